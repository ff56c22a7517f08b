"""The shipped alert rules and Grafana dashboard (fleet/): promtool checks them and runs their
unit tests, and every series they query exists, with the labels they select on, in the daemon's
real exposition (the end-to-end golden, tests/lab/test_metrics_e2e.py)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "fleet" / "prometheus" / "linkguard.rules.yml"
RULE_TESTS = REPO / "fleet" / "prometheus" / "linkguard.rules.test.yml"
DASHBOARD = REPO / "fleet" / "grafana" / "linkguard.json"
GOLDEN = REPO / "tests" / "unit" / "golden" / "metrics.txt"
# Added by Prometheus to every scraped series, so absent from the exposition itself.
TARGET_LABELS = {"instance", "job"}
SELECTOR = re.compile(r"\b(linkguard_[a-z_]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"')


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool missing: Debian's prometheus package (scripts/host-packages.txt)"
    return path


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd)


def exposition() -> dict[str, set[str]]:
    """sample name -> label names, from the golden scrape of the real daemon."""
    out: dict[str, set[str]] = {}
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("#") or not line:
            continue
        name, _, rest = line.partition("{")
        name = name.split(" ")[0]
        labels = set(re.findall(r'(\w+)="', rest.rsplit("}", 1)[0])) if rest else set()
        out.setdefault(name, set()).update(labels)
    return out


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def grafana_to_promql(expr: str) -> str:
    """A dashboard query as Prometheus sees it once Grafana filled in its variables."""
    expr = expr.replace("$__rate_interval", "5m").replace('"$instance"', '".*"')
    m = re.fullmatch(r"label_values\((\w+), (\w+)\)", expr)
    return f"group by ({m[2]}) ({m[1]})" if m else expr


def test_promtool_checks_the_rules() -> None:
    out = run("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_of_the_rules() -> None:
    out = run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_every_alert_has_a_severity_summary_and_runbook() -> None:
    alerts = {r["alert"]: r for r in rules()}
    assert set(alerts) >= {
        "LinkguardNicDown", "LinkguardPairWithoutHealthyNic", "LinkguardNicOnBackupTooLong",
        "LinkguardNicFlapping", "LinkguardNicDamped", "LinkguardOpticsDegraded",
        "LinkguardDaemonDown", "LinkguardHeartbeatStale"}
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"] and len(rule["annotations"]["runbook"]) > 40, name


def test_every_alert_is_unit_tested() -> None:
    tested = {t["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert tested == {r["alert"] for r in rules()}


def test_the_dashboard_queries_parse(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule."""
    records = [{"record": f"linkguard:dashboard_query_{i}", "expr": grafana_to_promql(e)}
               for i, e in enumerate(dashboard_exprs())]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    out = run("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_queried_series_is_in_the_real_exposition(source: str) -> None:
    exprs = [r["expr"] for r in rules()] if source == "rules" else dashboard_exprs()
    exposed = exposition()
    queried = 0
    for expr in exprs:
        for name, selector in SELECTOR.findall(expr):
            queried += 1
            assert name in exposed, f"{source} query names {name}, which the daemon does not export"
            unknown = set(MATCHER.findall(selector or "")) - exposed[name] - TARGET_LABELS
            assert not unknown, f"{source}: {name} has no label {', '.join(sorted(unknown))}"
    assert queried >= 8


def test_the_dashboard_is_well_formed() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "linkguard"
    for panel in board["panels"]:
        assert panel["targets"] and panel["title"], panel
        for t in panel["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = " ".join(p["title"] for p in board["panels"])
    for wanted in ("NIC states", "Failovers", "Detection latency", "Rx power"):
        assert wanted in titles
