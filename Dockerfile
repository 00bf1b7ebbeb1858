# inference-watchdog as a container image, for the Kubernetes DaemonSet in deploy/kubernetes/ (docs/kubernetes.md).
#
#   docker build -t inference-watchdog:0.1.0 .
#
# Debian (python slim) with the agent in its own virtual environment under /opt/inference-watchdog, the same
# layout as the systemd install (docs/install.md), so the config's rule and runbook paths are the same on
# both. The NVIDIA driver's user-space (libnvidia-ml.so, nvidia-smi) is NOT in the image: the NVIDIA
# container runtime mounts the host's copy, matching the host's kernel module (NVIDIA_DRIVER_CAPABILITIES
# =utility below; the DaemonSet sets runtimeClassName and NVIDIA_VISIBLE_DEVICES=all).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY watchdog ./watchdog
COPY rules ./rules
COPY runbooks ./runbooks
COPY scenarios ./scenarios
COPY dashboards ./dashboards
COPY systemd ./systemd
COPY docs ./docs
# The import name `watchdog` clashes with PyPI's unrelated `watchdog` library: hence a venv of its own.
RUN python -m venv /opt/inference-watchdog \
 && /opt/inference-watchdog/bin/pip install --no-cache-dir . \
 && /opt/inference-watchdog/bin/pip uninstall -y pip setuptools

FROM python:3.11-slim-bookworm
# systemd: journalctl, to read the kernel log from the host's journal (kmsg.source: journal), which needs no
#   privilege; /dev/kmsg inside a container needs a privileged pod (the device cgroup denies it otherwise).
# pciutils: lspci, which the GPU runbooks' diagnose steps and the driver-not-loaded check run.
RUN apt-get update \
 && apt-get install -y --no-install-recommends systemd pciutils \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/inference-watchdog /opt/inference-watchdog
# A fixed non-root user for the image. The DaemonSet overrides it with UID 0 without any capability, and
# only because the kubelet's pod-resources socket accepts connections from root alone (docs/kubernetes.md);
# everything else the agent reads works as this user (add it to the host's adm group for the journal).
RUN groupadd --system --gid 65532 watchdog \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin watchdog \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/inference-watchdog
ENV PATH=/opt/inference-watchdog/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    NVIDIA_DRIVER_CAPABILITIES=utility
USER 65532:65532
EXPOSE 9847
ENTRYPOINT ["inference-watchdog"]
CMD ["run", "--config", "/etc/inference-watchdog/config.yaml"]
