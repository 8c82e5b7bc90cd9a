"""/test-cases: a query, the servers on offer, and the expected (server, tool, parameters) — or none."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody, QueryParameter
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.common import (
    LimitParam,
    Name,
    OffsetParam,
    Page,
    Query,
    SessionDep,
    check_json_value,
    paginate,
    refreshed,
)
from api_service.errors import FieldError, InvalidInputError, NotFoundError
from shared.db.tables import McpServer, TestCase
from shared.matchers import validate_expected_parameters

MAX_SERVERS_PER_CASE = 50

ServerNames = Annotated[list[Name], msgspec.Meta(min_length=1, max_length=MAX_SERVERS_PER_CASE)]


class TestCaseCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    query: Query
    available_mcp_servers: ServerNames
    expected_mcp_server_name: Name | None = None
    expected_tool_name: Name | None = None
    expected_parameters: dict[str, Any] | None = None


class TestCasePatch(msgspec.Struct, forbid_unknown_fields=True):
    name: Name | msgspec.UnsetType = msgspec.UNSET
    query: Query | msgspec.UnsetType = msgspec.UNSET
    available_mcp_servers: ServerNames | msgspec.UnsetType = msgspec.UNSET
    expected_mcp_server_name: Name | msgspec.UnsetType | None = msgspec.UNSET
    expected_tool_name: Name | msgspec.UnsetType | None = msgspec.UNSET
    expected_parameters: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET


class TestCaseOut(msgspec.Struct):
    id: uuid.UUID
    name: str
    query: str
    expected_mcp_server_name: str | None
    expected_tool_name: str | None
    expected_parameters: dict[str, Any] | None
    available_mcp_servers: list[str]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: TestCase) -> TestCaseOut:
        return cls(
            id=row.id,
            name=row.name,
            query=row.query,
            expected_mcp_server_name=row.expected_mcp_server_name,
            expected_tool_name=row.expected_tool_name,
            expected_parameters=row.expected_parameters,
            available_mcp_servers=[s.name for s in row.servers],
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


async def _resolve_servers(session: AsyncSession, names: list[str]) -> list[McpServer]:
    wanted = list(dict.fromkeys(n.strip() for n in names))
    rows = (await session.scalars(select(McpServer).where(McpServer.name.in_(wanted)))).all()
    found = {r.name: r for r in rows}
    for index, name in enumerate(wanted):
        if name not in found:
            raise InvalidInputError(f"available_mcp_servers[{index}]", f"no MCP server named {name!r}")
    return [found[n] for n in wanted]


def _check_expectation(
    server: str | None, tool: str | None, parameters: dict[str, Any] | None, available: list[str]
) -> None:
    """The expected pair is set together (or both null: no tool expected) and on an available server."""
    if (server is None) != (tool is None):
        missing = "expected_tool_name" if tool is None else "expected_mcp_server_name"
        raise InvalidInputError(
            missing, "set both expected_mcp_server_name and expected_tool_name, or neither (no tool expected)"
        )
    if server is not None and server not in available:
        raise InvalidInputError("expected_mcp_server_name", f"{server!r} is not among available_mcp_servers")
    if parameters is not None:
        if server is None and parameters:
            raise InvalidInputError("expected_parameters", "must be null or empty when no tool is expected")
        check_json_value(parameters, "expected_parameters")
        problems = validate_expected_parameters(parameters)
        if problems:
            errors = [FieldError(field=p.path, reason=p.reason) for p in problems]
            error = InvalidInputError(errors[0].field, errors[0].reason)
            error.errors = errors
            error.detail = "; ".join(f"{e.field}: {e.reason}" for e in errors)
            raise error


async def _get(session: AsyncSession, case_id: FromPath[uuid.UUID]) -> TestCase:
    row = await session.get(TestCase, case_id)
    if row is None:
        raise NotFoundError(f"no test case with id {case_id}")
    return row


async def create_case(session: AsyncSession, data: JSONBody[TestCaseCreate]) -> TestCase:
    servers = await _resolve_servers(session, data.available_mcp_servers)
    _check_expectation(
        data.expected_mcp_server_name,
        data.expected_tool_name,
        data.expected_parameters,
        [s.name for s in servers],
    )
    row = TestCase(
        name=data.name.strip(),
        query=data.query,
        expected_mcp_server_name=data.expected_mcp_server_name,
        expected_tool_name=data.expected_tool_name,
        expected_parameters=data.expected_parameters,
        servers=servers,
    )
    session.add(row)
    await session.commit()
    await refreshed(session, row, "test case")
    return row


class TestCaseController(Controller):
    path = "/test-cases"
    tags = ["test-cases"]

    @post("/", status_code=201, summary="Create a test case")
    async def create(self, data: JSONBody[TestCaseCreate], session: SessionDep) -> TestCaseOut:
        return TestCaseOut.of(await create_case(session, data))

    @get("/", summary="List test cases")
    async def list(
        self,
        session: SessionDep,
        limit: Annotated[LimitParam, QueryParameter()] = 50,
        offset: Annotated[OffsetParam, QueryParameter()] = 0,
        name: Annotated[str | None, QueryParameter(max_length=200)] = None,
    ) -> Page[TestCaseOut]:
        query = select(TestCase).order_by(TestCase.created_at, TestCase.id)
        if name is not None:
            query = query.where(TestCase.name == name)
        rows, total = await paginate(session, query, limit, offset)
        return Page(items=[TestCaseOut.of(r) for r in rows], total=total, limit=limit, offset=offset)

    @get("/{case_id:uuid}", summary="Get one test case")
    async def get_one(self, case_id: FromPath[uuid.UUID], session: SessionDep) -> TestCaseOut:
        return TestCaseOut.of(await _get(session, case_id))

    @patch("/{case_id:uuid}", summary="Update a test case")
    async def update(
        self, case_id: FromPath[uuid.UUID], data: JSONBody[TestCasePatch], session: SessionDep
    ) -> TestCaseOut:
        row = await _get(session, case_id)
        servers = (
            row.servers
            if data.available_mcp_servers is msgspec.UNSET
            else await _resolve_servers(session, data.available_mcp_servers)
        )
        server = (
            row.expected_mcp_server_name
            if data.expected_mcp_server_name is msgspec.UNSET
            else data.expected_mcp_server_name
        )
        tool = row.expected_tool_name if data.expected_tool_name is msgspec.UNSET else data.expected_tool_name
        parameters = (
            row.expected_parameters if data.expected_parameters is msgspec.UNSET else data.expected_parameters
        )
        if server is None and tool is None and data.expected_parameters is msgspec.UNSET:
            parameters = None  # clearing the expectation clears its parameters too
        _check_expectation(server, tool, parameters, [s.name for s in servers])
        if data.name is not msgspec.UNSET:
            row.name = data.name.strip()
        if data.query is not msgspec.UNSET:
            row.query = data.query
        row.servers = list(servers)
        row.expected_mcp_server_name = server
        row.expected_tool_name = tool
        row.expected_parameters = parameters
        await session.commit()
        await refreshed(session, row, "test case")
        return TestCaseOut.of(row)

    @delete("/{case_id:uuid}", status_code=204, summary="Delete a test case (cascades to its runs)")
    async def remove(self, case_id: FromPath[uuid.UUID], session: SessionDep) -> None:
        row = await _get(session, case_id)
        await session.delete(row)
        await session.commit()
