"""The Grafana dashboard (deploy/grafana/leakproof.json) and the Prometheus alert rules
(deploy/prometheus/alerts.yml) query only series the driver exports (driver/metrics.py's
METRICS), and cover what an operator watches. ``promtool check rules`` and ``promtool test
rules`` run in make test's lint phase (scripts/test.sh)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from leakproof.driver.metrics import METRICS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "leakproof.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
NOT_NAMES = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def exported() -> set[str]:
    """What a query can name: each series, a histogram by its _bucket, _sum and _count."""
    found = set()
    for name, kind in METRICS.items():
        found |= ({name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram"
                  else {name})
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (in braces or in by/on/... lists) or strings."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    idents = re.findall(r"(?<![\w$.])([A-Za-z_:][\w:]*)\s*(\(?)", e)
    return {name for name, call in idents if not call and name.lower() not in NOT_NAMES}


def test_metric_names_are_read_out_of_promql() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket{x=~"$t"}'
                        '[$__rate_interval])))') == {"a_bucket"}
    assert metric_names("time() - max(b{topic=\"t\"}) > 10 * c and on (topic) d > 0") == {
        "b", "c", "d"}
    assert metric_names('up{job="leakproof"} == 0') == {"up"}


def dashboard_queries() -> list[str]:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["query"]["query"])
            assert found, var
            queries.append(found.group(1))
    return queries


def test_the_dashboard_queries_only_series_the_job_exports() -> None:
    used = set().union(*map(metric_names, dashboard_queries()))
    assert used <= exported(), sorted(used - exported())
    # throughput, lag in records and seconds, batch time against the interval, commits,
    # dead letters by kind, held transactions
    assert {"leakproof_records_read_total", "leakproof_lag_records", "leakproof_lag_seconds",
            "leakproof_batch_processing_seconds_bucket", "leakproof_batch_interval_seconds",
            "leakproof_commits_total", "leakproof_dead_letters_total",
            "leakproof_held_by_open_transaction"} <= used


def test_every_panel_has_a_query_and_its_own_place() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert all(p["targets"] and all(t["expr"].strip() for t in p["targets"]) for p in panels)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        here = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not here & cells, p["title"]  # no two panels overlap
        cells |= here


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_alerts_query_only_series_the_job_exports() -> None:
    used = set().union(*(metric_names(r["expr"]) for r in alert_rules()))
    assert used <= exported() | {"up"}, sorted(used - exported())


@pytest.mark.parametrize("alert", ["LeakproofLagHigh", "LeakproofNoCommit",
                                   "LeakproofDeadLetters", "LeakproofHeldByOpenTransaction",
                                   "LeakproofClientStalls", "LeakproofGroupMirrorFailing",
                                   "LeakproofStalled", "LeakproofDown"])
def test_each_alert_is_there_and_unit_tested(alert: str) -> None:
    rules = {r["alert"]: r for r in alert_rules()}
    assert rules[alert]["labels"]["severity"] in ("page", "ticket")
    tests = yaml.safe_load((ALERTS.parent / "alerts_test.yml").read_text())["tests"]
    fired = {case["alertname"] for t in tests for case in t["alert_rule_test"]
             if case["exp_alerts"]}
    assert alert in fired
