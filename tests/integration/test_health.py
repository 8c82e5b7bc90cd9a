"""Liveness and readiness: 200 when PostgreSQL and NATS answer, 503 (and still alive) when either does not."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from shared.embedded import EmbeddedNats, free_port
from shared.settings import Settings
from tests.support.background import api_server

pytestmark = pytest.mark.integration

POLL_SECONDS = 15.0


def wait_for_ready_status(client: httpx.Client, status_code: int) -> dict[str, Any]:
    """Poll /health/ready until it answers status_code (or fail after POLL_SECONDS)."""
    deadline = time.monotonic() + POLL_SECONDS
    response = client.get("/health/ready")
    while response.status_code != status_code and time.monotonic() < deadline:
        time.sleep(0.2)
        response = client.get("/health/ready")
    assert response.status_code == status_code, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_live_answers_200(api: httpx.AsyncClient) -> None:
    """GET /health/live answers 200 while the process runs."""
    response = await api.get("/health/live")

    assert response.status_code == 200
    assert response.json() == {"status": "live"}


async def test_ready_answers_200_when_database_and_nats_answer(api: httpx.AsyncClient) -> None:
    """GET /health/ready answers 200 with database ok and nats ok on the running stack."""
    response = await api.get("/health/ready")

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["database"], body["nats"]) == ("ready", "ok", "ok")


def test_ready_answers_503_when_postgres_is_unreachable(settings: Settings) -> None:
    """With PostgreSQL unreachable the app still starts, stays live, and readiness is 503 naming the database."""
    closed = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/mcpeval"
    broken = msgspec.structs.replace(settings, database_url=closed)

    with api_server(broken) as url, httpx.Client(base_url=url, timeout=30) as client:
        live = client.get("/health/live")
        ready = client.get("/health/ready")

    assert live.status_code == 200
    assert ready.status_code == 503, ready.text
    body = ready.json()
    assert body["status"] == "not ready"
    assert body["database"].startswith("unavailable")
    assert body["nats"] == "ok"


def test_ready_answers_503_when_nats_goes_away(settings: Settings, tmp_path: Path) -> None:
    """Readiness is 200 with a throwaway NATS up, then 503 naming NATS once it stops; liveness stays 200."""
    nats = EmbeddedNats(tmp_path / "nats-throwaway")
    nats.start()
    try:
        own = msgspec.structs.replace(settings, nats_url=nats.url)
        with api_server(own) as url, httpx.Client(base_url=url, timeout=30) as client:
            before = wait_for_ready_status(client, 200)
            nats.stop()
            after = wait_for_ready_status(client, 503)
            live = client.get("/health/live")
    finally:
        nats.stop()

    assert (before["database"], before["nats"]) == ("ok", "ok")
    assert after["status"] == "not ready"
    assert after["database"] == "ok"
    assert after["nats"].startswith("unavailable")
    assert live.status_code == 200
