"""Settings: one table, a TOML file, flags and environment; bad input names the key."""
from __future__ import annotations

import math
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from linkguardd.policy import PolicyConfig
from linkguardd.settings import (
    ENV_PREFIX,
    SETTINGS,
    ConfigError,
    Settings,
    admin_socket_exposure,
    build_settings,
    click_options,
    load_config,
    render_environment_file,
    render_example_toml,
    settings_from_click,
)

TWO = 'interfaces = ["rail0", "rail1"]\n'

# (TOML text, what the single error message must contain: the key and the problem)
BAD_CONFIGS = [
    ("hold_down = 500", "unknown key 'hold_down' (did you mean 'hold_down_ms'?)"),
    ("[policy]\nhold_down_ms = 1", "unknown key 'policy'"),
    ('hold_down_ms = "2s"', "hold_down_ms: expected an integer, got str '2s'"),
    ("hold_down_ms = 2.5", "hold_down_ms: expected an integer"),
    ("hold_down_ms = true", "hold_down_ms: expected an integer"),
    ("hold_down_ms = -5", "hold_down_ms: must be >= 0, got -5"),
    ("flap_half_life_ms = 0", "flap_half_life_ms: must be >= 1"),
    ("flap_penalty = -1.0", "flap_penalty: must be >= 0"),
    ("flap_reuse_threshold = 3000", "flap_reuse_threshold: must be below flap_suppress_threshold"),
    ("heartbeat_interval_ms = 250", "heartbeat_interval_ms: must be <= 100, got 250"),
    ("stats_interval_s = 0", "stats_interval_s: must be >= 0.1"),
    ("dom_interval_s = nan", "dom_interval_s: must be a number"),
    ('interfaces = "rail0"', "interfaces: expected a list of strings"),
    ("interfaces = [1, 2]", "interfaces: expected a list of strings"),
    ('interfaces = ["rail0", "rail0"]', "interfaces: rail0 listed more than once"),
    ('interfaces = ["a/b"]', "interfaces: 'a/b' is not a valid netdev name"),
    ('interfaces = ["sixteen_chars_xx"]', "interfaces: 'sixteen_chars_xx' is not a valid"),
    (TWO + '[pairs]\nrail0 = "rail0"', "pairs: rail0 is in its own backup set"),
    ('[pairs]\nrail1 = "rail1"', "pairs: rail1 is in its own backup set"),
    (TWO + '[pairs]\nrail0 = "rail1+rail2"', "pairs: rail2 is not in interfaces (rail0, rail1)"),
    ('[pairs]\nrail0 = "rail1+rail0"', "pairs: rail0 is in its own backup set"),
    ('[pairs]\nrail0 = "rail1+rail1"', "pairs: rail0: rail1 listed more than once in 'rail1+rail1'"),
    ('[pairs]\nrail0 = ""', "pairs: rail0: empty member in backup set ''"),
    ('[pairs]\nrail0 = "rail1++rail2"', "pairs: rail0: empty member in backup set 'rail1++rail2'"),
    ('[pairs]\nrail0 = "rail1+"', "pairs: rail0: empty member"),
    ('[pairs]\nrail0 = "all+rail1"', "pairs: rail0: all cannot be combined with names"),
    ('[pairs]\nrail0 = "rail 1"', "pairs: rail0: 'rail 1' is not a valid netdev name"),
    ('[pairs]\n"a/b" = "rail1"', "pairs: 'a/b' is not a valid netdev name"),
    ('[pairs]\n"*" = "rail1"', "pairs: * takes only all (every other NIC), got 'rail1'"),
    ('[pairs]\nr0 = "' + "+".join(f"r{i}" for i in range(1, 18)) + '"',
     "pairs: r0: 17 backups, at most 16"),
    ('locality = "rack"', "locality: must be one of same-switch, numa, any; got 'rack'"),
    (TWO + '[pairs]\nrail0 = "rail2"', "pairs: rail2 is not in interfaces (rail0, rail1)"),
    (TWO + '[pairs]\nrail9 = "rail0"', "pairs: rail9 is not in interfaces"),
    ("[pairs]\nrail0 = 1", "pairs: expected a table of strings"),
    ("pairs = 3", "pairs: expected a table of strings"),
    ("dom_degrade_on_warning = 1", "dom_degrade_on_warning: expected true or false"),
    ('log_format = "xml"', "log_format: must be one of logfmt, json; got 'xml'"),
    ("[error_rate_per_s]\nrx_crc_errors = -1", "error_rate_per_s: must be >= 0, got -1"),
    ('[error_rate_per_s]\nrx_crc_errors = "ten"', "error_rate_per_s: expected a table of numbers"),
    ('[error_rate_per_s]\n"rx crc" = 1', "error_rate_per_s: 'rx crc' is not a counter name"),
    ('metrics_address = "localhost"', "metrics_address: expected host:port"),
    ('metrics_address = "127.0.0.1:70000"', "metrics_address: port out of range"),
    ('shm_path = ""', "shm_path: must not be empty"),
    ("hold_down_ms = ", "not valid TOML"),
]


