"""The worker process: connect, consume runs and checks from the shared durable consumers, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import msgspec
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from shared.crypto import load_service_key
from shared.db.engine import make_engine, make_sessionmaker
from shared.db.tables import ModelSettings, TestRun
from shared.messages import CheckRequest, RunRequest
from shared.messaging import (
    CHECKS_DURABLE,
    CHECKS_STREAM,
    CHECKS_SUBJECT,
    RUNS_DURABLE,
    RUNS_STREAM,
    RUNS_SUBJECT,
    SIMILARITY_QUEUE,
    SIMILARITY_SUBJECT,
    connect,
    consumer_config,
    ensure_streams,
)
from shared.settings import ConfigError, Settings
from worker_service.checks import execute_check
from worker_service.ingest import ToolLister
from worker_service.runs import Outcome, WorkerContext, execute_run, retry_delay
from worker_service.similarity_service import SimilarityHandler

log = logging.getLogger("mcpeval.worker")

CHECK_CONCURRENCY = 8
DRAIN_GRACE_SECONDS = 20.0  # under `mcpeval up`'s 30 s and compose's stop_grace_period


async def _heartbeat(msg: Msg, every: float) -> None:
    """Tell JetStream the message is still being worked on, so it is not redelivered meanwhile."""
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):
            await msg.in_progress()


async def _settle(msg: Msg, outcome: Outcome) -> None:
    with contextlib.suppress(Exception):
        if outcome.action == "ack":
            await msg.ack()
        elif outcome.action == "nak":
            await msg.nak(delay=outcome.delay)
        elif outcome.action == "term":
            await msg.term()
        # "drop": leave it; the delivery that owns the run will settle the message


async def handle_run_message(ctx: WorkerContext, msg: Msg) -> None:
    try:
        request = msgspec.json.decode(msg.data, type=RunRequest)
    except msgspec.DecodeError:
        log.error("undecodable run message terminated")
        await _settle(msg, Outcome("term"))
        return
    delivery = int(msg.metadata.num_delivered)
    beat = asyncio.create_task(_heartbeat(msg, max(0.5, ctx.settings.ack_wait_seconds / 3)))
    try:
        outcome = await execute_run(ctx, request, delivery)
    except Exception:
        log.exception("run %s failed unexpectedly on delivery %d", request.run_id, delivery)
        outcome = await _unexpected_failure(ctx, request.run_id, delivery)
    finally:
        beat.cancel()
    await _settle(msg, outcome)


async def _unexpected_failure(ctx: WorkerContext, run_id: str, delivery: int) -> Outcome:
    """A bug or an outage (e.g. the database): retry later; on the last delivery record the failure."""
    if delivery < ctx.settings.max_deliver:
        return Outcome("nak", retry_delay(ctx.settings, delivery, None))
    with contextlib.suppress(Exception):
        async with ctx.sessionmaker() as session:
            await session.execute(
                update(TestRun)
                .where(TestRun.id == run_id, TestRun.status.in_(("pending", "running")))
                .values(
                    status="failed", error_message="internal error in the worker", completed_at=func.now()
                )
            )
            await session.commit()
    return Outcome("term")


async def handle_check_message(ctx: WorkerContext, msg: Msg) -> None:
    try:
        request = msgspec.json.decode(msg.data, type=CheckRequest)
    except msgspec.DecodeError:
        await _settle(msg, Outcome("term"))
        return
    try:
        await execute_check(ctx, request)
    except Exception:
        log.exception("connectivity check of %s failed unexpectedly", request.server_id)
        await _settle(msg, Outcome("nak", 5.0))
        return
    await _settle(msg, Outcome("ack"))


async def consume(
    sub: JetStreamContext.PullSubscription,
    handler: Callable[[Msg], Coroutine[Any, Any, None]],
    capacity: int,
    stop: asyncio.Event,
) -> None:
    """Fetch as many messages as there are free slots; at most `capacity` handled at once."""
    inflight: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        free = capacity - len(inflight)
        if free <= 0:
            await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            continue
        try:
            msgs = await sub.fetch(batch=free, timeout=1.0)
        except (NatsTimeoutError, TimeoutError):
            continue
        except Exception as exc:
            if stop.is_set():
                break
            log.warning("fetch failed (%s); retrying", type(exc).__name__)
            await asyncio.sleep(1.0)
            continue
        for msg in msgs:
            task = asyncio.create_task(handler(msg))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
    if inflight:
        log.info("draining %d in-flight message(s)", len(inflight))
        _, pending = await asyncio.wait(inflight, timeout=DRAIN_GRACE_SECONDS)
        for task in pending:  # not acked: JetStream redelivers them to another worker
            task.cancel()


async def sweep(ctx: WorkerContext, stop: asyncio.Event) -> None:
    """Fail runs whose message can no longer exist, so nothing stays pending/running forever."""
    settings = ctx.settings
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=settings.sweep_interval_seconds)
        if stop.is_set():
            return
        try:
            await sweep_once(ctx.sessionmaker, settings)
        except Exception as exc:
            log.warning("sweep failed (%s)", type(exc).__name__)


SWEPT_REASON = "no worker finished this run in time (message expired or its last delivery was lost)"


async def sweep_once(sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> int:
    """Fail every run that can no longer finish; returns how many.

    Two cases: the run outlived the stream's max_age (its message is gone), or it is `running` on its
    final delivery for longer than that attempt could possibly take — the model's timeout for every SDK
    retry and sample round, the MCP timeouts, plus twice ack_wait — so its worker died and no
    redelivery will come. A slow but live final attempt is never swept."""
    expired = func.now() - func.make_interval(0, 0, 0, 0, 0, 0, settings.run_deadline_seconds)
    attempt_bound = (
        ModelSettings.timeout * (ModelSettings.max_retries + 1) * 2
        + settings.mcp_timeout_seconds * 3
        + settings.ack_wait_seconds * 2
    )
    lost_final = func.now() - func.make_interval(0, 0, 0, 0, 0, 0, attempt_bound)
    failed = {
        "status": "failed",
        "completed_at": func.now(),
        "error_message": func.coalesce(TestRun.error_message + "; ", "") + SWEPT_REASON,
    }
    async with sessionmaker() as session:
        expired_ids = await session.scalars(
            update(TestRun)
            .where(TestRun.status.in_(("pending", "running")), TestRun.created_at < expired)
            .values(**failed)
            .returning(TestRun.id)
        )
        ids = list(expired_ids)
        lost_ids = await session.scalars(
            update(TestRun)
            .where(
                TestRun.model_settings_id == ModelSettings.id,
                TestRun.status == "running",
                TestRun.attempt >= settings.max_deliver,
                TestRun.started_at < lost_final,
            )
            .values(**failed)
            .returning(TestRun.id)
        )
        ids += list(lost_ids)
        await session.commit()
    if ids:
        log.warning("swept %d run(s) that could no longer finish", len(ids))
    return len(ids)


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop` is set), then stop fetching, finish in-flight work, drain."""
    if not settings.database_url or not settings.nats_url or not settings.secret_key:
        raise ConfigError("MCPEVAL_DATABASE_URL, MCPEVAL_NATS_URL and MCPEVAL_SECRET_KEY are required")
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    worker_id = f"{socket.gethostname()}-{os.getpid()}"
    async with AsyncExitStack() as stack:
        # Up to one connection per run in flight: a run must never wait for a connection.
        engine = make_engine(
            settings.database_url,
            settings.db_pool_size,
            max_overflow=settings.worker_concurrency,
            pre_ping=False,
        )
        stack.push_async_callback(engine.dispose)
        nc = await connect(settings.nats_url, name=f"mcpeval-worker-{worker_id}")
        stack.push_async_callback(nc.drain)
        js = nc.jetstream(timeout=5)
        await ensure_streams(js, settings)
        http = httpx2.AsyncClient(
            limits=httpx2.Limits(
                max_connections=settings.worker_concurrency * 2, max_keepalive_connections=64
            ),
            follow_redirects=False,
            trust_env=False,
        )
        stack.push_async_callback(http.aclose)
        ctx = WorkerContext(
            settings=settings,
            engine=engine,
            sessionmaker=make_sessionmaker(engine),
            nats=nc,
            service_key=load_service_key(settings.secret_key),
            http=http,
            worker_id=worker_id,
            tools=ToolLister(settings.mcp_timeout_seconds, settings.tool_cache_seconds),
        )
        runs = await js.pull_subscribe(
            RUNS_SUBJECT,
            durable=RUNS_DURABLE,
            stream=RUNS_STREAM,
            config=consumer_config(RUNS_DURABLE, RUNS_SUBJECT, settings),
        )
        checks = await js.pull_subscribe(
            CHECKS_SUBJECT,
            durable=CHECKS_DURABLE,
            stream=CHECKS_STREAM,
            config=consumer_config(CHECKS_DURABLE, CHECKS_SUBJECT, settings),
        )
        # Similarity is request-reply (core NATS, one worker of the queue group answers), not a stream.
        similarity = SimilarityHandler(ctx)
        similarity_sub = await nc.subscribe(
            SIMILARITY_SUBJECT, queue=SIMILARITY_QUEUE, cb=similarity.on_message
        )
        log.info("worker %s consuming (concurrency %d)", worker_id, settings.worker_concurrency)
        tasks = [
            asyncio.create_task(
                consume(runs, lambda m: handle_run_message(ctx, m), settings.worker_concurrency, stop)
            ),
            asyncio.create_task(
                consume(checks, lambda m: handle_check_message(ctx, m), CHECK_CONCURRENCY, stop)
            ),
            asyncio.create_task(sweep(ctx, stop)),
        ]
        await stop.wait()
        log.info("worker %s stopping: finishing in-flight work", worker_id)
        with contextlib.suppress(Exception):
            await similarity_sub.unsubscribe()
        await similarity.drain(DRAIN_GRACE_SECONDS)
        await asyncio.gather(*tasks, return_exceptions=True)
        # A pull subscription's inbox would hold nc.drain() until its timeout: release them first.
        for sub in (runs, checks):
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
    log.info("worker %s stopped", worker_id)
