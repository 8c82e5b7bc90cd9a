"""/metrics: the summary (seed fields + filters, groups, intervals, pass^k, calibration, cost), the confusion
matrix and the model comparison. SQL loads `RunRecord`s; `api_service.analysis` computes everything else."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

import msgspec
from litestar import Controller, get
from litestar.params import QueryParameter
from sqlalchemy import ColumnElement, Integer, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from api_service.analysis import (
    CompareOut,
    ConfusionOut,
    GroupMetrics,
    RunRecord,
    compare,
    confusion,
    group_metrics,
    grouped_metrics,
)
from api_service.common import ServicesDep, SessionDep
from api_service.errors import InvalidInputError, NotFoundError
from shared.db.tables import (
    EvaluationResult,
    McpServer,
    ModelSettings,
    TestBatch,
    TestCase,
    TestCaseMcpServer,
    TestRun,
    ToolDefinition,
)

GroupBy = Literal["model", "test_case", "tool", "server"]


class ConfidenceDistribution(msgspec.Struct):
    robust: int = 0
    needs_clarity: int = 0
    misleading: int = 0
    unrated: int = 0


class MetricsSummary(msgspec.Struct):
    total_tests: int
    true_positives: int
    false_positives: int
    true_negatives: int
    false_negatives: int
    precision: float | None
    recall: float | None
    f1_score: float | None
    accuracy: float | None
    parameter_accuracy: float | None
    average_execution_time_ms: float | None
    confidence_distribution: ConfidenceDistribution
    failed_runs: int
    overall: GroupMetrics | None = None
    group_by: str | None = None
    groups: list[GroupMetrics] = msgspec.field(default_factory=list)


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator/denominator rounded to 4 places, or None when undefined (no evidence is not zero)."""
    return None if denominator == 0 else round(numerator / denominator, 4)


def summarise(
    counts: dict[str, int],
    parameter_accuracy: float | None,
    average_ms: float | None,
    categories: dict[str | None, int],
    failed_runs: int,
) -> MetricsSummary:
    """The README's formulas: precision TP/(TP+FP), recall TP/(TP+FN), F1 their harmonic mean,
    accuracy (TP+TN)/total; parameter accuracy = mean parameter correctness over TP runs."""
    tp, fp, tn, fn = (counts.get(k, 0) for k in ("TP", "FP", "TN", "FN"))
    precision = ratio(tp, tp + fp)
    recall = ratio(tp, tp + fn)
    f1 = (
        None
        if precision is None or recall is None
        else ratio(2 * precision * recall, precision + recall) or 0.0
    )
    return MetricsSummary(
        total_tests=tp + fp + tn + fn,
        true_positives=tp,
        false_positives=fp,
        true_negatives=tn,
        false_negatives=fn,
        precision=precision,
        recall=recall,
        f1_score=f1,
        accuracy=ratio(tp + tn, tp + fp + tn + fn),
        parameter_accuracy=None if parameter_accuracy is None else round(parameter_accuracy, 4),
        average_execution_time_ms=None if average_ms is None else round(average_ms, 1),
        confidence_distribution=ConfidenceDistribution(
            robust=categories.get("robust", 0),
            needs_clarity=categories.get("needs_clarity", 0),
            misleading=categories.get("misleading", 0),
            unrated=categories.get(None, 0),
        ),
        failed_runs=failed_runs,
    )


