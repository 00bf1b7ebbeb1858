"""The demo: the production agent against simulated GPUs and engines, live (:mod:`runner`) or fast-forwarded on
simulated time (:mod:`harness`), and the simulators and reports around it."""
