"""Connectivity checks: connect, initialize, list tools; record active/failed, when, and why."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from sqlalchemy import update

from shared.db.tables import McpServer
from shared.messages import CheckRequest
from worker_service.ingest import IngestError, list_tools
from worker_service.runs import WorkerContext

log = logging.getLogger("mcpeval.worker")


async def execute_check(ctx: WorkerContext, request: CheckRequest) -> None:
    """Check one server and store the verdict (a deleted server is simply skipped)."""
    try:
        server_id = uuid.UUID(request.server_id)
    except ValueError:
        return
    async with ctx.sessionmaker() as session:
        server = await session.get(McpServer, server_id)
        if server is None:
            return
        url, transport, name = server.url, server.transport, server.name
    now = datetime.now(UTC)
    try:
        tools = await list_tools(url, transport, ctx.settings.mcp_timeout_seconds)
    except IngestError as exc:
        values: dict[str, object] = {"status": "failed", "last_error": str(exc), "last_checked_at": now}
        log.info("server %s check failed: %s", name, exc)
    else:
        values = {"status": "active", "last_error": None, "last_checked_at": now, "last_connected_at": now}
        log.info("server %s is active (%d tools)", name, len(tools))
    async with ctx.sessionmaker() as session:
        # Only if the server was not re-pointed meanwhile: that edit queued its own check.
        await session.execute(
            update(McpServer)
            .where(McpServer.id == server_id, McpServer.url == url, McpServer.transport == transport)
            .values(**values)
        )
        await session.commit()
