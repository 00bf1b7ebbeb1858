"""promtool's tooling on our evaluator: ``rules test`` (:mod:`runner`), the input-series notation
(:mod:`notation`) and ``rules eval`` (:mod:`eval_input`). Not used by the running agent."""
