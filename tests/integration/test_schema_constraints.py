"""The seed schema's constraints, enforced by the real PostgreSQL: each one violated and named."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Table, delete, insert, null, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.db import tables  # noqa: F401 - registers the models on the metadata
from shared.db.base import Base

pytestmark = pytest.mark.integration

TABLE_NAMES = (
    "mcp_servers",
    "tool_definitions",
    "test_case_mcp_servers",
    "test_cases",
    "model_settings",
    "test_runs",
    "evaluation_results",
)

NOT_NULL_SQLSTATE = "23502"
FK_SQLSTATE = "23503"
UNIQUE_SQLSTATE = "23505"
CHECK_SQLSTATE = "23514"


def table(name: str) -> Table:
    return Base.metadata.tables[name]


@dataclass
class Parents:
    """One row of every table, linked together, that violating rows can point at."""

    server_id: uuid.UUID
    case_id: uuid.UUID
    settings_id: uuid.UUID
    run_id: uuid.UUID
    tool_id: uuid.UUID


@dataclass
class Violation:
    """What asyncpg reported about the violated constraint."""

    sqlstate: str
    constraint_name: str | None
    table_name: str | None
    column_name: str | None


async def insert_row(engine: AsyncEngine, name: str, values: dict[str, Any]) -> uuid.UUID | None:
    async with engine.begin() as conn:
        tbl = table(name)
        if "id" in tbl.c:
            row_id: uuid.UUID = (
                await conn.execute(insert(tbl).values(**values).returning(tbl.c.id))
            ).scalar_one()
            return row_id
        await conn.execute(insert(tbl).values(**values))
        return None


async def violation(engine: AsyncEngine, name: str, values: dict[str, Any]) -> Violation:
    """Insert values into the table, expect an IntegrityError, and return what the driver said."""
    with pytest.raises(IntegrityError) as info:
        await insert_row(engine, name, values)
    cause = info.value.orig.__cause__ if info.value.orig is not None else None
    assert cause is not None, info.value
    return Violation(
        sqlstate=str(getattr(cause, "sqlstate", "")),
        constraint_name=getattr(cause, "constraint_name", None),
        table_name=getattr(cause, "table_name", None),
        column_name=getattr(cause, "column_name", None),
    )


def valid_row(name: str, parents: Parents) -> dict[str, Any]:
    """A row of the table that satisfies every constraint (names and urls unique per call)."""
    tag = uuid.uuid4().hex[:12]
    rows: dict[str, dict[str, Any]] = {
        "mcp_servers": {"name": f"srv-{tag}", "url": f"http://127.0.0.1/{tag}/mcp", "transport": "sse"},
        "test_cases": {"name": f"case-{tag}", "query": "List the buckets"},
        "test_case_mcp_servers": {"test_case_id": parents.case_id, "mcp_server_id": uuid.uuid4()},
        "model_settings": {"provider": "openai", "model": "gpt-4o-mini"},
        "test_runs": {"test_case_id": parents.case_id},
        "tool_definitions": {
            "name": "list_s3_buckets",
            "description": "List buckets",
            "input_schema": {"type": "object"},
            "mcp_server_id": parents.server_id,
            "test_run_id": parents.run_id,
        },
        "evaluation_results": {
            "test_run_id": parents.run_id,
            "classification": "TP",
            "tool_selection_correct": True,
            "parameter_completeness": 1.0,
            "parameter_correctness": 1.0,
            "parameter_type_conformance": True,
            "reasoning": "picked the expected tool",
            "recommendations": [],
        },
    }
    return rows[name]


@pytest.fixture
async def parents(clean_db: AsyncEngine) -> Parents:
    """A server, a case offering it, model settings, a run of the case and one tool snapshot of that run."""
    server_id = await insert_row(
        clean_db, "mcp_servers", {"name": "aws", "url": "http://127.0.0.1:1/mcp", "transport": "sse"}
    )
    case_id = await insert_row(clean_db, "test_cases", {"name": "buckets", "query": "List the buckets"})
    assert server_id is not None
    assert case_id is not None
    await insert_row(clean_db, "test_case_mcp_servers", {"test_case_id": case_id, "mcp_server_id": server_id})
    settings_id = await insert_row(clean_db, "model_settings", {"provider": "openai", "model": "gpt-4o-mini"})
    run_id = await insert_row(
        clean_db, "test_runs", {"test_case_id": case_id, "model_settings_id": settings_id}
    )
    assert settings_id is not None
    assert run_id is not None
    tool_id = await insert_row(
        clean_db,
        "tool_definitions",
        {
            "name": "list_s3_buckets",
            "description": "List buckets",
            "input_schema": {"type": "object"},
            "mcp_server_id": server_id,
            "test_run_id": run_id,
        },
    )
    assert tool_id is not None
    return Parents(server_id, case_id, settings_id, run_id, tool_id)


# --- NOT NULL -----------------------------------------------------------------------------------------

NOT_NULL_COLUMNS = [
    ("mcp_servers", "id"),
    ("mcp_servers", "name"),
    ("mcp_servers", "url"),
    ("mcp_servers", "transport"),
    ("mcp_servers", "status"),
    ("mcp_servers", "created_at"),
    ("mcp_servers", "updated_at"),
    ("tool_definitions", "id"),
    ("tool_definitions", "name"),
    ("tool_definitions", "description"),
    ("tool_definitions", "input_schema"),
    ("tool_definitions", "mcp_server_id"),
    ("tool_definitions", "test_run_id"),
    ("tool_definitions", "created_at"),
    ("tool_definitions", "updated_at"),
    ("test_case_mcp_servers", "test_case_id"),
    ("test_case_mcp_servers", "mcp_server_id"),
    ("test_cases", "id"),
    ("test_cases", "name"),
    ("test_cases", "query"),
    ("test_cases", "created_at"),
    ("test_cases", "updated_at"),
    ("model_settings", "id"),
    ("model_settings", "provider"),
    ("model_settings", "model"),
    ("model_settings", "timeout"),
    ("model_settings", "temperature"),
    ("model_settings", "max_retries"),
    ("model_settings", "samples"),
    ("model_settings", "explain"),
    ("model_settings", "created_at"),
    ("test_runs", "id"),
    ("test_runs", "test_case_id"),
    ("test_runs", "status"),
    ("test_runs", "attempt"),
    ("test_runs", "created_at"),
    ("evaluation_results", "id"),
    ("evaluation_results", "test_run_id"),
    ("evaluation_results", "classification"),
    ("evaluation_results", "tool_selection_correct"),
    ("evaluation_results", "parameter_completeness"),
    ("evaluation_results", "parameter_correctness"),
    ("evaluation_results", "parameter_type_conformance"),
    ("evaluation_results", "reasoning"),
    ("evaluation_results", "recommendations"),
    ("evaluation_results", "created_at"),
]


@pytest.mark.parametrize(("table_name", "column"), NOT_NULL_COLUMNS)
async def test_not_null_column_rejects_null(
    clean_db: AsyncEngine, parents: Parents, table_name: str, column: str
) -> None:
    """An explicit NULL in a NOT NULL column is refused, naming the table and the column."""
    values = {**valid_row(table_name, parents), column: null()}  # SQL NULL, not JSON 'null', for jsonb

    found = await violation(clean_db, table_name, values)

    assert found.sqlstate == NOT_NULL_SQLSTATE
    assert (found.table_name, found.column_name) == (table_name, column)


async def test_not_null_columns_are_exactly_the_listed_ones(clean_db: AsyncEngine) -> None:
    """The database's NOT NULL columns of the seven tables are exactly the list tested above."""
    async with clean_db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND is_nullable = 'NO' AND table_name = ANY(:names)"
                ),
                {"names": list(TABLE_NAMES)},
            )
        ).all()

    assert {(r[0], r[1]) for r in rows} == set(NOT_NULL_COLUMNS)


