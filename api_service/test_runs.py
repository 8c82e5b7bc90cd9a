"""Runs: `POST /test-cases/{id}/run` queues one, `/test-runs` reads their state and results."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.params import FromPath, JSONBody, QueryParameter
from sqlalchemy import delete as sql_delete
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.common import (
    LimitParam,
    OffsetParam,
    Page,
    Services,
    ServicesDep,
    SessionDep,
    Url,
    paginate,
    refreshed,
)
from api_service.errors import ConflictError, InvalidInputError, NotFoundError, ServiceUnavailableError
from shared.crypto import seal
from shared.db.tables import EvaluationResult, McpServer, ModelSettings, TestCase, TestRun, ToolDefinition
from shared.messaging import PublishError, publish_run, run_finished_subject
from shared.providers import BASELINE, requires_key, resolve_base_url

log = logging.getLogger("mcpeval.api")

API_KEY_HEADER = "X-Model-API-Key"
MAX_WAIT_SECONDS = 300
FINISHED = ("completed", "failed")

ProviderName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[^\x00\s][^\x00]*$")]


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True):
    """Per-run model settings (stored for the audit trail; the API key never is)."""

    provider: ProviderName
    model: ModelName
    timeout: Annotated[int, msgspec.Meta(ge=1, le=300)] = 30
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.4
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    base_url: Url | None = None
    system_prompt: Annotated[str, msgspec.Meta(max_length=20_000, pattern=r"^[^\x00]*$")] | None = None
    samples: Annotated[int, msgspec.Meta(ge=1, le=20)] = 3
    explain: bool = False

    def to_row(self) -> ModelSettings:
        """The audit-trail row for these settings (the key is never part of them)."""
        return ModelSettings(
            provider=self.provider,
            model=self.model,
            timeout=self.timeout,
            temperature=self.temperature,
            max_retries=self.max_retries,
            base_url=self.base_url,
            system_prompt=self.system_prompt,
            # The baseline is deterministic: more samples could only agree with the first.
            samples=1 if self.provider == BASELINE else self.samples,
            explain=self.explain,
        )


class RunBody(msgspec.Struct, forbid_unknown_fields=True):
    model_config: ModelConfig | None = None
    model_settings: ModelConfig | None = None


class ModelSettingsOut(msgspec.Struct):
    id: uuid.UUID
    provider: str
    model: str
    timeout: int
    temperature: float
    max_retries: int
    base_url: str | None
    samples: int
    explain: bool
    created_at: datetime
    is_baseline: bool

    @classmethod
    def of(cls, row: ModelSettings) -> ModelSettingsOut:
        return cls(
            id=row.id,
            provider=row.provider,
            model=row.model,
            timeout=row.timeout,
            temperature=round(row.temperature, 4),
            max_retries=row.max_retries,
            base_url=row.base_url,
            samples=row.samples,
            explain=row.explain,
            created_at=row.created_at,
            is_baseline=row.provider == BASELINE,
        )


class SelectedTool(msgspec.Struct):
    id: uuid.UUID
    name: str
    mcp_server_id: uuid.UUID
    mcp_server_name: str


class TestRunOut(msgspec.Struct):
    id: uuid.UUID
    test_case_id: uuid.UUID
    status: str
    classification: str | None
    confidence_score: float | None
    selected_tool: SelectedTool | None
    extracted_parameters: Any
    execution_time_ms: int | None
    error_message: str | None
    attempt: int
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    model_settings: ModelSettingsOut | None


class EvaluationOut(msgspec.Struct):
    id: uuid.UUID
    test_run_id: uuid.UUID
    classification: str
    tool_selection_correct: bool
    parameter_completeness: float
    parameter_correctness: float
    parameter_type_conformance: bool
    hallucinated_parameters: list[str] | None
    confidence_category: str | None
    confidence_score: float | None
    reasoning: str
    recommendations: list[Any]
    created_at: datetime
    run: TestRunOut


async def load_run_out(session: AsyncSession, run: TestRun) -> TestRunOut:
    settings = await session.get(ModelSettings, run.model_settings_id) if run.model_settings_id else None
    selected: SelectedTool | None = None
    if run.selected_tool_id is not None:
        found = (
            await session.execute(
                select(ToolDefinition, McpServer.name)
                .join(McpServer, McpServer.id == ToolDefinition.mcp_server_id)
                .where(ToolDefinition.id == run.selected_tool_id)
            )
        ).first()
        if found is not None:
            tool, server_name = found
            selected = SelectedTool(
                id=tool.id, name=tool.name, mcp_server_id=tool.mcp_server_id, mcp_server_name=server_name
            )
    return TestRunOut(
        id=run.id,
        test_case_id=run.test_case_id,
        status=run.status,
        classification=run.classification,
        confidence_score=None if run.confidence_score is None else round(run.confidence_score, 4),
        selected_tool=selected,
        extracted_parameters=run.extracted_parameters,
        execution_time_ms=run.execution_time_ms,
        error_message=run.error_message,
        attempt=run.attempt,
        created_at=run.created_at,
        started_at=run.started_at,
        completed_at=run.completed_at,
        model_settings=ModelSettingsOut.of(settings) if settings else None,
    )


def check_model_config(config: ModelConfig, api_key: str | None) -> None:
    """Fail fast on what the worker could only fail later: no endpoint, or no key for a cloud provider."""
    if config.provider == BASELINE:
        return
    base_url = resolve_base_url(config.provider, config.base_url)
    if base_url is None:
        raise InvalidInputError("model_config.base_url", f"required for provider {config.provider!r}")
    if requires_key(config.provider, base_url) and not api_key:
        raise InvalidInputError(API_KEY_HEADER, f"header required for provider {config.provider!r}")


async def queue_run(
    session: AsyncSession,
    services: Services,
    case_id: FromPath[uuid.UUID],
    config: ModelConfig,
    api_key: str | None,
    run_id: uuid.UUID | None = None,
) -> TestRun:
    """Insert the run (pending) and publish it; on a publish failure leave no orphan and answer 503."""
    settings_row = config.to_row()
    session.add(settings_row)
    await session.flush()
    run = TestRun(
        id=run_id or uuid.uuid4(), test_case_id=case_id, model_settings_id=settings_row.id, status="pending"
    )
    session.add(run)
    await session.commit()
    await refreshed(session, run, "test run")
    sealed = (
        seal(services.service_key, str(run.id), api_key, services.settings.key_ttl_seconds)
        if api_key
        else None
    )
    try:
        await publish_run(services.js, str(run.id), sealed)
    except PublishError:
        await session.execute(sql_delete(TestRun).where(TestRun.id == run.id))
        await session.execute(sql_delete(ModelSettings).where(ModelSettings.id == settings_row.id))
        await session.commit()
        raise ServiceUnavailableError("the work queue is unavailable; the run was not created") from None
    return run


class RunController(Controller):
    path = "/test-cases"
    tags = ["test-runs"]

    @post(
        "/{case_id:uuid}/run",
        status_code=202,
        summary="Queue a run of a test case (202), or wait up to `wait` seconds for it (200 when finished)",
    )
    async def run(
        self,
        case_id: FromPath[uuid.UUID],
        data: JSONBody[RunBody],
        request: Request[Any, Any, Any],
        session: SessionDep,
        services: ServicesDep,
        wait: Annotated[int, QueryParameter(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    ) -> Response[TestRunOut]:
        if data.model_config is not None and data.model_settings is not None:
            raise InvalidInputError("model_config", "give model_config or its alias model_settings, not both")
        config = data.model_config or data.model_settings
        if config is None:
            raise InvalidInputError("model_config", "required")
        api_key = request.headers.get(API_KEY_HEADER) or None
        check_model_config(config, api_key)
        if await session.get(TestCase, case_id) is None:
            raise NotFoundError(f"no test case with id {case_id}")
        if not wait:
            run = await queue_run(session, services, case_id, config, api_key)
            return Response(await load_run_out(session, run), status_code=202)
        return await self._run_and_wait(session, services, case_id, config, api_key, wait)

    async def _run_and_wait(
        self,
        session: SessionDep,
        services: ServicesDep,
        case_id: FromPath[uuid.UUID],
        config: ModelConfig,
        api_key: str | None,
        wait: int,
    ) -> Response[TestRunOut]:
        # The id is chosen here so the completion event's subject can be subscribed to before the run is
        # published: the event cannot be missed, and this request hears only its own run.
        run_id = uuid.uuid4()
        finished = asyncio.Event()

        async def on_finished(_msg: Any) -> None:
            finished.set()

        sub = await services.nats.subscribe(run_finished_subject(str(run_id)), cb=on_finished)
        try:
            run = await queue_run(session, services, case_id, config, api_key, run_id=run_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), timeout=wait)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        await refreshed(session, run, "test run")
        out = await load_run_out(session, run)
        return Response(out, status_code=200 if run.status in FINISHED else 202)


class TestRunController(Controller):
    path = "/test-runs"
    tags = ["test-runs"]

    @get("/", summary="List runs, filtered by test case and status")
    async def list(
        self,
        session: SessionDep,
        test_case_id: Annotated[uuid.UUID | None, QueryParameter()] = None,
        status: Annotated[
            Literal["pending", "running", "completed", "failed"] | None, QueryParameter()
        ] = None,
        limit: Annotated[LimitParam, QueryParameter()] = 50,
        offset: Annotated[OffsetParam, QueryParameter()] = 0,
    ) -> Page[TestRunOut]:
        query = select(TestRun).order_by(TestRun.created_at.desc(), TestRun.id)
        if test_case_id is not None:
            query = query.where(TestRun.test_case_id == test_case_id)
        if status is not None:
            query = query.where(TestRun.status == status)
        rows, total = await paginate(session, query, limit, offset)
        items = [await load_run_out(session, r) for r in rows]
        return Page(items=items, total=total, limit=limit, offset=offset)

    @get("/{run_id:uuid}", summary="Get one run")
    async def get_one(self, run_id: FromPath[uuid.UUID], session: SessionDep) -> TestRunOut:
        run = await session.get(TestRun, run_id)
        if run is None:
            raise NotFoundError(f"no test run with id {run_id}")
        return await load_run_out(session, run)

    @get("/{run_id:uuid}/result", summary="The evaluation of a completed run (409 until it is completed)")
    async def result(self, run_id: FromPath[uuid.UUID], session: SessionDep) -> EvaluationOut:
        run = await session.get(TestRun, run_id)
        if run is None:
            raise NotFoundError(f"no test run with id {run_id}")
        if run.status != "completed":
            detail = f"run is {run.status}"
            if run.status == "failed" and run.error_message:
                detail += f": {run.error_message}"
            raise ConflictError(detail)
        ev = await session.scalar(select(EvaluationResult).where(EvaluationResult.test_run_id == run_id))
        if ev is None:
            raise ConflictError("run is completed but has no evaluation result")
        return EvaluationOut(
            id=ev.id,
            test_run_id=ev.test_run_id,
            classification=ev.classification,
            tool_selection_correct=ev.tool_selection_correct,
            parameter_completeness=round(ev.parameter_completeness, 4),
            parameter_correctness=round(ev.parameter_correctness, 4),
            parameter_type_conformance=ev.parameter_type_conformance,
            hallucinated_parameters=ev.hallucinated_parameters,
            confidence_category=ev.confidence_category,
            confidence_score=None if run.confidence_score is None else round(run.confidence_score, 4),
            reasoning=ev.reasoning,
            recommendations=ev.recommendations,
            created_at=ev.created_at,
            run=await load_run_out(session, run),
        )

    @delete("/{run_id:uuid}", status_code=204, summary="Delete a run and its snapshot")
    async def remove(self, run_id: FromPath[uuid.UUID], session: SessionDep) -> None:
        run = await session.get(TestRun, run_id)
        if run is None:
            raise NotFoundError(f"no test run with id {run_id}")
        await session.delete(run)
        await session.commit()
