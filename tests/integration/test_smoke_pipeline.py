"""The pipeline end to end: register demo servers, create a case, run it with the baseline, read the result."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle

pytestmark = pytest.mark.integration


async def test_baseline_run_completes_with_a_stored_evaluation(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """A baseline run of a registered case completes and stores one evaluation and the tool snapshot."""
    for handle in demo_servers:
        created = await api.post(
            "/mcp-servers", json={"name": handle.name, "url": handle.url, "transport": handle.transport}
        )
        assert created.status_code == 201, created.text
    case = await api.post(
        "/test-cases",
        json={
            "name": "list buckets",
            "query": "List the S3 buckets in the account",
            "available_mcp_servers": ["aws", "github"],
            "expected_mcp_server_name": "aws",
            "expected_tool_name": "list_s3_buckets",
        },
    )
    assert case.status_code == 201, case.text

    run = await api.post(
        f"/test-cases/{case.json()['id']}/run?wait=20",
        json={"model_config": {"provider": "baseline", "model": "x"}},
    )

    assert run.status_code == 200, run.text
    body = run.json()
    assert body["status"] == "completed"
    assert body["classification"] == "TP"
    assert body["selected_tool"]["mcp_server_name"] == "aws"
    async with clean_db.connect() as conn:
        results = await conn.scalar(text("SELECT count(*) FROM evaluation_results"))
        tools = await conn.scalar(
            text("SELECT count(*) FROM tool_definitions WHERE test_run_id = :id"), {"id": body["id"]}
        )
    assert results == 1
    assert tools is not None
    assert tools > 5