class RunFilter(msgspec.Struct, frozen=True):
    """Which finished runs the metrics cover; every field narrows the selection."""

    test_case_ids: tuple[uuid.UUID, ...] | None = None
    from_date: datetime | None = None
    to_date: datetime | None = None
    batch_id: uuid.UUID | None = None
    provider: str | None = None
    model: str | None = None
    mcp_server_name: str | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = [TestRun.status.in_(("completed", "failed"))]
        if self.test_case_ids is not None:
            out.append(TestRun.test_case_id.in_(self.test_case_ids))
        if self.from_date is not None:
            out.append(TestRun.created_at >= self.from_date)
        if self.to_date is not None:
            out.append(TestRun.created_at <= self.to_date)
        if self.batch_id is not None:
            out.append(TestRun.batch_id == self.batch_id)
        if self.provider is not None:
            out.append(ModelSettings.provider == self.provider)
        if self.model is not None:
            out.append(ModelSettings.model == self.model)
        if self.mcp_server_name is not None:
            # Runs whose case offered this server (whatever it expected).
            offered = (
                select(TestCaseMcpServer.test_case_id)
                .join(McpServer, McpServer.id == TestCaseMcpServer.mcp_server_id)
                .where(McpServer.name == self.mcp_server_name)
            )
            out.append(TestRun.test_case_id.in_(offered))
        return out


def parse_case_ids(raw: str | None) -> tuple[uuid.UUID, ...] | None:
    if not raw:
        return None
    try:
        return tuple(uuid.UUID(part.strip()) for part in raw.split(",") if part.strip())
    except ValueError:
        raise InvalidInputError("test_case_ids", "a comma-separated list of UUIDs") from None


async def load_records(session: AsyncSession, where: RunFilter) -> list[RunRecord]:
    """One row per finished run matching the filter, with its case, model, choice and evaluation."""
    selected_server = aliased(McpServer)
    usage = TestRun.llm_response_raw["usage"]
    query = (
        select(
            TestRun.id,
            TestRun.test_case_id,
            TestCase.name,
            TestCase.query,
            ModelSettings.provider,
            ModelSettings.model,
            TestRun.status,
            TestRun.classification,
            TestRun.confidence_score,
            TestRun.execution_time_ms,
            usage["prompt_tokens"].as_integer().cast(Integer),
            usage["completion_tokens"].as_integer().cast(Integer),
            TestCase.expected_mcp_server_name,
            TestCase.expected_tool_name,
            selected_server.name,
            ToolDefinition.name,
            EvaluationResult.parameter_correctness,
            EvaluationResult.confidence_category,
            EvaluationResult.reasoning,
            TestRun.error_message,
            TestRun.batch_id,
            TestRun.created_at,
        )
        .join(TestCase, TestCase.id == TestRun.test_case_id)
        .outerjoin(ModelSettings, ModelSettings.id == TestRun.model_settings_id)
        .outerjoin(ToolDefinition, ToolDefinition.id == TestRun.selected_tool_id)
        .outerjoin(selected_server, selected_server.id == ToolDefinition.mcp_server_id)
        .outerjoin(EvaluationResult, EvaluationResult.test_run_id == TestRun.id)
        .where(*where.conditions())
        .order_by(TestRun.created_at, TestRun.id)
    )
    rows = (await session.execute(query)).all()
    return [
        RunRecord(
            run_id=row[0],
            test_case_id=row[1],
            test_case_name=row[2],
            query=row[3],
            provider=row[4] or "(unknown)",
            model=row[5] or "(unknown)",
            status=row[6],
            classification=row[7],
            confidence_score=row[8],
            execution_time_ms=row[9],
            prompt_tokens=row[10],
            completion_tokens=row[11],
            expected_server=row[12],
            expected_tool=row[13],
            selected_server=row[14],
            selected_tool=row[15],
            parameter_correctness=row[16],
            confidence_category=row[17],
            reasoning=row[18],
            error_message=row[19],
            batch_id=row[20],
            created_at=row[21],
        )
        for row in rows
    ]


def summary_of(
    records: Sequence[RunRecord], group_by: str | None, prices: dict[str, tuple[float, float]]
) -> MetricsSummary:
    """The seed fields (via `summarise`) plus the overall group and, with `group_by`, one group per key."""
    completed = [r for r in records if r.status == "completed"]
    counts = Counter(r.classification for r in completed if r.classification)
    tp_params = [r.parameter_correctness for r in completed if r.classification == "TP"]
    evaluated = [r for r in completed if r.reasoning is not None]
    times = [r.execution_time_ms for r in completed if r.execution_time_ms is not None]
    out = summarise(
        {str(k): v for k, v in counts.items()},
        sum(p or 0.0 for p in tp_params) / len(tp_params) if tp_params else None,
        sum(times) / len(times) if times else None,
        dict(Counter(r.confidence_category for r in evaluated)),
        sum(1 for r in records if r.status == "failed"),
    )
    out.overall = group_metrics("all", records, prices)
    if group_by is not None:
        out.group_by = group_by
        out.groups = grouped_metrics(records, group_by, prices)
    return out


