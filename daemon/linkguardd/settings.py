"""Every linkguardd tunable, declared once: the Settings dataclass below is the table.

Each field has a type, a default and a doc; its command-line flag (--hold-down-ms) and its
environment variable (LINKGUARDD_HOLD_DOWN_MS) are derived from its name. Precedence, highest
first: flag, environment (the systemd EnvironmentFile), the TOML file, the default. The example
config and EnvironmentFile in systemd/ are generated from this table (render_* below).
"""
from __future__ import annotations

import difflib
import math
import os
import re
import textwrap
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from linkguardd import pairing
from linkguardd.policy import DEFAULT_ERROR_RATES, PolicyConfig

DEFAULT_CONFIG_PATH = "/etc/linkguard/linkguard.toml"
ENV_PREFIX = "LINKGUARDD_"  # not LINKGUARD_: that prefix belongs to the plugin's variables
_P = PolicyConfig()  # the policy's defaults; their reasons are commented in policy.py


class ConfigError(Exception):
    """A bad configuration; the message names the offending key."""

    exit_code = 2  # linkguardd exits with it before starting anything (issue 3)


def _setting(default: Any, doc: str, *, minimum: float | None = None,
             maximum: float | None = None, choices: tuple[str, ...] = (),
             merge: bool = False, example: Mapping[str, str] | None = None,
             restart: bool = False) -> Any:
    """`restart`: SIGHUP cannot apply a change (a file, socket or port opened at start)."""
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum, "choices": choices,
            "merge": merge, "example": example, "restart": restart}
    if isinstance(default, Mapping):
        frozen = MappingProxyType(dict(default))
        return field(default_factory=lambda: frozen, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    interfaces: tuple[str, ...] = _setting(
        (), "Netdevs to watch, in rail order (rail i is the plugin's device i). Empty: every "
        "netdev backed by a PCI device (<sysfs_root>/class/net/<if>/device), sorted by name.")
    pairs: Mapping[str, str] = _setting(
        {}, "Backup set of each primary NIC: the NICs its connections' backup paths may use, "
        "one NIC (a pair) or several joined by + (rail1+rail2+rail3), or all (every other "
        "monitored NIC, at most 16); the key * gives every NIC not listed by name its set (only "
        "* = all). TOML table rail0 = \"rail1+rail2\"; flag and environment "
        "rail0:rail1+rail2,rail1:all. Each set is ordered by `locality`. A NIC not listed gets "
        "one backup automatically: the nearest other NIC under `locality`, else the next rail.",
        example={"rail0": "rail1+rail2+rail3", "rail1": "all"})
    locality: str = _setting(
        pairing.LOCALITY[0], "How a backup set is ordered, nearest first, from sysfs (the "
        "NIC's PCI path and numa_node): same-switch (behind the same PCIe switch, then on the "
        "same NUMA node, then the rest), numa (same NUMA node, then the rest) or any (as "
        "listed; all and automatic backups in rail order from the next rail).",
        choices=pairing.LOCALITY)
    shm_path: str = _setting("/run/linkguard/linkguard.shm",
                             "Shared-memory control file the NCCL plugin reads (keep it in a "
                             "root-owned directory: the plugin trusts only a file no one else can "
                             "write).", restart=True)
    sysfs_root: str = _setting("/sys", "Where sysfs is mounted (tests point it at a fake tree).")
    netns: str = _setting(
        "", "Network namespace whose NICs are watched (a name in /var/run/netns or a path). "
        "Empty: the daemon's own.")
    # Two sockets, libvirt's model: the kernel checks the file's mode and group at connect(),
    # so who may do what is decided before a byte of the API is read.
    grpc_socket: str = _setting(
        "/run/linkguard-admin/linkguard.sock", "Admin socket of the gRPC API (mode 0660, group "
        "admin_group): every call, drain and undrain included. Keep it out of the directory of "
        "shm_path and the other sockets: jobs mount that one, and a root job could drain.",
        restart=True)
    grpc_ro_socket: str = _setting(
        "/run/linkguard/linkguard-ro.sock", "Read-only socket of the gRPC API (mode 0660, group "
        "reader_group): status, watch, events, dom and dump; drain and undrain are refused. "
        "Empty: not served.", restart=True)
    admin_group: str = _setting(
        "linkguard-admin", "Group of the admin socket: its members may drain and undrain. "
        "Empty, or a group that does not exist: root only.", restart=True)
    reader_group: str = _setting(
        "linkguard", "Group of the read-only socket: its members may read state (health "
        "checks, dashboards). Empty, or a group that does not exist: root only.", restart=True)
    plugin_verdict_socket: str = _setting(
        "/run/linkguard/linkguard-verdict.sock", "Unix datagram socket (mode 0666) on which "
        "jobs' NCCL plugins report NICs they judged stalled, lossy or slow "
        "(LINKGUARD_VERDICT_SOCKET on their side). Shown in status, events and /metrics; never "
        "a state change. Empty: not received.")
    # 300 s: a stalled path is failed over at once and rebuilt within seconds to minutes; a gray
    # link that stays gray is reported again each time, so 5 minutes of silence means it healed.
    plugin_verdict_ttl_s: float = _setting(
        300.0, "A NIC stays reported gray this long after a job's last verdict on it.",
        minimum=1.0)
    # 5 s: the plugin sends its census at least once a second while it has a connection
    # (plugin/src/daemon/census.h, LG_CENSUS_INTERVAL_MS), so 5 s of silence is a process gone or stuck.
    plugin_census_ttl_s: float = _setting(
        5.0, "A job's process drops out of the connection census (status, jobs, /metrics) this "
        "long after its last report on plugin_verdict_socket; at once when it says bye or its "
        "pid is gone.", minimum=2.0)
    state_dir: str = _setting(
        "/var/lib/linkguard", "Directory of the state that survives restarts (drains, the "
        "event sequence): systemd's StateDirectory. Empty: nothing survives a restart.",
        restart=True)
    # 9846: in the exporter range 9100-9999 of Prometheus' "Default port allocations" wiki. That
    # range is reported fully allocated since 2023 and could not be checked offline: check and
    # register the port there before a release. Loopback by default: scrape through a proxy.
    metrics_address: str = _setting(
        "127.0.0.1:9846", "host:port of the Prometheus /metrics endpoint. Empty: disabled.",
        restart=True)
    # 50 ms: DESIGN.md requires a heartbeat at least every 100 ms; half of it leaves room for one
    # late wake-up of the event loop before a reader could see a stale heartbeat.
    heartbeat_interval_ms: int = _setting(
        50, "Shared-memory heartbeat period. At most 100: readers treat an older heartbeat "
        "as a dead daemon.", minimum=1, maximum=100)
    # 1 s: error-rate thresholds are per second; 8 IFLA_STATS64 reads per second cost nothing.
    stats_interval_s: float = _setting(
        1.0, "Period of error-counter sampling (netlink link statistics, RDMA port and "
        "transport counters, FEC and PCS statistics).",
        minimum=0.1)  # below 0.1 s a single burst dominates the rate
    # 10 s: optics degrade over minutes; each EEPROM page is an I2C read of milliseconds that
    # competes with the NIC firmware's own module polling.
    dom_interval_s: float = _setting(
        10.0, "Period of optical-module (DOM) reads.", minimum=1.0)
    hold_down_ms: int = _setting(
        _P.hold_down_ms, "A returning link must stay healthy this long before it is UP again.",
        minimum=0)
    flap_penalty: float = _setting(
        _P.flap_penalty, "Penalty added by each flap (a move to DOWN from UP, DEGRADED or "
        "RECOVERING).", minimum=0)
    flap_suppress_threshold: float = _setting(
        _P.flap_suppress_threshold, "A flap that leaves the penalty above this suppresses the "
        "NIC: it stays RECOVERING until the penalty decays below flap_reuse_threshold.",
        minimum=0)
    flap_reuse_threshold: float = _setting(
        _P.flap_reuse_threshold, "A suppressed NIC may become UP once its decaying penalty is "
        "below this (and the hold-down has passed). Must be below flap_suppress_threshold.",
        minimum=0)
    flap_half_life_ms: int = _setting(
        _P.flap_half_life_ms, "The flap penalty halves every half-life.", minimum=1)
    flap_max_penalty: float = _setting(
        _P.flap_max_penalty, "Cap on the penalty; bounds suppression to half_life * "
        "log2(max / reuse) after the last flap.", minimum=0)
    dom_degrade_on_warning: bool = _setting(
        _P.dom_degrade_on_warning, "DOM readings past the module's warning thresholds mark the "
        "NIC DEGRADED (alarms always do).")
    error_rate_per_s: Mapping[str, float] = _setting(
        DEFAULT_ERROR_RATES, "Counter name = errors per second above which the NIC is DEGRADED. "
        "Entries given are merged over the defaults; inf disables one.", minimum=0, merge=True)
    error_rate_min_interval_ms: int = _setting(
        _P.error_rate_min_interval_ms, "Shortest window a counter rate is computed over.",
        minimum=0)
    error_rate_clean_window_ms: int = _setting(
        _P.error_rate_clean_window_ms, "A NIC DEGRADED by an error rate stays DEGRADED until "
        "that counter has stayed at or below its rate this long (then RECOVERING and the "
        "hold-down).", minimum=0)
    log_format: str = _setting(
        "logfmt", "Log line format on stderr (journald): logfmt key=value, or json.",
        choices=("logfmt", "json"))
    log_level: str = _setting("info", "Least severe level logged.",
                              choices=("debug", "info", "warning", "error"))

    def policy_config(self) -> PolicyConfig:
        """The policy's knobs; a test checks that every PolicyConfig field is a setting."""
        return PolicyConfig(**{f.name: getattr(self, f.name) for f in fields(PolicyConfig)})


@dataclass(frozen=True)
class SettingSpec:
    """One row of the table, as click, the generators and the docs see it."""

    name: str
    kind: str  # str, int, float, bool, list, map_str, map_float
    default: Any
    doc: str
    flag: str
    env: str
    minimum: float | None
    maximum: float | None
    choices: tuple[str, ...]
    merge: bool
    example: Mapping[str, str] | None  # shown, commented out, in the example TOML
    restart: bool  # a change needs a restart: SIGHUP keeps the running value


_KIND_TEXT = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
              "list": "a list of strings", "map_str": "a table of strings",
              "map_float": "a table of numbers"}


