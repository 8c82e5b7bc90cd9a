"""Liveness (the process answers) and readiness (PostgreSQL and NATS answer)."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Controller, Response, get
from sqlalchemy import text

from api_service.common import Services, ServicesDep
from shared.messaging import RUNS_DURABLE, RUNS_STREAM

CHECK_TIMEOUT_SECONDS = 2.0


class Live(msgspec.Struct):
    status: str


class Ready(msgspec.Struct):
    status: str
    database: str
    nats: str
    workers_waiting: int | None = None


class HealthController(Controller):
    path = "/health"
    tags = ["health"]

    @get("/live", summary="The API process is up")
    async def live(self) -> Live:
        return Live(status="live")

    @get("/ready", summary="PostgreSQL and NATS answer (503 when either does not)")
    async def ready(self, services: ServicesDep) -> Response[Ready]:
        database = await _check_database(services)
        nats_state, waiting = await _check_nats(services)
        ok = database == "ok" and nats_state == "ok"
        body = Ready(
            status="ready" if ok else "not ready", database=database, nats=nats_state, workers_waiting=waiting
        )
        return Response(body, status_code=200 if ok else 503)


async def _check_database(services: Services) -> str:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS), services.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"
    return "ok"


async def _check_nats(services: Services) -> tuple[str, int | None]:
    if not services.nats.is_connected:
        return "unavailable (disconnected)", None
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            await services.nats.flush(timeout=int(CHECK_TIMEOUT_SECONDS))
            try:
                info = await services.js.consumer_info(
                    RUNS_STREAM, RUNS_DURABLE, timeout=CHECK_TIMEOUT_SECONDS
                )
                waiting: int | None = info.num_waiting
            except Exception:
                waiting = None  # no worker has created the consumer yet: NATS itself is fine
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})", None
    return "ok", waiting
