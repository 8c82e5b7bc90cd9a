"""Render a batch report — table (humans), JSON (machines), JUnit XML (CI) and one self-contained HTML file.

The input is the `ReportData` the CLI gathers from the REST API (plain JSON dicts as the API answers them).
Every text that reaches HTML or XML is escaped: tool descriptions, case names and LLM output are untrusted.
"""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Any

from shared.demo.run import format_table

FORMATS = ("table", "json", "junit", "html")


@dataclass
class ReportData:
    """Everything one report shows: the batch (progress), its summary grouped by model, the model
    comparison, the confusion matrix and the runs that did not pass."""

    batch: dict[str, Any]
    summary: dict[str, Any]
    compare: dict[str, Any]
    confusion: dict[str, Any]
    failures: list[dict[str, Any]] = field(default_factory=list)


def pct(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:.1f}%"


def with_interval(estimate: dict[str, Any] | None) -> str:
    """`91.7% [84.0-96.0]` from an `Estimate` dict."""
    if not estimate or estimate.get("value") is None:
        return "-"
    return (
        f"{pct(estimate['value'])} [{float(estimate['low']) * 100:.1f}-{float(estimate['high']) * 100:.1f}]"
    )


def _num(value: Any, places: int = 1) -> str:
    return "-" if value is None else f"{float(value):.{places}f}"


def _pass_k(group: dict[str, Any]) -> str:
    values = group.get("pass_hat_k") or {}
    if not values:
        return "-"
    k = max(values, key=int)
    return f"k={k}: {pct(values[k])}"


def metric_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[object]]]:
    """Headers and one row per model group (and the overall row) of the metrics table."""
    headers = [
        "model",
        "runs",
        "pass rate [95% CI]",
        "F1 [95% CI]",
        "precision",
        "recall",
        "accuracy",
        "params",
        "pass^k",
        "p50 ms",
        "p95 ms",
        "tokens in/out",
        "cost $",
        "Brier",
        "ECE",
    ]
    groups = list(summary.get("groups") or [])
    if summary.get("overall") and len(groups) != 1:
        groups.append(summary["overall"])
    rows: list[list[object]] = []
    for g in groups:
        tokens = (
            "-"
            if g.get("prompt_tokens") is None
            else f"{g['prompt_tokens']}/{g.get('completion_tokens') or 0}"
        )
        calibration = g.get("calibration") or {}
        rows.append(
            [
                g["key"],
                g["runs"],
                with_interval(g.get("pass_rate")),
                with_interval(g.get("f1_score")),
                pct((g.get("precision") or {}).get("value")),
                pct((g.get("recall") or {}).get("value")),
                pct((g.get("accuracy") or {}).get("value")),
                pct(g.get("parameter_accuracy")),
                _pass_k(g),
                _num(g.get("latency_p50_ms"), 0),
                _num(g.get("latency_p95_ms"), 0),
                tokens,
                _num(g.get("cost_usd"), 4),
                _num(calibration.get("brier_score"), 3),
                _num(calibration.get("expected_calibration_error"), 3),
            ]
        )
    return headers, rows


def aligned_table(headers: list[str], rows: list[list[object]], cap: int = 48) -> str:
    widths = [min(cap, max([len(h), *(len(str(r[i])) for r in rows)])) for i, h in enumerate(headers)]
    return format_table(headers, rows, widths)


def comparison_rows(compare: dict[str, Any]) -> tuple[list[str], list[list[object]]]:
    models: list[str] = list(compare.get("models") or [])
    rows: list[list[object]] = []
    for case in compare.get("cases") or []:
        row: list[object] = [case["test_case_name"]]
        for model in models:
            result = case["results"].get(model)
            if result is None:
                row.append("-")
            else:
                mark = "pass" if result["passed"] else "FAIL"
                row.append(f"{mark} {result['passed_runs']}/{result['runs']}")
        rows.append(row)
    return ["test case", *models], rows


