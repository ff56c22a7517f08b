"""scripts/install.sh (what `make install` runs): file placement under DESTDIR, config files
never overwritten, the opt-in nccl.conf lines. The pip step is skipped (--no-python) unless
LINKGUARD_TEST_INSTALL_PIP=1: it builds a venv from PyPI, which takes a while and a network."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install.sh"


def install(destdir: Path, *args: str, prefix: str = "/usr/local",
            plugin: Path | None = None, python: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DESTDIR=str(destdir), PREFIX=prefix)
    if plugin is not None:
        env["PLUGIN"] = str(plugin)
    argv = [str(SCRIPT), *args] + ([] if python else ["--no-python"])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    so = tmp_path / "libnccl-net-linkguard.so"
    so.write_bytes(b"\x7fELF not really")
    return so


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_files_land_where_systemd_ldso_and_admins_look(tmp_path: Path, plugin: Path) -> None:
    dest = tmp_path / "dest"
    out = install(dest, plugin=plugin)
    assert out.returncode == 0, out.stderr
    usr = dest / "usr/local"
    assert (usr / "lib/libnccl-net-linkguard.so").read_bytes() == plugin.read_bytes()
    assert mode(usr / "lib/libnccl-net-linkguard.so") == 0o755
    for tool in ("linkguardd", "linkguard-cli", "linkguard-slurm-healthcheck",
                 "linkguard-slurm-taskprolog"):
        assert os.readlink(usr / "bin" / tool) == f"../lib/linkguard/venv/bin/{tool}"
    slurm_example = (ROOT / "slurm/linkguard-slurm.toml").read_text()
    assert (dest / "etc/linkguard/slurm.toml").read_text() == slurm_example
    assert (dest / "etc/linkguard/slurm.toml.example").read_text() == slurm_example
    assert (usr / "share/linkguard/nhc/linkguard.nhc").read_text() == \
        (ROOT / "slurm/nhc/linkguard.nhc").read_text()
    unit = (usr / "lib/systemd/system/linkguardd.service").read_text()
    assert "\nExecStart=/usr/local/bin/linkguardd\n" in unit
    assert "Documentation=file:///usr/local/share/doc/linkguard/operators.md" in unit
    assert (usr / "lib/sysusers.d/linkguard.conf").exists()
    example = (ROOT / "systemd/linkguard.toml").read_text()
    assert (dest / "etc/linkguard/linkguard.toml").read_text() == example
    assert (dest / "etc/linkguard/linkguard.toml.example").read_text() == example
    assert (dest / "etc/default/linkguardd").read_text() == \
        (ROOT / "systemd/linkguardd.default").read_text()
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert {"operators.md", "failover.md", "wrap-mode.md", "slurm.md",
            "kubernetes.md"} <= set(docs)
    for doc in docs:  # operators.md links every one of them
        assert (usr / "share/doc/linkguard" / doc).read_text() == (ROOT / "docs" / doc).read_text()
    for shipped in ("prometheus/linkguard.rules.yml", "grafana/linkguard.json"):
        assert (usr / "share/linkguard" / shipped).read_bytes() == \
            (ROOT / "fleet" / shipped).read_bytes()
    assert mode(dest / "etc/linkguard/linkguard.toml") == 0o644
    assert not (dest / "etc/nccl.conf").exists()  # opt-in only
    assert "NCCL_NET_PLUGIN=linkguard" in out.stdout  # ...but documented
    for path, fragment in (("bash-completion/completions/linkguard-cli", "complete -o"),
                           ("zsh/site-functions/_linkguard-cli", "compdef"),
                           ("fish/vendor_completions.d/linkguard-cli.fish", "complete --no-files")):
        text = (usr / "share" / path).read_text()
        assert "_LINKGUARD_CLI_COMPLETE" in text and fragment in text, path


def test_other_prefix_puts_the_unit_in_etc(tmp_path: Path, plugin: Path) -> None:
    out = install(tmp_path, plugin=plugin, prefix="/opt/linkguard")
    assert out.returncode == 0, out.stderr
    unit = tmp_path / "etc/systemd/system/linkguardd.service"
    assert "\nExecStart=/opt/linkguard/bin/linkguardd\n" in unit.read_text()
    assert (tmp_path / "etc/sysusers.d/linkguard.conf").exists()
    assert "add /opt/linkguard/lib to /etc/ld.so.conf.d/" in out.stdout


def test_an_administrators_config_is_kept(tmp_path: Path, plugin: Path) -> None:
    conf = tmp_path / "etc/linkguard/linkguard.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('interfaces = ["eth4"]\n')
    out = install(tmp_path, plugin=plugin)
    assert out.returncode == 0 and "(kept: already present)" in out.stdout
    assert conf.read_text() == 'interfaces = ["eth4"]\n'
    assert (tmp_path / "etc/linkguard/linkguard.toml.example").exists()


def test_nccl_conf_is_opt_in_and_idempotent(tmp_path: Path, plugin: Path) -> None:
    for _ in range(2):
        assert install(tmp_path, "--nccl-net-strict", plugin=plugin).returncode == 0
    lines = (tmp_path / "etc/nccl.conf").read_text().splitlines()
    assert [ln for ln in lines if not ln.startswith("#")] == [
        "NCCL_NET_PLUGIN=linkguard", "NCCL_NET=linkguard"]
    # NCCL takes everything after '=' as the value: comments must be lines of their own
    assert all("=" not in ln for ln in lines if ln.startswith("#"))


def test_nccl_conf_never_overrides_another_plugin(tmp_path: Path, plugin: Path) -> None:
    conf = tmp_path / "etc/nccl.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("NCCL_NET_PLUGIN=aws-ofi\n")
    out = install(tmp_path, "--nccl-conf", plugin=plugin)
    assert out.returncode == 0
    assert "already sets NCCL_NET_PLUGIN=aws-ofi; left unchanged" in out.stderr
    assert conf.read_text() == "NCCL_NET_PLUGIN=aws-ofi\n"


def test_a_missing_plugin_says_what_to_do(tmp_path: Path) -> None:
    out = install(tmp_path, plugin=tmp_path / "absent.so")
    assert out.returncode == 1 and "make plugin" in out.stderr and "--no-plugin" in out.stderr
    assert install(tmp_path, "--no-plugin", plugin=tmp_path / "absent.so").returncode == 0


@pytest.mark.parametrize("args, prefix, fragment", [
    (["--frobnicate"], "/usr/local", "unknown argument '--frobnicate'"),
    ([], "usr/local", "PREFIX must be absolute"),
])
def test_usage_errors(tmp_path: Path, args: list[str], prefix: str, fragment: str) -> None:
    out = install(tmp_path, *args, prefix=prefix)
    assert out.returncode == 2 and fragment in out.stderr


@pytest.mark.skipif(os.environ.get("LINKGUARD_TEST_INSTALL_PIP") != "1",
                    reason="builds a venv from PyPI: set LINKGUARD_TEST_INSTALL_PIP=1")
def test_the_venv_runs_from_its_final_path_after_staging(tmp_path: Path, plugin: Path) -> None:
    out = install(tmp_path, plugin=plugin, prefix="/opt/lg", python=True)
    assert out.returncode == 0, out.stderr
    venv = tmp_path / "opt/lg/lib/linkguard/venv"
    assert (venv / "bin/linkguardd").read_text().startswith("#!/opt/lg/lib/linkguard/venv/")
    assert str(tmp_path) not in (venv / "pyvenv.cfg").read_text()
    cli = subprocess.run([str(venv / "bin/python"), str(venv / "bin/linkguard-cli"),
                          "--socket", str(tmp_path / "none.sock"), "status"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert cli.returncode == 3 and "no such socket" in cli.stderr


# --- reproducible installs: constraints.txt, pyproject.toml and the generated stubs agree -------
def pins() -> dict[str, str]:
    from packaging.utils import canonicalize_name

    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin"
            out[canonicalize_name(name)] = version.strip()
    return out


def requirements() -> list:
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] +
            project["optional-dependencies"]["dev"]]


def test_every_dependency_is_pinned_within_pyprojects_range() -> None:
    from packaging.utils import canonicalize_name

    pinned = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (req, pinned[name])


def test_the_stubs_agree_with_the_pins_and_the_lower_bounds() -> None:
    import re

    from packaging.version import Version

    from linkguard.v1 import linkguard_pb2_grpc

    generated_grpc = Version(linkguard_pb2_grpc.GRPC_GENERATED_VERSION)
    text = (ROOT / "daemon/linkguard/v1/linkguard_pb2.py").read_text()
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+)", text)
    assert m, "the protobuf stub no longer names its generated version"
    generated_pb = Version(".".join(m.groups()))
    pinned = pins()
    assert Version(pinned["grpcio-tools"]) == generated_grpc  # made by the pinned generator
    assert Version(pinned["grpcio"]) >= generated_grpc
    assert Version(pinned["protobuf"]) >= generated_pb
    lowest = {r.name: min(Version(s.version) for s in r.specifier if s.operator == ">=")
              for r in requirements() if r.name in ("grpcio", "protobuf", "grpcio-tools")}
    # a loose install (no constraints) can never pick a version the stubs refuse
    assert lowest == {"grpcio": generated_grpc, "protobuf": generated_pb,
                      "grpcio-tools": generated_grpc}


def test_the_venv_was_built_with_the_pins() -> None:
    from importlib import metadata

    for name, version in pins().items():
        assert metadata.version(name) == version, f"{name}: venv has {metadata.version(name)}"


def test_no_make_target_is_promised_that_does_not_exist() -> None:
    import re

    targets = set(re.findall(r"(?m)^([a-z][\w-]*):", (ROOT / "Makefile").read_text()))
    for path in ("pyproject.toml", "README.md", "docs/operators.md", "CONTRIBUTING.md"):
        for target in re.findall(r"`make ([a-z][\w-]*)", (ROOT / path).read_text()):
            assert target in targets, f"{path} names `make {target}`, which does not exist"


@pytest.mark.skipif(os.environ.get("LINKGUARD_TEST_INSTALL_PIP") != "1",
                    reason="downloads the pinned wheels: set LINKGUARD_TEST_INSTALL_PIP=1")
def test_the_wheelhouse_installs_offline(tmp_path: Path) -> None:
    built = subprocess.run(["make", "-s", "wheelhouse"], cwd=ROOT, capture_output=True,
                           text=True, timeout=1200, check=False)
    assert built.returncode == 0, built.stderr
    archive = ROOT / built.stdout.strip().splitlines()[-1]
    subprocess.run(["tar", "-C", str(tmp_path), "-xzf", str(archive)], check=True, timeout=120)
    unpacked = tmp_path / archive.name.removesuffix(".tar.gz")
    env = dict(os.environ, DESTDIR=str(tmp_path / "dest"), PREFIX="/opt/lg",
               PIP_INDEX_URL="http://127.0.0.1:9/no-index")  # nothing may be downloaded
    out = subprocess.run([str(unpacked / "scripts/install.sh")], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    venv = tmp_path / "dest/opt/lg/lib/linkguard/venv"
    cli = subprocess.run([str(venv / "bin/python"), str(venv / "bin/linkguard-cli"), "--version"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert cli.returncode == 0 and cli.stdout.startswith("linkguard-cli "), cli.stderr
    assert (tmp_path / "dest/opt/lg/lib/libnccl-net-linkguard.so").exists()
