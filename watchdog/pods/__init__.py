"""Kubernetes: which pod holds which GPU (the kubelet's PodResources API) and which pod runs an engine
(its processes' cgroup).

Its modules each hold one concern: :mod:`.podresources` (the gRPC client and the pure mapping of its
answer to GPUs), :mod:`.cgroup` (pod UID and container id from ``/proc/PID/cgroup``, pure),
:mod:`.containers` (container id to namespace, pod and container names from the kubelet's log
directory, pure parsing), :mod:`.directory` (the current mapping, shared by the collector, the exporter
and the alert path). The generated ``podresources_v1_pb2*`` modules come from ``podresources_v1.proto``
beside them (docs/pod-resources.md says how to regenerate them).
"""
