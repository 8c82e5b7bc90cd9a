"""Messages on the wire (msgspec JSON). New fields always get defaults: messages cross versions."""

from __future__ import annotations

import msgspec


class RunRequest(msgspec.Struct, kw_only=True):
    """Execute one test run. Everything but the key is read from Postgres by run_id."""

    run_id: str
    sealed_api_key: str | None = None


class CheckRequest(msgspec.Struct, kw_only=True):
    """Check that one registered MCP server answers initialize + list_tools."""

    server_id: str
    requested_at: float = 0.0


class RunFinished(msgspec.Struct, kw_only=True):
    """Published (core NATS, not persisted) after a run's final state is committed."""

    run_id: str
    status: str


class SimilarityRequest(msgspec.Struct, kw_only=True):
    """Request-reply body for similarity analysis done by a worker (the API never reaches out)."""

    operation: str
    payload: bytes
    sealed_api_key: str | None = None


class SimilarityReply(msgspec.Struct, kw_only=True):
    ok: bool
    payload: bytes = b""
    error: str | None = None
    status: int = 200
