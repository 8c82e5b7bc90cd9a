"""Issue #3's secret rule, proven with a canary key: X-Model-API-Key reaches the model endpoint and nothing
else - not a Postgres table (nor PostgreSQL's files and WAL), not a log line, not an API response, not the NATS
store in clear."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.crypto import load_service_key, open_sealed
from shared.demo.servers import DemoServerHandle
from shared.messages import RunRequest
from shared.messaging import RUNS_STREAM, RUNS_SUBJECT, connect
from shared.settings import Settings
from tests.support.pipeline import (
    IsolatedQueue,
    create_case,
    isolated_queue,
    openai_config,
    poll_run,
    register_servers,
    worker_processes,
)
from tests.support.scripted_llm import Rule, ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Only one model answers each case: a TP with 3 samples, an explained run, a provider error that echoes the key.
TP_QUERY = "Show me GitHub issue 42 in octo/widgets"
ECHO_QUERY = "List the commits of octo/widgets (echo)"


def new_canary() -> str:
    return f"sk-canary-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def queue(settings: Settings) -> Iterator[IsolatedQueue]:
    with isolated_queue(settings) as private:
        yield private


class Recorder:
    """Every response body the test received."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def hook(self, response: httpx.Response) -> None:
        await response.aread()
        self.bodies.append(response.content)
        self.bodies.append(repr(dict(response.headers)).encode())


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[Recorder, dict[str, httpx.AsyncClient]]]:
    """A recorder and a factory-by-url of clients whose every response it records."""
    recorder = Recorder()
    clients: dict[str, httpx.AsyncClient] = {}
    try:
        yield recorder, clients
    finally:
        for client in clients.values():
            await client.aclose()


def client_for(url: str, recorded: tuple[Recorder, dict[str, httpx.AsyncClient]]) -> httpx.AsyncClient:
    recorder, clients = recorded
    if url not in clients:
        clients[url] = httpx.AsyncClient(
            base_url=url,
            timeout=60,
            limits=httpx.Limits(max_keepalive_connections=0),
            event_hooks={"response": [recorder.hook]},
        )
    return clients[url]