def render_table(data: ReportData) -> str:
    """The human report: batch line, metrics per model, per-case comparison, model tests, flaky cases."""
    batch = data.batch
    progress = batch.get("progress") or {}
    parts = [
        f"batch {batch.get('id')}  {batch.get('name') or ''}".rstrip(),
        f"{batch.get('run_count')} runs: {batch.get('test_case_count')} cases x {batch.get('model_count')} "
        f"models x {batch.get('repeats')} repeats — completed {progress.get('completed', 0)}, "
        f"failed {progress.get('failed', 0)}, pending {progress.get('pending', 0)}, "
        f"running {progress.get('running', 0)}",
        "",
        aligned_table(*metric_rows(data.summary)),
        "",
        "Per test case (majority of repeats decides pass):",
        aligned_table(*comparison_rows(data.compare)),
    ]
    comparisons = data.compare.get("comparisons") or []
    if comparisons:
        parts += ["", "Model comparison (exact McNemar test over paired cases):"]
        rows: list[list[object]] = [
            [
                c["model"],
                c["against"],
                c["paired_cases"],
                c["regressions"],
                c["fixes"],
                f"{float(c['p_value']):.4g}",
            ]
            for c in comparisons
        ]
        parts.append(aligned_table(["model", "against", "cases", "regressions", "fixes", "p-value"], rows))
    flaky = (data.summary.get("overall") or {}).get("flaky_cases") or []
    if flaky:
        parts += ["", "Flaky cases (passed some repeats, not all):"]
        parts.append(
            aligned_table(
                ["test case", "model", "passed"],
                [[f["test_case_name"], f["model"], f"{f['passed_runs']}/{f['runs']}"] for f in flaky],
            )
        )
    confusions = (data.confusion.get("top_confusions") or [])[:10]
    if confusions:
        parts += ["", "Most frequent confusions (expected -> selected):"]
        parts.append(
            aligned_table(
                ["expected", "selected", "runs"],
                [[c["expected"], c["selected"], c["count"]] for c in confusions],
            )
        )
    return "\n".join(parts)


def render_json(data: ReportData) -> str:
    return json.dumps(asdict(data), indent=2, sort_keys=False, default=str)


_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: Any) -> str:
    """Text without the characters XML 1.0 cannot hold (LLM output may contain any)."""
    return _NOT_XML.sub("\ufffd", str(text))


def _failure_text(runs: list[dict[str, Any]]) -> str:
    lines = []
    for run in runs:
        what = run.get("classification") or run.get("status")
        lines.append(
            f"[{what}] expected {run.get('expected')}, selected {run.get('selected')}: "
            f"{run.get('reasoning') or run.get('error_message') or ''}".strip()
        )
    return xml_safe("\n".join(lines))


