"""GET /metrics speaks the Prometheus text format and counts what is in PostgreSQL and JetStream."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle
from tests.support.pipeline import create_case, register_servers

pytestmark = pytest.mark.integration


def _samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


async def test_metrics_count_runs_servers_and_queue(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """After one completed baseline run the scrape shows it, the servers, and the run consumer."""
    await register_servers(api, demo_servers)
    case_id = await create_case(
        api,
        query="List the S3 buckets in the account",
        servers=["aws"],
        expected_server="aws",
        expected_tool="list_s3_buckets",
    )
    run = await api.post(
        f"/test-cases/{case_id}/run?wait=20", json={"model_config": {"provider": "baseline", "model": "b"}}
    )
    assert run.json()["status"] == "completed", run.text

    scraped = await api.get("/metrics")

    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    samples = _samples(scraped.text)
    assert samples[("mcpeval_test_runs", (("status", "completed"),))] == 1.0
    assert samples[("mcpeval_test_runs", (("status", "pending"),))] == 0.0
    assert samples[("mcpeval_test_run_classifications", (("classification", "TP"),))] == 1.0
    registered = sum(v for (name, _), v in samples.items() if name == "mcpeval_mcp_servers")
    assert registered == len(demo_servers)
    assert ("mcpeval_consumer_ack_pending", (("consumer", "run-workers"),)) in samples
    assert ("mcpeval_queue_messages", (("stream", "RUNS"),)) in samples