async def exercise(
    api: httpx.AsyncClient, demo_servers: list[DemoServerHandle], llm: ScriptedLLM, canary: str
) -> list[str]:
    """Submit runs carrying the canary through every path that touches the key; return the run ids."""
    headers = {"X-Model-API-Key": canary}
    await register_servers(api, [h for h in demo_servers if h.name in ("github", "jira")], skip_existing=True)
    tp_case = await create_case(
        api, query=TP_QUERY, servers=["github", "jira"], expected_server="github", expected_tool="get_issue"
    )
    echo_case = await create_case(
        api, query=ECHO_QUERY, servers=["github"], expected_server="github", expected_tool="list_commits"
    )
    llm.script(Rule(match=TP_QUERY, answers=[[("github__get_issue", {"owner": "octo", "issue_number": 42})]]))
    # A provider whose error body echoes the key back (real providers print part of it).
    llm.script(Rule(match=ECHO_QUERY, status=401, error_message=f"Incorrect API key provided: {canary}."))

    run_ids: list[str] = []
    for case_id, config, wanted in (
        (tp_case, openai_config(llm.base_url, samples=3), "completed"),
        (tp_case, openai_config(llm.base_url, explain=True), "completed"),
        (echo_case, openai_config(llm.base_url, max_retries=2), "failed"),
    ):
        response = await api.post(
            f"/test-cases/{case_id}/run?wait=30", json={"model_config": config}, headers=headers
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == wanted, response.json()
        run_ids.append(response.json()["id"])
    queued = await api.post(
        f"/test-cases/{tp_case}/run", json={"model_config": openai_config(llm.base_url)}, headers=headers
    )
    assert queued.status_code == 202
    run_ids.append(queued.json()["id"])
    await poll_run(api, queued.json()["id"])
    # Rejected requests carrying the key must not echo it either.
    invalid = await api.post(f"/test-cases/{tp_case}/run", json={"model_config": {}}, headers=headers)
    assert invalid.status_code in (400, 422)
    missing = await api.post(
        f"/test-cases/{uuid.uuid4()}/run", json={"model_config": openai_config(llm.base_url)}, headers=headers
    )
    assert missing.status_code == 404
    # Read everything back the ways a client can.
    for run_id in run_ids:
        for path in (f"/test-runs/{run_id}", f"/test-runs/{run_id}/result", f"/tools?test_run_id={run_id}"):
            assert (await api.get(path)).status_code in (200, 409)
    for path in ("/test-runs?limit=100", "/metrics/summary", "/metrics", "/health/ready"):
        await api.get(path)
    # The key did reach the model, as a bearer token, on every request.
    auth = {r.headers.get("authorization") for r in llm.requests}
    assert auth == {f"Bearer {canary}"}, auth
    assert any(r.json.get("n") == 3 for r in llm.requests)
    return run_ids


async def assert_not_in_postgres(engine: AsyncEngine, canary: str, run_ids: list[str]) -> None:
    """No row of any table, and no file of the cluster (heap, WAL, logs), holds the canary."""
    async with engine.connect() as conn:
        tables = (
            await conn.scalars(
                text(
                    "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM "
                    "information_schema.tables WHERE table_type = 'BASE TABLE' "
                    "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
                )
            )
        ).all()
        assert "public.test_runs" in tables
        dumped: dict[str, str] = {}
        for table in tables:
            rows = (await conn.scalars(text(f"SELECT t::text FROM {table} t"))).all()  # noqa: S608
            dumped[table] = "\n".join(rows)
        data_directory = await conn.scalar(text("SELECT current_setting('data_directory')"))
    for run_id in run_ids:
        assert run_id in dumped["public.test_runs"]  # the dump is of the right database
    for table, content in dumped.items():
        assert canary not in content, f"the canary is stored in {table}"
    assert_not_in_files(Path(str(data_directory)), canary, must_exist=False)


def assert_not_in_files(root: Path, canary: str, must_exist: bool = True) -> int:
    """No file under root contains the canary's bytes; returns how many files were read."""
    if not root.exists():
        assert not must_exist, f"{root} does not exist"
        return 0
    needle = canary.encode()
    read = 0
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            path = Path(dirpath) / filename
            try:
                data = path.read_bytes()
            except OSError:
                continue
            read += 1
            assert needle not in data, f"the canary is in clear in {path}"
    return read


def assert_not_logged(caplog: pytest.LogCaptureFixture, canary: str) -> None:
    assert caplog.records, "nothing was logged: the capture does not work"
    assert any(r.name.startswith("mcpeval.worker") for r in caplog.records)
    assert any(r.levelno == logging.DEBUG for r in caplog.records)
    for record in caplog.records:
        rendered = " ".join(
            (record.getMessage(), repr(record.args), record.exc_text or "", str(record.__dict__))
        )
        assert canary not in rendered, f"the canary is logged by {record.name}: {record.getMessage()[:200]}"
    assert canary not in caplog.text


def assert_not_in_responses(recorder: Recorder, canary: str) -> None:
    assert len(recorder.bodies) > 20
    for body in recorder.bodies:
        assert canary.encode() not in body, body[:300]


async def test_canary_key_leaks_nowhere_with_the_in_process_worker(
    api_url: str,
    settings: Settings,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    caplog: pytest.LogCaptureFixture,
    recorded: tuple[Recorder, dict[str, httpx.AsyncClient]],
) -> None:
    """Runs through the API and the in-process worker, logged at DEBUG, leave no trace of the key."""
    caplog.set_level(logging.DEBUG)
    canary = new_canary()
    with ScriptedLLM(api_key=canary) as llm:
        run_ids = await exercise(client_for(api_url, recorded), demo_servers, llm, canary)

    assert_not_logged(caplog, canary)
    assert_not_in_responses(recorded[0], canary)
    await assert_not_in_postgres(clean_db, canary, run_ids)
    # The session's data folder holds the embedded NATS store (and PostgreSQL) unless external urls are used.
    assert assert_not_in_files(Path(settings.data_dir), canary) > 0
    nats_store = Path(settings.data_dir) / "nats"
    if nats_store.exists():
        assert assert_not_in_files(nats_store, canary) > 0


async def test_canary_key_leaks_nowhere_with_a_worker_process(
    queue: IsolatedQueue,
    tmp_path: Path,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    caplog: pytest.LogCaptureFixture,
    recorded: tuple[Recorder, dict[str, httpx.AsyncClient]],
) -> None:
    """Runs through a worker PROCESS logging at DEBUG leave the key out of its output and the NATS store."""
    caplog.set_level(logging.DEBUG)
    canary = new_canary()
    assert queue.settings.nats_url
    headers = {"X-Model-API-Key": canary}
    api = client_for(queue.api_url, recorded)
    with (
        worker_processes(
            queue.settings, queue.settings.nats_url, tmp_path, MCPEVAL_LOG_LEVEL="DEBUG"
        ) as workers,
        ScriptedLLM(api_key=canary) as llm,
    ):
        # Queue a run while no worker consumes, and look at it where JetStream keeps it.
        await register_servers(api, [h for h in demo_servers if h.name == "github"])
        case_id = await create_case(
            api,
            query="Get the file README.md of octo/widgets",
            servers=["github"],
            expected_server="github",
            expected_tool="get_file",
        )
        queued = await api.post(
            f"/test-cases/{case_id}/run", json={"model_config": openai_config(llm.base_url)}, headers=headers
        )
        assert queued.status_code == 202
        waiting_id = queued.json()["id"]
        stored = await stored_run_message(queue.settings.nats_url)
        assert waiting_id.encode() in stored
        assert canary.encode() not in stored
        request = msgspec.json.decode(stored, type=RunRequest)
        assert queue.settings.secret_key
        assert request.sealed_api_key
        key = load_service_key(queue.settings.secret_key)
        assert open_sealed(key, waiting_id, request.sealed_api_key) == canary  # sealed, not dropped
        on_disk = await wait_for_bytes(queue.store_dir, waiting_id.encode())
        assert request.sealed_api_key.encode() in on_disk
        assert canary.encode() not in on_disk

        worker = workers.start()
        await worker.wait_ready()
        assert (await poll_run(api, waiting_id))["status"] == "completed"
        run_ids = [waiting_id, *await exercise(api, demo_servers, llm, canary)]
        worker.close()
        output = worker.output

    assert " DEBUG " in output  # the process did log at DEBUG
    assert canary not in output
    assert_not_in_responses(recorded[0], canary)
    assert canary not in caplog.text
    await assert_not_in_postgres(clean_db, canary, run_ids)
    assert assert_not_in_files(queue.store_dir, canary) > 0


async def stored_run_message(nats_url: str) -> bytes:
    """The body of the last run message JetStream stores."""
    nc = await connect(nats_url, name="canary-test")
    try:
        msg = await nc.jetstream().get_last_msg(RUNS_STREAM, RUNS_SUBJECT)
        data: bytes = msg.data or b""
        return data
    finally:
        await nc.close()


async def wait_for_bytes(root: Path, needle: bytes, timeout: float = 10.0) -> bytes:
    """All bytes of the files under root, once they contain `needle` (JetStream writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        data = read_tree(root)
        if needle in data:
            return data
        assert time.monotonic() < deadline, f"{needle!r} never reached {root}"
        await asyncio.sleep(0.1)


def read_tree(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
