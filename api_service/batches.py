"""Batches: `POST /test-runs/batch` queues every case x every model x `repeats` as normal runs; the GETs
follow their progress and, once all are finished, summarise them.

Every run of a batch is inserted first (one transaction), then published. If the queue fails midway, the runs
that were not confirmed are marked failed (or, when none was published, the whole batch is removed) and the
answer is 503: no run is ever left pending without a message.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, JSONBody, QueryParameter
from sqlalchemy import delete as sql_delete
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.analysis import FailureOut, failures
from api_service.common import (
    LimitParam,
    Name,
    OffsetParam,
    Page,
    Services,
    ServicesDep,
    SessionDep,
    paginate,
)
from api_service.errors import InvalidInputError, ServiceUnavailableError
from api_service.metrics import MetricsSummary, RunFilter, load_records, require_batch, summary_of
from api_service.test_runs import API_KEY_HEADER, ModelConfig, check_model_config
from shared.crypto import seal
from shared.db.tables import ModelSettings, TestBatch, TestCase, TestRun
from shared.messaging import PublishError, publish_run

log = logging.getLogger("mcpeval.api")

PUBLISH_CONCURRENCY = 64
NOT_QUEUED = "not queued: the work queue failed while the batch was being published"


class BatchBody(msgspec.Struct, forbid_unknown_fields=True):
    model_configs: Annotated[list[ModelConfig], msgspec.Meta(min_length=1, max_length=20)]
    test_case_ids: list[uuid.UUID] | Literal["all"] = "all"
    repeats: Annotated[int, msgspec.Meta(ge=1, le=20)] = 1
    name: Name | None = None


class BatchAccepted(msgspec.Struct):
    batch_id: uuid.UUID
    run_count: int
    test_case_count: int
    model_count: int
    repeats: int


class BatchProgress(msgspec.Struct):
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0


class BatchOut(msgspec.Struct):
    id: uuid.UUID
    name: str | None
    created_at: datetime
    repeats: int
    test_case_count: int
    model_count: int
    run_count: int
    progress: BatchProgress
    done: bool
    summary: MetricsSummary | None = None


def key_for(request: Request[Any, Any, Any], provider: str) -> str | None:
    """`X-Model-API-Key-<provider>` when given, else `X-Model-API-Key` (header names are case-insensitive)."""
    return request.headers.get(f"{API_KEY_HEADER}-{provider}") or request.headers.get(API_KEY_HEADER) or None


async def _case_ids(session: AsyncSession, wanted: list[uuid.UUID] | Literal["all"]) -> list[uuid.UUID]:
    if wanted == "all":
        ids = list(
            (await session.scalars(select(TestCase.id).order_by(TestCase.created_at, TestCase.id))).all()
        )
        if not ids:
            raise InvalidInputError("test_case_ids", "there are no test cases to run")
        return ids
    unique = list(dict.fromkeys(wanted))
    if not unique:
        raise InvalidInputError("test_case_ids", 'give at least one test case id, or "all"')
    found = set((await session.scalars(select(TestCase.id).where(TestCase.id.in_(unique)))).all())
    missing = [str(i) for i in unique if i not in found]
    if missing:
        raise InvalidInputError("test_case_ids", f"no test case with id {', '.join(missing[:10])}")
    return unique


async def _publish_all(services: Services, runs: list[tuple[uuid.UUID, str | None]]) -> set[uuid.UUID]:
    """Publish each (run id, api key) with bounded concurrency; stop at the first failure. Returns the ids
    JetStream confirmed."""
    published: set[uuid.UUID] = set()
    failed = asyncio.Event()
    gate = asyncio.Semaphore(PUBLISH_CONCURRENCY)
    ttl = services.settings.key_ttl_seconds

    async def one(run_id: uuid.UUID, api_key: str | None) -> None:
        async with gate:
            if failed.is_set():
                return
            sealed = seal(services.service_key, str(run_id), api_key, ttl) if api_key else None
            try:
                await publish_run(services.js, str(run_id), sealed)
            except PublishError:
                failed.set()
                return
            published.add(run_id)

    await asyncio.gather(*(one(run_id, key) for run_id, key in runs))
    return published


async def _batch_out(
    session: AsyncSession, services: Services, batch: TestBatch, with_summary: bool = True
) -> BatchOut:
    counts = dict(
        (
            await session.execute(
                select(TestRun.status, func.count())
                .where(TestRun.batch_id == batch.id)
                .group_by(TestRun.status)
            )
        ).all()
    )
    progress = BatchProgress(**{str(k): int(v) for k, v in counts.items()})
    done = progress.pending == 0 and progress.running == 0
    summary = None
    if done and with_summary:
        records = await load_records(session, RunFilter(batch_id=batch.id))
        summary = summary_of(records, "model", services.settings.price_table())
    return BatchOut(
        id=batch.id,
        name=batch.name,
        created_at=batch.created_at,
        repeats=batch.repeats,
        test_case_count=batch.test_case_count,
        model_count=batch.model_count,
        run_count=batch.run_count,
        progress=progress,
        done=done,
        summary=summary,
    )


class BatchController(Controller):
    path = "/test-runs/batch"
    tags = ["test-runs"]

    @post(
        "/",
        status_code=202,
        summary="Queue every test case x every model config x repeats as runs (202 with the batch id)",
    )
    async def create(
        self,
        data: JSONBody[BatchBody],
        request: Request[Any, Any, Any],
        session: SessionDep,
        services: ServicesDep,
    ) -> Response[BatchAccepted]:
        keys = []
        for index, config in enumerate(data.model_configs):
            api_key = key_for(request, config.provider)
            try:
                check_model_config(config, api_key)
            except InvalidInputError as exc:
                raise InvalidInputError(f"model_configs[{index}]", exc.detail) from None
            keys.append(api_key)
        case_ids = await _case_ids(session, data.test_case_ids)
        total = len(case_ids) * len(data.model_configs) * data.repeats
        limit = services.settings.max_batch_runs
        if total > limit:
            raise InvalidInputError(
                "body",
                f"{total} runs ({len(case_ids)} cases x {len(data.model_configs)} models x "
                f"{data.repeats} repeats) exceed the limit of {limit} runs per batch",
            )
        batch = TestBatch(
            name=data.name,
            repeats=data.repeats,
            test_case_count=len(case_ids),
            model_count=len(data.model_configs),
            run_count=total,
        )
        session.add(batch)
        settings_rows = [c.to_row() for c in data.model_configs]
        session.add_all(settings_rows)
        await session.flush()
        # Repeat-major order: every model makes progress on every case from the start.
        values = [
            {"test_case_id": case_id, "model_settings_id": row.id, "status": "pending", "batch_id": batch.id}
            for _ in range(data.repeats)
            for case_id in case_ids
            for row in settings_rows
        ]
        run_ids = list(
            (
                await session.scalars(
                    insert(TestRun).returning(TestRun.id, sort_by_parameter_order=True), values
                )
            ).all()
        )
        await session.commit()
        run_keys = [keys[i] for _ in range(data.repeats) for _ in case_ids for i in range(len(settings_rows))]
        pairs = list(zip(run_ids, run_keys, strict=True))
        published = await _publish_all(services, pairs)
        if len(published) < len(run_ids):
            await self._undo(session, batch.id, [r.id for r in settings_rows], run_ids, published)
            raise ServiceUnavailableError(
                f"the work queue is unavailable: {len(run_ids) - len(published)} of {len(run_ids)} runs "
                + ("were marked failed" if published else "were not created")
            )
        return Response(
            BatchAccepted(
                batch_id=batch.id,
                run_count=total,
                test_case_count=len(case_ids),
                model_count=len(settings_rows),
                repeats=data.repeats,
            ),
            status_code=202,
        )

    @staticmethod
    async def _undo(
        session: AsyncSession,
        batch_id: uuid.UUID,
        settings_ids: list[uuid.UUID],
        run_ids: list[uuid.UUID],
        published: set[uuid.UUID],
    ) -> None:
        """No orphans: remove a batch nothing of which was queued, else fail the runs that were not."""
        if not published:
            await session.execute(sql_delete(TestBatch).where(TestBatch.id == batch_id))
            await session.execute(sql_delete(ModelSettings).where(ModelSettings.id.in_(settings_ids)))
        else:
            unpublished = [r for r in run_ids if r not in published]
            await session.execute(
                update(TestRun)
                .where(TestRun.id.in_(unpublished), TestRun.status == "pending")
                .values(status="failed", error_message=NOT_QUEUED, completed_at=func.now())
            )
        await session.commit()
        log.warning("batch %s: publishing failed after %d of %d runs", batch_id, len(published), len(run_ids))

    @get("/", summary="List batches, newest first")
    async def list_batches(
        self,
        session: SessionDep,
        services: ServicesDep,
        limit: Annotated[LimitParam, QueryParameter()] = 50,
        offset: Annotated[OffsetParam, QueryParameter()] = 0,
    ) -> Page[BatchOut]:
        query = select(TestBatch).order_by(TestBatch.created_at.desc(), TestBatch.id)
        rows, total = await paginate(session, query, limit, offset)
        # The list stays light: GET one batch for its summary.
        items = [await _batch_out(session, services, row, with_summary=False) for row in rows]
        return Page(items=items, total=total, limit=limit, offset=offset)

    @get("/{batch_id:uuid}", summary="Progress of a batch and, once every run has finished, its summary")
    async def get_one(
        self, batch_id: FromPath[uuid.UUID], session: SessionDep, services: ServicesDep
    ) -> BatchOut:
        return await _batch_out(session, services, await require_batch(session, batch_id))

    @get("/{batch_id:uuid}/failures", summary="The runs of a batch that did not pass, with their reasoning")
    async def failures(
        self,
        batch_id: FromPath[uuid.UUID],
        session: SessionDep,
        limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 500,
    ) -> list[FailureOut]:
        await require_batch(session, batch_id)
        return failures(await load_records(session, RunFilter(batch_id=batch_id)), limit)
