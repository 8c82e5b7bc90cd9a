"""Issue #3: every failure path of a run ends in a clear, final state (never stuck pending/running), the API
refuses what the worker could only fail later, and `?wait`, `/result` and the run list behave as documented."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle
from shared.embedded import free_port
from tests.support.pipeline import create_case, db_run, openai_config, poll_run, register_servers
from tests.support.scripted_llm import Rule, ScriptedLLM

pytestmark = pytest.mark.integration

API_KEY = "sk-failures-test-key"
HEADERS = {"X-Model-API-Key": API_KEY}
QUERY = "Search GitHub repositories about web frameworks"


async def github_case(
    api: httpx.AsyncClient, demo_servers: list[DemoServerHandle], query: str = QUERY
) -> str:
    """Register the github demo server (if needed) and create a case expecting search_repositories."""
    listed = await api.get("/mcp-servers", params={"limit": 100})
    if "github" not in {s["name"] for s in listed.json()["items"]}:
        await register_servers(api, [h for h in demo_servers if h.name == "github"])
    return await create_case(
        api,
        query=query,
        servers=["github"],
        expected_server="github",
        expected_tool="search_repositories",
    )


async def run_and_wait(
    api: httpx.AsyncClient, case_id: str, config: dict[str, Any], wait: int = 30
) -> dict[str, Any]:
    response = await api.post(
        f"/test-cases/{case_id}/run?wait={wait}", json={"model_config": config}, headers=HEADERS
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def assert_nothing_unfinished(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        stuck = await conn.scalar(
            text("SELECT count(*) FROM test_runs WHERE status IN ('pending', 'running')")
        )
    assert stuck == 0


async def assert_failed_without_result(
    api: httpx.AsyncClient, engine: AsyncEngine, run: dict[str, Any], attempts: int, *needles: str
) -> dict[str, Any]:
    """The run is failed (API and Postgres) after `attempts` deliveries, names why, and has no result."""
    assert run["status"] == "failed", run
    assert run["classification"] is None
    assert run["completed_at"] is not None
    for needle in needles:
        assert needle in run["error_message"], run["error_message"]
    row = await db_run(engine, run["id"])
    assert row["status"] == "failed"
    assert row["attempt"] == attempts
    assert row["error_message"] == run["error_message"]
    result = await api.get(f"/test-runs/{run['id']}/result")
    assert result.status_code == 409
    assert "failed" in result.json()["detail"]
    async with engine.connect() as conn:
        evaluations = await conn.scalar(
            text("SELECT count(*) FROM evaluation_results WHERE test_run_id = :id"), {"id": run["id"]}
        )
    assert evaluations == 0
    await assert_nothing_unfinished(engine)
    return row


async def test_unreachable_mcp_server_is_retried_then_fails_naming_the_server(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, llm: ScriptedLLM
) -> None:
    """A registered server nobody listens on is a transient fault: retried max_deliver times, then failed."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    created = await api.post(
        "/mcp-servers", json={"name": "offline-server", "url": url, "transport": "streamable-http"}
    )
    assert created.status_code == 201
    case_id = await create_case(
        api,
        query="anything",
        servers=["offline-server"],
        expected_server="offline-server",
        expected_tool="whatever",
    )

    run = await run_and_wait(api, case_id, openai_config(llm.base_url))

    await assert_failed_without_result(
        api, clean_db, run, 3, "gave up after 3 attempts", "'offline-server'", url, "connection refused"
    )
    assert llm.requests == []  # the model is never asked without tools


