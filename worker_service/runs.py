"""One run, start to finish: claim (fenced), ingest, ask the model, score, write everything in one transaction.

The fence: a claim stamps the run with this delivery's number; every later write requires that number and
status `running`. A zombie (a worker whose message was redelivered to another) therefore cannot write,
and `evaluation_results.test_run_id` is UNIQUE besides.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import httpx2
import msgspec
from nats.aio.client import Client as NatsClient
from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from shared.crypto import EnvelopeError, open_sealed
from shared.db.tables import (
    EvaluationResult,
    McpServer,
    ModelSettings,
    TestCase,
    TestCaseMcpServer,
    TestRun,
    ToolDefinition,
)
from shared.messages import RunFinished, RunRequest
from shared.messaging import run_finished_subject
from shared.providers import BASELINE
from shared.settings import Settings
from worker_service.ingest import IngestedTool, IngestError, ToolLister
from worker_service.llm import (
    LlmError,
    ModelAnswer,
    ask_baseline,
    ask_openai_compatible,
    explain_reasoning,
    make_offer,
)
from worker_service.scoring import Expected, Score, Thresholds, ToolSpec, score

log = logging.getLogger("mcpeval.worker")


@dataclass
class WorkerContext:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    nats: NatsClient
    service_key: bytes
    http: httpx2.AsyncClient
    worker_id: str
    tools: ToolLister


# Core tables: a run's statements are plain SQL, without the ORM's per-statement bookkeeping.
RUNS = cast(Table, TestRun.__table__)
CASES = cast(Table, TestCase.__table__)
SETTINGS = cast(Table, ModelSettings.__table__)
SERVERS = cast(Table, McpServer.__table__)
CASE_SERVERS = cast(Table, TestCaseMcpServer.__table__)
TOOLS = cast(Table, ToolDefinition.__table__)
RESULTS = cast(Table, EvaluationResult.__table__)


class Outcome(msgspec.Struct):
    """What to tell JetStream: ack (done, or nothing to do), nak after a delay (retry), or term."""

    action: str  # "ack" | "nak" | "term" | "drop"
    delay: float = 0.0


ACK = Outcome("ack")
DROP = Outcome("drop")  # a zombie's message: another delivery owns the run now


class _FenceLostError(Exception):
    """Another delivery owns the run now: roll this one's writes back."""


