"""The seed schema (seeds/000) as SQLAlchemy 2.0 typed models.

Deliberate resolutions of the seed, each documented in the README's schema section:
- ids are native UUIDs, JSON columns are jsonb, 0/1 integers are booleans, timestamps carry a time zone;
- `expected_mcp_server_name` / `expected_tool_name` are NULL together ("no tool expected") or both non-empty;
- `test_runs.selected_tool_id` is ON DELETE SET NULL: deleting one snapshot row must not delete the run;
- additions: mcp_servers.last_error/last_checked_at, model_settings.base_url/system_prompt/samples/explain,
  test_runs.attempt/started_at/worker_id (the delivery fence and progress);
- addition (migration 0002): table test_batches and the nullable test_runs.batch_id (runs queued together).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    REAL,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column, relationship

from shared.db.base import Base

SERVER_STATUSES = ("active", "failed", "inactive")
TRANSPORTS = ("sse", "streamable-http")
RUN_STATUSES = ("pending", "running", "completed", "failed")
CLASSIFICATIONS = ("TP", "FP", "TN", "FN")
CONFIDENCE_CATEGORIES = ("robust", "needs_clarity", "misleading")

# Tables whose updated_at a trigger keeps current (seed "Triggers").
UPDATED_AT_TABLES = ("mcp_servers", "test_cases", "tool_definitions")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _uuid_pk() -> Mapped[uuid.UUID]:
    return mapped_column(UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()"))


def _created_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


def _updated_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class McpServer(Base):
    __tablename__ = "mcp_servers"
    __table_args__ = (
        CheckConstraint("name <> ''", name="name_not_empty"),
        CheckConstraint("url <> ''", name="url_not_empty"),
        CheckConstraint(_in("transport", TRANSPORTS), name="transport"),
        CheckConstraint(_in("status", SERVER_STATUSES), name="status"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    url: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    transport: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="inactive")
    last_connected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class ToolDefinition(Base):
    __tablename__ = "tool_definitions"
    __table_args__ = (CheckConstraint("name <> ''", name="name_not_empty"),)

    id: Mapped[uuid.UUID] = _uuid_pk()
    name: Mapped[str] = mapped_column(Text, nullable=False, index=True)
    description: Mapped[str] = mapped_column(Text, nullable=False)
    input_schema: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    output_schema: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    mcp_server_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("mcp_servers.id", ondelete="CASCADE"), nullable=False, index=True
    )
    test_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("test_runs.id", ondelete="CASCADE"), nullable=False, index=True
    )
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()

    server: Mapped[McpServer] = relationship(lazy="raise")


class TestCaseMcpServer(Base):
    __tablename__ = "test_case_mcp_servers"

    test_case_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("test_cases.id", ondelete="CASCADE"), primary_key=True
    )
    mcp_server_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("mcp_servers.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class TestCase(Base):
    __tablename__ = "test_cases"
    __table_args__ = (
        CheckConstraint("name <> ''", name="name_not_empty"),
        CheckConstraint("char_length(query) BETWEEN 1 AND 8000", name="query_length"),
        CheckConstraint(
            "(expected_mcp_server_name IS NULL) = (expected_tool_name IS NULL)", name="expected_pair"
        ),
        CheckConstraint("expected_mcp_server_name <> ''", name="expected_server_not_empty"),
        CheckConstraint("expected_tool_name <> ''", name="expected_tool_not_empty"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    name: Mapped[str] = mapped_column(Text, nullable=False)
    query: Mapped[str] = mapped_column(Text, nullable=False)
    expected_mcp_server_name: Mapped[str | None] = mapped_column(Text, index=True)
    expected_tool_name: Mapped[str | None] = mapped_column(Text, index=True)
    expected_parameters: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()

    servers: Mapped[list[McpServer]] = relationship(
        secondary="test_case_mcp_servers", lazy="selectin", order_by=McpServer.name
    )


class ModelSettings(Base):
    __tablename__ = "model_settings"
    __table_args__ = (
        CheckConstraint("char_length(provider) BETWEEN 1 AND 100", name="provider_length"),
        CheckConstraint("char_length(model) BETWEEN 1 AND 100", name="model_length"),
        CheckConstraint("timeout BETWEEN 1 AND 300", name="timeout_range"),
        CheckConstraint("temperature BETWEEN 0.0 AND 2.0", name="temperature_range"),
        CheckConstraint("max_retries BETWEEN 0 AND 10", name="max_retries_range"),
        CheckConstraint("samples BETWEEN 1 AND 20", name="samples_range"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    provider: Mapped[str] = mapped_column(Text, nullable=False)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    timeout: Mapped[int] = mapped_column(Integer, nullable=False, server_default="30")
    temperature: Mapped[float] = mapped_column(REAL, nullable=False, server_default="0.4")
    max_retries: Mapped[int] = mapped_column(Integer, nullable=False, server_default="3")
    base_url: Mapped[str | None] = mapped_column(Text)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    samples: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    explain: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    created_at: Mapped[datetime] = _created_at()


class TestBatch(Base):
    """Runs queued together by `POST /test-runs/batch`: every case x every model x `repeats`."""

    __tablename__ = "test_batches"
    __table_args__ = (
        CheckConstraint("repeats BETWEEN 1 AND 20", name="repeats_range"),
        CheckConstraint("test_case_count >= 1", name="test_case_count_positive"),
        CheckConstraint("model_count >= 1", name="model_count_positive"),
        CheckConstraint("run_count >= 1", name="run_count_positive"),
        Index(None, "created_at"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    name: Mapped[str | None] = mapped_column(Text)
    repeats: Mapped[int] = mapped_column(Integer, nullable=False)
    test_case_count: Mapped[int] = mapped_column(Integer, nullable=False)
    model_count: Mapped[int] = mapped_column(Integer, nullable=False)
    run_count: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = _created_at()


class TestRun(Base):
    __tablename__ = "test_runs"
    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="status"),
        CheckConstraint("confidence_score BETWEEN 0.0 AND 1.0", name="confidence_range"),
        CheckConstraint(_in("classification", CLASSIFICATIONS), name="classification"),
        CheckConstraint("execution_time_ms > 0", name="execution_time_positive"),
        CheckConstraint("attempt >= 0", name="attempt_non_negative"),
        Index(None, "created_at"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    test_case_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("test_cases.id", ondelete="CASCADE"), nullable=False, index=True
    )
    model_settings_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("model_settings.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="pending", index=True)
    llm_response_raw: Mapped[Any | None] = mapped_column(JSONB)
    selected_tool_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("tool_definitions.id", ondelete="SET NULL", use_alter=True)
    )
    extracted_parameters: Mapped[Any | None] = mapped_column(JSONB)
    confidence_score: Mapped[float | None] = mapped_column(REAL)
    classification: Mapped[str | None] = mapped_column(Text)
    execution_time_ms: Mapped[int | None] = mapped_column(Integer)
    error_message: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    worker_id: Mapped[str | None] = mapped_column(Text)
    batch_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("test_batches.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = _created_at()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    model_settings: Mapped[ModelSettings | None] = relationship(lazy="raise")


class EvaluationResult(Base):
    __tablename__ = "evaluation_results"
    __table_args__ = (
        CheckConstraint(_in("classification", CLASSIFICATIONS), name="classification"),
        CheckConstraint("parameter_completeness BETWEEN 0.0 AND 1.0", name="completeness_range"),
        CheckConstraint("parameter_correctness BETWEEN 0.0 AND 1.0", name="correctness_range"),
        CheckConstraint(_in("confidence_category", CONFIDENCE_CATEGORIES), name="confidence_category"),
    )

    id: Mapped[uuid.UUID] = _uuid_pk()
    test_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("test_runs.id", ondelete="CASCADE"), nullable=False, unique=True
    )
    classification: Mapped[str] = mapped_column(Text, nullable=False)
    tool_selection_correct: Mapped[bool] = mapped_column(Boolean, nullable=False)
    parameter_completeness: Mapped[float] = mapped_column(REAL, nullable=False)
    parameter_correctness: Mapped[float] = mapped_column(REAL, nullable=False)
    parameter_type_conformance: Mapped[bool] = mapped_column(Boolean, nullable=False)
    hallucinated_parameters: Mapped[list[str] | None] = mapped_column(JSONB)
    confidence_category: Mapped[str | None] = mapped_column(Text)
    reasoning: Mapped[str] = mapped_column(Text, nullable=False)
    recommendations: Mapped[list[Any]] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = _created_at()
