"""The Kubernetes manifests under deploy/k8s against the Kubernetes API schemas (kubernetes-validate, which bundles
them: no network), strictly (an unknown field fails), and against the code they start: the settings they set, the
probe paths, the migration command, the sandbox's allowances on the worker. A broken manifest must fail."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.cli.main import app as cli_app
from service.core.config import Settings

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.36"
"""The oldest release where the worker's pod user namespace (hostUsers: false, needed for procMount: Unmasked) is
generally available."""


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifests() -> dict[str, dict[str, Any]]:
    """Every Kubernetes object in the tree (kustomization files aside), by "file#kind/name"."""
    out = {}
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in documents(path):
            out[f"{path.relative_to(K8S)}#{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def kustomizations() -> dict[Path, dict[str, Any]]:
    return {p: documents(p)[0] for p in sorted(K8S.rglob("kustomization.yaml"))}


def find(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in manifests().values() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902's add, remove and replace: what kustomize does with a component's JSON patches."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key = int(last) if isinstance(node, list) else last
        if op["op"] == "remove":
            del node[key]
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace":
                assert key in node or isinstance(node, list), f"replace of a missing {op['path']}"
            node[key] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


def test_the_tree_has_the_fleet():
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in manifests().values())
    assert kinds == ["ConfigMap/kernel-judge", "DaemonSet/kernel-judge-worker", "Deployment/kernel-judge-api",
                     "Deployment/kernel-judge-builder", "HorizontalPodAutoscaler/kernel-judge-builder",
                     "Job/kernel-judge-migrate", "Namespace/kernel-judge", "Service/kernel-judge-api",
                     "Service/kernel-judge-db", "StatefulSet/kernel-judge-db"]


@pytest.mark.parametrize("name", sorted(manifests()))
def test_every_manifest_validates_strictly_against_the_kubernetes_schemas(name):
    assert kubernetes_validate.validate(manifests()[name], VERSION, strict=True).startswith(VERSION)


def test_a_broken_manifest_fails():
    worker = find("DaemonSet", "kernel-judge-worker")
    typo = copy.deepcopy(worker)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {"procMount": "Unmasked"}
    with pytest.raises(kubernetes_validate.ValidationError, match="securityContxt"):
        kubernetes_validate.validate(typo, VERSION, strict=True)
    wrong_type = copy.deepcopy(worker)
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "ninety"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, VERSION, strict=True)
    no_image = copy.deepcopy(find("Deployment", "kernel-judge-api"))
    del no_image["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(kubernetes_validate.ValidationError, match="name"):
        kubernetes_validate.validate(no_image, VERSION, strict=True)


def test_kustomizations_name_files_that_exist_and_the_component_patch_validates():
    for path, kustomization in kustomizations().items():
        for entry in kustomization.get("resources", []) + kustomization.get("components", []):
            assert (path.parent / entry).exists(), f"{path}: {entry} does not exist"
    component = documents(K8S / "components" / "privileged-worker" / "kustomization.yaml")[0]
    targets = [(p["target"]["kind"], p["target"]["name"]) for p in component["patches"]]
    assert targets == [("DaemonSet", "kernel-judge-worker"), ("Deployment", "kernel-judge-builder")]
    for patch in component["patches"]:
        privileged = apply_json_patch(find(*patch["target"].values()), yaml.safe_load(patch["patch"]))
        kubernetes_validate.validate(privileged, VERSION, strict=True)
        pod = privileged["spec"]["template"]["spec"]
        assert "hostUsers" not in pod and pod["containers"][0]["securityContext"]["privileged"] is True


def test_the_worker_asks_for_a_gpu_and_what_bubblewrap_needs():
    pod = find("DaemonSet", "kernel-judge-worker")["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["command"] == ["kernel-judge", "worker", "--no-migrate"]
    assert pod["hostUsers"] is False and worker["securityContext"]["procMount"] == "Unmasked"
    assert pod["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert pod["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    assert pod["securityContext"]["runAsUser"] == 10001 and worker["securityContext"]["capabilities"] == {
        "drop": ["ALL"]}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    shm = next(v for v in pod["volumes"] if v["name"] == mounts["/dev/shm"])
    assert shm["emptyDir"]["medium"] == "Memory"
    assert pod["terminationGracePeriodSeconds"] > Settings().shutdown_grace_s


def test_the_builders_ask_for_no_gpu_build_for_the_gpus_and_scale_on_the_build_backlog(client):
    pod = find("Deployment", "kernel-judge-builder")["spec"]["template"]["spec"]
    (builder,) = pod["containers"]
    assert "nvidia.com/gpu" not in {**builder["resources"].get("limits", {}), **builder["resources"]["requests"]}
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert builder["command"][-2:] == ["--role", "build"]
    env = {e["name"]: e.get("value") for e in builder["env"]}
    assert env["JUDGE_ROLE"] == "build" and env["JUDGE_BUILD_TARGET"] == "cuda"
    Settings(role=env["JUDGE_ROLE"], build_target=env["JUDGE_BUILD_TARGET"])  # values the settings take
    assert "TORCH_CUDA_ARCH_LIST" in find("ConfigMap", "kernel-judge")["data"]  # the GPU workers' list, shared
    assert pod["hostUsers"] is False and builder["securityContext"]["procMount"] == "Unmasked"
    (metric,) = find("HorizontalPodAutoscaler", "kernel-judge-builder")["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "judge_stage_backlog_jobs"
    assert metric["external"]["metric"]["selector"] == {"matchLabels": {"stage": "build"}}
    # The metric it scales on is served by the API's /metrics.
    assert 'judge_stage_backlog_jobs{stage="build"}' in client.get("/metrics").text


def test_settings_probes_and_commands_exist_in_the_code():
    # A setting is a Settings field, or a variable the judge reads by name (JUDGE_ISOLATION, JUDGE_LOG_LEVEL, ...).
    fields = {f"JUDGE_{name.upper()}" for name in Settings.model_fields}
    sources = [p.read_text() for root in ("service", "sandbox") for p in (K8S.parents[1] / root).rglob("*.py")]
    fields |= {name for text in sources for name in re.findall(r'"(JUDGE_[A-Z0-9_]+)"', text)}
    names = set(find("ConfigMap", "kernel-judge")["data"])
    for doc in manifests().values():
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            names |= {e["name"] for e in container.get("env", [])}
    assert {n for n in names if n.startswith("JUDGE_")} <= fields
    commands = {c.name or c.callback.__name__ for c in cli_app.registered_commands}
    migrate = find("Job", "kernel-judge-migrate")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert migrate[0] == "kernel-judge" and migrate[1] in commands and migrate[1] == "migrate"


def test_the_api_probes_answer_on_the_running_app(client):
    """The probe paths of the API Deployment answer 200 on the real app over a migrated database."""
    api = find("Deployment", "kernel-judge-api")["spec"]["template"]["spec"]["containers"][0]
    probes = [api["readinessProbe"]["httpGet"]["path"], api["livenessProbe"]["httpGet"]["path"]]
    assert probes == ["/readyz", "/healthz"]
    for path in probes:
        assert client.get(path).status_code == 200, path
