"""/mcp-servers: register MCP servers; a worker's connectivity check sets their status."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody, QueryParameter
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.common import (
    LimitParam,
    Name,
    OffsetParam,
    Page,
    Services,
    ServicesDep,
    SessionDep,
    Url,
    constraint_name,
    normalise_transport,
    paginate,
    refreshed,
)
from api_service.errors import ConflictError, InvalidInputError, NotFoundError, ServiceUnavailableError
from shared.db.tables import McpServer
from shared.messaging import PublishError, publish_check

log = logging.getLogger("mcpeval.api")

Transport = Literal["sse", "streamable-http", "streamable_http"]


class McpServerCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    url: Url
    transport: Transport = "streamable-http"


class McpServerPatch(msgspec.Struct, forbid_unknown_fields=True):
    name: Name | msgspec.UnsetType = msgspec.UNSET
    url: Url | msgspec.UnsetType = msgspec.UNSET
    transport: Transport | msgspec.UnsetType = msgspec.UNSET


class McpServerOut(msgspec.Struct):
    id: uuid.UUID
    name: str
    url: str
    transport: str
    status: str
    last_connected_at: datetime | None
    last_checked_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: McpServer) -> McpServerOut:
        return cls(
            id=row.id,
            name=row.name,
            url=row.url,
            transport=row.transport,
            status=row.status,
            last_connected_at=row.last_connected_at,
            last_checked_at=row.last_checked_at,
            last_error=row.last_error,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class CheckAccepted(msgspec.Struct):
    server_id: uuid.UUID
    status: str
    detail: str


class ImportSkipped(msgspec.Struct):
    name: str
    reason: str


class ImportResult(msgspec.Struct):
    created: list[McpServerOut]
    existing: list[str]
    skipped: list[ImportSkipped]


def _conflict(exc: IntegrityError, name: str, url: str) -> ConflictError:
    which = constraint_name(exc)
    if which == "uq_mcp_servers_name":
        return ConflictError(f"an MCP server named {name!r} already exists")
    if which == "uq_mcp_servers_url":
        return ConflictError(f"an MCP server with url {url!r} already exists")
    return ConflictError("the MCP server conflicts with an existing one")


async def _get(session: AsyncSession, server_id: FromPath[uuid.UUID]) -> McpServer:
    row = await session.get(McpServer, server_id)
    if row is None:
        raise NotFoundError(f"no MCP server with id {server_id}")
    return row


async def request_check(services: Services, server_id: FromPath[uuid.UUID]) -> bool:
    """Queue a connectivity check; False (and a log line) when JetStream is unreachable."""
    try:
        await publish_check(services.js, str(server_id), time.time())
    except PublishError:
        log.warning("connectivity check for server %s not queued: NATS unavailable", server_id)
        return False
    return True


async def create_server(
    session: AsyncSession, services: Services, data: JSONBody[McpServerCreate]
) -> McpServer:
    row = McpServer(name=data.name.strip(), url=data.url, transport=normalise_transport(data.transport))
    session.add(row)
    try:
        await session.commit()
    except IntegrityError as exc:
        await session.rollback()
        raise _conflict(exc, data.name, data.url) from None
    await refreshed(session, row, "MCP server")
    await request_check(services, row.id)
    return row


class McpServerController(Controller):
    path = "/mcp-servers"
    tags = ["mcp-servers"]

    @post("/", status_code=201, summary="Register an MCP server (answers at once, status inactive)")
    async def create(
        self, data: JSONBody[McpServerCreate], session: SessionDep, services: ServicesDep
    ) -> McpServerOut:
        return McpServerOut.of(await create_server(session, services, data))

    @get("/", summary="List MCP servers")
    async def list(
        self,
        session: SessionDep,
        limit: Annotated[LimitParam, QueryParameter()] = 50,
        offset: Annotated[OffsetParam, QueryParameter()] = 0,
        status: Annotated[Literal["active", "failed", "inactive"] | None, QueryParameter()] = None,
    ) -> Page[McpServerOut]:
        query = select(McpServer).order_by(McpServer.created_at, McpServer.id)
        if status is not None:
            query = query.where(McpServer.status == status)
        rows, total = await paginate(session, query, limit, offset)
        return Page(items=[McpServerOut.of(r) for r in rows], total=total, limit=limit, offset=offset)

    @get("/{server_id:uuid}", summary="Get one MCP server")
    async def get_one(self, server_id: FromPath[uuid.UUID], session: SessionDep) -> McpServerOut:
        return McpServerOut.of(await _get(session, server_id))

    @patch("/{server_id:uuid}", summary="Update an MCP server (status resets to inactive until re-checked)")
    async def update(
        self,
        server_id: FromPath[uuid.UUID],
        data: JSONBody[McpServerPatch],
        session: SessionDep,
        services: ServicesDep,
    ) -> McpServerOut:
        row = await _get(session, server_id)
        if data.name is not msgspec.UNSET:
            row.name = data.name.strip()
        if data.url is not msgspec.UNSET:
            row.url = data.url
        if data.transport is not msgspec.UNSET:
            row.transport = normalise_transport(data.transport)
        row.status = "inactive"
        try:
            await session.commit()
        except IntegrityError as exc:
            await session.rollback()
            raise _conflict(exc, str(data.name), str(data.url)) from None
        await refreshed(session, row, "MCP server")
        await request_check(services, row.id)
        return McpServerOut.of(row)

    @delete("/{server_id:uuid}", status_code=204, summary="Delete an MCP server (cascades to its links)")
    async def remove(self, server_id: FromPath[uuid.UUID], session: SessionDep) -> None:
        row = await _get(session, server_id)
        await session.delete(row)
        await session.commit()

    @post("/{server_id:uuid}/check", status_code=202, summary="Queue a connectivity check")
    async def check(
        self, server_id: FromPath[uuid.UUID], session: SessionDep, services: ServicesDep
    ) -> CheckAccepted:
        await _get(session, server_id)
        if not await request_check(services, server_id):
            raise ServiceUnavailableError("the work queue is unavailable; try again shortly")
        return CheckAccepted(server_id=server_id, status="queued", detail="a worker will update the status")

    @post(
        "/import",
        status_code=200,
        summary="Import url servers from a Claude Desktop / Cursor / VS Code mcp.json",
    )
    async def import_config(
        self, data: JSONBody[dict[str, Any]], session: SessionDep, services: ServicesDep
    ) -> ImportResult:
        entries = data.get("mcpServers", data.get("servers"))
        if not isinstance(entries, dict):
            raise InvalidInputError(
                "mcpServers", 'expected an object like {"mcpServers": {"name": {"url": ...}}}'
            )
        created: list[McpServerOut] = []
        existing: list[str] = []
        skipped: list[ImportSkipped] = []
        for name, entry in entries.items():
            parsed = _import_entry(str(name), entry)
            if isinstance(parsed, ImportSkipped):
                skipped.append(parsed)
                continue
            found = await session.scalar(
                select(McpServer).where((McpServer.name == parsed.name) | (McpServer.url == parsed.url))
            )
            if found is not None:
                existing.append(parsed.name)
                continue
            created.append(McpServerOut.of(await create_server(session, services, parsed)))
        return ImportResult(created=created, existing=existing, skipped=skipped)


def _import_entry(name: str, entry: Any) -> McpServerCreate | ImportSkipped:
    """One mcp.json entry → a server to create, or the reason it cannot be one (stdio, bad url, ...)."""
    if not isinstance(entry, dict):
        return ImportSkipped(name=name, reason="entry is not an object")
    url = entry.get("url") or entry.get("serverUrl")
    if not url:
        return ImportSkipped(name=name, reason="no url: command (stdio) servers cannot be reached by workers")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    if kind in ("sse",):
        transport = "sse"
    elif kind in ("", "http", "streamable-http", "streamable_http", "streamablehttp"):
        transport = "sse" if not kind and str(url).rstrip("/").endswith("/sse") else "streamable-http"
    else:
        return ImportSkipped(name=name, reason=f"unsupported transport {kind!r}")
    try:
        return msgspec.convert({"name": name, "url": url, "transport": transport}, McpServerCreate)
    except msgspec.ValidationError as exc:
        return ImportSkipped(name=name, reason=str(exc))
