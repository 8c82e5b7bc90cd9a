"""initial seed schema: the seven seed tables, their constraints, indexes and updated_at triggers

Revision ID: 0001
Revises:
Create Date: 2026-11-23 00:32:35.317986
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Frozen here, not imported from the models: a migration must not change when the models do.
UPDATED_AT_TABLES = ("mcp_servers", "test_cases", "tool_definitions")

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("transport", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="inactive", nullable=False),
        sa.Column("last_connected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("name <> ''", name=op.f("ck_mcp_servers_name_not_empty")),
        sa.CheckConstraint("status IN ('active', 'failed', 'inactive')", name=op.f("ck_mcp_servers_status")),
        sa.CheckConstraint("transport IN ('sse', 'streamable-http')", name=op.f("ck_mcp_servers_transport")),
        sa.CheckConstraint("url <> ''", name=op.f("ck_mcp_servers_url_not_empty")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mcp_servers")),
        sa.UniqueConstraint("name", name=op.f("uq_mcp_servers_name")),
        sa.UniqueConstraint("url", name=op.f("uq_mcp_servers_url")),
    )
    op.create_table(
        "model_settings",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("timeout", sa.Integer(), server_default="30", nullable=False),
        sa.Column("temperature", sa.Float(precision=24), server_default="0.4", nullable=False),
        sa.Column("max_retries", sa.Integer(), server_default="3", nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("system_prompt", sa.Text(), nullable=True),
        sa.Column("samples", sa.Integer(), server_default="1", nullable=False),
        sa.Column("explain", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "char_length(model) BETWEEN 1 AND 100", name=op.f("ck_model_settings_model_length")
        ),
        sa.CheckConstraint(
            "char_length(provider) BETWEEN 1 AND 100", name=op.f("ck_model_settings_provider_length")
        ),
        sa.CheckConstraint("max_retries BETWEEN 0 AND 10", name=op.f("ck_model_settings_max_retries_range")),
        sa.CheckConstraint("samples BETWEEN 1 AND 20", name=op.f("ck_model_settings_samples_range")),
        sa.CheckConstraint(
            "temperature BETWEEN 0.0 AND 2.0", name=op.f("ck_model_settings_temperature_range")
        ),
        sa.CheckConstraint("timeout BETWEEN 1 AND 300", name=op.f("ck_model_settings_timeout_range")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_settings")),
    )
    op.create_table(
        "test_cases",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("expected_mcp_server_name", sa.Text(), nullable=True),
        sa.Column("expected_tool_name", sa.Text(), nullable=True),
        sa.Column("expected_parameters", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "expected_mcp_server_name <> ''", name=op.f("ck_test_cases_expected_server_not_empty")
        ),
        sa.CheckConstraint("expected_tool_name <> ''", name=op.f("ck_test_cases_expected_tool_not_empty")),
        sa.CheckConstraint("name <> ''", name=op.f("ck_test_cases_name_not_empty")),
        sa.CheckConstraint(
            "(expected_mcp_server_name IS NULL) = (expected_tool_name IS NULL)",
            name=op.f("ck_test_cases_expected_pair"),
        ),
        sa.CheckConstraint("char_length(query) BETWEEN 1 AND 8000", name=op.f("ck_test_cases_query_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_test_cases")),
    )
    op.create_index(
        op.f("ix_test_cases_expected_mcp_server_name"),
        "test_cases",
        ["expected_mcp_server_name"],
        unique=False,
    )
    op.create_index(
        op.f("ix_test_cases_expected_tool_name"), "test_cases", ["expected_tool_name"], unique=False
    )
    op.create_table(
        "test_case_mcp_servers",
        sa.Column("test_case_id", sa.UUID(), nullable=False),
        sa.Column("mcp_server_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(
            ["mcp_server_id"],
            ["mcp_servers.id"],
            name=op.f("fk_test_case_mcp_servers_mcp_server_id_mcp_servers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["test_case_id"],
            ["test_cases.id"],
            name=op.f("fk_test_case_mcp_servers_test_case_id_test_cases"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("test_case_id", "mcp_server_id", name=op.f("pk_test_case_mcp_servers")),
    )
    op.create_index(
        op.f("ix_test_case_mcp_servers_mcp_server_id"),
        "test_case_mcp_servers",
        ["mcp_server_id"],
        unique=False,
    )
    op.create_table(
        "test_runs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("test_case_id", sa.UUID(), nullable=False),
        sa.Column("model_settings_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("llm_response_raw", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("selected_tool_id", sa.UUID(), nullable=True),
        sa.Column("extracted_parameters", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("confidence_score", sa.Float(precision=24), nullable=True),
        sa.Column("classification", sa.Text(), nullable=True),
        sa.Column("execution_time_ms", sa.Integer(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), server_default="0", nullable=False),
        sa.Column("worker_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "classification IN ('TP', 'FP', 'TN', 'FN')", name=op.f("ck_test_runs_classification")
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed')", name=op.f("ck_test_runs_status")
        ),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_test_runs_attempt_non_negative")),
        sa.CheckConstraint(
            "confidence_score BETWEEN 0.0 AND 1.0", name=op.f("ck_test_runs_confidence_range")
        ),
        sa.CheckConstraint("execution_time_ms > 0", name=op.f("ck_test_runs_execution_time_positive")),
        sa.ForeignKeyConstraint(
            ["model_settings_id"],
            ["model_settings.id"],
            name=op.f("fk_test_runs_model_settings_id_model_settings"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["test_case_id"],
            ["test_cases.id"],
            name=op.f("fk_test_runs_test_case_id_test_cases"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_test_runs")),
    )
    op.create_index(op.f("ix_test_runs_created_at"), "test_runs", ["created_at"], unique=False)
    op.create_index(op.f("ix_test_runs_model_settings_id"), "test_runs", ["model_settings_id"], unique=False)
    op.create_index(op.f("ix_test_runs_status"), "test_runs", ["status"], unique=False)
    op.create_index(op.f("ix_test_runs_test_case_id"), "test_runs", ["test_case_id"], unique=False)
    op.create_table(
        "evaluation_results",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("test_run_id", sa.UUID(), nullable=False),
        sa.Column("classification", sa.Text(), nullable=False),
        sa.Column("tool_selection_correct", sa.Boolean(), nullable=False),
        sa.Column("parameter_completeness", sa.Float(precision=24), nullable=False),
        sa.Column("parameter_correctness", sa.Float(precision=24), nullable=False),
        sa.Column("parameter_type_conformance", sa.Boolean(), nullable=False),
        sa.Column("hallucinated_parameters", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("confidence_category", sa.Text(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=False),
        sa.Column("recommendations", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "classification IN ('TP', 'FP', 'TN', 'FN')", name=op.f("ck_evaluation_results_classification")
        ),
        sa.CheckConstraint(
            "confidence_category IN ('robust', 'needs_clarity', 'misleading')",
            name=op.f("ck_evaluation_results_confidence_category"),
        ),
        sa.CheckConstraint(
            "parameter_completeness BETWEEN 0.0 AND 1.0",
            name=op.f("ck_evaluation_results_completeness_range"),
        ),
        sa.CheckConstraint(
            "parameter_correctness BETWEEN 0.0 AND 1.0", name=op.f("ck_evaluation_results_correctness_range")
        ),
        sa.ForeignKeyConstraint(
            ["test_run_id"],
            ["test_runs.id"],
            name=op.f("fk_evaluation_results_test_run_id_test_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation_results")),
        sa.UniqueConstraint("test_run_id", name=op.f("uq_evaluation_results_test_run_id")),
    )
    op.create_table(
        "tool_definitions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("input_schema", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("output_schema", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("mcp_server_id", sa.UUID(), nullable=False),
        sa.Column("test_run_id", sa.UUID(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("name <> ''", name=op.f("ck_tool_definitions_name_not_empty")),
        sa.ForeignKeyConstraint(
            ["mcp_server_id"],
            ["mcp_servers.id"],
            name=op.f("fk_tool_definitions_mcp_server_id_mcp_servers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["test_run_id"],
            ["test_runs.id"],
            name=op.f("fk_tool_definitions_test_run_id_test_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_definitions")),
    )
    op.create_index(
        op.f("ix_tool_definitions_mcp_server_id"), "tool_definitions", ["mcp_server_id"], unique=False
    )
    op.create_index(op.f("ix_tool_definitions_name"), "tool_definitions", ["name"], unique=False)
    op.create_index(
        op.f("ix_tool_definitions_test_run_id"), "tool_definitions", ["test_run_id"], unique=False
    )
    # test_runs and tool_definitions reference each other: this side is added once both exist.
    op.create_foreign_key(
        op.f("fk_test_runs_selected_tool_id_tool_definitions"),
        "test_runs",
        "tool_definitions",
        ["selected_tool_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.execute(
        """
        CREATE FUNCTION set_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.updated_at = now();
            RETURN NEW;
        END;
        $$
        """
    )
    for table in UPDATED_AT_TABLES:
        op.execute(
            f"CREATE TRIGGER trg_{table}_updated_at BEFORE UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION set_updated_at()"
        )


def downgrade() -> None:
    for table in UPDATED_AT_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_updated_at ON {table}")
    op.execute("DROP FUNCTION IF EXISTS set_updated_at()")
    op.drop_constraint(
        op.f("fk_test_runs_selected_tool_id_tool_definitions"), "test_runs", type_="foreignkey"
    )
    op.drop_index(op.f("ix_tool_definitions_test_run_id"), table_name="tool_definitions")
    op.drop_index(op.f("ix_tool_definitions_name"), table_name="tool_definitions")
    op.drop_index(op.f("ix_tool_definitions_mcp_server_id"), table_name="tool_definitions")
    op.drop_table("tool_definitions")
    op.drop_table("evaluation_results")
    op.drop_index(op.f("ix_test_runs_test_case_id"), table_name="test_runs")
    op.drop_index(op.f("ix_test_runs_status"), table_name="test_runs")
    op.drop_index(op.f("ix_test_runs_model_settings_id"), table_name="test_runs")
    op.drop_index(op.f("ix_test_runs_created_at"), table_name="test_runs")
    op.drop_table("test_runs")
    op.drop_index(op.f("ix_test_case_mcp_servers_mcp_server_id"), table_name="test_case_mcp_servers")
    op.drop_table("test_case_mcp_servers")
    op.drop_index(op.f("ix_test_cases_expected_tool_name"), table_name="test_cases")
    op.drop_index(op.f("ix_test_cases_expected_mcp_server_name"), table_name="test_cases")
    op.drop_table("test_cases")
    op.drop_table("model_settings")
    op.drop_table("mcp_servers")