def render_junit(data: ReportData) -> str:
    """JUnit XML: a testsuite per model, a testcase per (test case x model); a case whose repeats mostly
    failed is a <failure> (an <error> when every run errored) carrying the reasoning."""
    compare = data.compare
    failures_by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in data.failures:
        failures_by.setdefault((str(run["test_case_id"]), run["model"]), []).append(run)
    root = ET.Element("testsuites", name="mcpeval")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for model in compare.get("models") or []:
        suite = ET.SubElement(root, "testsuite", name=xml_safe(model))
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for case in compare.get("cases") or []:
            result = case["results"].get(model)
            if result is None:
                continue
            counts["tests"] += 1
            testcase = ET.SubElement(
                suite,
                "testcase",
                name=xml_safe(case["test_case_name"]),
                classname=xml_safe(f"mcpeval.{model}"),
                time="0",
            )
            runs = failures_by.get((str(case["test_case_id"]), model), [])
            summary = f"{result['passed_runs']}/{result['runs']} runs passed"
            if not result["passed"]:
                errored = (
                    runs and all(r.get("status") == "failed" for r in runs) and result["passed_runs"] == 0
                )
                kind = "error" if errored and len(runs) == result["runs"] else "failure"
                counts["errors" if kind == "error" else "failures"] += 1
                first = runs[0] if runs else {}
                element = ET.SubElement(
                    testcase, kind, message=summary, type=str(first.get("classification") or "failed")
                )
                element.text = _failure_text(runs)
            elif runs:
                ET.SubElement(testcase, "system-out").text = f"flaky: {summary}\n{_failure_text(runs)}"
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("skipped", "0")
        suite.set("time", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ------------------------------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
p.meta{color:#57606a;margin:0 0 12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.pass{background:#dafbe1} td.fail{background:#ffebe9} td.flaky{background:#fff8c5}
.reason{white-space:pre-wrap;max-width:640px}
.figs{display:flex;flex-wrap:wrap;gap:24px}
svg text{font-family:system-ui,sans-serif}
"""


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def _table(headers: list[str], rows: list[list[object]], classes: list[list[str]] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, value in enumerate(row):
            css = classes[r][c] if classes else ""
            if not css and isinstance(value, int | float):
                css = "num"
            cells.append(f'<td class="{css}">{_e(value)}</td>' if css else f"<td>{_e(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _heat(value: int, peak: int, diagonal: bool) -> str:
    if value == 0:
        return "#ffffff"
    strength = 0.15 + 0.85 * value / max(peak, 1)
    colour = (34, 139, 34) if diagonal else (207, 34, 46)
    r, g, b = (round(255 - (255 - c) * strength) for c in colour)
    return f"rgb({r},{g},{b})"


def confusion_svg(server: dict[str, Any]) -> str:
    """An inline SVG heatmap of one server's expected x selected matrix (green diagonal, red confusions)."""
    rows: list[str] = server["expected_tools"]
    cols: list[str] = server["selected_tools"]
    matrix: list[list[int]] = server["matrix"]
    cell, left, top = 34, 230, 150
    width, height = left + cell * len(cols) + 140, top + cell * len(rows) + 20
    peak = max((v for row in matrix for v in row), default=1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{_e("confusion matrix " + server["server"])}</title>',
        f'<text x="4" y="16" font-size="13" font-weight="bold">{_e(server["server"])}</text>',
        f'<text x="{left}" y="16" font-size="11" fill="#57606a">selected →</text>',
    ]
    for j, name in enumerate(cols):
        x = left + j * cell + cell / 2
        out.append(
            f'<text x="{x:.0f}" y="{top - 6}" font-size="10" transform="rotate(-50 {x:.0f} {top - 6})">'
            f"{_e(name[-34:])}</text>"
        )
    for i, name in enumerate(rows):
        y = top + i * cell
        out.append(
            f'<text x="{left - 6}" y="{y + cell / 2 + 4:.0f}" font-size="10" text-anchor="end">'
            f"{_e(name[-36:])}</text>"
        )
        for j, value in enumerate(matrix[i]):
            x = left + j * cell
            fill = _heat(value, peak, rows[i] == cols[j])
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" stroke="#d0d7de">'
                f"<title>{_e(rows[i])} → {_e(cols[j])}: {value}</title></rect>"
            )
            if value:
                out.append(
                    f'<text x="{x + cell / 2:.0f}" y="{y + cell / 2 + 4:.0f}" font-size="11" '
                    f'text-anchor="middle">{value}</text>'
                )
    out.append("</svg>")
    return "".join(out)


_PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#57606a")


def reliability_svg(groups: list[dict[str, Any]]) -> str:
    """An inline SVG reliability diagram: accuracy against mean confidence per bin, one line per group."""
    size, pad = 300, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{size + 2 * pad + 140}" '
        f'height="{size + 2 * pad}" viewBox="0 0 {size + 2 * pad + 140} {size + 2 * pad}">'
        "<title>reliability diagram</title>",
        f'<rect x="{pad}" y="{pad}" width="{size}" height="{size}" fill="#fff" stroke="#8c959f"/>',
        f'<line x1="{pad}" y1="{pad + size}" x2="{pad + size}" y2="{pad}" stroke="#8c959f" '
        'stroke-dasharray="4 3"/>',
        f'<text x="{pad + size / 2:.0f}" y="{pad + size + 30}" font-size="11" text-anchor="middle">'
        "confidence</text>",
        f'<text x="12" y="{pad + size / 2:.0f}" font-size="11" transform="rotate(-90 12 {pad + size / 2:.0f})" '
        'text-anchor="middle">accuracy</text>',
    ]
    for tick in (0.0, 0.5, 1.0):
        x = pad + tick * size
        y = pad + size - tick * size
        out.append(
            f'<text x="{x:.0f}" y="{pad + size + 14}" font-size="10" text-anchor="middle">{tick}</text>'
        )
        out.append(f'<text x="{pad - 6}" y="{y + 4:.0f}" font-size="10" text-anchor="end">{tick}</text>')
    for index, group in enumerate(groups):
        colour = _PALETTE[index % len(_PALETTE)]
        bins = [
            b
            for b in (group.get("calibration") or {}).get("bins") or []
            if b.get("count") and b.get("mean_confidence") is not None
        ]
        points = [
            (pad + float(b["mean_confidence"]) * size, pad + size - float(b["accuracy"]) * size, b)
            for b in bins
        ]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y, b in points:
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"><title>{_e(group["key"])}: '
                f"{b['count']} runs, confidence {float(b['mean_confidence']):.2f}, "
                f"accuracy {float(b['accuracy']):.2f}</title></circle>"
            )
        ly = pad + 14 + index * 18
        out.append(f'<rect x="{pad + size + 14}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{pad + size + 30}" y="{ly}" font-size="11">{_e(group["key"][:18])}</text>')
    out.append("</svg>")
    return "".join(out)