@pytest.mark.parametrize("text,message", BAD_CONFIGS, ids=[m for _, m in BAD_CONFIGS])
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "linkguard.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)  # one line, one problem
    assert err.value.exit_code == 2


def test_good_config_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "linkguard.toml"
    path.write_text(TWO + 'shm_path = "/run/lg/shm"\nhold_down_ms = 500\nstats_interval_s = 2\n'
                    "dom_degrade_on_warning = false\n"
                    '[pairs]\nrail0 = "rail1"\n[error_rate_per_s]\nrx_crc_errors = 3\n'
                    "symbol_error = inf\n")
    s = load_config(path)
    assert s.interfaces == ("rail0", "rail1") and dict(s.pairs) == {"rail0": "rail1"}
    assert (s.shm_path, s.hold_down_ms, s.stats_interval_s) == ("/run/lg/shm", 500, 2.0)
    assert s.dom_degrade_on_warning is False
    # error_rate_per_s merges over the defaults: the other counters keep theirs
    assert s.error_rate_per_s["rx_crc_errors"] == 3.0
    assert math.isinf(s.error_rate_per_s["symbol_error"])
    assert s.error_rate_per_s["link_downed"] == Settings().error_rate_per_s["link_downed"]
    again = tmp_path / "again.toml"
    again.write_text(render_example_toml(commented=False, settings=s))
    assert load_config(again) == s


@pytest.mark.parametrize("commented", [True, False])
def test_example_toml_parses_back_to_defaults(tmp_path: Path, commented: bool) -> None:
    text = render_example_toml(commented=commented)
    data = tomllib.loads(text)
    assert data == {} if commented else set(data) == {s.name for s in SETTINGS}
    assert build_settings(data) == Settings()
    # the commented file, uncommented line by line, is the full default config too
    if commented:
        lines = [ln[1:] if ln.startswith("#") and ln[1:2] not in ("", " ") else ln
                 for ln in text.splitlines()]  # "#key = v" and "#[table]", not "# doc" lines
        full = tomllib.loads("\n".join(ln for ln in lines if not ln.startswith("rail")))
        assert build_settings(full) == Settings()


def test_environment_file_values_parse_back_to_defaults(tmp_path: Path) -> None:
    env = {}
    for line in render_environment_file().splitlines():
        if line.startswith("#" + ENV_PREFIX):
            key, _, value = line[1:].partition("=")
            env[key] = value
    assert set(env) == {s.env for s in SETTINGS} | {ENV_PREFIX + "CONFIG"}
    env[ENV_PREFIX + "CONFIG"] = str(tmp_path / "empty.toml")
    (tmp_path / "empty.toml").write_text("")
    assert invoke([], env) == Settings()


@click.command()
@click_options()
def _cmd(**params: Any) -> None:
    _cmd.result = settings_from_click(params)  # type: ignore[attr-defined]


