"""/metrics/summary: classification counts and the scores derived from them, over completed runs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import msgspec
from litestar import Controller, get
from litestar.params import QueryParameter
from sqlalchemy import ColumnElement, func, select

from api_service.common import SessionDep
from api_service.errors import InvalidInputError
from shared.db.tables import EvaluationResult, TestRun


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


class MetricsController(Controller):
    path = "/metrics"
    tags = ["metrics"]

    @get("/summary", summary="Precision, recall, F1, parameter accuracy and confidence over completed runs")
    async def summary(
        self,
        session: SessionDep,
        test_case_ids: Annotated[str | None, QueryParameter(max_length=20_000)] = None,
        from_date: Annotated[datetime | None, QueryParameter()] = None,
        to_date: Annotated[datetime | None, QueryParameter()] = None,
    ) -> MetricsSummary:
        conditions: list[ColumnElement[bool]] = []
        if test_case_ids:
            try:
                ids = [uuid.UUID(part.strip()) for part in test_case_ids.split(",") if part.strip()]
            except ValueError:
                raise InvalidInputError("test_case_ids", "a comma-separated list of UUIDs") from None
            conditions.append(TestRun.test_case_id.in_(ids))
        if from_date is not None:
            conditions.append(TestRun.created_at >= from_date)
        if to_date is not None:
            conditions.append(TestRun.created_at <= to_date)
        completed = [TestRun.status == "completed", *conditions]
        counts = dict(
            (
                await session.execute(
                    select(TestRun.classification, func.count())
                    .where(*completed)
                    .group_by(TestRun.classification)
                )
            )
            .tuples()
            .all()
        )
        parameter_accuracy = await session.scalar(
            select(func.avg(EvaluationResult.parameter_correctness))
            .join(TestRun, TestRun.id == EvaluationResult.test_run_id)
            .where(*completed, EvaluationResult.classification == "TP")
        )
        categories = dict(
            (
                await session.execute(
                    select(EvaluationResult.confidence_category, func.count())
                    .join(TestRun, TestRun.id == EvaluationResult.test_run_id)
                    .where(*completed)
                    .group_by(EvaluationResult.confidence_category)
                )
            )
            .tuples()
            .all()
        )
        average_ms = await session.scalar(select(func.avg(TestRun.execution_time_ms)).where(*completed))
        failed = await session.scalar(
            select(func.count()).select_from(TestRun).where(TestRun.status == "failed", *conditions)
        )
        return summarise(
            {str(k): int(v) for k, v in counts.items() if k},
            None if parameter_accuracy is None else float(parameter_accuracy),
            None if average_ms is None else float(average_ms),
            {k: int(v) for k, v in categories.items()},
            int(failed or 0),
        )
