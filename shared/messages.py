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
    """Request-reply body for similarity analysis done by a worker (the API never reaches out).

    `payload` is a `shared.similarity_wire.SimilarityJob` (msgspec JSON, zlib-compressed when
    `compression == "zlib"`); `sealed_api_key` is sealed for `request_id`; a worker skips the request
    once `deadline` (epoch seconds, 0 = none) has passed: nobody waits for the answer any more."""

    operation: str
    payload: bytes
    sealed_api_key: str | None = None
    request_id: str = ""
    deadline: float = 0.0
    compression: str | None = None


class SimilarityReply(msgspec.Struct, kw_only=True):
    """`payload` is the JSON response body (zlib-compressed when `compression == "zlib"`); on failure
    `status` is the HTTP status the API answers with and `field` the request field at fault, if any."""

    ok: bool
    payload: bytes = b""
    error: str | None = None
    status: int = 200
    field: str | None = None
    compression: str | None = None