def _kind(hint: Any) -> str:
    """tuple[str, ...] -> list, Mapping[str, X] -> map_X, a plain type -> its name."""
    if get_origin(hint) is tuple:
        return "list"
    if get_origin(hint) is Mapping:
        return "map_" + str(get_args(hint)[1].__name__)
    return str(hint.__name__)


def _spec(f: Any, hint: Any) -> SettingSpec:
    default = f.default if f.default is not MISSING else f.default_factory()
    return SettingSpec(f.name, _kind(hint), default, f.metadata["doc"],
                       "--" + f.name.replace("_", "-"), ENV_PREFIX + f.name.upper(),
                       f.metadata["minimum"], f.metadata["maximum"], f.metadata["choices"],
                       f.metadata["merge"], f.metadata["example"], f.metadata["restart"])


_HINTS = get_type_hints(Settings)
SETTINGS: tuple[SettingSpec, ...] = tuple(_spec(f, _HINTS[f.name]) for f in fields(Settings))
_BY_NAME = {s.name: s for s in SETTINGS}
_IFNAME = pairing.IFNAME
_COUNTER = re.compile(r"^[A-Za-z0-9_]+$")


# ---- loading and validation ------------------------------------------------------------------
def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                default_path: str | Path = DEFAULT_CONFIG_PATH) -> Settings:
    """Settings from the TOML file at `path` (None: `default_path`) plus `overrides`.

    A missing file at the default path means defaults; a missing file given explicitly is an
    error. `overrides` (name -> value, None = not given) come from flags or the environment.
    """
    file = Path(path if path is not None else default_path)
    return build_settings(read_toml(file, required=path is not None), overrides,
                          source=str(file))


