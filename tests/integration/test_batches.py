"""Batches end to end: 20 cases x 2 models x 3 repeats through the queue, the metrics, the comparison, and the
CLI's report (table, JUnit, HTML) and gate against the real API."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.cli import main as cli_main
from shared.demo.servers import DemoServerHandle
from shared.messaging import PublishError, publish_run
from tests.support.batch_suite import (
    BAD_MODEL,
    GOOD_MODEL,
    model_configs,
    register,
    script_models,
    suite_cases,
)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

CASES = 20
REPEATS = 3


@pytest.fixture
def bad_llm() -> Iterator[ScriptedLLM]:
    """A second scripted LLM serving the worse model."""
    with ScriptedLLM() as llm:
        yield llm


async def wait_done(api: httpx.AsyncClient, batch_id: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        batch: dict[str, Any] = (await api.get(f"/test-runs/batch/{batch_id}")).json()
        if batch["done"] or time.monotonic() > deadline:
            return batch
        await asyncio.sleep(0.3)


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]


async def test_batch_of_two_models_runs_through_the_queue_and_reports(
    api: httpx.AsyncClient,
    api_url: str,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
    bad_llm: ScriptedLLM,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 20 x 2 x 3 batch completes; metrics, comparison, confusion, report, JUnit, HTML and gate agree."""
    cases = suite_cases(CASES)
    await register(api, demo_servers, cases)
    broken, flaky = script_models(llm, bad_llm, cases)

    queued = await api.post(
        "/test-runs/batch",
        json={"test_case_ids": "all", "model_configs": model_configs(llm, bad_llm), "repeats": REPEATS},
    )
    assert queued.status_code == 202, queued.text
    batch_id = queued.json()["batch_id"]
    assert queued.json()["run_count"] == CASES * 2 * REPEATS
    batch = await wait_done(api, batch_id)

    assert batch["done"], batch["progress"]
    assert batch["progress"]["completed"] == CASES * 2 * REPEATS
    groups = {g["key"]: g for g in batch["summary"]["groups"]}
    assert groups[GOOD_MODEL]["pass_rate"]["value"] == 1.0
    assert groups[GOOD_MODEL]["pass_hat_k"]["3"] == 1.0
    bad = groups[BAD_MODEL]
    expected_bad_passes = (CASES - broken) * REPEATS - flaky
    assert bad["pass_rate"]["value"] == round(expected_bad_passes / (CASES * REPEATS), 4)
    assert bad["pass_rate"]["low"] < bad["pass_rate"]["value"] < bad["pass_rate"]["high"]
    assert len(bad["flaky_cases"]) == flaky
    assert bad["prompt_tokens"] > 0
    assert bad["latency_p50_ms"] is not None
    assert bad["calibration"]["brier_score"] is None  # one sample per run: no measured confidence
    assert groups[GOOD_MODEL]["calibration"]["rated_runs"] == CASES * REPEATS
    assert groups[GOOD_MODEL]["calibration"]["brier_score"] == 0.0

    compare = (
        await api.get("/metrics/compare", params={"batch_id": batch_id, "baseline": GOOD_MODEL})
    ).json()
    [pair] = compare["comparisons"]
    assert (pair["model"], pair["regressions"], pair["fixes"]) == (BAD_MODEL, broken, 0)
    assert 0 < pair["p_value"] <= 1
    confusion = (await api.get("/metrics/confusion", params={"batch_id": batch_id})).json()
    assert sum(c["count"] for c in confusion["top_confusions"]) == broken * REPEATS + flaky

    assert cli_main(["report", "--url", api_url, "--batch", batch_id]) == 0
    table = capsys.readouterr().out
    assert "Per test case" in table
    assert GOOD_MODEL in table
    assert BAD_MODEL in table
    assert "McNemar" in table

    junit_path = tmp_path / "report.xml"
    assert cli_main(["report", "--url", api_url, "--format", "junit", "--out", str(junit_path)]) == 0
    root = ET.parse(junit_path).getroot()  # noqa: S314 - our own output
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert {s.get("name") for s in suites} == {GOOD_MODEL, BAD_MODEL}
    assert int(root.get("tests", "0")) == sum(len(s.findall("testcase")) for s in suites) == CASES * 2
    for suite in suites:
        assert int(suite.get("failures", "-1")) == len(suite.findall("testcase/failure"))
    failing = [f for s in suites for f in s.findall("testcase/failure")]
    assert len(failing) == broken
    assert all(f.text and "expected" in f.text for f in failing)

    html_path = tmp_path / "report.html"
    assert cli_main(["report", "--url", api_url, "--format", "html", "--out", str(html_path)]) == 0
    page = html_path.read_text(encoding="utf-8")
    parser = _Html()
    parser.feed(page)
    parser.close()
    assert parser.tags.count("svg") >= 2
    assert not [link for link in parser.links if link.startswith(("http:", "https:", "//"))]
    assert "<script" not in page

    capsys.readouterr()
    assert cli_main(["gate", "--url", api_url, "--min-f1", "0.99", "--min-pass-rate", "0.95"]) == 1
    assert "FAIL: pass rate" in capsys.readouterr().out
    assert cli_main(["gate", "--url", api_url, "--min-f1", "0.5", "--min-pass-rate", "0.5"]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """Headless Chromium renders the HTML report of a small synthetic batch to a non-empty PNG."""
    from shared.reports import render_html
    from tests.unit.test_reports import sample_report

    page = tmp_path / "report.html"
    page.write_text(render_html(sample_report()), encoding="utf-8")
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            # This machine has no network: keep Chromium from trying, and from touching a real profile.
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1400,1800",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 10_000


async def test_publish_failure_midway_leaves_no_pending_run(
    api: httpx.AsyncClient,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the queue fails after some runs were published, the rest are failed, and the answer is 503."""
    cases = suite_cases(4)
    await register(api, demo_servers, cases)
    published: list[str] = []

    async def flaky_publish(js: Any, run_id: str, sealed: str | None) -> None:
        if len(published) >= 3:
            raise PublishError("queue down")
        published.append(run_id)
        await publish_run(js, run_id, sealed)

    monkeypatch.setattr("api_service.batches.publish_run", flaky_publish)
    baseline = {"provider": "baseline", "model": "lexical"}

    response = await api.post("/test-runs/batch", json={"model_configs": [baseline], "repeats": 5})

    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    async with clean_db.connect() as conn:
        unpublished = await conn.scalar(
            text(
                "SELECT count(*) FROM test_runs WHERE NOT (id = ANY(CAST(:ids AS uuid[]))) AND status = 'pending'"
            ),
            {"ids": published},
        )
        marked = await conn.scalar(
            text("SELECT count(*) FROM test_runs WHERE error_message LIKE 'not queued%'")
        )
    assert unpublished == 0
    assert marked == 4 * 5 - 3


async def test_publish_failure_at_once_removes_the_batch(
    api: httpx.AsyncClient,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When no run could be published, the batch and its runs are rolled back and the answer is 503."""
    await register(api, demo_servers, suite_cases(2))

    async def down(js: Any, run_id: str, sealed: str | None) -> None:
        raise PublishError("queue down")

    monkeypatch.setattr("api_service.batches.publish_run", down)

    response = await api.post(
        "/test-runs/batch", json={"model_configs": [{"provider": "baseline", "model": "lexical"}]}
    )

    assert response.status_code == 503
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM test_runs")) == 0
        assert await conn.scalar(text("SELECT count(*) FROM test_batches")) == 0


async def test_batch_over_the_run_cap_is_refused(
    api: httpx.AsyncClient, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """26 cases x 20 models x 20 repeats (10,400 runs) exceeds the 10,000-run cap: 422, nothing queued."""
    await register(api, demo_servers, suite_cases(26))
    configs = [{"provider": "baseline", "model": f"m{i}"} for i in range(20)]

    response = await api.post("/test-runs/batch", json={"model_configs": configs, "repeats": 20})

    assert response.status_code == 422
    assert "10400 runs" in response.json()["detail"]
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM test_runs")) == 0


async def test_cloud_provider_without_its_key_is_refused(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """A cloud model config with neither X-Model-API-Key nor X-Model-API-Key-<provider> fails fast with 422."""
    configs = [{"provider": "openai", "model": "gpt-4o-mini"}]

    response = await api.post(
        "/test-runs/batch",
        json={"model_configs": configs, "test_case_ids": [str(uuid.uuid4())]},
        headers={"X-Model-API-Key-groq": "k"},
    )

    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "model_configs[0]"


async def test_unknown_batch_is_404(api: httpx.AsyncClient) -> None:
    """Reading a batch that does not exist answers 404 problem+json."""
    response = await api.get(f"/test-runs/batch/{uuid.uuid4()}")

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_cli_registers_servers_imports_cases_idempotently_and_runs_a_batch(
    api_url: str,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """servers add/list, cases import (YAML twice, then CSV) and run --wait work over the REST API."""
    for handle in demo_servers:
        argv = ["servers", "add", handle.name, handle.url, "--transport", handle.transport, "--url", api_url]
        assert cli_main(argv) == 0
    assert cli_main(["servers", "list", "--url", api_url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {s["name"] for s in listed} == {h.name for h in demo_servers}
    yaml_file = tmp_path / "cases.yaml"
    yaml_file.write_text(
        "test_cases:\n"
        "  - name: buckets\n"
        "    query: List the S3 buckets in the account\n"
        "    expected_mcp_server_name: aws\n"
        "    expected_tool_name: list_s3_buckets\n"
        "    available_mcp_servers: [aws]\n"
        "  - name: greeting\n"
        "    query: Hello there, how are you?\n"
        "    available_mcp_servers: [todo]\n",
        encoding="utf-8",
    )
    csv_file = tmp_path / "cases.csv"
    csv_file.write_text(
        "name,query,expected_mcp_server_name,expected_tool_name,expected_parameters,available_mcp_servers\n"
        'todo,Delete todo 17.,todo,delete_todo,"{""id"": 17}",todo;jira\n',
        encoding="utf-8",
    )

    assert cli_main(["cases", "import", str(yaml_file), "--url", api_url]) == 0
    assert "2 created, 0 updated" in capsys.readouterr().out
    assert cli_main(["cases", "import", str(yaml_file), "--url", api_url]) == 0
    assert "0 created, 2 updated" in capsys.readouterr().out
    assert cli_main(["cases", "import", str(csv_file), "--url", api_url]) == 0
    assert "1 created" in capsys.readouterr().out

    code = cli_main(
        ["run", "--url", api_url, "--provider", "baseline", "--model", "lexical", "--repeats", "2", "--wait"]
    )

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "6/6" in captured.err
    assert "lexical" in captured.out
    assert cli_main(["report", "--url", api_url, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["batch"]["progress"]["completed"] == 6


def test_cli_prints_the_problem_detail_and_exits_2(api_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An API error reaches the user as its problem detail with exit code 2."""
    code = cli_main(["report", "--url", api_url, "--batch", str(uuid.uuid4())])

    assert code == 2
    assert "HTTP 404: no test batch with id" in capsys.readouterr().err