class RunFailedError(Exception):
    def __init__(self, message: str, transient: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after


class ServerRef(msgspec.Struct, frozen=True):
    id: uuid.UUID
    name: str
    url: str
    transport: str


class RunSettings(msgspec.Struct, frozen=True):
    provider: str
    model: str
    timeout: int
    temperature: float
    max_retries: int
    base_url: str | None
    system_prompt: str | None
    samples: int
    explain: bool


class _Loaded(msgspec.Struct):
    run_id: uuid.UUID
    query: str
    expected: Expected
    settings: RunSettings
    servers: list[ServerRef]


async def _claim(ctx: WorkerContext, run_id: uuid.UUID, delivery: int) -> _Loaded | Outcome:
    """Stamp the run with this delivery (the fence), then load what the run needs."""
    async with ctx.engine.begin() as conn:
        claimed = (
            await conn.execute(
                update(RUNS)
                .where(
                    RUNS.c.id == run_id, RUNS.c.status.in_(("pending", "running")), RUNS.c.attempt < delivery
                )
                .values(status="running", attempt=delivery, started_at=func.now(), worker_id=ctx.worker_id)
                .returning(RUNS.c.test_case_id, RUNS.c.model_settings_id)
            )
        ).first()
        if claimed is None:
            status = await conn.scalar(select(RUNS.c.status).where(RUNS.c.id == run_id))
            if status is None or status in ("completed", "failed"):
                return ACK  # deleted, or a duplicate delivery of finished work
            return DROP
    async with ctx.engine.connect() as conn:
        found = (
            await conn.execute(
                select(
                    CASES.c.query,
                    CASES.c.expected_mcp_server_name,
                    CASES.c.expected_tool_name,
                    CASES.c.expected_parameters,
                    *(SETTINGS.c[name] for name in RunSettings.__struct_fields__),
                )
                .select_from(CASES.join(SETTINGS, SETTINGS.c.id == claimed.model_settings_id))
                .where(CASES.c.id == claimed.test_case_id)
            )
        ).first()
        servers = (
            await conn.execute(
                select(SERVERS.c.id, SERVERS.c.name, SERVERS.c.url, SERVERS.c.transport)
                .join(CASE_SERVERS, CASE_SERVERS.c.mcp_server_id == SERVERS.c.id)
                .where(CASE_SERVERS.c.test_case_id == claimed.test_case_id)
                .order_by(SERVERS.c.name)
            )
        ).all()
    if found is None:
        return ACK
    row = found._mapping
    return _Loaded(
        run_id=run_id,
        query=row["query"],
        expected=Expected(
            server=row["expected_mcp_server_name"],
            tool=row["expected_tool_name"],
            parameters=row["expected_parameters"],
        ),
        settings=RunSettings(**{name: row[name] for name in RunSettings.__struct_fields__}),
        servers=[ServerRef(id=r.id, name=r.name, url=r.url, transport=r.transport) for r in servers],
    )


async def _finish_failed(
    ctx: WorkerContext, run_id: uuid.UUID, delivery: int, message: str, status: str = "failed"
) -> bool:
    """Record a failure (or, with status pending, a failed attempt that will be retried); fenced."""
    values: dict[str, Any] = {"status": status, "error_message": message[:2000]}
    if status == "failed":
        values["completed_at"] = func.now()
    async with ctx.engine.begin() as conn:
        written = (
            await conn.execute(
                update(RUNS)
                .where(RUNS.c.id == run_id, RUNS.c.attempt == delivery, RUNS.c.status == "running")
                .values(**values)
                .returning(RUNS.c.id)
            )
        ).first() is not None
    if written and status == "failed":
        await _announce(ctx, run_id, "failed")
    return written


async def _announce(ctx: WorkerContext, run_id: uuid.UUID, status: str) -> None:
    try:
        await ctx.nats.publish(
            run_finished_subject(str(run_id)),
            msgspec.json.encode(RunFinished(run_id=str(run_id), status=status)),
        )
    except Exception:  # the event only shortens ?wait; the state is in Postgres
        log.warning("could not publish completion of run %s", run_id)


async def _ingest(ctx: WorkerContext, servers: list[ServerRef]) -> list[tuple[ServerRef, IngestedTool]]:
    async def one(server: ServerRef) -> list[tuple[ServerRef, IngestedTool]]:
        try:
            tools = await ctx.tools.list(server.url, server.transport)
        except IngestError as exc:
            raise RunFailedError(f"MCP server {server.name!r} ({server.url}): {exc}", exc.transient) from None
        return [(server, t) for t in tools]

    results = await asyncio.gather(*(one(s) for s in servers), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        first = failures[0]
        if isinstance(first, RunFailedError):
            raise RunFailedError(
                "; ".join(str(f) for f in failures),
                transient=all(getattr(f, "transient", False) for f in failures),
            )
        raise first
    return [pair for r in results if not isinstance(r, BaseException) for pair in r]


async def _ask(
    ctx: WorkerContext, loaded: _Loaded, specs: list[ToolSpec], api_key: str | None
) -> ModelAnswer:
    offer = make_offer(specs)
    settings = loaded.settings
    if settings.provider == BASELINE:
        return ask_baseline(loaded.query, offer)
    try:
        return await ask_openai_compatible(
            ctx.http,
            provider=settings.provider,
            model=settings.model,
            base_url=settings.base_url,
            api_key=api_key,
            timeout=float(settings.timeout),
            temperature=settings.temperature,
            max_retries=settings.max_retries,
            system_prompt=settings.system_prompt,
            query=loaded.query,
            offer=offer,
            samples=settings.samples,
        )
    except LlmError as exc:
        raise RunFailedError(str(exc), exc.transient, exc.retry_after) from None


async def _write_result(
    ctx: WorkerContext,
    loaded: _Loaded,
    delivery: int,
    ingested: list[tuple[ServerRef, IngestedTool]],
    answer: ModelAnswer,
    result: Score,
    elapsed_ms: int,
) -> bool:
    """Snapshot + result + final status in ONE transaction; False when the fence says we lost the run."""
    run_id = loaded.run_id
    snapshot: dict[tuple[str, str], uuid.UUID] = {}
    rows: list[dict[str, Any]] = []
    for server, tool in ingested:
        tool_id = uuid.uuid4()
        snapshot.setdefault((server.name, tool.name), tool_id)
        rows.append(
            {
                "id": tool_id,
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "output_schema": tool.output_schema,
                "mcp_server_id": server.id,
                "test_run_id": run_id,
            }
        )
    selected = result.selected
    selected_id = (
        snapshot.get((selected.server, selected.tool))
        if selected is not None and selected.server is not None and selected.tool is not None
        else None
    )
    raw = dict(answer.raw)
    raw["sample_choices"] = result.sample_choices
    try:
        async with ctx.engine.begin() as conn:
            # One multi-row insert: the snapshot is data, not objects to track.
            await conn.execute(insert(TOOLS), rows)
            # The fence: only the delivery that claimed the run may finish it; otherwise all is rolled back.
            fenced = await conn.execute(
                update(RUNS)
                .where(RUNS.c.id == run_id, RUNS.c.attempt == delivery, RUNS.c.status == "running")
                .values(
                    status="completed",
                    llm_response_raw=raw,
                    selected_tool_id=selected_id,
                    extracted_parameters=selected.arguments if selected is not None else None,
                    confidence_score=result.confidence_score,
                    classification=result.classification,
                    execution_time_ms=max(1, elapsed_ms),
                    error_message=None,
                    completed_at=datetime.now(UTC),
                )
                .returning(RUNS.c.id)
            )
            if fenced.first() is None:
                raise _FenceLostError
            await conn.execute(
                insert(RESULTS).values(
                    id=uuid.uuid4(),
                    test_run_id=run_id,
                    classification=result.classification,
                    tool_selection_correct=result.tool_selection_correct,
                    parameter_completeness=result.parameter_completeness,
                    parameter_correctness=result.parameter_correctness,
                    parameter_type_conformance=result.parameter_type_conformance,
                    hallucinated_parameters=result.hallucinated_parameters,
                    confidence_category=result.confidence_category,
                    reasoning=result.reasoning,
                    recommendations=result.recommendations,
                )
            )
    except _FenceLostError:
        return False
    return True


async def _with_explanation(
    ctx: WorkerContext, settings: RunSettings, api_key: str | None, result: Score
) -> Score:
    """`explain: true`: append the same model's prose version of the reasoning, marked as model-written."""
    prose = await explain_reasoning(
        ctx.http,
        provider=settings.provider,
        model=settings.model,
        base_url=settings.base_url,
        api_key=api_key,
        timeout=float(settings.timeout),
        reasoning=result.reasoning,
    )
    note = (
        f"Model-written explanation ({settings.model}; may be wrong, the evidence above is authoritative):\n{prose}"
        if prose
        else "Model-written explanation: unavailable (the model did not answer)."
    )
    return msgspec.structs.replace(result, reasoning=f"{result.reasoning}\n\n{note}")


def retry_delay(settings: Settings, delivery: int, retry_after: float | None) -> float:
    """Exponential backoff from the base delay, at least the server's Retry-After, capped at 5 minutes."""
    backoff = settings.retry_base_delay_seconds * (2 ** max(0, delivery - 1))
    return float(min(300.0, max(backoff, retry_after or 0.0)))


async def execute_run(ctx: WorkerContext, request: RunRequest, delivery: int) -> Outcome:
    """Run one delivery of a run message and say what to do with the message."""
    try:
        run_id = uuid.UUID(request.run_id)
    except ValueError:
        log.error("run message with an invalid id dropped")
        return Outcome("term")
    claimed = await _claim(ctx, run_id, delivery)
    if isinstance(claimed, Outcome):
        return claimed
    started = time.perf_counter()
    try:
        api_key = None
        if request.sealed_api_key:
            try:
                api_key = open_sealed(ctx.service_key, request.run_id, request.sealed_api_key)
            except EnvelopeError as exc:
                raise RunFailedError(f"the API key could not be used: {exc}", transient=False) from None
        ingested = await _ingest(ctx, claimed.servers)
        if not ingested:
            raise RunFailedError("the available MCP servers list no tools", transient=False)
        specs = [
            ToolSpec(server=s.name, name=t.name, description=t.description, input_schema=t.input_schema)
            for s, t in ingested
        ]
        answer = await _ask(ctx, claimed, specs, api_key)
        result = score(claimed.expected, specs, answer.samples, Thresholds(ctx.settings.confidence_threshold))
        if claimed.settings.explain and claimed.settings.provider != BASELINE:
            result = await _with_explanation(ctx, claimed.settings, api_key, result)
        elapsed_ms = round((time.perf_counter() - started) * 1000)
        if not await _write_result(ctx, claimed, delivery, ingested, answer, result, elapsed_ms):
            return DROP
        await _announce(ctx, run_id, "completed")
        return ACK
    except RunFailedError as failure:
        last = delivery >= ctx.settings.max_deliver
        if failure.transient and not last:
            delay = retry_delay(ctx.settings, delivery, failure.retry_after)
            note = f"attempt {delivery} failed, retrying in {delay:.0f}s: {failure}"
            if await _finish_failed(ctx, run_id, delivery, note, status="pending"):
                return Outcome("nak", delay)
            return DROP
        message = str(failure) if not failure.transient else f"gave up after {delivery} attempts: {failure}"
        return Outcome("term") if await _finish_failed(ctx, run_id, delivery, message) else DROP
