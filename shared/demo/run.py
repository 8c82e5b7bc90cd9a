"""`mcpeval demo`: the stack, the bundled demo MCP servers, the sample suite through the REST API, a report.

Everything goes through the public REST API, exactly as a user's client would: register servers, create
cases (idempotent by name), queue runs, follow their progress, print the results and the metrics.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from shared.demo.cases import DEMO_CASES, DemoCase
from shared.demo.catalog import DEMO_SERVERS
from shared.demo.servers import DemoServerHandle, run_demo_servers
from shared.settings import ConfigError, Settings

RUN_TIMEOUT_SECONDS = 600.0


def _check(response: httpx.Response, what: str) -> dict[str, Any]:
    if response.status_code >= 400:
        raise RuntimeError(f"{what} failed: HTTP {response.status_code} {response.text[:500]}")
    body: dict[str, Any] = response.json()
    return body


def register_servers(client: httpx.Client, handles: list[DemoServerHandle]) -> None:
    """Create each demo server, or re-point the one of the same name (ports change between runs)."""
    for handle in handles:
        listing = _check(client.get("/mcp-servers", params={"limit": 100}), "listing servers")
        found = next((s for s in listing["items"] if s["name"] == handle.name), None)
        body = {"name": handle.name, "url": handle.url, "transport": handle.transport}
        if found is None:
            _check(client.post("/mcp-servers", json=body), f"registering {handle.name}")
        elif found["url"] != handle.url or found["transport"] != handle.transport:
            _check(client.patch(f"/mcp-servers/{found['id']}", json=body), f"updating {handle.name}")


def upsert_case(client: httpx.Client, case: DemoCase) -> str:
    body = case.as_request_body()
    found = _check(client.get("/test-cases", params={"name": case.name, "limit": 1}), "finding a case")
    if found["items"]:
        case_id = str(found["items"][0]["id"])
        patch = {k: v for k, v in body.items() if k != "name"}
        _check(client.patch(f"/test-cases/{case_id}", json=patch), f"updating case {case.name}")
        return case_id
    return str(_check(client.post("/test-cases", json=body), f"creating case {case.name}")["id"])


def wait_for_runs(client: httpx.Client, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Follow the runs until each is completed or failed, printing progress on one line."""
    finished: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while len(finished) < len(run_ids) and time.monotonic() < deadline:
        for run_id in run_ids:
            if run_id in finished:
                continue
            run = _check(client.get(f"/test-runs/{run_id}"), "reading a run")
            if run["status"] in ("completed", "failed"):
                finished[run_id] = run
        print(f"\r  runs finished: {len(finished)}/{len(run_ids)}", end="", flush=True)
        if len(finished) < len(run_ids):
            time.sleep(0.3)
    print(flush=True)
    return finished


def _cell(value: object, width: int) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(headers: list[str], rows: list[list[object]], widths: list[int]) -> str:
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(_cell(v, w).ljust(w) for v, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


def report(cases: list[DemoCase], runs: dict[str, dict[str, Any]], order: list[tuple[str, str]]) -> str:
    rows: list[list[object]] = []
    for case_name, run_id in order:
        case = next(c for c in cases if c.name == case_name)
        run = runs.get(run_id, {"status": "unfinished"})
        expected = (
            f"{case.expected_mcp_server_name}.{case.expected_tool_name}"
            if case.expected_tool_name
            else "(none)"
        )
        selected = run.get("selected_tool")
        chosen = f"{selected['mcp_server_name']}.{selected['name']}" if selected else "(none)"
        verdict = run.get("classification") or run["status"]
        rows.append([case_name, expected, chosen, verdict, run.get("execution_time_ms")])
    return format_table(["case", "expected", "selected", "result", "ms"], rows, [34, 34, 34, 9, 6])


def run_demo(settings: Settings, args: argparse.Namespace) -> int:
    from shared.cli import running_services

    model_config: dict[str, Any] = {"provider": args.provider, "model": args.model or "lexical-tfidf"}
    headers: dict[str, str] = {}
    if args.provider != "baseline":
        if not args.model:
            raise ConfigError("--model is required with --provider other than baseline")
        model_config["samples"] = args.samples
        if args.base_url:
            model_config["base_url"] = args.base_url
        key = os.environ.get(args.api_key_env, "")
        if key:
            headers["X-Model-API-Key"] = key
    started = datetime.now(UTC)
    with (
        running_services(settings, settings.workers) as (api_url, _),
        run_demo_servers(DEMO_SERVERS) as handles,
    ):
        print(f"Demo MCP servers: {', '.join(f'{h.name} ({h.transport})' for h in handles)}", flush=True)
        with httpx.Client(base_url=api_url, timeout=60) as client:
            register_servers(client, handles)
            cases = list(DEMO_CASES)
            case_ids = {case.name: upsert_case(client, case) for case in cases}
            print(f"Sample suite: {len(cases)} test cases; provider {args.provider}", flush=True)
            order: list[tuple[str, str]] = []
            for case in cases:
                queued = _check(
                    client.post(
                        f"/test-cases/{case_ids[case.name]}/run",
                        json={"model_config": model_config},
                        headers=headers,
                    ),
                    f"running {case.name}",
                )
                order.append((case.name, str(queued["id"])))
            runs = wait_for_runs(client, [run_id for _, run_id in order])
            print(report(cases, runs, order), flush=True)
            summary = _check(
                client.get(
                    "/metrics/summary",
                    params={"test_case_ids": ",".join(case_ids.values()), "from_date": started.isoformat()},
                ),
                "reading metrics",
            )
            print(_summary_line(summary, args.provider), flush=True)
            failed = [r for r in runs.values() if r["status"] == "failed"]
            for run in failed[:5]:
                print(f"  failed run {run['id']}: {run['error_message']}", file=sys.stderr, flush=True)
            if args.keep_running:
                print(f"The stack stays up at {api_url} — Ctrl-C stops it.", flush=True)
                while True:
                    time.sleep(1)
    return 0 if len(runs) == len(order) and not failed else 1


def _summary_line(summary: dict[str, Any], provider: str) -> str:
    def pct(value: object) -> str:
        return "n/a" if value is None else f"{float(value) * 100:.1f}%"  # type: ignore[arg-type]

    label = " (offline lexical baseline, no parameters extracted)" if provider == "baseline" else ""
    return (
        f"\nSummary{label}: {summary['total_tests']} completed runs — "
        f"TP {summary['true_positives']}  FP {summary['false_positives']}  "
        f"TN {summary['true_negatives']}  FN {summary['false_negatives']}  | "
        f"precision {pct(summary['precision'])}  recall {pct(summary['recall'])}  "
        f"F1 {pct(summary['f1_score'])}  accuracy {pct(summary['accuracy'])}  "
        f"mean time {summary['average_execution_time_ms']} ms"
    )