# --- UNIQUE and primary keys --------------------------------------------------------------------------


async def test_duplicate_server_name_violates_uq_mcp_servers_name(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """A second server with an existing name (any url) is refused by uq_mcp_servers_name."""
    values = {**valid_row("mcp_servers", parents), "name": "aws"}

    found = await violation(clean_db, "mcp_servers", values)

    assert (found.sqlstate, found.constraint_name) == (UNIQUE_SQLSTATE, "uq_mcp_servers_name")


async def test_duplicate_server_url_violates_uq_mcp_servers_url(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """A second server with an existing url (any name) is refused by uq_mcp_servers_url."""
    values = {**valid_row("mcp_servers", parents), "url": "http://127.0.0.1:1/mcp"}

    found = await violation(clean_db, "mcp_servers", values)

    assert (found.sqlstate, found.constraint_name) == (UNIQUE_SQLSTATE, "uq_mcp_servers_url")


async def test_second_result_for_a_run_violates_uq_evaluation_results_test_run_id(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """A run has at most one evaluation result (uq_evaluation_results_test_run_id)."""
    await insert_row(clean_db, "evaluation_results", valid_row("evaluation_results", parents))

    found = await violation(clean_db, "evaluation_results", valid_row("evaluation_results", parents))

    assert (found.sqlstate, found.constraint_name) == (UNIQUE_SQLSTATE, "uq_evaluation_results_test_run_id")


async def test_duplicate_link_violates_composite_primary_key(clean_db: AsyncEngine, parents: Parents) -> None:
    """The same (test case, server) link twice is refused by the composite pk_test_case_mcp_servers."""
    values = {"test_case_id": parents.case_id, "mcp_server_id": parents.server_id}

    found = await violation(clean_db, "test_case_mcp_servers", values)

    assert (found.sqlstate, found.constraint_name) == (UNIQUE_SQLSTATE, "pk_test_case_mcp_servers")


@pytest.mark.parametrize("table_name", [t for t in TABLE_NAMES if t != "test_case_mcp_servers"])
async def test_duplicate_id_violates_primary_key(
    clean_db: AsyncEngine, parents: Parents, table_name: str
) -> None:
    """Reusing an existing id is refused by the table's pk_ constraint."""
    row = valid_row(table_name, parents)
    if table_name == "evaluation_results":
        run_id = await insert_row(clean_db, "test_runs", {"test_case_id": parents.case_id})
        row = {**row, "test_run_id": run_id}
    existing = await insert_row(clean_db, table_name, row)
    duplicate = {**valid_row(table_name, parents), "id": existing}

    found = await violation(clean_db, table_name, duplicate)

    assert (found.sqlstate, found.constraint_name) == (UNIQUE_SQLSTATE, f"pk_{table_name}")


# --- Foreign keys -------------------------------------------------------------------------------------

FOREIGN_KEYS = [
    ("test_case_mcp_servers", "test_case_id", "fk_test_case_mcp_servers_test_case_id_test_cases"),
    ("test_case_mcp_servers", "mcp_server_id", "fk_test_case_mcp_servers_mcp_server_id_mcp_servers"),
    ("tool_definitions", "mcp_server_id", "fk_tool_definitions_mcp_server_id_mcp_servers"),
    ("tool_definitions", "test_run_id", "fk_tool_definitions_test_run_id_test_runs"),
    ("test_runs", "test_case_id", "fk_test_runs_test_case_id_test_cases"),
    ("test_runs", "model_settings_id", "fk_test_runs_model_settings_id_model_settings"),
    ("test_runs", "selected_tool_id", "fk_test_runs_selected_tool_id_tool_definitions"),
    ("evaluation_results", "test_run_id", "fk_evaluation_results_test_run_id_test_runs"),
]


@pytest.mark.parametrize(("table_name", "column", "constraint"), FOREIGN_KEYS)
async def test_foreign_key_rejects_unknown_id(
    clean_db: AsyncEngine, parents: Parents, table_name: str, column: str, constraint: str
) -> None:
    """A reference to an id that does not exist is refused by the named foreign key."""
    values = {**valid_row(table_name, parents), column: uuid.uuid4()}
    if table_name == "test_case_mcp_servers" and column == "test_case_id":
        values["mcp_server_id"] = parents.server_id  # only the column under test dangles

    found = await violation(clean_db, table_name, values)

    assert (found.sqlstate, found.constraint_name) == (FK_SQLSTATE, constraint)


# --- CHECK constraints --------------------------------------------------------------------------------

CHECKS: list[tuple[str, dict[str, Any], str]] = [
    ("mcp_servers", {"transport": "stdio"}, "ck_mcp_servers_transport"),
    ("mcp_servers", {"transport": "streamable_http"}, "ck_mcp_servers_transport"),
    ("mcp_servers", {"status": "unknown"}, "ck_mcp_servers_status"),
    ("mcp_servers", {"name": ""}, "ck_mcp_servers_name_not_empty"),
    ("mcp_servers", {"url": ""}, "ck_mcp_servers_url_not_empty"),
    ("tool_definitions", {"name": ""}, "ck_tool_definitions_name_not_empty"),
    ("test_cases", {"name": ""}, "ck_test_cases_name_not_empty"),
    ("test_cases", {"query": ""}, "ck_test_cases_query_length"),
    ("test_cases", {"query": "q" * 8001}, "ck_test_cases_query_length"),
    ("test_cases", {"expected_mcp_server_name": "aws"}, "ck_test_cases_expected_pair"),
    ("test_cases", {"expected_tool_name": "list_s3_buckets"}, "ck_test_cases_expected_pair"),
    (
        "test_cases",
        {"expected_mcp_server_name": "", "expected_tool_name": "list_s3_buckets"},
        "ck_test_cases_expected_server_not_empty",
    ),
    (
        "test_cases",
        {"expected_mcp_server_name": "aws", "expected_tool_name": ""},
        "ck_test_cases_expected_tool_not_empty",
    ),
    ("model_settings", {"provider": ""}, "ck_model_settings_provider_length"),
    ("model_settings", {"provider": "p" * 101}, "ck_model_settings_provider_length"),
    ("model_settings", {"model": ""}, "ck_model_settings_model_length"),
    ("model_settings", {"model": "m" * 101}, "ck_model_settings_model_length"),
    ("model_settings", {"timeout": 0}, "ck_model_settings_timeout_range"),
    ("model_settings", {"timeout": 301}, "ck_model_settings_timeout_range"),
    ("model_settings", {"temperature": -0.1}, "ck_model_settings_temperature_range"),
    ("model_settings", {"temperature": 2.1}, "ck_model_settings_temperature_range"),
    ("model_settings", {"max_retries": -1}, "ck_model_settings_max_retries_range"),
    ("model_settings", {"max_retries": 11}, "ck_model_settings_max_retries_range"),
    ("model_settings", {"samples": 0}, "ck_model_settings_samples_range"),
    ("model_settings", {"samples": 21}, "ck_model_settings_samples_range"),
    ("test_runs", {"status": "done"}, "ck_test_runs_status"),
    ("test_runs", {"classification": "XX"}, "ck_test_runs_classification"),
    ("test_runs", {"classification": "tp"}, "ck_test_runs_classification"),
    ("test_runs", {"confidence_score": -0.01}, "ck_test_runs_confidence_range"),
    ("test_runs", {"confidence_score": 1.01}, "ck_test_runs_confidence_range"),
    ("test_runs", {"execution_time_ms": 0}, "ck_test_runs_execution_time_positive"),
    ("test_runs", {"execution_time_ms": -5}, "ck_test_runs_execution_time_positive"),
    ("test_runs", {"attempt": -1}, "ck_test_runs_attempt_non_negative"),
    ("evaluation_results", {"classification": "maybe"}, "ck_evaluation_results_classification"),
    ("evaluation_results", {"parameter_completeness": -0.1}, "ck_evaluation_results_completeness_range"),
    ("evaluation_results", {"parameter_completeness": 1.1}, "ck_evaluation_results_completeness_range"),
    ("evaluation_results", {"parameter_correctness": -0.1}, "ck_evaluation_results_correctness_range"),
    ("evaluation_results", {"parameter_correctness": 1.1}, "ck_evaluation_results_correctness_range"),
    (
        "evaluation_results",
        {"confidence_category": "great"},
        "ck_evaluation_results_confidence_category",
    ),
]


@pytest.mark.parametrize(
    ("table_name", "override", "constraint"),
    CHECKS,
    ids=[f"{c}-{next(iter(o.values()))!s:.12}" for _, o, c in CHECKS],
)
async def test_check_constraint_rejects_value(
    clean_db: AsyncEngine, parents: Parents, table_name: str, override: dict[str, Any], constraint: str
) -> None:
    """A value outside the allowed set or range is refused by the named CHECK constraint."""
    values = {**valid_row(table_name, parents), **override}

    found = await violation(clean_db, table_name, values)

    assert (found.sqlstate, found.constraint_name) == (CHECK_SQLSTATE, constraint)


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("mcp_servers", {"transport": "streamable-http", "status": "active"}),
    ("mcp_servers", {"status": "failed"}),
    ("test_cases", {"query": "q" * 8000}),
    ("test_cases", {"expected_mcp_server_name": "aws", "expected_tool_name": "list_s3_buckets"}),
    ("test_cases", {"expected_mcp_server_name": None, "expected_tool_name": None}),
    ("model_settings", {"provider": "p", "model": "m" * 100, "timeout": 1, "temperature": 0.0}),
    ("model_settings", {"provider": "p" * 100, "timeout": 300, "temperature": 2.0, "max_retries": 0}),
    ("model_settings", {"max_retries": 10, "samples": 1}),
    ("model_settings", {"samples": 20}),
    ("test_runs", {"status": "running", "confidence_score": 0.0, "classification": "FN"}),
    ("test_runs", {"status": "completed", "confidence_score": 1.0, "execution_time_ms": 1}),
    ("test_runs", {"status": "failed", "classification": "TN"}),
    ("evaluation_results", {"parameter_completeness": 0.0, "parameter_correctness": 0.0}),
    ("evaluation_results", {"classification": "FP", "confidence_category": "needs_clarity"}),
]


@pytest.mark.parametrize(("table_name", "override"), ACCEPTED)
async def test_check_constraint_accepts_boundary_value(
    clean_db: AsyncEngine, parents: Parents, table_name: str, override: dict[str, Any]
) -> None:
    """Values at the edges of each allowed range (and every enum member) are stored."""
    values = {**valid_row(table_name, parents), **override}

    await insert_row(clean_db, table_name, values)

    async with clean_db.connect() as conn:
        count = await conn.scalar(select(text("count(*)")).select_from(table(table_name)))
    assert count is not None
    assert count >= 1


# --- ON DELETE ----------------------------------------------------------------------------------------


async def count_rows(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            name: int(await conn.scalar(text(f"SELECT count(*) FROM {name}")) or 0)  # noqa: S608 - constant
            for name in TABLE_NAMES
        }


async def add_result(engine: AsyncEngine, parents: Parents) -> None:
    await insert_row(engine, "evaluation_results", valid_row("evaluation_results", parents))
    async with engine.begin() as conn:
        await conn.execute(
            update(table("test_runs"))
            .where(table("test_runs").c.id == parents.run_id)
            .values(selected_tool_id=parents.tool_id)
        )


async def test_deleting_a_server_cascades_to_links_and_tool_snapshots(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """Deleting a server removes its test-case links and its tool snapshots, but not cases or runs."""
    await add_result(clean_db, parents)

    async with clean_db.begin() as conn:
        await conn.execute(delete(table("mcp_servers")).where(table("mcp_servers").c.id == parents.server_id))

    counts = await count_rows(clean_db)
    assert counts["mcp_servers"] == 0
    assert counts["test_case_mcp_servers"] == 0
    assert counts["tool_definitions"] == 0
    assert (counts["test_cases"], counts["test_runs"], counts["evaluation_results"]) == (1, 1, 1)


async def test_deleting_a_test_case_cascades_to_runs_results_and_snapshots(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """Deleting a test case removes its links, runs, their results and tool snapshots; the server stays."""
    await add_result(clean_db, parents)

    async with clean_db.begin() as conn:
        await conn.execute(delete(table("test_cases")).where(table("test_cases").c.id == parents.case_id))

    counts = await count_rows(clean_db)
    assert counts["test_cases"] == 0
    assert counts["test_case_mcp_servers"] == 0
    assert counts["test_runs"] == 0
    assert counts["evaluation_results"] == 0
    assert counts["tool_definitions"] == 0
    assert (counts["mcp_servers"], counts["model_settings"]) == (1, 1)


async def test_deleting_a_run_cascades_to_its_result_and_snapshots(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """Deleting a run removes its evaluation result and its tool snapshots; the case and server stay."""
    await add_result(clean_db, parents)

    async with clean_db.begin() as conn:
        await conn.execute(delete(table("test_runs")).where(table("test_runs").c.id == parents.run_id))

    counts = await count_rows(clean_db)
    assert (counts["test_runs"], counts["evaluation_results"], counts["tool_definitions"]) == (0, 0, 0)
    assert (counts["test_cases"], counts["mcp_servers"], counts["test_case_mcp_servers"]) == (1, 1, 1)


async def test_deleting_model_settings_cascades_to_their_runs(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """Deleting model settings removes the runs made with them (and so their results)."""
    await add_result(clean_db, parents)

    async with clean_db.begin() as conn:
        await conn.execute(
            delete(table("model_settings")).where(table("model_settings").c.id == parents.settings_id)
        )

    counts = await count_rows(clean_db)
    assert (counts["test_runs"], counts["evaluation_results"], counts["tool_definitions"]) == (0, 0, 0)
    assert counts["test_cases"] == 1


async def test_deleting_the_selected_tool_sets_the_run_reference_to_null(
    clean_db: AsyncEngine, parents: Parents
) -> None:
    """Deleting the tool snapshot a run selected keeps the run and sets selected_tool_id to NULL."""
    await add_result(clean_db, parents)

    async with clean_db.begin() as conn:
        await conn.execute(
            delete(table("tool_definitions")).where(table("tool_definitions").c.id == parents.tool_id)
        )

    async with clean_db.connect() as conn:
        selected = (
            await conn.execute(
                text("SELECT selected_tool_id FROM test_runs WHERE id = :id"), {"id": parents.run_id}
            )
        ).all()
    assert selected == [(None,)]


# --- updated_at triggers and defaults ----------------------------------------------------------------

TRIGGER_UPDATES = [
    ("mcp_servers", {"status": "active"}),
    ("test_cases", {"query": "List every bucket"}),
    ("tool_definitions", {"description": "List all the buckets"}),
]


def id_of(parents: Parents, table_name: str) -> uuid.UUID:
    return {
        "mcp_servers": parents.server_id,
        "test_cases": parents.case_id,
        "tool_definitions": parents.tool_id,
    }[table_name]


@pytest.mark.parametrize(("table_name", "change"), TRIGGER_UPDATES)
async def test_update_advances_updated_at(
    clean_db: AsyncEngine, parents: Parents, table_name: str, change: dict[str, Any]
) -> None:
    """An UPDATE moves updated_at forward (even if the statement tries to set it) and keeps created_at."""
    tbl = table(table_name)
    row_id = id_of(parents, table_name)
    async with clean_db.connect() as conn:
        before = (
            await conn.execute(select(tbl.c.created_at, tbl.c.updated_at).where(tbl.c.id == row_id))
        ).one()

    async with clean_db.begin() as conn:
        await conn.execute(
            update(tbl)
            .where(tbl.c.id == row_id)
            .values(**change, updated_at=datetime(2000, 1, 1).astimezone())
        )

    async with clean_db.connect() as conn:
        after = (
            await conn.execute(select(tbl.c.created_at, tbl.c.updated_at).where(tbl.c.id == row_id))
        ).one()
    assert after.created_at == before.created_at
    assert after.updated_at > before.updated_at


async def test_updated_at_triggers_exist_only_on_the_seed_tables(clean_db: AsyncEngine) -> None:
    """Exactly mcp_servers, test_cases and tool_definitions carry the updated_at trigger."""
    async with clean_db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE NOT t.tgisinternal AND c.relname = ANY(:names)"
                ),
                {"names": list(TABLE_NAMES)},
            )
        ).all()

    assert {(r[0], r[1]) for r in rows} == {(t, f"trg_{t}_updated_at") for t, _ in TRIGGER_UPDATES}


async def test_defaults_fill_status_ids_and_timestamps(clean_db: AsyncEngine, parents: Parents) -> None:
    """Omitted columns get their defaults: random v4 ids, status inactive/pending, the model settings knobs."""
    async with clean_db.connect() as conn:
        server = (
            await conn.execute(
                text("SELECT id, status, created_at, updated_at FROM mcp_servers WHERE id = :id"),
                {"id": parents.server_id},
            )
        ).one()
        run = (
            await conn.execute(
                text("SELECT status, attempt, created_at FROM test_runs WHERE id = :id"),
                {"id": parents.run_id},
            )
        ).one()
        knobs = (
            await conn.execute(
                text("SELECT timeout, temperature, max_retries, samples, explain FROM model_settings")
            )
        ).one()
        ids = (await conn.execute(text("SELECT gen_random_uuid(), gen_random_uuid()"))).one()

    assert isinstance(server.id, uuid.UUID)
    assert server.id.version == 4
    assert server.status == "inactive"
    assert server.created_at is not None
    assert server.updated_at is not None
    assert (run.status, run.attempt) == ("pending", 0)
    assert run.created_at is not None
    assert (knobs.timeout, knobs.max_retries, knobs.samples, knobs.explain) == (30, 3, 1, False)
    assert knobs.temperature == pytest.approx(0.4)
    assert ids[0] != ids[1]


async def test_id_default_is_gen_random_uuid(clean_db: AsyncEngine) -> None:
    """Every table's id column defaults to gen_random_uuid()."""
    async with clean_db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT table_name, column_default FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND column_name = 'id' AND table_name = ANY(:names)"
                ),
                {"names": list(TABLE_NAMES)},
            )
        ).all()

    assert {r[0]: r[1] for r in rows} == {
        t: "gen_random_uuid()" for t in TABLE_NAMES if t != "test_case_mcp_servers"
    }