def invoke(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    result = CliRunner().invoke(_cmd, argv, env=env, catch_exceptions=True)
    if result.exception is not None:
        raise result.exception
    assert result.exit_code == 0, result.output
    return _cmd.result  # type: ignore[attr-defined,no-any-return]


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    path = tmp_path / "lg.toml"
    path.write_text("hold_down_ms = 1000\ndom_degrade_on_warning = true\n" + TWO)
    assert invoke(["--config", str(path)]).hold_down_ms == 1000
    assert invoke(["--config", str(path), "--hold-down-ms", "500"]).hold_down_ms == 500
    env = {ENV_PREFIX + "HOLD_DOWN_MS": "700", ENV_PREFIX + "CONFIG": str(path)}
    assert invoke([], env).hold_down_ms == 700
    assert invoke(["--hold-down-ms", "500"], env).hold_down_ms == 500
    s = invoke(["--config", str(path), "--no-dom-degrade-on-warning", "--interfaces", "a,b,c",
                "--pairs", "a:c", "--error-rate-per-s", "symbol_error:inf"])
    assert s.dom_degrade_on_warning is False and s.interfaces == ("a", "b", "c")
    assert dict(s.pairs) == {"a": "c"} and math.isinf(s.error_rate_per_s["symbol_error"])


def test_backup_sets_from_flag_and_environment() -> None:
    s = invoke(["--config", "/dev/null", "--interfaces", "a,b,c,d", "--pairs", "a:b+c+d,*:all",
                "--locality", "numa"])
    assert dict(s.pairs) == {"a": "b+c+d", "*": "all"} and s.locality == "numa"
    env = {ENV_PREFIX + "PAIRS": "a:all,b:c", ENV_PREFIX + "CONFIG": "/dev/null"}
    assert dict(invoke([], env).pairs) == {"a": "all", "b": "c"}
    with pytest.raises(ConfigError, match="pairs: a: b listed more than once"):
        invoke(["--config", "/dev/null", "--pairs", "a:b+b"])


def test_bad_flag_value_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--hold-down-ms: must be >= 0"):
        invoke(["--config", "/dev/null", "--hold-down-ms", "-5"])
    with pytest.raises(ConfigError, match="pairs: a is in its own backup set"):
        invoke(["--config", "/dev/null", "--pairs", "a:a"])
    result = CliRunner().invoke(_cmd, ["--config", "/dev/null", "--pairs", "a-b"])
    assert result.exit_code == 2 and "expected NAME:NAME" in result.output


def test_missing_file(tmp_path: Path) -> None:
    assert load_config(None, default_path=tmp_path / "absent.toml") == Settings()
    with pytest.raises(ConfigError, match="absent.toml: config file not found"):
        load_config(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="nope.toml: config file not found"):
        invoke(["--config", str(tmp_path / "nope.toml")])


def test_table_is_complete() -> None:
    names = {s.name for s in SETTINGS}
    assert {f.name for f in fields(PolicyConfig)} <= names  # every policy knob is a setting
    assert Settings().policy_config() == PolicyConfig()
    for spec in SETTINGS:
        assert spec.doc.endswith(".") and spec.flag == "--" + spec.name.replace("_", "-")
        assert spec.env == ENV_PREFIX + spec.name.upper()


def test_an_admin_socket_beside_the_control_file_is_named_as_reachable_by_jobs() -> None:
    """Issue 30, finding 1: jobs are given the control file's directory; the default keeps the
    admin socket out of it, and a config that puts it there is warned about."""
    assert admin_socket_exposure(Settings()) == ""
    shared = build_settings({"grpc_socket": "/run/linkguard/linkguard.sock"}, {}, source="t")
    problem = admin_socket_exposure(shared)
    assert "shm_path, grpc_ro_socket, plugin_verdict_socket" in problem
    assert "can drain" in problem and "/run/linkguard " in problem
