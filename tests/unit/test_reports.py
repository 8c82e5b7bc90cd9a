"""Aggregation of runs (analysis) and the report renderers: table, JSON, JUnit XML and the offline HTML page."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import msgspec
import pytest

from api_service.analysis import RunRecord, compare, confusion, failures, group_metrics, grouped_metrics
from shared.reports import ReportData, render_html, render_json, render_junit, render_table

pytestmark = pytest.mark.unit

EVIL = '<script>alert("x")</script><img src="https://evil.example/x.png">'
CASE_IDS = [uuid.UUID(int=i + 1) for i in range(3)]
BATCH = uuid.UUID(int=99)


def _run(
    case: int, model: str, passed: bool, confidence: float = 0.9, status: str = "completed"
) -> RunRecord:
    names = ["search issues", "create todo", EVIL]
    return RunRecord(
        run_id=uuid.uuid4(),
        test_case_id=CASE_IDS[case],
        test_case_name=names[case],
        provider="scripted",
        model=model,
        status=status,
        classification=None if status == "failed" else ("TP" if passed else "FN"),
        confidence_score=None if status == "failed" else confidence,
        execution_time_ms=100 + case,
        prompt_tokens=1000,
        completion_tokens=50,
        expected_server="jira",
        expected_tool=["search_issues", "create_issue", "get_issue"][case],
        selected_server="jira",
        selected_tool=["search_issues", "create_issue", "get_issue"][case] if passed else "add_comment",
        parameter_correctness=1.0 if passed else 0.0,
        reasoning="ok" if passed else f"picked add_comment {EVIL}",
        error_message="boom" if status == "failed" else None,
        query="q",
        batch_id=BATCH,
    )


def sample_records() -> list[RunRecord]:
    records = []
    for case in range(3):
        records += [_run(case, "good", True) for _ in range(3)]
    records += [_run(0, "bad", True), _run(0, "bad", True), _run(0, "bad", False, 0.8)]
    records += [_run(1, "bad", False, 0.7) for _ in range(3)]
    records += [_run(2, "bad", False, status="failed") for _ in range(3)]
    return records


def sample_report() -> ReportData:
    """A small synthetic batch rendered through the real aggregation (shared with the Chromium test)."""
    records = sample_records()
    overall = group_metrics("all", records, {"good": (1.0, 2.0)})
    summary = {"overall": overall, "group_by": "model", "groups": grouped_metrics(records, "model", {})}
    return ReportData(
        batch={
            "id": str(BATCH),
            "name": EVIL,
            "run_count": len(records),
            "test_case_count": 3,
            "model_count": 2,
            "repeats": 3,
            "progress": {"completed": 15, "failed": 3, "pending": 0, "running": 0},
            "done": True,
        },
        summary=msgspec.to_builtins(summary),
        compare=msgspec.to_builtins(compare(BATCH, records, "good")),
        confusion=msgspec.to_builtins(confusion(records)),
        failures=msgspec.to_builtins(failures(records)),
    )


def test_group_metrics_counts_pass_rate_flakiness_cost_and_calibration() -> None:
    """The bad model passes 2 of 9 runs, case 0 is flaky, and the good model's tokens are priced."""
    groups = {g.key: g for g in grouped_metrics(sample_records(), "model", {"good": (1.0, 2.0)})}

    bad, good = groups["bad"], groups["good"]
    assert bad.pass_rate.value == pytest.approx(2 / 9, abs=1e-4)
    assert bad.failed_runs == 3
    assert [c.test_case_name for c in bad.flaky_cases] == ["search issues"]
    assert good.pass_hat_k == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert good.cost_usd == pytest.approx(9 * (1000 * 1.0 + 50 * 2.0) / 1e6)
    assert bad.cost_usd is None
    assert good.calibration.brier_score == pytest.approx(0.01)


def test_compare_counts_regressions_with_mcnemar() -> None:
    """Against the good model the bad one regresses on the two cases it mostly fails."""
    out = compare(BATCH, sample_records(), "good")

    [pair] = out.comparisons
    assert (pair.regressions, pair.fixes, pair.paired_cases) == (2, 0, 3)
    assert pair.p_value == pytest.approx(0.5)


def test_compare_across_batches_pairs_each_model_with_itself() -> None:
    """With another batch, each model in it is compared with the same model in the first batch."""
    other = uuid.UUID(int=7)
    later = [_run(c, "bad", True) for c in range(3)]

    out = compare(BATCH, sample_records(), "good", other, later)

    across = [c for c in out.comparisons if c.against == "bad"]
    assert len(across) == 1
    assert across[0].fixes == 2


def test_confusion_lists_wrong_pairs_worst_first() -> None:
    """The confusion matrix keeps the diagonal and lists expected -> selected mistakes by count."""
    out = confusion(sample_records())

    top = out.top_confusions[0]
    assert (top.expected, top.selected, top.count) == ("jira.create_issue", "jira.add_comment", 3)
    [jira] = out.servers
    assert len(jira.matrix) == len(jira.expected_tools)


def test_table_report_aligns_models_and_cases() -> None:
    """The table report lists both models, the per-case verdicts and the McNemar comparison."""
    text = render_table(sample_report())

    assert "good" in text
    assert "FAIL 0/3" in text
    assert "McNemar" in text


def test_json_report_round_trips() -> None:
    """The JSON report is valid JSON with the five sections."""
    data = json.loads(render_json(sample_report()))

    assert set(data) == {"batch", "summary", "compare", "confusion", "failures"}


def test_junit_has_one_testcase_per_case_and_model_with_consistent_counts() -> None:
    """JUnit: testsuites/testsuite/testcase, failures carry reasoning, all-errored cases are errors."""
    root = ET.fromstring(render_junit(sample_report()))  # noqa: S314 - our own output

    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"good", "bad"}
    bad = suites["bad"]
    assert len(bad.findall("testcase")) == 3
    assert bad.get("failures") == "1"
    assert bad.get("errors") == "1"
    assert len(bad.findall("testcase/failure")) == 1
    assert len(bad.findall("testcase/error")) == 1
    assert "add_comment" in (bad.find("testcase/failure").text or "")  # type: ignore[union-attr]
    assert root.get("tests") == "6"
    assert root.get("failures") == "1"
    assert all(tc.get("classname", "").startswith("mcpeval.") for tc in root.iter("testcase"))


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action", "xlink:href")]

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def test_html_report_is_self_contained_escaped_and_embeds_svgs() -> None:
    """The page parses, loads nothing from the network, escapes untrusted text and embeds its SVG plots."""
    page = render_html(sample_report())
    parser = _Collect()

    parser.feed(page)
    parser.close()

    assert "script" not in parser.tags
    assert "img" not in parser.tags
    assert not [u for u in parser.urls if u.startswith(("http:", "https:", "//"))]
    assert parser.tags.count("svg") >= 2
    assert "rect" in parser.tags
    assert "circle" in parser.tags
    assert any(EVIL in d for d in parser.data)
    for svg in page.split("<svg")[1:]:
        ET.fromstring("<svg" + svg.split("</svg>")[0] + "</svg>")  # noqa: S314 - our own output


def test_junit_survives_control_characters_in_llm_output() -> None:
    """Characters XML 1.0 forbids (e.g. \\x01 in a model's text) are replaced, so the file still parses."""
    data = sample_report()
    data.failures[0]["reasoning"] = "bad \x01 byte \x1b[31m"

    root = ET.fromstring(render_junit(data))  # noqa: S314 - our own output

    assert root.tag == "testsuites"
