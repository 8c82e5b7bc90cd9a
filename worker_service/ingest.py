"""Talk to MCP servers with the official `mcp` client: connect, initialize, list every tool.

Tool names, descriptions and schemas are untrusted input: they are size-capped and cleaned of what
PostgreSQL cannot store, never executed, never formatted into anything but data.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import msgspec
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

MAX_TOOLS_PER_SERVER = 1000
MAX_DESCRIPTION_CHARS = 20_000
MAX_SCHEMA_BYTES = 256_000
MAX_LIST_PAGES = 50


class IngestError(Exception):
    """A server could not be reached or did not answer like an MCP server. `transient` says retry."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class IngestedTool(msgspec.Struct):
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None


def _clean_text(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else ""
    return text.replace("\x00", "")[:limit]


def _clean_json(value: Any) -> Any:
    """Drop NUL characters anywhere in a JSON value (jsonb cannot hold them)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    return value


def _clean_schema(schema: object) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    cleaned: dict[str, Any] = _clean_json(schema)
    if len(msgspec.json.encode(cleaned)) > MAX_SCHEMA_BYTES:
        raise IngestError(f"a tool's input schema is larger than {MAX_SCHEMA_BYTES} bytes", transient=False)
    return cleaned


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one per MCP session costs tens of milliseconds of CPU."""
    return ssl.create_default_context()


def _http_client_factory(seconds: float) -> Any:
    def make(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,  # the SDK's default is replaced by ours below
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        # Our own client: bounded timeouts, no redirect following, no proxy from the environment.
        return httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(seconds, read=max(seconds, 30.0)),
            auth=auth,
            follow_redirects=False,
            trust_env=False,
            verify=_tls_context(),
        )

    return make


@contextlib.asynccontextmanager
async def open_session(url: str, transport: str, timeout: float) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session over `sse` or `streamable-http`."""
    factory = _http_client_factory(timeout)
    if transport == "sse":
        streams = sse_client(
            url, timeout=timeout, sse_read_timeout=max(timeout, 30.0), httpx_client_factory=factory
        )
        async with (
            streams as (read, write),
            ClientSession(read, write, read_timeout_seconds=timeout) as session,
        ):
            await session.initialize()
            yield session
    else:
        async with (
            factory() as http_client,
            streamable_http_client(url, http_client=http_client) as (read, write),
            ClientSession(read, write, read_timeout_seconds=timeout) as session,
        ):
            await session.initialize()
            yield session


def _describe(exc: BaseException) -> tuple[str, bool]:
    """A short, secret-free reason and whether retrying may help."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, IngestError):
        return str(exc), exc.transient
    if isinstance(exc, httpx2.ConnectError | ConnectionError):
        return "connection refused or host unreachable", True
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return "timed out", True
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        return f"HTTP {status} from the server", status >= 500 or status == 429
    if isinstance(exc, httpx2.HTTPError):
        return f"HTTP error ({type(exc).__name__})", True
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}{': ' + text if text else ''}", False


async def list_tools(url: str, transport: str, timeout: float) -> list[IngestedTool]:
    """Every tool the server lists (following pagination), or IngestError saying why not."""
    try:
        async with asyncio.timeout(timeout * 3), open_session(url, transport, timeout) as session:
            tools: list[IngestedTool] = []
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                if cursor:
                    from mcp.types import PaginatedRequestParams

                    result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
                else:
                    result = await session.list_tools()
                for tool in result.tools:
                    if len(tools) >= MAX_TOOLS_PER_SERVER:
                        raise IngestError(
                            f"server lists more than {MAX_TOOLS_PER_SERVER} tools", transient=False
                        )
                    name = _clean_text(tool.name, 200).strip()
                    if not name:
                        continue
                    tools.append(
                        IngestedTool(
                            name=name,
                            description=_clean_text(tool.description, MAX_DESCRIPTION_CHARS),
                            input_schema=_clean_schema(tool.input_schema),
                            output_schema=_clean_schema(tool.output_schema) if tool.output_schema else None,
                        )
                    )
                cursor = result.next_cursor
                if not cursor:
                    break
            return tools
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            raise
        reason, transient = _describe(exc)
        raise IngestError(reason, transient) from None


class ToolLister:
    """Fetches server tool lists for runs, coalescing concurrent fetches of the same server.

    Runs that start while a fetch of their server is in flight share its result, so a burst of runs costs
    one MCP session per server, not one per run, and every run still sees tools fetched after it started.
    With `ttl_seconds` > 0 a successful result is also reused for that long. Failures are never cached.
    """

    def __init__(self, timeout: float, ttl_seconds: float = 0.0) -> None:
        self._timeout = timeout
        self._ttl = ttl_seconds
        self._inflight: dict[tuple[str, str], asyncio.Future[list[IngestedTool]]] = {}
        self._cache: dict[tuple[str, str], tuple[float, list[IngestedTool]]] = {}

    async def list(self, url: str, transport: str) -> list[IngestedTool]:
        key = (url, transport)
        loop = asyncio.get_running_loop()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        pending = self._inflight.get(key)
        if pending is None:
            pending = loop.create_future()
            self._inflight[key] = pending
            try:
                tools = await list_tools(url, transport, self._timeout)
            except asyncio.CancelledError:
                pending.cancel()  # waiters fetch for themselves (below) rather than inherit our cancellation
                raise
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: no "never retrieved" warning when nobody else waits
                raise
            else:
                pending.set_result(tools)
                if self._ttl > 0:
                    self._cache[key] = (loop.time() + self._ttl, tools)
                return tools
            finally:
                self._inflight.pop(key, None)
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if pending.cancelled() and task is not None and not task.cancelling():
                return await self.list(url, transport)
            raise
