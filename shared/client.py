"""`mcpeval servers|cases|run|report|gate`: a client of the REST API for people and CI.

The API url comes from `--url`, else `MCPEVAL_URL`, else http://127.0.0.1:8000. A model API key comes only
from the environment (`MCPEVAL_MODEL_API_KEY`), never from a flag (flags end up in shell history and CI logs).
Exit codes: 0 fine, 1 a gate threshold missed (or `run --wait` timed out), 2 the API refused or is unreachable.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import httpx
import yaml

from shared.reports import (
    FORMATS,
    ReportData,
    aligned_table,
    metric_rows,
    render_html,
    render_json,
    render_junit,
    render_table,
)
from shared.settings import Settings

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "MCPEVAL_URL"
KEY_ENV = "MCPEVAL_MODEL_API_KEY"
CASE_FIELDS = (
    "name",
    "query",
    "expected_mcp_server_name",
    "expected_tool_name",
    "expected_parameters",
    "available_mcp_servers",
)


class ApiProblemError(Exception):
    """The API answered an error (its problem detail) or could not be reached (status 0)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ApiClient:
    """A thin JSON client: every error becomes an `ApiProblemError` carrying the problem+json detail."""

    def __init__(self, url: str, timeout: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiProblemError(0, f"cannot reach the API at {self.url}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            detail = response.text[:500]
            try:
                body = response.json()
                detail = str(body.get("detail") or body)
            except (ValueError, AttributeError):
                pass
            raise ApiProblemError(response.status_code, f"HTTP {response.status_code}: {detail}")
        return response.json() if response.content else None


def _out(text: str, stream: TextIO | None = None) -> None:
    print(text, file=stream or sys.stdout, flush=True)


def _table(headers: list[str], rows: list[list[object]]) -> str:
    return aligned_table(headers, rows)


# --------------------------------------------------------------------------------------------------- servers
def cmd_servers_add(client: ApiClient, args: argparse.Namespace) -> int:
    body = {"name": args.name, "url": args.server_url, "transport": args.transport}
    server = client.call("POST", "/mcp-servers", json=body)
    _out(json.dumps(server) if args.json else f"registered {server['name']} ({server['id']})")
    return 0


def cmd_servers_list(client: ApiClient, args: argparse.Namespace) -> int:
    items: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = client.call("GET", "/mcp-servers", params={"limit": 100, "offset": offset})
        items += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            break
    if args.json:
        _out(json.dumps(items))
    else:
        rows: list[list[object]] = [
            [s["name"], s["transport"], s["status"], s["url"], s.get("last_connected_at") or "-"]
            for s in items
        ]
        _out(_table(["name", "transport", "status", "url", "last connected"], rows))
    return 0


def cmd_servers_import(client: ApiClient, args: argparse.Namespace) -> int:
    config = json.loads(Path(args.file).read_text(encoding="utf-8"))
    result = client.call("POST", "/mcp-servers/import", json=config)
    if args.json:
        _out(json.dumps(result))
    else:
        _out(
            f"created {len(result['created'])}, already registered {len(result['existing'])}, "
            f"skipped {len(result['skipped'])}"
        )
        for skipped in result["skipped"]:
            _out(f"  skipped {skipped['name']}: {skipped['reason']}", sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------------------- cases
def _blank_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def parse_cases(path: Path) -> list[dict[str, Any]]:
    """Test cases from YAML, JSON (a list, or {"test_cases": [...]}) or CSV (header row; expected_parameters
    as JSON text, available_mcp_servers separated by `;` or `|`)."""
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    raw: Any
    if suffix == ".csv":
        raw = []
        for row in csv.DictReader(io.StringIO(text)):
            case: dict[str, Any] = {k: _blank_to_none(v) for k, v in row.items() if k in CASE_FIELDS}
            if case.get("expected_parameters"):
                case["expected_parameters"] = json.loads(case["expected_parameters"])
            servers = (row.get("available_mcp_servers") or "").replace("|", ";")
            case["available_mcp_servers"] = [s.strip() for s in servers.split(";") if s.strip()]
            raw.append(case)
    elif suffix == ".json":
        raw = json.loads(text)
    else:
        raw = yaml.safe_load(text)
    if isinstance(raw, dict):
        raw = raw.get("test_cases", raw.get("cases"))
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise ValueError(f"{path}: expected a list of test cases (or an object with key test_cases)")
    return [{k: v for k, v in c.items() if k in CASE_FIELDS} for c in raw]


def cmd_cases_import(client: ApiClient, args: argparse.Namespace) -> int:
    try:
        cases = parse_cases(Path(args.file))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        _out(f"mcpeval: cannot read {args.file}: {exc}", sys.stderr)
        return 2
    created = updated = 0
    ids: list[str] = []
    for case in cases:
        name = case.get("name")
        if not isinstance(name, str) or not name.strip():
            _out("mcpeval: every test case needs a name", sys.stderr)
            return 2
        found = client.call("GET", "/test-cases", params={"name": name, "limit": 1})
        if found["items"]:
            case_id = str(found["items"][0]["id"])
            client.call(
                "PATCH", f"/test-cases/{case_id}", json={k: v for k, v in case.items() if k != "name"}
            )
            updated += 1
        else:
            case_id = str(client.call("POST", "/test-cases", json=case)["id"])
            created += 1
        ids.append(case_id)
    if args.json:
        _out(json.dumps({"created": created, "updated": updated, "ids": ids}))
    else:
        _out(f"{len(cases)} test cases: {created} created, {updated} updated")
    return 0


# ------------------------------------------------------------------------------------------------------- run
def progress_bar(progress: dict[str, int], total: int, width: int = 30) -> str:
    done = progress.get("completed", 0) + progress.get("failed", 0)
    filled = round(width * done / total) if total else width
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  completed {progress.get('completed', 0)}"
        f"  failed {progress.get('failed', 0)}  running {progress.get('running', 0)}"
    )


def wait_for_batch(client: ApiClient, batch_id: str, timeout: float, interval: float = 0.5) -> dict[str, Any]:
    """Poll the batch, drawing a progress bar on stderr, until done or the timeout; returns the last state."""
    deadline = time.monotonic() + timeout
    while True:
        batch: dict[str, Any] = client.call("GET", f"/test-runs/batch/{batch_id}")
        print("\r" + progress_bar(batch["progress"], batch["run_count"]), end="", file=sys.stderr, flush=True)
        if batch["done"] or time.monotonic() >= deadline:
            print(file=sys.stderr, flush=True)
            return batch
        time.sleep(interval)


def model_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    providers: list[str] = args.provider or ["baseline"]
    if len(providers) not in (1, len(args.model)):
        raise ValueError("give one --provider for all models, or one per --model")
    configs = []
    for index, model in enumerate(args.model):
        config: dict[str, Any] = {
            "provider": providers[index] if len(providers) > 1 else providers[0],
            "model": model,
            "samples": args.samples,
        }
        if args.base_url:
            config["base_url"] = args.base_url
        if args.temperature is not None:
            config["temperature"] = args.temperature
        configs.append(config)
    return configs


def cmd_run(client: ApiClient, args: argparse.Namespace) -> int:
    try:
        configs = model_configs(args)
    except ValueError as exc:
        _out(f"mcpeval: {exc}", sys.stderr)
        return 2
    cases: Any = "all" if args.cases == "all" else [c.strip() for c in args.cases.split(",") if c.strip()]
    body: dict[str, Any] = {"test_case_ids": cases, "model_configs": configs, "repeats": args.repeats}
    if args.name:
        body["name"] = args.name
    key = os.environ.get(KEY_ENV, "")
    headers = {"X-Model-API-Key": key} if key else {}
    accepted = client.call("POST", "/test-runs/batch", json=body, headers=headers)
    batch_id = str(accepted["batch_id"])
    if not args.wait:
        _out(json.dumps(accepted) if args.json else f"batch {batch_id}: {accepted['run_count']} runs queued")
        return 0
    _out(f"batch {batch_id}: {accepted['run_count']} runs queued", sys.stderr)
    batch = wait_for_batch(client, batch_id, args.timeout)
    if args.json:
        _out(json.dumps(batch))
    else:
        _out(f"batch {batch_id}")
        if batch.get("summary"):
            _out(_table(*metric_rows(batch["summary"])))
    if not batch["done"]:
        _out(f"mcpeval: batch {batch_id} did not finish within {args.timeout:.0f}s", sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------- report, gate
def resolve_batch(client: ApiClient, batch_id: str | None) -> dict[str, Any]:
    """The named batch, else the newest one."""
    if batch_id:
        found: dict[str, Any] = client.call("GET", f"/test-runs/batch/{batch_id}")
        return found
    page = client.call("GET", "/test-runs/batch", params={"limit": 1})
    if not page["items"]:
        raise ApiProblemError(404, "there is no batch yet: start one with `mcpeval run`")
    newest: dict[str, Any] = client.call("GET", f"/test-runs/batch/{page['items'][0]['id']}")
    return newest


def gather_report(client: ApiClient, batch_id: str | None, baseline: str | None = None) -> ReportData:
    batch = resolve_batch(client, batch_id)
    bid = str(batch["id"])
    summary = client.call("GET", "/metrics/summary", params={"batch_id": bid, "group_by": "model"})
    params = {"batch_id": bid, **({"baseline": baseline} if baseline else {})}
    return ReportData(
        batch={k: v for k, v in batch.items() if k != "summary"},
        summary=summary,
        compare=client.call("GET", "/metrics/compare", params=params),
        confusion=client.call("GET", "/metrics/confusion", params={"batch_id": bid}),
        failures=client.call("GET", f"/test-runs/batch/{bid}/failures"),
    )


RENDERERS = {"table": render_table, "json": render_json, "junit": render_junit, "html": render_html}


def cmd_report(client: ApiClient, args: argparse.Namespace) -> int:
    data = gather_report(client, args.batch, args.baseline)
    text = RENDERERS[args.format](data)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        _out(f"wrote {args.format} report to {args.out}", sys.stderr)
    else:
        _out(text)
    return 0


def gate_failures(summary: dict[str, Any], min_f1: float | None, min_pass_rate: float | None) -> list[str]:
    """Which thresholds the overall metrics miss (an undefined metric misses its threshold)."""
    overall = summary.get("overall") or {}
    missed = []
    for label, key, threshold in (("F1", "f1_score", min_f1), ("pass rate", "pass_rate", min_pass_rate)):
        if threshold is None:
            continue
        value = (overall.get(key) or {}).get("value")
        if value is None:
            missed.append(f"{label} is undefined (no evidence), required >= {threshold}")
        elif float(value) < threshold:
            missed.append(f"{label} {float(value):.4f} < {threshold}")
    return missed


def cmd_gate(client: ApiClient, args: argparse.Namespace) -> int:
    batch = resolve_batch(client, args.batch)
    if not batch["done"]:
        _out(f"mcpeval: batch {batch['id']} is still running: {batch['progress']}", sys.stderr)
        return 2
    summary = client.call(
        "GET", "/metrics/summary", params={"batch_id": str(batch["id"]), "group_by": "model"}
    )
    missed = gate_failures(summary, args.min_f1, args.min_pass_rate)
    overall = summary.get("overall") or {}
    line = (
        f"batch {batch['id']}: F1 {(overall.get('f1_score') or {}).get('value')}, "
        f"pass rate {(overall.get('pass_rate') or {}).get('value')} over {overall.get('runs')} runs"
    )
    if args.json:
        _out(json.dumps({"batch_id": batch["id"], "passed": not missed, "missed": missed}))
    else:
        _out(line)
        for reason in missed:
            _out(f"FAIL: {reason}")
        if not missed:
            _out("PASS: every threshold met")
    return 1 if missed else 0


# ------------------------------------------------------------------------------------------------ wiring
def _with_client(func: Any) -> Any:
    def run(settings: Settings, args: argparse.Namespace) -> int:
        client = ApiClient(args.url)
        try:
            return int(func(client, args))
        except ApiProblemError as problem:
            _out(f"mcpeval: {problem.detail}", sys.stderr)
            return 2
        finally:
            client.close()

    return run


def add_client_commands(sub: Any) -> None:
    """Register servers, cases, run, report and gate on the `mcpeval` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get(URL_ENV) or DEFAULT_URL,
        help=f"API url (env {URL_ENV}; {DEFAULT_URL})",
    )
    common.add_argument("--json", action="store_true", help="machine output (JSON) instead of tables")

    servers = sub.add_parser("servers", help="register and list MCP servers").add_subparsers(
        dest="servers_command", required=True
    )
    add = servers.add_parser("add", parents=[common], help="register an MCP server")
    add.add_argument("name")
    add.add_argument("server_url", metavar="URL")
    add.add_argument("--transport", default="streamable-http", choices=["streamable-http", "sse"])
    add.set_defaults(func=_with_client(cmd_servers_add))
    servers.add_parser("list", parents=[common], help="list MCP servers").set_defaults(
        func=_with_client(cmd_servers_list)
    )
    imp = servers.add_parser("import", parents=[common], help="import url servers from an mcp.json file")
    imp.add_argument("file")
    imp.set_defaults(func=_with_client(cmd_servers_import))

    cases = sub.add_parser("cases", help="manage test cases").add_subparsers(
        dest="cases_command", required=True
    )
    cimp = cases.add_parser(
        "import", parents=[common], help="create or update (by name) test cases from YAML, JSON or CSV"
    )
    cimp.add_argument("file")
    cimp.set_defaults(func=_with_client(cmd_cases_import))

    run = sub.add_parser(
        "run", parents=[common], help=f"queue a batch (key from env {KEY_ENV}); --wait shows progress"
    )
    run.add_argument("--model", action="append", required=True, help="model name (repeat for several)")
    run.add_argument("--provider", action="append", help="provider (one for all, or one per --model)")
    run.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint")
    run.add_argument("--repeats", type=int, default=1, help="runs per case and model (1-20)")
    run.add_argument("--samples", type=int, default=1, help="samples per run for measured confidence (1-20)")
    run.add_argument("--temperature", type=float, default=None)
    run.add_argument("--cases", default="all", help='"all" or comma-separated test case ids')
    run.add_argument("--name", default=None, help="a label for the batch")
    run.add_argument("--wait", action="store_true", help="follow the batch until it finishes")
    run.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits at most")
    run.set_defaults(func=_with_client(cmd_run))

    report = sub.add_parser("report", parents=[common], help="report a batch (newest by default)")
    report.add_argument("--batch", default=None, help="batch id (default: the newest)")
    report.add_argument("--format", default="table", choices=FORMATS)
    report.add_argument("--out", default=None, help="write to this file instead of stdout")
    report.add_argument("--baseline", default=None, help="model the others are compared with")
    report.set_defaults(func=_with_client(cmd_report))

    gate = sub.add_parser("gate", parents=[common], help="exit 1 when a batch misses a threshold (for CI)")
    gate.add_argument("--batch", default=None, help="batch id (default: the newest)")
    gate.add_argument("--min-f1", type=float, default=None)
    gate.add_argument("--min-pass-rate", type=float, default=None)
    gate.set_defaults(func=_with_client(cmd_gate))
