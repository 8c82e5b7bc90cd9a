"""GET /metrics: Prometheus exposition of what operators watch — runs by state, servers by state, queue depth.

Values are read at scrape time from PostgreSQL (the source of truth) and JetStream, so every API replica
reports the same numbers and nothing is lost on restart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from litestar import Controller, Response, get
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from api_service.common import ServicesDep, SessionDep
from shared.db.tables import RUN_STATUSES, SERVER_STATUSES, McpServer, TestRun
from shared.messaging import CHECKS_DURABLE, CHECKS_STREAM, RUNS_DURABLE, RUNS_STREAM

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Snapshot(Collector):
    """Metric families computed before the scrape is rendered (collect() itself cannot await)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class PrometheusController(Controller):
    path = "/metrics"
    tags = ["health"]

    @get(
        "/",
        summary="Prometheus metrics: runs and servers by status, queue and consumer depth",
        media_type=CONTENT_TYPE,
    )
    async def scrape(self, session: SessionDep, services: ServicesDep) -> Response[bytes]:
        runs = GaugeMetricFamily("mcpeval_test_runs", "Test runs by status.", labels=["status"])
        by_status = dict(
            (await session.execute(select(TestRun.status, func.count()).group_by(TestRun.status))).all()
        )
        for status in RUN_STATUSES:
            runs.add_metric([status], float(by_status.get(status, 0)))
        verdicts = GaugeMetricFamily(
            "mcpeval_test_run_classifications", "Completed runs by classification.", labels=["classification"]
        )
        by_class = dict(
            (
                await session.execute(
                    select(TestRun.classification, func.count())
                    .where(TestRun.status == "completed")
                    .group_by(TestRun.classification)
                )
            ).all()
        )
        for label in ("TP", "FP", "TN", "FN"):
            verdicts.add_metric([label], float(by_class.get(label, 0)))
        servers = GaugeMetricFamily(
            "mcpeval_mcp_servers", "Registered MCP servers by status.", labels=["status"]
        )
        by_server = dict(
            (await session.execute(select(McpServer.status, func.count()).group_by(McpServer.status))).all()
        )
        for status in SERVER_STATUSES:
            servers.add_metric([status], float(by_server.get(status, 0)))
        families: list[Metric] = [runs, verdicts, servers]
        families.extend(await _queue_families(services))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(families))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)


async def _queue_families(services: ServicesDep) -> list[Metric]:
    stored = GaugeMetricFamily(
        "mcpeval_queue_messages", "Messages stored in a work-queue stream.", labels=["stream"]
    )
    pending = GaugeMetricFamily(
        "mcpeval_consumer_pending", "Messages not yet delivered to any worker.", labels=["consumer"]
    )
    in_flight = GaugeMetricFamily(
        "mcpeval_consumer_ack_pending",
        "Messages delivered to a worker and not yet acknowledged.",
        labels=["consumer"],
    )
    waiting = GaugeMetricFamily(
        "mcpeval_consumer_waiting_pulls",
        "Outstanding pull requests (idle worker capacity).",
        labels=["consumer"],
    )
    for stream, durable in ((RUNS_STREAM, RUNS_DURABLE), (CHECKS_STREAM, CHECKS_DURABLE)):
        with contextlib.suppress(Exception):  # NATS down or no worker yet: report what is known
            info = await services.js.stream_info(stream)
            stored.add_metric([stream], float(info.state.messages))
        with contextlib.suppress(Exception):
            consumer = await services.js.consumer_info(stream, durable, timeout=2)
            pending.add_metric([durable], float(consumer.num_pending or 0))
            in_flight.add_metric([durable], float(consumer.num_ack_pending or 0))
            waiting.add_metric([durable], float(consumer.num_waiting or 0))
    return [stored, pending, in_flight, waiting]
