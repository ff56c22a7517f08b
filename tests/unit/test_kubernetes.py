"""fleet/kubernetes: every manifest against the Kubernetes API schemas (kubernetes-validate,
strict: unknown fields are errors, offline), and the manifests' agreement with the daemon's
settings, the systemd unit, the install layout and the CLI. The lab runs the probes and the
capability set against a real daemon (tests/lab/test_kubernetes_mounts.py)."""
from __future__ import annotations

import copy
import os
import re
import socket
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from k8s_manifests import (
    CONTAINERFILE,
    EXAMPLE_POD,
    KUBE_DIR,
    added_capabilities,
    daemon_container,
    documents,
    manifest_files,
    pod_spec,
    probe_argv,
    resource,
)

from linkguard_cli.main import cli
from linkguardd.settings import (
    DEFAULT_CONFIG_PATH,
    ENV_PREFIX,
    SETTINGS,
    admin_socket_exposure,
    build_settings,
)

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "linkguardd.service"
RUN_DIR = "/run/linkguard"  # the one host directory pods mount (docs/kubernetes.md)
ADMIN_DIR = "/run/linkguard-admin"  # the admin socket's: the DaemonSet's alone
VERSIONS = (kubernetes_validate.utils.all_versions()[0],  # the oldest and newest schemas shipped
            kubernetes_validate.utils.latest_version())
DOCS = [(p, i, d) for p in manifest_files() for i, d in enumerate(documents(p))]


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """The validator must work offline (CI, air-gapped sites): any connect() fails the test."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access during validation: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def validate(doc: dict[str, Any], version: str) -> None:
    """Strict validation; an unknown kind or apiVersion is an error too (the CLI only warns)."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.utils.SchemaNotFoundError as exc:
        raise AssertionError(exc.message) from None


def test_manifests_are_there() -> None:
    kinds = sorted(d["kind"] for _, _, d in DOCS)
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "Pod", "ServiceAccount"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path, index, doc", DOCS,
                         ids=[f"{p.relative_to(KUBE_DIR)}:{d['kind']}" for p, _, d in DOCS])
def test_manifest_matches_the_kubernetes_schema(path: Path, index: int, doc: dict[str, Any],
                                                version: str) -> None:
    validate(doc, version)


BROKEN = [  # (what, change to the DaemonSet) each must be rejected by the schema check
    ("a misspelt field", lambda ds: ds["spec"]["template"]["spec"].update(hostNetwrk=True)),
    ("a string where a boolean goes",
     lambda ds: ds["spec"]["template"]["spec"].update(hostNetwork="yes")),
    ("a capability list as a string", lambda ds: ds["spec"]["template"]["spec"]["containers"][0]
     ["securityContext"]["capabilities"].update(add="NET_ADMIN")),
    ("no selector", lambda ds: ds["spec"].pop("selector")),
]


@pytest.mark.parametrize("what, breaks", BROKEN, ids=[b[0] for b in BROKEN])
def test_the_schema_check_rejects_a_broken_daemonset(what: str, breaks: Any) -> None:
    daemonset = copy.deepcopy(resource("DaemonSet"))
    breaks(daemonset)
    with pytest.raises(kubernetes_validate.utils.ValidationError):
        kubernetes_validate.validate(daemonset, VERSIONS[-1], strict=True)


def test_an_unknown_kind_is_an_error() -> None:
    with pytest.raises(AssertionError, match="Couldn't find schema for kind DeamonSet"):
        validate({**resource("DaemonSet"), "kind": "DeamonSet"}, VERSIONS[-1])


# --- agreement with the daemon ------------------------------------------------------------------
def daemonset_settings() -> Any:
    """The Settings linkguardd runs with under the DaemonSet: the ConfigMap's file plus the
    container's LINKGUARDD_* variables (with an example node address)."""
    config = tomllib.loads(resource("ConfigMap")["data"][Path(DEFAULT_CONFIG_PATH).name])
    by_env = {s.env: s.name for s in SETTINGS}
    overrides = {}
    for var in daemon_container()["env"]:
        if var["name"].startswith(ENV_PREFIX):
            assert var["name"] in by_env, f"{var['name']} is not a linkguardd setting"
            overrides[by_env[var["name"]]] = var["value"].replace("$(NODE_IP)", "198.18.0.1")
    return build_settings(config, overrides, source="ConfigMap linkguard-config")


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container["volumeMounts"]}


def volumes(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in spec["volumes"]}


def test_the_configmap_is_a_valid_config_that_keeps_everything_in_the_run_dir() -> None:
    s = daemonset_settings()
    assert os.path.dirname(s.shm_path) == RUN_DIR
    sockets = [spec.name for spec in SETTINGS if spec.name.endswith("socket")]
    assert len(sockets) == 3
    assert {n: os.path.dirname(getattr(s, n)) for n in sockets} == {
        "grpc_socket": ADMIN_DIR, "grpc_ro_socket": RUN_DIR, "plugin_verdict_socket": RUN_DIR}
    assert not admin_socket_exposure(s)
    assert s.metrics_address == "198.18.0.1:9846"


