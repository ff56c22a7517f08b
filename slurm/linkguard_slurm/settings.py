"""Every setting of linkguard's Slurm programs, declared once: the Settings dataclass below.

Both programs (the health check and the task prolog) read the same file. Each field's flag
(--max-off-service-s) and environment variable (LINKGUARD_SLURM_MAX_OFF_SERVICE_S) are derived
from its name. Precedence, highest first: flag, environment, the TOML file, the default. Slurm
runs HealthCheckProgram with no arguments and an environment of SLURMD_NODENAME alone, so on a
cluster the file is what counts. The example file slurm/linkguard-slurm.toml is generated from
this table (render_example_toml).
"""
from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

# The daemon's table helpers: a field with its doc and bounds; the TOML reader and its errors.
from linkguardd.settings import ConfigError, _setting, check_number, read_toml

DEFAULT_CONFIG_PATH = "/etc/linkguard/slurm.toml"
ENV_PREFIX = "LINKGUARD_SLURM_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Settings:
    # --- the health check ---------------------------------------------------------------------
    socket: str = _setting(
        "/run/linkguard/linkguard-ro.sock", "linkguardd's read-only API socket. %n is replaced "
        "by the Slurm node name (for several slurmd on one host, as in slurm.conf).")
    timeout_s: float = _setting(2.0, "Deadline of each request to linkguardd.", minimum=0.1)
    # 3 x 1 s: rides out a daemon restart (its API is back within about a second).
    attempts: int = _setting(
        3, "Requests before linkguardd counts as unreachable; an unreachable daemon never drains "
        "the node.", minimum=1, maximum=10)
    retry_interval_s: float = _setting(1.0, "Pause between two attempts.", minimum=0,
                                       maximum=10)
    max_off_service_s: float = _setting(
        0.0, "Also drain the node when one NIC has been out of service (any state but UP) for "
        "longer than this, even though its pair still works. 0: never; only a NIC pair with no "
        "healthy member drains the node.", minimum=0)
    degraded_is_healthy: bool = _setting(
        True, "A DEGRADED NIC (still carrying traffic, predicted to fail) counts as a healthy "
        "member of its pair.")
    drain: bool = _setting(
        True, "Drain the node (and resume nodes this check drained) with scontrol. false: only "
        "report, through the exit status and one line (for NHC, which drains by itself).")
    scontrol: str = _setting(
        "/usr/bin/scontrol", "The scontrol program (an absolute path: slurmd runs health "
        "checks without PATH).")
    scontrol_timeout_s: float = _setting(20.0, "Deadline of each scontrol call.", minimum=1)
    node_name: str = _setting(
        "", "This node's Slurm name. Empty: SLURMD_NODENAME (slurmd sets it), else the short "
        "host name.")
    # --- the task prolog ----------------------------------------------------------------------
    nccl_net_plugin: str = _setting(
        "linkguard", "NCCL_NET_PLUGIN given to job tasks: the plugin's name (NCCL loads "
        "libnccl-net-<name>.so through ld.so). Empty: not given.")
    nccl_net_strict: bool = _setting(
        False, "Also give NCCL_NET=linkguard, so that a job fails instead of silently falling "
        "back to NCCL's own transports when the plugin cannot load.")
    shm_path: str = _setting(
        "/run/linkguard/linkguard.shm", "LINKGUARD_SHM given to job tasks: linkguardd's control "
        "file. %n is replaced by the Slurm node name. Empty: not given (the plugin's default).")
    environment: Mapping[str, str] = _setting(
        {}, "More variables given to job tasks, e.g. LINKGUARD_INNER for wrap mode on RDMA "
        "clusters (TOML table NAME = \"value\"; flag and environment NAME:value,...).")


@dataclass(frozen=True)
class SettingSpec:
    """One row of the table, as click and the generator see it."""

    name: str
    kind: type
    default: Any
    doc: str
    minimum: float | None
    maximum: float | None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _spec(f: Any) -> SettingSpec:
    default = f.default if f.default is not MISSING else f.default_factory()
    kind = dict if isinstance(default, Mapping) else type(default)
    return SettingSpec(f.name, kind, default, f.metadata["doc"], f.metadata["minimum"],
                       f.metadata["maximum"])


SETTINGS: tuple[SettingSpec, ...] = tuple(_spec(f) for f in fields(Settings))
_BY_NAME = {s.name: s for s in SETTINGS}


