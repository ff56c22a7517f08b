"""The Kubernetes manifests of fleet/kubernetes, loaded for the unit tests (schemas, agreement
with the daemon's settings) and the lab test (the probes and capabilities run for real)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

KUBE_DIR = Path(__file__).resolve().parents[1] / "fleet" / "kubernetes"
CONTAINERFILE = KUBE_DIR / "Containerfile"
EXAMPLE_POD = KUBE_DIR / "examples" / "training-pod.yaml"


def manifest_files() -> list[Path]:
    return sorted(KUBE_DIR.rglob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resource(kind: str) -> dict[str, Any]:
    """The one object of `kind` in the manifests."""
    found = [d for p in manifest_files() for d in documents(p) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in {KUBE_DIR}, found {len(found)}"
    return found[0]


def pod_spec(kind: str) -> dict[str, Any]:
    obj = resource(kind)
    spec: dict[str, Any] = obj["spec"]["template"]["spec"] if kind == "DaemonSet" else obj["spec"]
    return spec


def daemon_container() -> dict[str, Any]:
    (container,) = pod_spec("DaemonSet")["containers"]
    return container


def probe_argv(probe: str) -> list[str]:
    """The exec command of the daemon container's startupProbe/livenessProbe."""
    argv: list[str] = daemon_container()[probe]["exec"]["command"]
    return argv


def added_capabilities() -> set[str]:
    caps = daemon_container()["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    return set(caps["add"])


RUN_PATH_SETTINGS = ("shm_path", "grpc_socket", "grpc_ro_socket", "plugin_verdict_socket")


def run_paths() -> dict[str, Path]:
    """Where the ConfigMap puts the control file and the sockets, relative to /run (the lab
    lays a daemon's files out the same way under a temporary directory)."""
    config = tomllib.loads(resource("ConfigMap")["data"]["linkguard.toml"])
    return {name: Path(config[name]).relative_to("/run") for name in RUN_PATH_SETTINGS}
