"""Running on Kubernetes: the Node signals (condition, taint) for node-unfit GPU faults (docs/kubernetes.md)."""
