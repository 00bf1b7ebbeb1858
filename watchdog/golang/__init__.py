"""Go-compatibility ports: what Prometheus does through Go's standard library, reproduced exactly.

``strconv`` (:mod:`gostrconv`), ``math`` (:mod:`gomath`, :mod:`gotrig`), ``fmt`` (:mod:`gofmt`),
``text/template`` (:mod:`gotemplate_syntax`, :mod:`gotemplate`) and RE2 regexes as Prometheus anchors them
(:mod:`goregexp`). Leaf package: imports nothing of ours.
"""