# --- Naming convention --------------------------------------------------------------------------------

PREFIXES = {"p": "pk_", "f": "fk_", "u": "uq_", "c": "ck_"}


async def test_constraint_and_index_names_follow_the_naming_convention(clean_db: AsyncEngine) -> None:
    """Every constraint is named pk_/fk_/uq_/ck_<table>... and every index ix_/uq_/pk_<table>..."""
    async with clean_db.connect() as conn:
        constraints = (
            await conn.execute(
                text(
                    "SELECT c.relname, k.conname, k.contype::text FROM pg_constraint k "
                    "JOIN pg_class c ON c.oid = k.conrelid WHERE c.relname = ANY(:names)"
                ),
                {"names": list(TABLE_NAMES)},
            )
        ).all()
        indexes = (
            await conn.execute(
                text(
                    "SELECT tablename, indexname FROM pg_indexes "
                    "WHERE schemaname = 'public' AND tablename = ANY(:names)"
                ),
                {"names": list(TABLE_NAMES)},
            )
        ).all()

    # PostgreSQL 18 records NOT NULL as constraints ('n') with names of its own; those are not ours to name.
    named = [(t, n, k) for t, n, k in constraints if k != "n"]
    assert {k for _, _, k in named} == set(PREFIXES)
    bad = [(t, n) for t, n, k in named if not n.startswith(f"{PREFIXES[k]}{t}")]
    assert bad == []
    assert {n for t, n, k in named if k == "p"} == {f"pk_{t}" for t in TABLE_NAMES}
    assert indexes
    bad_indexes = [(t, n) for t, n in indexes if not n.startswith((f"ix_{t}_", f"uq_{t}_", f"pk_{t}"))]
    assert bad_indexes == []
