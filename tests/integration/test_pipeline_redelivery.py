"""Issue #3 with real worker PROCESSES (`python -m shared.cli worker`): a killed worker's run is redelivered
and completed exactly once, two processes share one durable consumer, and SIGTERM drains in-flight work.

The runs go through an isolated queue (a private NATS + an API on it, same Postgres and service key), so the
session's in-process `worker` - which another module may have started - never takes them: which process holds
a run is then under the test's control.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle
from shared.settings import Settings
from tests.support.pipeline import (
    IsolatedQueue,
    WorkerFactory,
    create_case,
    isolated_queue,
    openai_config,
    poll_db_run,
    register_servers,
    worker_processes,
)
from tests.support.scripted_llm import Rule, ScriptedLLM
from worker_service.main import DRAIN_GRACE_SECONDS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEADERS = {"X-Model-API-Key": "sk-redelivery-test"}
ANSWER = [[("search_repositories", {"query": "web frameworks"})]]


@pytest.fixture(scope="module")
def queue(settings: Settings) -> Iterator[IsolatedQueue]:
    with isolated_queue(settings) as private:
        yield private


@pytest.fixture
async def qapi(queue: IsolatedQueue) -> AsyncIterator[httpx.AsyncClient]:
    # No keep-alive: an idle pooled connection can race uvicorn's 5 s keep-alive close (httpx.ReadError).
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=queue.api_url, timeout=60, limits=limits) as client:
        yield client


@pytest.fixture
def workers(queue: IsolatedQueue, tmp_path: Path) -> Iterator[WorkerFactory]:
    assert queue.settings.nats_url
    with worker_processes(queue.settings, queue.settings.nats_url, tmp_path) as factory:
        yield factory


async def github_case(qapi: httpx.AsyncClient, demo_servers: list[DemoServerHandle]) -> str:
    await register_servers(qapi, [h for h in demo_servers if h.name == "github"])
    return await create_case(
        qapi,
        query="Search GitHub repositories about web frameworks",
        servers=["github"],
        expected_server="github",
        expected_tool="search_repositories",
    )


async def submit(qapi: httpx.AsyncClient, case_id: str, llm: ScriptedLLM) -> str:
    response = await qapi.post(
        f"/test-cases/{case_id}/run", json={"model_config": openai_config(llm.base_url)}, headers=HEADERS
    )
    assert response.status_code == 202, response.text
    run_id: str = response.json()["id"]
    return run_id


async def wait_for_llm_requests(llm: ScriptedLLM, count: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while len(llm.requests) < count:
        assert time.monotonic() < deadline, f"the LLM saw {len(llm.requests)} of {count} requests"
        await asyncio.sleep(0.05)


async def stored(engine: AsyncEngine, run_id: str) -> tuple[int, int]:
    """(evaluation_results rows, tool_definitions rows) of the run."""
    async with engine.connect() as conn:
        evaluations = await conn.scalar(
            text("SELECT count(*) FROM evaluation_results WHERE test_run_id = :id"), {"id": run_id}
        )
        tools = await conn.scalar(
            text("SELECT count(*) FROM tool_definitions WHERE test_run_id = :id"), {"id": run_id}
        )
    return int(evaluations or 0), int(tools or 0)


async def test_killed_worker_run_is_redelivered_and_completed_once(
    qapi: httpx.AsyncClient,
    workers: WorkerFactory,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """kill -9 of the worker holding a run: after ack_wait another worker completes it, exactly once."""
    case_id = await github_case(qapi, demo_servers)
    llm.script(Rule(delay_ms=3000, answers=ANSWER, times=1))  # slow only for the worker we kill
    llm.script(Rule(answers=ANSWER))
    first = workers.start()
    await first.wait_ready()

    run_id = await submit(qapi, case_id, llm)
    holding = await poll_db_run(clean_db, run_id, ("running",), timeout=20, worker_ids=[first.worker_id])
    assert holding["attempt"] == 1
    await wait_for_llm_requests(llm, 1)  # mid-run: waiting for the model
    first.signal(signal.SIGKILL)
    assert await first.wait_exit(10) == -signal.SIGKILL
    second = workers.start()
    await second.wait_ready()

    done = await poll_db_run(clean_db, run_id, timeout=30)

    assert done["status"] == "completed", done
    assert done["attempt"] >= 2
    assert done["worker_id"] == second.worker_id
    assert done["classification"] == "TP"
    assert await stored(clean_db, run_id) == (1, 5)  # one result, one snapshot of github's 5 tools
    assert len(llm.requests) >= 2


async def test_two_worker_processes_share_the_queue_exactly_once(
    qapi: httpx.AsyncClient,
    workers: WorkerFactory,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """40 runs over two worker processes on one durable consumer: each completes once; both took work."""
    case_id = await github_case(qapi, demo_servers)
    llm.script(Rule(delay_ms=300, answers=ANSWER))
    pair = [workers.start(MCPEVAL_WORKER_CONCURRENCY="8") for _ in range(2)]
    await asyncio.gather(*(w.wait_ready() for w in pair))
    gate = asyncio.Semaphore(10)

    async def one() -> str:
        async with gate:
            return await submit(qapi, case_id, llm)

    run_ids = await asyncio.gather(*(one() for _ in range(40)))

    deadline = time.monotonic() + 60
    rows: list[Any] = []
    while time.monotonic() < deadline:
        async with clean_db.connect() as conn:
            rows = list(
                (
                    await conn.execute(
                        text(
                            "SELECT r.id::text AS id, r.status, r.attempt, r.worker_id, "
                            "(SELECT count(*) FROM evaluation_results e WHERE e.test_run_id = r.id) AS results, "
                            "(SELECT count(*) FROM tool_definitions t WHERE t.test_run_id = r.id) AS tools "
                            "FROM test_runs r"
                        )
                    )
                ).mappings()
            )
        if len(rows) == 40 and all(r["status"] in ("completed", "failed") for r in rows):
            break
        await asyncio.sleep(0.1)
    assert {r["id"] for r in rows} == set(run_ids)
    assert [r for r in rows if r["status"] != "completed"] == []
    assert {(r["results"], r["tools"]) for r in rows} == {(1, 5)}
    assert {r["attempt"] for r in rows} == {1}
    by_worker = {w.worker_id: sum(1 for r in rows if r["worker_id"] == w.worker_id) for w in pair}
    assert sum(by_worker.values()) == 40
    assert all(count > 0 for count in by_worker.values()), by_worker
    assert len(llm.requests) == 40


async def test_sigterm_drains_the_in_flight_run_and_exits_zero(
    qapi: httpx.AsyncClient,
    workers: WorkerFactory,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """SIGTERM mid-run: the worker finishes the run it holds, then exits 0 within the drain grace period."""
    case_id = await github_case(qapi, demo_servers)
    llm.script(Rule(delay_ms=3000, answers=ANSWER))
    worker = workers.start()
    await worker.wait_ready()
    run_id = await submit(qapi, case_id, llm)
    await poll_db_run(clean_db, run_id, ("running",), timeout=20, worker_ids=[worker.worker_id])
    await wait_for_llm_requests(llm, 1)

    worker.signal(signal.SIGTERM)
    code = await worker.wait_exit(DRAIN_GRACE_SECONDS + 10)

    assert code == 0, worker.output
    done = await poll_db_run(clean_db, run_id, timeout=1)
    assert done["status"] == "completed"
    assert done["worker_id"] == worker.worker_id
    assert done["attempt"] == 1
    assert await stored(clean_db, run_id) == (1, 5)
    assert "stopping: finishing in-flight work" in worker.output
    assert f"worker {worker.worker_id} stopped" in worker.output
