"""Session fixtures: the real PostgreSQL and NATS JetStream (embedded, or MCPEVAL_TEST_* urls), the API
as a real server, a worker, demo MCP servers, a scripted LLM."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.crypto import generate_service_key
from shared.db.engine import make_engine
from shared.db.migrate import upgrade
from shared.demo.catalog import DEMO_SERVERS
from shared.demo.servers import DemoServerHandle, run_demo_servers
from shared.embedded import embedded_stack
from shared.settings import Settings
from tests.support.background import api_server, worker_thread
from tests.support.scripted_llm import ScriptedLLM

TABLES = (
    "evaluation_results",
    "tool_definitions",
    "test_runs",
    "test_batches",
    "model_settings",
    "test_case_mcp_servers",
    "test_cases",
    "mcp_servers",
)


class Stack:
    def __init__(self, database_url: str, nats_url: str, data_dir: Path) -> None:
        self.database_url = database_url
        self.nats_url = nats_url
        self.data_dir = data_dir


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Real PostgreSQL + NATS for the whole session, migrated to head."""
    db_url = os.environ.get("MCPEVAL_TEST_DATABASE_URL")
    nats_url = os.environ.get("MCPEVAL_TEST_NATS_URL")
    data_dir = Path(tempfile.mkdtemp(prefix="mcpeval-test-"))
    os.chmod(data_dir, 0o755)  # noqa: S103 - the embedded PostgreSQL runs as `nobody` when we are root
    try:
        if db_url and nats_url:
            upgrade(db_url)
            yield Stack(db_url, nats_url, data_dir)
        else:
            with embedded_stack(data_dir) as (db, nats):
                upgrade(db)
                yield Stack(db, nats, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(stack: Stack) -> Settings:
    return Settings(
        database_url=stack.database_url,
        nats_url=stack.nats_url,
        secret_key=generate_service_key(),
        data_dir=str(stack.data_dir),
        ack_wait_seconds=3.0,
        max_deliver=3,
        retry_base_delay_seconds=0.2,
        mcp_timeout_seconds=5.0,
        worker_concurrency=32,
        sweep_interval_seconds=3600,
        max_body_bytes=262_144,
    )


@pytest.fixture(scope="session")
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    assert settings.database_url
    eng = make_engine(settings.database_url, pool_size=5)
    yield eng
    await eng.dispose()


async def truncate_all(engine: AsyncEngine) -> None:
    """Empty every table. A worker still finishing a previous test's run can deadlock with TRUNCATE's
    table locks; PostgreSQL then aborts one side, and if that is us, we simply try again."""
    for attempt in range(10):
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
            return
        except DBAPIError as exc:
            if "deadlock" not in str(exc) or attempt == 9:
                raise
            await asyncio.sleep(0.1 * (attempt + 1))


@pytest.fixture
async def clean_db(engine: AsyncEngine) -> AsyncEngine:
    """An empty database at the start of the test."""
    await truncate_all(engine)
    return engine


@pytest.fixture(scope="session")
def api_url(settings: Settings) -> Iterator[str]:
    """The real API (uvicorn, lifespan and all) on a loopback port, in a thread of its own."""
    with api_server(settings) as url:
        yield url


@pytest.fixture(scope="session")
async def api(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the API."""
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def worker(settings: Settings, api_url: str) -> Iterator[None]:
    """One worker consuming the shared durable consumers until the session ends."""
    with worker_thread(settings):
        yield


@pytest.fixture(scope="session")
def demo_servers() -> Iterator[list[DemoServerHandle]]:
    with run_demo_servers(DEMO_SERVERS) as handles:
        yield handles


@pytest.fixture(scope="session")
def scripted_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as llm:
        yield llm


@pytest.fixture
def llm(scripted_llm: ScriptedLLM) -> ScriptedLLM:
    """The session's scripted LLM with no rules and no recorded requests."""
    scripted_llm.reset()
    return scripted_llm