async def require_batch(session: AsyncSession, batch_id: uuid.UUID, field: str | None = None) -> TestBatch:
    """The batch, or 404 (naming the query parameter when the id came from one)."""
    batch = await session.get(TestBatch, batch_id)
    if batch is None:
        prefix = f"{field}: " if field else ""
        raise NotFoundError(f"{prefix}no test batch with id {batch_id}")
    return batch


class MetricsController(Controller):
    path = "/metrics"
    tags = ["metrics"]

    @get(
        "/summary",
        summary="Precision, recall, F1 (Wilson 95 % intervals), pass rate, pass^k, latency, tokens, cost and "
        "calibration over finished runs, optionally grouped",
    )
    async def summary(
        self,
        session: SessionDep,
        services: ServicesDep,
        test_case_ids: Annotated[str | None, QueryParameter(max_length=20_000)] = None,
        from_date: Annotated[datetime | None, QueryParameter()] = None,
        to_date: Annotated[datetime | None, QueryParameter()] = None,
        batch_id: Annotated[uuid.UUID | None, QueryParameter()] = None,
        provider: Annotated[str | None, QueryParameter(max_length=100)] = None,
        model: Annotated[str | None, QueryParameter(max_length=100)] = None,
        mcp_server_name: Annotated[str | None, QueryParameter(max_length=200)] = None,
        group_by: Annotated[GroupBy | None, QueryParameter()] = None,
    ) -> MetricsSummary:
        where = RunFilter(
            test_case_ids=parse_case_ids(test_case_ids),
            from_date=from_date,
            to_date=to_date,
            batch_id=batch_id,
            provider=provider,
            model=model,
            mcp_server_name=mcp_server_name,
        )
        records = await load_records(session, where)
        return summary_of(records, group_by, services.settings.price_table())

    @get("/confusion", summary="Expected tool x selected tool per expected server, and the worst confusions")
    async def confusion_matrix(
        self,
        session: SessionDep,
        batch_id: Annotated[uuid.UUID | None, QueryParameter()] = None,
        provider: Annotated[str | None, QueryParameter(max_length=100)] = None,
        model: Annotated[str | None, QueryParameter(max_length=100)] = None,
        mcp_server_name: Annotated[str | None, QueryParameter(max_length=200)] = None,
    ) -> ConfusionOut:
        where = RunFilter(batch_id=batch_id, provider=provider, model=model, mcp_server_name=mcp_server_name)
        return confusion(await load_records(session, where))

    @get(
        "/compare",
        summary="Per test case which model passed; each model against the baseline (and against another "
        "batch) with an exact McNemar p-value",
    )
    async def compare_models(
        self,
        session: SessionDep,
        batch_id: Annotated[uuid.UUID, QueryParameter()],
        baseline: Annotated[str | None, QueryParameter(max_length=100)] = None,
        other_batch_id: Annotated[uuid.UUID | None, QueryParameter()] = None,
    ) -> CompareOut:
        await require_batch(session, batch_id, "batch_id")
        records = await load_records(session, RunFilter(batch_id=batch_id))
        if baseline is not None and baseline not in {r.model for r in records}:
            raise InvalidInputError("baseline", f"no finished run of model {baseline!r} in this batch")
        other: list[RunRecord] = []
        if other_batch_id is not None:
            await require_batch(session, other_batch_id, "other_batch_id")
            other = await load_records(session, RunFilter(batch_id=other_batch_id))
        return compare(batch_id, records, baseline, other_batch_id, other)
