"""Helpers for the pipeline tests: register servers and cases through the API, poll runs, run worker
PROCESSES, and an isolated work queue (its own NATS + API) that no in-process worker consumes from."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle
from shared.embedded import EmbeddedNats
from shared.settings import Settings
from tests.support.background import api_server

REPO_ROOT = Path(__file__).resolve().parents[2]
FINISHED = ("completed", "failed")


async def register_servers(
    api: httpx.AsyncClient, handles: Iterable[DemoServerHandle], *, skip_existing: bool = False
) -> dict[str, str]:
    """Register every handle as an MCP server (leaving out names already registered when `skip_existing`);
    return name -> id of the servers registered now."""
    existing: set[str] = set()
    if skip_existing:
        listed = await api.get("/mcp-servers", params={"limit": 100})
        assert listed.status_code == 200, listed.text
        existing = {s["name"] for s in listed.json()["items"]}
    ids: dict[str, str] = {}
    for handle in handles:
        if handle.name in existing:
            continue
        created = await api.post(
            "/mcp-servers", json={"name": handle.name, "url": handle.url, "transport": handle.transport}
        )
        assert created.status_code == 201, created.text
        ids[handle.name] = created.json()["id"]
    return ids


async def create_case(
    api: httpx.AsyncClient,
    *,
    query: str,
    servers: list[str],
    expected_server: str | None = None,
    expected_tool: str | None = None,
    expected_parameters: dict[str, Any] | None = None,
    name: str | None = None,
) -> str:
    """Create a test case; return its id."""
    body: dict[str, Any] = {
        "name": name or query[:60],
        "query": query,
        "available_mcp_servers": servers,
        "expected_mcp_server_name": expected_server,
        "expected_tool_name": expected_tool,
    }
    if expected_parameters is not None:
        body["expected_parameters"] = expected_parameters
    created = await api.post("/test-cases", json=body)
    assert created.status_code == 201, created.text
    case_id: str = created.json()["id"]
    return case_id


def openai_config(base_url: str, **overrides: Any) -> dict[str, Any]:
    """A `model_config` for the scripted LLM as an `openai` provider (which needs X-Model-API-Key)."""
    config: dict[str, Any] = {
        "provider": "openai",
        "model": "scripted-model",
        "base_url": base_url,
        "samples": 1,
        "max_retries": 0,
        "timeout": 10,
    }
    config.update(overrides)
    return config


async def poll_run(
    api: httpx.AsyncClient, run_id: str, statuses: tuple[str, ...] = FINISHED, timeout: float = 30.0
) -> dict[str, Any]:
    """GET /test-runs/{id} until its status is one of `statuses`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        got = await api.get(f"/test-runs/{run_id}")
        assert got.status_code == 200, got.text
        body = got.json()
        if body["status"] in statuses:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not reach {statuses} within {timeout}s: {body}")


async def db_run(engine: AsyncEngine, run_id: str) -> dict[str, Any]:
    """The run's row as a dict (or an empty dict when it does not exist)."""
    async with engine.connect() as conn:
        row = (
            (await conn.execute(text("SELECT * FROM test_runs WHERE id = :id"), {"id": run_id}))
            .mappings()
            .first()
        )
    return dict(row) if row is not None else {}


async def poll_db_run(
    engine: AsyncEngine,
    run_id: str,
    statuses: tuple[str, ...] = FINISHED,
    timeout: float = 30.0,
    worker_ids: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Poll Postgres until the run's status is one of `statuses` (and, if given, its worker_id one of
    `worker_ids`); fail after `timeout` seconds."""
    wanted = set(worker_ids) if worker_ids is not None else None
    deadline = time.monotonic() + timeout
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        row = await db_run(engine, run_id)
        if row and row["status"] in statuses and (wanted is None or row["worker_id"] in wanted):
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not reach {statuses} within {timeout}s: {row}")


# ------------------------------------------------------------------------------------------ worker processes
def worker_env(settings: Settings, nats_url: str, **extra: str) -> dict[str, str]:
    """The environment of a `python -m shared.cli worker` process for this test stack."""
    assert settings.database_url
    assert settings.secret_key
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPEVAL_")}
    env.update(
        {
            "MCPEVAL_DATABASE_URL": settings.database_url,
            "MCPEVAL_NATS_URL": nats_url,
            "MCPEVAL_SECRET_KEY": settings.secret_key,
            "MCPEVAL_MAX_DELIVER": str(settings.max_deliver),
            "MCPEVAL_RETRY_BASE_DELAY_SECONDS": str(settings.retry_base_delay_seconds),
            "MCPEVAL_MCP_TIMEOUT_SECONDS": str(settings.mcp_timeout_seconds),
            "MCPEVAL_SWEEP_INTERVAL_SECONDS": str(settings.sweep_interval_seconds),
            "MCPEVAL_ACK_WAIT_SECONDS": "2",
            "MCPEVAL_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


class WorkerProcess:
    """One `python -m shared.cli worker` child process; its stderr goes to a file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared.cli", "worker"],
            cwd=REPO_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # run_worker names itself f"{socket.gethostname()}-{os.getpid()}".
        self.worker_id = f"{socket.gethostname()}-{self.proc.pid}"

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the worker logs that it consumes (its pull subscriptions exist)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f"worker {self.worker_id} consuming" in self.output:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.output}")
            await asyncio.sleep(0.05)
        raise AssertionError(f"worker not ready within {timeout}s:\n{self.output}")

    async def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process has exited, or None if it is still running after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def close(self) -> None:
        """Stop the process if it still runs (SIGTERM, then SIGKILL) and close its log."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()


@contextlib.contextmanager
def worker_processes(
    settings: Settings, nats_url: str, log_dir: Path, **extra: str
) -> Iterator[WorkerFactory]:
    """A factory of worker processes; every process it started is stopped on exit."""
    factory = WorkerFactory(settings, nats_url, log_dir, extra)
    try:
        yield factory
    finally:
        for worker in factory.started:
            worker.close()


@dataclass
class WorkerFactory:
    settings: Settings
    nats_url: str
    log_dir: Path
    extra: dict[str, str]

    def __post_init__(self) -> None:
        self.started: list[WorkerProcess] = []

    def start(self, **extra: str) -> WorkerProcess:
        env = worker_env(self.settings, self.nats_url, **{**self.extra, **extra})
        worker = WorkerProcess(env, self.log_dir / f"worker-{len(self.started) + 1}.log")
        self.started.append(worker)
        return worker


# ------------------------------------------------------------------------------------------ isolated queue
@dataclass(frozen=True)
class IsolatedQueue:
    """A NATS JetStream of its own (same Postgres, same service key) and an API publishing to it."""

    settings: Settings
    api_url: str
    store_dir: Path


@contextlib.contextmanager
def isolated_queue(settings: Settings) -> Iterator[IsolatedQueue]:
    """Start a private embedded NATS and an API on it: runs submitted there reach only the workers that
    consume from this NATS, never the session's in-process worker."""
    data_dir = Path(tempfile.mkdtemp(prefix="mcpeval-queue-"))
    nats = EmbeddedNats(data_dir / f"nats-{uuid.uuid4().hex[:8]}")
    nats.start()
    try:
        private = msgspec.structs.replace(settings, nats_url=nats.url)
        with api_server(private) as url:
            yield IsolatedQueue(settings=private, api_url=url, store_dir=nats.store_dir)
    finally:
        nats.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