def _case_class(result: dict[str, Any] | None) -> str:
    if result is None:
        return ""
    if not result["passed"]:
        return "fail"
    return "pass" if result["passed_runs"] == result["runs"] else "flaky"


def render_html(data: ReportData) -> str:
    """One self-contained page (inline CSS and SVG, no scripts, no external resources)."""
    batch = data.batch
    headers, rows = metric_rows(data.summary)
    case_headers, case_rows = comparison_rows(data.compare)
    case_classes = [
        ["", *(_case_class(case["results"].get(m)) for m in case_headers[1:])]
        for case in data.compare.get("cases") or []
    ]
    comparisons = data.compare.get("comparisons") or []
    comparison_table = _table(
        ["model", "against", "paired cases", "regressions", "fixes", "p-value (exact McNemar)"],
        [
            [c["model"], c["against"], c["paired_cases"], c["regressions"], c["fixes"], f"{c['p_value']:.4g}"]
            for c in comparisons
        ],
    )
    heatmaps = "".join(confusion_svg(s) for s in data.confusion.get("servers") or [])
    groups = list(data.summary.get("groups") or []) or (
        [data.summary["overall"]] if data.summary.get("overall") else []
    )
    failure_rows: list[list[object]] = [
        [
            f["test_case_name"],
            f["model"],
            f.get("classification") or f.get("status"),
            f["expected"],
            f["selected"],
            "-" if f.get("confidence_score") is None else f"{float(f['confidence_score']):.2f}",
            f.get("reasoning") or f.get("error_message") or "",
        ]
        for f in data.failures
    ]
    failure_table = _table(
        ["test case", "model", "result", "expected", "selected", "confidence", "reasoning"],
        failure_rows,
        [["", "", "", "", "", "num", "reason"] for _ in failure_rows],
    )
    progress = batch.get("progress") or {}
    title = f"mcpeval report — batch {batch.get('name') or batch.get('id')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="meta">{_e(batch.get("run_count"))} runs: {_e(batch.get("test_case_count"))} cases x
{_e(batch.get("model_count"))} models x {_e(batch.get("repeats"))} repeats — completed
{_e(progress.get("completed", 0))}, failed {_e(progress.get("failed", 0))}; created {_e(batch.get("created_at"))}</p>
<h2>Metrics per model</h2>
{_table(headers, rows)}
<p class="meta">Intervals are Wilson 95 %. A run passes when the right tool (or rightly none) was chosen with
every expected parameter right; pass^k is the chance that k repeats all pass.</p>
<h2>Per test case</h2>
{_table(case_headers, case_rows, case_classes)}
<h2>Model comparison</h2>
{comparison_table if comparisons else '<p class="meta">One model only: nothing to compare.</p>'}
<h2>Confusion matrices (expected x selected)</h2>
<div class="figs">{heatmaps or '<p class="meta">No completed runs.</p>'}</div>
<h2>Calibration (reliability diagram)</h2>
<div class="figs">{reliability_svg(groups)}</div>
<h2>Failing runs ({len(data.failures)})</h2>
{failure_table if data.failures else '<p class="meta">Every run passed.</p>'}
</body></html>
"""
