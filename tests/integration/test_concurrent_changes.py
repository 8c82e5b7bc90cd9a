"""Requests racing each other end in 404/409 problems, never a 500."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api_service.common import refreshed
from api_service.errors import NotFoundError
from shared.db.engine import make_sessionmaker
from shared.db.tables import McpServer

pytestmark = pytest.mark.integration


async def test_refresh_of_a_row_deleted_meanwhile_is_a_404(clean_db: AsyncEngine) -> None:
    """Re-reading a row another connection deleted raises NotFoundError, not an internal error."""
    async with make_sessionmaker(clean_db)() as session:
        row = McpServer(name="gone", url="http://127.0.0.1:9/gone", transport="sse")
        session.add(row)
        await session.commit()
        async with clean_db.begin() as conn:
            await conn.execute(text("DELETE FROM mcp_servers WHERE name = 'gone'"))

        with pytest.raises(NotFoundError, match="deleted by another request"):
            await refreshed(session, row, "MCP server")


async def test_patch_and_delete_racing_never_answer_500(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """Many PATCH and DELETE requests on the same servers at once answer 2xx, 404 or 409 only."""
    ids = []
    for index in range(10):
        created = await api.post(
            "/mcp-servers", json={"name": f"race-{index}", "url": f"http://127.0.0.1:9/race/{index}"}
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])

    requests = []
    for index, server_id in enumerate(ids):
        for turn in range(3):
            requests.append(api.patch(f"/mcp-servers/{server_id}", json={"name": f"race-{index}-{turn}"}))
        requests.append(api.delete(f"/mcp-servers/{server_id}"))
    answers = await asyncio.gather(*requests)

    assert {a.status_code for a in answers} <= {200, 204, 404, 409}
    for answer in answers:
        if answer.status_code >= 400:
            assert answer.headers["content-type"].startswith("application/problem+json")
