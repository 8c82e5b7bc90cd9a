"""/tools: the point-in-time tool snapshots that runs ingested (and manual snapshots, as in the contract)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import FromPath, JSONBody, QueryParameter
from sqlalchemy import select

from api_service.common import (
    Description,
    LimitParam,
    Name,
    OffsetParam,
    Page,
    SessionDep,
    check_json_value,
    paginate,
    refreshed,
)
from api_service.errors import InvalidInputError, NotFoundError
from shared.db.tables import McpServer, TestRun, ToolDefinition


class ToolCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    description: Description
    input_schema: dict[str, Any]
    mcp_server_id: uuid.UUID
    test_run_id: uuid.UUID
    output_schema: dict[str, Any] | None = None


class ToolOut(msgspec.Struct):
    id: uuid.UUID
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    mcp_server_id: uuid.UUID
    test_run_id: uuid.UUID
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: ToolDefinition) -> ToolOut:
        return cls(
            id=row.id,
            name=row.name,
            description=row.description,
            input_schema=row.input_schema,
            output_schema=row.output_schema,
            mcp_server_id=row.mcp_server_id,
            test_run_id=row.test_run_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class ToolController(Controller):
    path = "/tools"
    tags = ["tools"]

    @get("/", summary="List tool snapshots, optionally of one run")
    async def list(
        self,
        session: SessionDep,
        test_run_id: Annotated[uuid.UUID | None, QueryParameter()] = None,
        limit: Annotated[LimitParam, QueryParameter()] = 50,
        offset: Annotated[OffsetParam, QueryParameter()] = 0,
    ) -> Page[ToolOut]:
        query = select(ToolDefinition).order_by(
            ToolDefinition.created_at, ToolDefinition.name, ToolDefinition.id
        )
        if test_run_id is not None:
            query = query.where(ToolDefinition.test_run_id == test_run_id)
        rows, total = await paginate(session, query, limit, offset)
        return Page(items=[ToolOut.of(r) for r in rows], total=total, limit=limit, offset=offset)

    @get("/{tool_id:uuid}", summary="Get one tool snapshot")
    async def get_one(self, tool_id: FromPath[uuid.UUID], session: SessionDep) -> ToolOut:
        row = await session.get(ToolDefinition, tool_id)
        if row is None:
            raise NotFoundError(f"no tool with id {tool_id}")
        return ToolOut.of(row)

    @post("/", status_code=201, summary="Add a tool snapshot to a run")
    async def create(self, data: JSONBody[ToolCreate], session: SessionDep) -> ToolOut:
        check_json_value(data.input_schema, "input_schema")
        check_json_value(data.output_schema, "output_schema")
        if await session.get(McpServer, data.mcp_server_id) is None:
            raise InvalidInputError("mcp_server_id", f"no MCP server with id {data.mcp_server_id}")
        if await session.get(TestRun, data.test_run_id) is None:
            raise InvalidInputError("test_run_id", f"no test run with id {data.test_run_id}")
        row = ToolDefinition(
            name=data.name,
            description=data.description,
            input_schema=data.input_schema,
            output_schema=data.output_schema,
            mcp_server_id=data.mcp_server_id,
            test_run_id=data.test_run_id,
        )
        session.add(row)
        await session.commit()
        await refreshed(session, row, "tool")
        return ToolOut.of(row)

    @delete("/{tool_id:uuid}", status_code=204, summary="Delete a tool snapshot")
    async def remove(self, tool_id: FromPath[uuid.UUID], session: SessionDep) -> None:
        row = await session.get(ToolDefinition, tool_id)
        if row is None:
            raise NotFoundError(f"no tool with id {tool_id}")
        await session.delete(row)
        await session.commit()