# ---- loading -----------------------------------------------------------------------------------
def load(path: str | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from the TOML file at `path` (None: DEFAULT_CONFIG_PATH, which may be missing)
    plus `overrides` (name -> value; None means not given)."""
    file = Path(path or DEFAULT_CONFIG_PATH)
    data = read_toml(file, required=bool(path))
    values: dict[str, Any] = {}
    for layer, where in ((data, f"{file}: "), (overrides or {}, "")):
        for key, raw in layer.items():
            spec = _BY_NAME.get(key)
            if spec is None:
                raise ConfigError(f"{where}unknown key '{key}' (known: {', '.join(_BY_NAME)})")
            if raw is not None:
                values[key] = _coerce(spec, raw, f"{where}{key if where else spec.flag}")
    return Settings(**values)


def _coerce(spec: SettingSpec, raw: Any, label: str) -> Any:
    kind = spec.kind
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        raw = float(raw)
    if kind is dict and isinstance(raw, Mapping):
        bad = [k for k, v in raw.items() if not _ENV_NAME.match(k) or not isinstance(v, str)
               or "\n" in v]
        if bad:
            raise ConfigError(f"{label}: {bad[0]!r} is not a variable name with a one-line "
                              "string value")
        return MappingProxyType(dict(raw))
    if not isinstance(raw, kind) or (kind is int and isinstance(raw, bool)):
        raise ConfigError(f"{label}: expected {kind.__name__}, got {type(raw).__name__} "
                          f"{raw!r:.40}")
    if kind in (int, float):
        check_number(raw, spec.minimum, spec.maximum, label)
    if kind is str and "\n" in raw:
        raise ConfigError(f"{label}: must be one line")
    return raw


def expand_node(template: str, node: str) -> str:
    """%n -> the Slurm node name, %% -> % (slurm.conf's convention)."""
    return re.sub(r"%[n%]", lambda m: node if m.group() == "%n" else "%", template)


def node_name(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return settings.node_name or env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


# ---- click ---------------------------------------------------------------------------------------
F = TypeVar("F", bound=Callable[..., Any])


def click_options() -> Callable[[F], F]:
    """--config and one option per setting (also read from its environment variable); unset
    options arrive as None, for load()."""
    import click

    class _Table(click.ParamType):  # type: ignore[type-arg]  # generic in click >= 8.2
        name = "NAME:VALUE,..."

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if not isinstance(value, str):
                return value
            out = {}
            for item in filter(None, (v.strip() for v in value.split(","))):
                k, sep, v = item.partition(":")
                if not sep or not k:
                    self.fail(f"expected {self.name}, got {value!r}", param, ctx)
                out[k] = v
            return out

    types = {str: click.STRING, int: click.INT, float: click.FLOAT, bool: click.BOOL,
             dict: _Table()}

    def decorate(f: F) -> F:
        for spec in reversed(SETTINGS):
            decls = [f"{spec.flag}/--no-{spec.flag[2:]}"] if spec.kind is bool else [spec.flag]
            f = click.option(*decls, spec.name, default=None, envvar=spec.env,
                             show_envvar=True, type=types[spec.kind],
                             help=f"{spec.doc} [default: {_text(spec.default) or 'empty'}]")(f)
        return click.option("--config", default=None, envvar=CONFIG_ENV, show_envvar=True,
                            type=click.Path(dir_okay=False),
                            help=f"TOML file [default: {DEFAULT_CONFIG_PATH}, if it exists]")(f)
    return decorate


def from_click(params: Mapping[str, Any]) -> Settings:
    return load(params.get("config"), {k: v for k, v in params.items() if k in _BY_NAME})


# ---- the example file ----------------------------------------------------------------------------
def render_example_toml() -> str:
    out = ["# linkguard's Slurm health check and task prolog (TOML), read from",
           f"# {DEFAULT_CONFIG_PATH}. Generated from slurm/linkguard_slurm/settings.py.",
           "# Every key is optional; the value shown is the default.", ""]
    for spec in sorted(SETTINGS, key=lambda s: s.kind is dict):  # TOML: tables last
        out += textwrap.wrap(spec.doc, 98, initial_indent="# ", subsequent_indent="# ")
        if spec.kind is dict:
            out += [f"#[{spec.name}]", ('#LINKGUARD_INNER = "/opt/nccl-rdma-sharp-plugins/lib/'
                    'libnccl-net.so"')]
        else:
            out.append(f"#{spec.name} = {_toml(spec.default)}")
        out.append("")
    return "\n".join(out)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    return _text(value)
