"""test batches: table test_batches and the nullable test_runs.batch_id (runs queued together)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "test_batches",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("test_case_count", sa.Integer(), nullable=False),
        sa.Column("model_count", sa.Integer(), nullable=False),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("repeats BETWEEN 1 AND 20", name=op.f("ck_test_batches_repeats_range")),
        sa.CheckConstraint("test_case_count >= 1", name=op.f("ck_test_batches_test_case_count_positive")),
        sa.CheckConstraint("model_count >= 1", name=op.f("ck_test_batches_model_count_positive")),
        sa.CheckConstraint("run_count >= 1", name=op.f("ck_test_batches_run_count_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_test_batches")),
    )
    op.create_index(op.f("ix_test_batches_created_at"), "test_batches", ["created_at"], unique=False)
    op.add_column("test_runs", sa.Column("batch_id", sa.UUID(), nullable=True))
    op.create_foreign_key(
        op.f("fk_test_runs_batch_id_test_batches"),
        "test_runs",
        "test_batches",
        ["batch_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_index(op.f("ix_test_runs_batch_id"), "test_runs", ["batch_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_test_runs_batch_id"), table_name="test_runs")
    op.drop_constraint(op.f("fk_test_runs_batch_id_test_batches"), "test_runs", type_="foreignkey")
    op.drop_column("test_runs", "batch_id")
    op.drop_index(op.f("ix_test_batches_created_at"), table_name="test_batches")
    op.drop_table("test_batches")