async def test_rejected_key_fails_at_once_without_retry(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """A 401 from the model is permanent: failed on the first delivery, one request, the SDK does not retry."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(status=401, error_message="Incorrect API key provided."))

    run = await run_and_wait(api, case_id, openai_config(llm.base_url, max_retries=3))

    await assert_failed_without_result(api, clean_db, run, 1, "401", "API key")
    assert API_KEY not in run["error_message"]
    assert len(llm.requests) == 1


async def test_unknown_model_fails_at_once(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """A 404 (unknown model or wrong base_url) is permanent: failed on the first delivery with a hint."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(status=404, error_message="The model does not exist."))

    run = await run_and_wait(api, case_id, openai_config(llm.base_url, max_retries=3))

    await assert_failed_without_result(api, clean_db, run, 1, "404", "model name")
    assert len(llm.requests) == 1


@pytest.mark.parametrize(
    ("max_retries", "attempts"), [(2, 1), (0, 2)], ids=["sdk retry", "redelivery after nak"]
)
async def test_rate_limit_then_success_completes(
    max_retries: int,
    attempts: int,
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """One 429 then success completes: retried by the SDK when it may, else by a delayed redelivery."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(status=429, retry_after=0.01, times=1))
    llm.script(Rule(answers=[[("search_repositories", {"query": "web framework"})]]))

    run = await run_and_wait(api, case_id, openai_config(llm.base_url, max_retries=max_retries))

    assert run["status"] == "completed", run
    assert run["classification"] == "TP"
    assert run["attempt"] == attempts
    assert run["error_message"] is None
    assert len(llm.requests) == 2
    assert (await api.get(f"/test-runs/{run['id']}/result")).status_code == 200
    await assert_nothing_unfinished(clean_db)


async def test_persistent_server_error_gives_up_after_max_deliveries(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """A model endpoint answering 500 every time is retried once per delivery, then the run fails."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(status=500))

    run = await run_and_wait(api, case_id, openai_config(llm.base_url, max_retries=0))

    await assert_failed_without_result(api, clean_db, run, 3, "gave up after 3 attempts", "(500)")
    assert len(llm.requests) == 3


@pytest.mark.slow
async def test_model_timeout_is_retried_then_fails(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """A model that never answers times out after model_config.timeout on every delivery, then fails."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(hang=True))

    run = await run_and_wait(api, case_id, openai_config(llm.base_url, timeout=1, max_retries=0))

    await assert_failed_without_result(api, clean_db, run, 3, "gave up after 3 attempts", "timed out")
    assert len(llm.requests) == 3


# ------------------------------------------------------------------------------------------- API validation
async def count_rows(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        runs = await conn.scalar(text("SELECT count(*) FROM test_runs"))
        settings = await conn.scalar(text("SELECT count(*) FROM model_settings"))
    return int(runs or 0), int(settings or 0)


async def test_missing_key_for_a_cloud_provider_is_refused_and_nothing_stored(
    api: httpx.AsyncClient, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle], llm: ScriptedLLM
) -> None:
    """Provider openai without X-Model-API-Key answers 422 naming the header and stores nothing."""
    case_id = await github_case(api, demo_servers)

    response = await api.post(
        f"/test-cases/{case_id}/run", json={"model_config": openai_config(llm.base_url)}
    )

    assert response.status_code == 422
    problem = response.json()
    assert "X-Model-API-Key" in problem["detail"]
    assert problem["errors"][0]["field"] == "X-Model-API-Key"
    assert await count_rows(clean_db) == (0, 0)
    assert llm.requests == []


async def test_unknown_provider_needs_a_base_url(
    api: httpx.AsyncClient, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """A provider mcpeval does not know, with no base_url, answers 422 naming model_config.base_url."""
    case_id = await github_case(api, demo_servers)

    response = await api.post(
        f"/test-cases/{case_id}/run",
        json={"model_config": {"provider": "acme-llm", "model": "m1"}},
        headers=HEADERS,
    )

    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "model_config.base_url"
    assert await count_rows(clean_db) == (0, 0)


async def test_remote_unknown_provider_needs_a_key_but_a_local_one_does_not(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """An unknown provider on a remote base_url needs the key header; one on this machine runs without it."""
    case_id = await github_case(api, demo_servers)

    remote = await api.post(
        f"/test-cases/{case_id}/run",
        json={"model_config": {"provider": "acme-llm", "model": "m1", "base_url": "https://llm.example/v1"}},
    )
    local = await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={"model_config": openai_config(llm.base_url, provider="acme-local")},
    )

    assert remote.status_code == 422
    assert remote.json()["errors"][0]["field"] == "X-Model-API-Key"
    assert local.status_code == 200, local.text
    assert local.json()["status"] == "completed"
    assert llm.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_baseline_provider_needs_no_key(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """The offline baseline runs without X-Model-API-Key and never calls a model endpoint."""
    case_id = await github_case(api, demo_servers)

    response = await api.post(
        f"/test-cases/{case_id}/run?wait=30", json={"model_config": {"provider": "baseline", "model": "x"}}
    )

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"
    assert response.json()["model_settings"]["is_baseline"] is True
    assert llm.requests == []


# ------------------------------------------------------------------------------------- wait, result, listing
async def test_without_wait_answers_202_pending_and_result_is_409_until_completed(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """No wait: 202 with the pending run; /result answers 409 while it is pending or running, then 200."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(delay_ms=1500, answers=[[("search_repositories", {"query": "web frameworks"})]]))

    queued = await api.post(
        f"/test-cases/{case_id}/run", json={"model_config": openai_config(llm.base_url)}, headers=HEADERS
    )

    assert queued.status_code == 202, queued.text
    run_id = queued.json()["id"]
    assert queued.json()["status"] == "pending"
    early = await api.get(f"/test-runs/{run_id}/result")
    assert early.status_code == 409
    assert early.json()["detail"] in ("run is pending", "run is running")
    running = await poll_run(api, run_id, ("running",), timeout=10)
    assert running["started_at"] is not None
    assert (await api.get(f"/test-runs/{run_id}/result")).status_code == 409
    done = await poll_run(api, run_id, timeout=20)
    assert done["status"] == "completed"
    result = await api.get(f"/test-runs/{run_id}/result")
    assert result.status_code == 200
    assert result.json()["classification"] == "TP"


async def test_wait_shorter_than_the_run_answers_202_with_the_unfinished_run(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """?wait=1 on a run that takes longer answers 202 with the run as it is; the run still completes."""
    case_id = await github_case(api, demo_servers)
    llm.script(Rule(delay_ms=2500))

    response = await api.post(
        f"/test-cases/{case_id}/run?wait=1",
        json={"model_config": openai_config(llm.base_url)},
        headers=HEADERS,
    )

    assert response.status_code == 202, response.text
    assert response.json()["status"] in ("pending", "running")
    done = await poll_run(api, response.json()["id"], timeout=20)
    assert done["status"] == "completed"


async def test_run_list_filters_by_case_and_status(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """GET /test-runs filters by test_case_id and status, alone or together."""
    first = await github_case(api, demo_servers)
    second = await github_case(api, demo_servers, query="Find repositories about rust parsers, and fail")
    llm.script(Rule(match="and fail", status=404, times=1))
    ok_first = await run_and_wait(api, first, openai_config(llm.base_url))
    failed_second = await run_and_wait(api, second, openai_config(llm.base_url))
    ok_second = await run_and_wait(api, second, openai_config(llm.base_url))
    assert [r["status"] for r in (ok_first, failed_second, ok_second)] == ["completed", "failed", "completed"]

    async def ids(**params: str) -> set[str]:
        page = await api.get("/test-runs", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["total"] == len(body["items"])
        return {item["id"] for item in body["items"]}

    assert await ids(test_case_id=first) == {ok_first["id"]}
    assert await ids(test_case_id=second) == {failed_second["id"], ok_second["id"]}
    assert await ids(status="failed") == {failed_second["id"]}
    assert await ids(status="completed") == {ok_first["id"], ok_second["id"]}
    assert await ids(test_case_id=second, status="completed") == {ok_second["id"]}
    assert await ids(test_case_id=first, status="failed") == set()
    assert await ids(status="pending") == set()
    bad = await api.get("/test-runs", params={"status": "exploded"})
    assert bad.status_code in (400, 422)