def test_the_daemonset_mounts_the_run_dir_the_state_dir_and_the_config() -> None:
    s, spec, container = daemonset_settings(), pod_spec("DaemonSet"), daemon_container()
    run = volumes(spec)[mounts(container)["run"]["name"]]
    assert mounts(container)["run"]["mountPath"] == run["hostPath"]["path"] == RUN_DIR
    assert not mounts(container)["run"].get("readOnly")  # the daemon writes there
    assert run["hostPath"]["type"] == "DirectoryOrCreate"  # a directory, never single files
    admin = volumes(spec)[mounts(container)["admin"]["name"]]["hostPath"]
    assert mounts(container)["admin"]["mountPath"] == admin["path"] == ADMIN_DIR
    assert os.path.dirname(s.grpc_socket) == ADMIN_DIR
    state = volumes(spec)[mounts(container)["state"]["name"]]["hostPath"]
    assert mounts(container)["state"]["mountPath"] == state["path"] == s.state_dir
    assert not mounts(container)["state"].get("readOnly")  # drains are written there
    config = mounts(container)["config"]
    assert config["mountPath"] == os.path.dirname(DEFAULT_CONFIG_PATH) and config["readOnly"]
    assert "subPath" not in config  # a subPath mount never sees ConfigMap updates
    assert volumes(spec)["config"]["configMap"]["name"] == resource("ConfigMap")["metadata"]["name"]


def test_the_metrics_port_and_the_probes_match_the_daemon() -> None:
    s, container = daemonset_settings(), daemon_container()
    (port,) = container["ports"]
    assert port["containerPort"] == int(s.metrics_address.rsplit(":", 1)[1])
    ready = container["readinessProbe"]["httpGet"]
    assert ready["path"] == "/metrics" and ready["port"] == port["name"]
    for probe in ("startupProbe", "livenessProbe"):
        argv = probe_argv(probe)
        assert argv[:2] == ["linkguard-cli", "health"], probe
        assert "--shm" in {o for p in cli.commands["health"].params for o in p.opts}
        # The daemon's own control file: a file read no reader can saturate (issue 30), where
        # the read-only socket's connections can all be held by any pod that mounts it.
        assert argv[2:] == ["--shm", s.shm_path], probe
        # and no socket at all: never the admin one (a probe must never be able to drain)
        assert not {s.grpc_socket, s.grpc_ro_socket} & set(argv), probe


def test_the_daemonset_runs_like_the_systemd_unit() -> None:
    unit = UNIT.read_text()
    stop = re.search(r"(?m)^TimeoutStopSec=(\d+)s$", unit)
    assert stop and pod_spec("DaemonSet")["terminationGracePeriodSeconds"] == int(stop.group(1))
    bounding = re.search(r"(?m)^CapabilityBoundingSet=(.*)$", unit)
    assert bounding and added_capabilities() == {c.removeprefix("CAP_")
                                                 for c in bounding.group(1).split()}
    context = daemon_container()["securityContext"]
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert not context["privileged"] and pod_spec("DaemonSet")["hostNetwork"]


def test_the_training_pod_reads_the_daemons_file_read_only() -> None:
    s, spec = daemonset_settings(), pod_spec("Pod")
    (trainer,) = spec["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    run = mounts(trainer)["linkguard-run"]
    assert run["readOnly"] and run["mountPath"] == RUN_DIR
    assert volumes(spec)["linkguard-run"]["hostPath"] == {"path": RUN_DIR, "type": "Directory"}
    assert env["LINKGUARD_SHM"] == s.shm_path
    assert spec["nodeSelector"] == pod_spec("DaemonSet")["nodeSelector"]
    assert spec["hostNetwork"]  # the daemon's NICs are the host's


def test_no_training_pod_volume_reaches_the_admin_socket() -> None:
    """A pod running as root passes the socket's mode check: only a path it cannot see keeps it
    from draining (issue 30, finding 1)."""
    s, spec = daemonset_settings(), pod_spec("Pod")
    admin_dir = os.path.dirname(s.grpc_socket)
    host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert host_paths == [RUN_DIR]
    for path in host_paths:  # neither the admin directory nor one above it
        assert os.path.commonpath([path, admin_dir]) != path, path
    assert "supplementalGroups" not in spec.get("securityContext", {})


def test_the_training_pod_gets_the_plugin_from_the_daemons_image() -> None:
    spec = pod_spec("Pod")
    (init,), (trainer,) = spec["initContainers"], spec["containers"]
    assert init["image"] == daemon_container()["image"]
    source, target = init["command"][1:]
    prefix = re.search(r"make install PREFIX=(\S+)", CONTAINERFILE.read_text())
    assert prefix and source == f"{prefix.group(1)}/lib/libnccl-net-linkguard.so"
    assert target.rstrip("/") == mounts(init)["linkguard-lib"]["mountPath"]
    lib = mounts(trainer)["linkguard-lib"]
    assert lib["readOnly"] and "emptyDir" in volumes(spec)["linkguard-lib"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["NCCL_NET_PLUGIN"] == f"{lib['mountPath']}/{Path(source).name}"
    assert env["NCCL_NET"] == "linkguard"


def test_the_containerfile_builds_on_debian_12_and_creates_the_configs_groups() -> None:
    text = CONTAINERFILE.read_text()
    assert re.findall(r"(?m)^FROM (\S+)", text) == ["debian:bookworm-slim"] * 2
    prefix = re.search(r"make install PREFIX=(\S+)", text)
    assert prefix and f'ENTRYPOINT ["{prefix.group(1)}/bin/linkguardd"]' in text
    groups = set(re.findall(r"groupadd --system --gid \S+ (\S+)", text))
    s = daemonset_settings()
    assert {s.admin_group, s.reader_group} <= groups
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".build", "plugin/build"} <= set(ignored)  # no local build leaks in


def test_the_example_pod_is_not_applied_with_the_daemon() -> None:
    # `kubectl apply -f fleet/kubernetes/` applies the top level, in name order
    top = sorted(p.name for p in KUBE_DIR.glob("*.yaml"))
    assert top == ["00-namespace.yaml", "10-configmap.yaml", "20-daemonset.yaml"]
    assert EXAMPLE_POD.parent != KUBE_DIR
