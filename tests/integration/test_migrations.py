"""The Alembic migrations on a fresh database: up, down, up again, and the result matches the models."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Float, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shared.db import tables  # noqa: F401 - registers the models on the metadata
from shared.db.base import Base
from shared.db.migrate import alembic_config, downgrade, upgrade
from shared.settings import Settings

pytestmark = pytest.mark.integration

SEED_TABLES = {
    "mcp_servers",
    "tool_definitions",
    "test_case_mcp_servers",
    "test_cases",
    "model_settings",
    "test_runs",
    "evaluation_results",
}


@pytest.fixture
async def fresh_database(engine: AsyncEngine, settings: Settings) -> AsyncIterator[str]:
    """A new, empty database on the test server (dropped afterwards); yields its url."""
    assert settings.database_url
    name = f"mcpeval_migrations_{uuid.uuid4().hex[:12]}"
    async with engine.connect() as conn:
        admin = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await admin.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(settings.database_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        async with engine.connect() as conn:
            admin = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await admin.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def public_tables(url: str) -> set[str]:
    eng = create_async_engine(url)
    try:
        async with eng.connect() as conn:
            rows = await conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
            return {r[0] for r in rows}
    finally:
        await eng.dispose()


async def current_revision(url: str) -> str | None:
    eng = create_async_engine(url)
    try:
        async with eng.connect() as conn:
            return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
    finally:
        await eng.dispose()


def compare_real_default(
    context: MigrationContext,
    inspected_column: Any,
    metadata_column: Column[Any],
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """Compare a `real` column's default as a `real`: Alembic's own check compares `'0.4'::real` with the
    numeric literal 0.4, which PostgreSQL widens to double precision and finds unequal."""
    if not isinstance(metadata_column.type, Float) or not inspected_default or not rendered_metadata_default:
        return None  # Alembic's default comparison
    assert context.bind is not None
    same = context.bind.scalar(
        text(f"SELECT ({inspected_default}) = CAST({rendered_metadata_default} AS real)")
    )
    return not same


async def schema_differences(url: str) -> list[Any]:
    def compare(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": compare_real_default}
        )
        return list(compare_metadata(context, Base.metadata))

    eng = create_async_engine(url)
    try:
        async with eng.connect() as conn:
            return await conn.run_sync(compare)
    finally:
        await eng.dispose()


async def test_upgrade_downgrade_upgrade_round_trip(fresh_database: str) -> None:
    """upgrade head creates the seven seed tables, downgrade base removes every table, and upgrade head works again."""
    head = ScriptDirectory.from_config(alembic_config(fresh_database)).get_current_head()

    # alembic's env.py runs its own event loop (asyncio.run), so it runs in a thread of its own here.
    await asyncio.to_thread(upgrade, fresh_database)
    after_first_upgrade = await public_tables(fresh_database)
    revision_after_upgrade = await current_revision(fresh_database)
    await asyncio.to_thread(downgrade, fresh_database)
    after_downgrade = await public_tables(fresh_database)
    revision_after_downgrade = await current_revision(fresh_database)
    await asyncio.to_thread(upgrade, fresh_database)
    after_second_upgrade = await public_tables(fresh_database)

    assert SEED_TABLES | {"alembic_version"} <= after_first_upgrade
    assert revision_after_upgrade == head
    assert after_downgrade == {"alembic_version"}
    assert revision_after_downgrade is None
    assert after_second_upgrade == after_first_upgrade


async def test_downgrade_removes_the_trigger_function(fresh_database: str) -> None:
    """downgrade base leaves no set_updated_at() function behind."""
    await asyncio.to_thread(upgrade, fresh_database)
    await asyncio.to_thread(downgrade, fresh_database)

    eng = create_async_engine(fresh_database)
    try:
        async with eng.connect() as conn:
            functions = await conn.scalar(
                text("SELECT count(*) FROM pg_proc WHERE proname = 'set_updated_at'")
            )
    finally:
        await eng.dispose()
    assert functions == 0


async def test_migrated_schema_matches_the_models(fresh_database: str) -> None:
    """Autogenerate finds no difference between the migrated database and the SQLAlchemy models."""
    await asyncio.to_thread(upgrade, fresh_database)

    differences = await schema_differences(fresh_database)

    assert differences == []