def read_toml(file: Path, required: bool) -> dict[str, Any]:
    """A config file's table; a missing file is {} unless `required` (ConfigError)."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{file}: config file not found") from None
        return {}
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{file}: cannot read config file: {e}") from None


def build_settings(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                   source: str = "config") -> Settings:
    """Validate a parsed TOML mapping plus overrides into Settings (raises ConfigError)."""
    values: dict[str, Any] = {}
    layers = [(data, f"{source}: ", False), (overrides or {}, "", True)]
    for layer, where, is_flag in layers:
        for key, raw in layer.items():
            spec = _BY_NAME.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, _BY_NAME, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"{where}unknown key '{key}'{hint}")
            if raw is None and is_flag:
                continue
            label = f"{where}{spec.flag if is_flag else key}"
            value = _coerce(spec, raw, label)
            if spec.merge:
                value = MappingProxyType({**values.get(key, spec.default), **value})
            values[key] = value
    settings = Settings(**values)
    _check_together(settings)
    return settings


def _coerce(spec: SettingSpec, raw: Any, label: str) -> Any:
    kind = spec.kind
    ok = {
        "str": isinstance(raw, str),
        "int": isinstance(raw, int) and not isinstance(raw, bool),
        "float": isinstance(raw, (int, float)) and not isinstance(raw, bool),
        "bool": isinstance(raw, bool),
        "list": isinstance(raw, (list, tuple)) and all(isinstance(v, str) for v in raw),
        "map_str": isinstance(raw, Mapping) and all(isinstance(v, str) for v in raw.values()),
        "map_float": isinstance(raw, Mapping) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw.values()),
    }[kind]
    if not ok:
        shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:37] + "..."
        raise ConfigError(f"{label}: expected {_KIND_TEXT[kind]}, got {type(raw).__name__} {shown}")
    if kind == "float":
        raw = float(raw)
    if kind == "list":
        raw = tuple(raw)
    if kind.startswith("map"):
        raw = MappingProxyType({k: float(v) if kind == "map_float" else v for k, v in raw.items()})
    numbers = [raw] if kind in ("int", "float") else []
    if kind == "map_float":
        numbers = list(raw.values())
    for n in numbers:
        check_number(n, spec.minimum, spec.maximum, label)
    if spec.choices and raw not in spec.choices:
        raise ConfigError(f"{label}: must be one of {', '.join(spec.choices)}; got {raw!r}")
    return raw


def check_number(n: float, minimum: float | None, maximum: float | None, label: str) -> None:
    """A number setting is not nan and within its bounds (ConfigError naming `label`)."""
    if math.isnan(n):
        raise ConfigError(f"{label}: must be a number, got nan")
    if minimum is not None and n < minimum:
        raise ConfigError(f"{label}: must be >= {minimum:g}, got {n:g}")
    if maximum is not None and n > maximum:
        raise ConfigError(f"{label}: must be <= {maximum:g}, got {n:g}")


def _check_together(s: Settings) -> None:
    """Checks that involve the meaning of values or more than one key."""
    for name in s.interfaces:
        if not _IFNAME.match(name):
            raise ConfigError(f"interfaces: {name!r} is not a valid netdev name")
    dup = sorted({n for n in s.interfaces if s.interfaces.count(n) > 1})
    if dup:
        raise ConfigError(f"interfaces: {', '.join(dup)} listed more than once")
    try:
        pairing.check_pairs(s.pairs, s.interfaces)
    except pairing.PairingError as e:
        raise ConfigError(str(e)) from None
    for name in s.error_rate_per_s:
        if not _COUNTER.match(name):
            raise ConfigError(f"error_rate_per_s: {name!r} is not a counter name")
    if s.flap_reuse_threshold >= s.flap_suppress_threshold:
        raise ConfigError(f"flap_reuse_threshold: must be below flap_suppress_threshold "
                          f"({s.flap_reuse_threshold:g} >= {s.flap_suppress_threshold:g})")
    if s.metrics_address and not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):\d{1,5}$",
                                          s.metrics_address):
        raise ConfigError(f"metrics_address: expected host:port, got {s.metrics_address!r}")
    if s.metrics_address and not 0 < int(s.metrics_address.rsplit(":", 1)[1]) < 65536:
        raise ConfigError(f"metrics_address: port out of range in {s.metrics_address!r}")
    for name in ("shm_path", "sysfs_root", "grpc_socket"):
        if not getattr(s, name):
            raise ConfigError(f"{name}: must not be empty")
    if s.grpc_ro_socket and os.path.abspath(s.grpc_ro_socket) == os.path.abspath(s.grpc_socket):
        raise ConfigError(f"grpc_ro_socket: must differ from grpc_socket ({s.grpc_socket})")
    if s.plugin_verdict_socket and os.path.abspath(s.plugin_verdict_socket) in {
            os.path.abspath(p) for p in (s.grpc_socket, s.grpc_ro_socket) if p}:
        raise ConfigError("plugin_verdict_socket: must differ from grpc_socket and "
                          f"grpc_ro_socket ({s.plugin_verdict_socket})")


def admin_socket_exposure(s: Settings) -> str:
    """Why the admin socket is reachable where jobs look ('' when it has its own directory).

    Jobs (Kubernetes pods, containers) are given the directory of the control file and of the
    sockets they use; a root job then passes the socket's mode check, whatever its group.
    """
    admin_dir = os.path.dirname(os.path.abspath(s.grpc_socket))
    shared = [name for name in ("shm_path", "grpc_ro_socket", "plugin_verdict_socket")
              if getattr(s, name) and os.path.dirname(os.path.abspath(getattr(s, name)))
              == admin_dir]
    if not shared:
        return ""
    return (f"grpc_socket {s.grpc_socket} shares its directory with {', '.join(shared)}: a job "
            f"that is given {admin_dir} and runs as root can drain NICs; move grpc_socket to a "
            "directory of its own (docs/kubernetes.md)")


# ---- click -------------------------------------------------------------------------------------
F = TypeVar("F", bound=Callable[..., Any])


def cli_text(spec: SettingSpec, value: Any) -> str:
    """`value` as a flag or environment variable spells it: a,b for lists, k:v,k2:v2 for maps."""
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "list":
        return ",".join(value)
    if spec.kind.startswith("map"):
        return ",".join(f"{k}:{_num(v) if spec.kind == 'map_float' else v}"
                        for k, v in value.items())
    return _num(value) if spec.kind == "float" else str(value)


def click_options() -> Callable[[F], F]:
    """A decorator adding --config and one option per setting, each also read from its
    environment variable. Unset options arrive as None; pass the parameters to
    settings_from_click()."""
    import click

    class _Sequence(click.ParamType):  # type: ignore[type-arg]  # generic in click >= 8.2
        def __init__(self, kind: str) -> None:
            self.kind = kind
            self.name = {"list": "NAME,...", "map_str": "NAME:NAME,...",
                         "map_float": "NAME:RATE,..."}[kind]

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if not isinstance(value, str):
                return value
            items = [v.strip() for v in value.split(",") if v.strip()]
            if self.kind == "list":
                return tuple(items)
            out: dict[str, Any] = {}
            for item in items:
                k, sep, v = item.partition(":")
                if not sep or not k or not v:
                    self.fail(f"expected {self.name}, got {value!r}", param, ctx)
                try:
                    out[k] = float(v) if self.kind == "map_float" else v
                except ValueError:
                    self.fail(f"{v!r} is not a number", param, ctx)
            return out

    def decorate(f: F) -> F:
        for spec in reversed(SETTINGS):
            help_text = f"{spec.doc} [default: {cli_text(spec, spec.default) or 'empty'}]"
            decls = [spec.flag]
            kw: dict[str, Any] = {"default": None, "envvar": spec.env, "help": help_text,
                                  "show_envvar": True}
            if spec.kind == "bool":
                decls = [f"{spec.flag}/--no-{spec.flag[2:]}"]
                kw["type"] = click.BOOL
            elif spec.kind in ("list", "map_str", "map_float"):
                kw["type"] = _Sequence(spec.kind)
            elif spec.choices:
                kw["type"] = click.Choice(spec.choices)
            else:
                kw["type"] = {"int": click.INT, "float": click.FLOAT}.get(spec.kind, click.STRING)
            f = click.option(*decls, spec.name, **kw)(f)
        return click.option(
            "--config", "config", default=None, envvar=ENV_PREFIX + "CONFIG", show_envvar=True,
            type=click.Path(dir_okay=False),
            help=f"TOML config file [default: {DEFAULT_CONFIG_PATH}, if it exists]")(f)
    return decorate


def settings_from_click(params: Mapping[str, Any]) -> Settings:
    """Settings from the parameters click_options() produced (extra parameters are ignored)."""
    overrides = {k: v for k, v in params.items() if k in _BY_NAME and v is not None}
    return load_config(params.get("config"), overrides)


# ---- generators --------------------------------------------------------------------------------
def render_example_toml(commented: bool = True, settings: Settings | None = None) -> str:
    """The example /etc/linkguard/linkguard.toml: every key, its doc and its default (or its
    value in `settings`). With `commented` the assignments are commented out, so an installed
    file follows the daemon's defaults."""
    c = "#" if commented else ""
    values = settings or Settings()
    out = ["# linkguardd configuration (TOML). Generated from daemon/linkguardd/settings.py.",
           "# Every key is optional; the value shown is the default. A command-line flag or an",
           f"# environment variable ({ENV_PREFIX}<KEY>) overrides the value set here.", ""]
    scalars = [s for s in SETTINGS if not s.kind.startswith("map")]
    tables = [s for s in SETTINGS if s.kind.startswith("map")]  # TOML: tables after bare keys
    for spec in scalars + tables:
        out += textwrap.wrap(spec.doc, 98, initial_indent="# ", subsequent_indent="# ")
        out.append(f"# flag {spec.flag}, environment {spec.env}"
                   + ("; a change needs a restart" if spec.restart else ""))
        if spec.kind.startswith("map"):
            out.append(f"{c}[{spec.name}]")
            table = getattr(values, spec.name)
            out += [f"{c}{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
            if not table:
                out += [f"#{_toml_key(k)} = {_toml_value(v)}"
                        for k, v in (spec.example or {}).items()]
        else:
            out.append(f"{c}{spec.name} = {_toml_value(getattr(values, spec.name))}")
        out.append("")
    return "\n".join(out)


def render_environment_file() -> str:
    """The example EnvironmentFile for linkguardd.service, every variable commented out."""
    out = ["# linkguardd environment (systemd EnvironmentFile=). Generated from",
           "# daemon/linkguardd/settings.py. A variable set here overrides the config file; a",
           "# command-line flag overrides both. Uncomment to set.", "",
           "# TOML config file; a missing default file means built-in defaults.",
           f"#{ENV_PREFIX}CONFIG={DEFAULT_CONFIG_PATH}", ""]
    for spec in SETTINGS:
        out += textwrap.wrap(spec.doc, 98, initial_indent="# ", subsequent_indent="# ")
        value = cli_text(spec, spec.default)
        out += [f"#{spec.env}={value}", ""]
    return "\n".join(out)


def _num(v: float) -> str:
    return "inf" if v == math.inf else repr(float(v))


def _toml_key(k: str) -> str:
    return k if re.match(r"^[A-Za-z0-9_-]+$", k) else _toml_value(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _num(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"
