"""The sweeper: runs whose message can no longer exist end `failed` with a reason; live ones are untouched."""

from __future__ import annotations

import msgspec
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.db.engine import make_sessionmaker
from shared.settings import Settings
from worker_service.main import sweep_once

pytestmark = pytest.mark.integration


async def _insert_run(
    engine: AsyncEngine, status: str, created_ago_s: int, attempt: int, started_ago_s: int
) -> str:
    """A run whose model settings say timeout 1 s, max_retries 0 (a short attempt bound)."""
    async with engine.begin() as conn:
        case_id = await conn.scalar(
            text("INSERT INTO test_cases (name, query) VALUES ('sweep', 'q') RETURNING id")
        )
        settings_id = await conn.scalar(
            text(
                "INSERT INTO model_settings (provider, model, timeout, max_retries) "
                "VALUES ('openai', 'm', 1, 0) RETURNING id"
            )
        )
        run_id = await conn.scalar(
            text(
                "INSERT INTO test_runs (test_case_id, model_settings_id, status, attempt, created_at, started_at) "
                "VALUES (:case, :settings, :status, :attempt, now() - make_interval(secs => :created), "
                " now() - make_interval(secs => :started)) RETURNING id"
            ),
            {
                "case": case_id,
                "settings": settings_id,
                "status": status,
                "attempt": attempt,
                "created": created_ago_s,
                "started": started_ago_s,
            },
        )
    return str(run_id)


async def _status(engine: AsyncEngine, run_id: str) -> tuple[str, str | None]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT status, error_message FROM test_runs WHERE id = :id"), {"id": run_id}
            )
        ).one()
    return str(row[0]), row[1]


async def test_sweeper_fails_expired_and_lost_runs_only(clean_db: AsyncEngine, settings: Settings) -> None:
    """Past the deadline, or running on its last delivery longer than that attempt could take: failed."""
    # The attempt bound here: 1 s x 1 try x 2 rounds + 3 x 1 s of MCP + 2 x 3 s of ack_wait = 11 s.
    swept_settings = msgspec.structs.replace(
        settings, run_deadline_seconds=600, ack_wait_seconds=3.0, max_deliver=3, mcp_timeout_seconds=1.0
    )
    expired_pending = await _insert_run(clean_db, "pending", created_ago_s=700, attempt=0, started_ago_s=700)
    lost_last_delivery = await _insert_run(clean_db, "running", created_ago_s=30, attempt=3, started_ago_s=30)
    fresh_pending = await _insert_run(clean_db, "pending", created_ago_s=5, attempt=0, started_ago_s=5)
    running_with_retries_left = await _insert_run(
        clean_db, "running", created_ago_s=30, attempt=1, started_ago_s=30
    )
    running_last_delivery_recent = await _insert_run(
        clean_db, "running", created_ago_s=9, attempt=3, started_ago_s=8
    )

    swept = await sweep_once(make_sessionmaker(clean_db), swept_settings)

    assert swept == 2
    for run_id in (expired_pending, lost_last_delivery):
        status, message = await _status(clean_db, run_id)
        assert status == "failed"
        assert message is not None
        assert "no worker finished this run in time" in message
    assert (await _status(clean_db, fresh_pending))[0] == "pending"
    assert (await _status(clean_db, running_with_retries_left))[0] == "running"
    assert (await _status(clean_db, running_last_delivery_recent))[0] == "running"
