"""Serve demo tool catalogs as real MCP servers (official `mcp` 2.3 SDK) on loopback.

Each `DemoServerSpec` becomes one low-level `mcp.server.Server` (the low-level API, because `MCPServer` derives
input schemas from Python signatures and we must advertise the catalog's JSON Schemas unchanged) behind its own
uvicorn server and port. All of them run in ONE background thread with its own event loop.

Client-side URLs (verified with mcp 2.3.0):

- `streamable-http`: `http://HOST:PORT/mcp` (`/mcp/` costs a 307 redirect, which the SDK follows because it
  stays on the same origin; register the URL without the slash). Connect with
  `mcp.Client(url)`, or `streamable_http_client(url, http_client=httpx2.AsyncClient(...))` which yields
  `(read, write)` for `ClientSession(read, write)`; then `await session.initialize()`.
- `sse`: `http://HOST:PORT/sse` - the GET event stream; the server then announces the POST endpoint
  `/messages/?session_id=...` itself. Connect with `sse_client(url, timeout=..., sse_read_timeout=...)`,
  which yields `(read, write)` for `ClientSession`; then `await session.initialize()`. Or
  `mcp.Client(sse_client(url, ...))` - a plain string given to `mcp.Client` always means streamable HTTP.

Calling a tool validates the arguments against the tool's schema and answers a small canned text result (an
`is_error` result when the arguments do not validate); an unknown tool name is an MCP protocol error.

Foreground mode: `python -m shared.demo.servers --port-base 9100` prints `name url transport` lines and runs
until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.sse import SseServerTransport
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from shared.demo.catalog import DEMO_SERVERS, DemoServerSpec, Transport

__all__ = [
    "SSE_PATH",
    "STREAMABLE_HTTP_PATH",
    "DemoServerHandle",
    "bind_socket",
    "build_demo_app",
    "build_mcp_server",
    "run_asgi_apps",
    "run_demo_servers",
]

STREAMABLE_HTTP_PATH = "/mcp"
SSE_PATH = "/sse"
SSE_MESSAGE_PATH = "/messages/"

_STARTUP_TIMEOUT_S = 15.0
# SSE streams stay open until the client leaves; a client that never leaves must not hold shutdown hostage.
_GRACEFUL_SHUTDOWN_S = 2


@dataclass(frozen=True, slots=True)
class DemoServerHandle:
    """A running demo server: the name it registers under, the URL a client connects to and its transport."""

    name: str
    url: str
    transport: Transport


def build_mcp_server(spec: DemoServerSpec) -> Server[Any]:
    """Return a low-level MCP server that lists exactly `spec.tools` and answers calls with canned text."""
    tools = [
        types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema)
        for tool in spec.tools
    ]
    validators = {
        tool.name: jsonschema.Draft202012Validator(
            tool.input_schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        for tool in spec.tools
    }

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        validator = validators.get(params.name)
        if validator is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        arguments = params.arguments or {}
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            text = "; ".join(
                f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
            )
            return types.CallToolResult(
                content=[types.TextContent(text=f"invalid arguments for {params.name}: {text}")],
                is_error=True,
            )
        canned = f"[demo {spec.name}] {params.name} ok: {json.dumps(arguments, sort_keys=True)}"
        return types.CallToolResult(content=[types.TextContent(text=canned)])

    def input_schema(name: str) -> Mapping[str, Any] | None:
        for tool in spec.tools:
            if tool.name == name:
                return tool.input_schema
        return None

    return Server(
        spec.name,
        version="1.0.0",
        description=spec.description or None,
        get_tool_input_schema=input_schema,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _sse_app(server: Server[Any]) -> Starlette:
    """An SSE app for a low-level server, the way `MCPServer.sse_app` builds one (which low-level lacks)."""
    # No explicit security settings: DNS-rebinding protection then stays off, so a demo server bound to
    # 0.0.0.0 remains reachable under any host name; loopback-only use is the default anyway.
    sse = SseServerTransport(SSE_MESSAGE_PATH)

    async def sse_endpoint(request: Request) -> Response:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return Response()

    return Starlette(
        routes=[
            Route(SSE_PATH, endpoint=sse_endpoint, methods=["GET"]),
            Mount(SSE_MESSAGE_PATH, app=sse.handle_post_message),
        ]
    )


def build_demo_app(spec: DemoServerSpec, host: str = "127.0.0.1") -> ASGIApp:
    """Return the ASGI app serving `spec` over its transport (`/mcp` or `/sse`); build a fresh one per run."""
    server = build_mcp_server(spec)
    if spec.transport == "sse":
        return _sse_app(server)
    return server.streamable_http_app(streamable_http_path=STREAMABLE_HTTP_PATH, host=host)


def bind_socket(host: str, port: int = 0, backlog: int = 1024) -> socket.socket:
    """Return a non-blocking TCP socket listening on `(host, port)` (port 0 = a free port).

    Binding in the caller's thread means the port is known (and owned) before any server thread starts.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio enables TCP_NODELAY on accepted sockets only when their proto says TCP;
    # with proto 0 every response pays Nagle + delayed-ACK (~40 ms on loopback).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def run_asgi_apps(
    apps: Sequence[tuple[ASGIApp, socket.socket]],
    *,
    thread_name: str = "asgi-servers",
    startup_timeout: float = _STARTUP_TIMEOUT_S,
    graceful_shutdown: int = _GRACEFUL_SHUTDOWN_S,
    access_log: bool = False,
) -> Iterator[None]:
    """Serve each `(app, bound socket)` with uvicorn in ONE background thread; stop them all on exit.

    Returns (enters) only once every server has finished its lifespan startup and listens; raises RuntimeError
    when one fails to start within `startup_timeout`. On exit the servers shut down (open connections get
    `graceful_shutdown` seconds), the thread is joined and the sockets are closed.
    """
    ready = threading.Event()
    failures: list[BaseException] = []
    loop_box: list[asyncio.AbstractEventLoop] = []
    stop_box: list[asyncio.Event] = []
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                app,
                lifespan="auto",
                log_level="warning",
                access_log=access_log,
                # No websockets: nothing here needs them and importing a ws library is a warning risk.
                ws="none",
                http="h11",
                timeout_graceful_shutdown=graceful_shutdown,
            )
        )
        for app, _ in apps
    ]

    async def main() -> None:
        stop = asyncio.Event()
        loop_box.append(asyncio.get_running_loop())
        stop_box.append(stop)
        tasks = [
            asyncio.create_task(srv.serve(sockets=[sock]))
            for srv, (_, sock) in zip(servers, apps, strict=True)
        ]
        try:
            while not all(srv.started for srv in servers):
                if any(t.done() for t in tasks):
                    # A server returned (or died) before it started: startup failed.
                    break
                await asyncio.sleep(0.005)
            if all(srv.started for srv in servers):
                ready.set()
                await stop.wait()
        finally:
            for srv in servers:
                srv.should_exit = True
            results = await asyncio.gather(*tasks, return_exceptions=True)
            failures.extend(r for r in results if isinstance(r, BaseException))
            ready.set()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the caller's thread, which owns error handling
            failures.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name=thread_name, daemon=True)
    thread.start()
    try:
        if not ready.wait(startup_timeout):
            raise RuntimeError(f"ASGI servers did not start within {startup_timeout}s")
        if not all(srv.started for srv in servers):
            raise RuntimeError(f"ASGI servers failed to start: {failures!r}")
        yield
    finally:
        if loop_box and stop_box:
            with contextlib.suppress(RuntimeError):  # loop already closed: the thread has finished
                loop_box[0].call_soon_threadsafe(stop_box[0].set)
        thread.join(graceful_shutdown + 10.0)
        for _, sock in apps:
            sock.close()
        if thread.is_alive():
            raise RuntimeError(f"thread {thread_name!r} did not stop")


@contextlib.contextmanager
def run_demo_servers(
    specs: Sequence[DemoServerSpec] = DEMO_SERVERS,
    host: str = "127.0.0.1",
    ports: Mapping[str, int] | None = None,
    *,
    startup_timeout: float = _STARTUP_TIMEOUT_S,
) -> Iterator[list[DemoServerHandle]]:
    """Run `specs` as MCP servers on `host` (one port each) in one background thread; yield their handles.

    `ports` maps a spec name to a port; missing names (or `None`) get a free port. Yields only when every server
    accepts connections; on exit stops them all and joins the thread. Handles come in the order of `specs`.
    """
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate server names in {names}")
    ports = ports or {}
    sockets: list[socket.socket] = []
    try:
        for spec in specs:
            sockets.append(bind_socket(host, ports.get(spec.name, 0)))
        handles = []
        for spec, sock in zip(specs, sockets, strict=True):
            port = sock.getsockname()[1]
            path = SSE_PATH if spec.transport == "sse" else STREAMABLE_HTTP_PATH
            handles.append(
                DemoServerHandle(spec.name, f"http://{_url_host(host)}:{port}{path}", spec.transport)
            )
        apps = [(build_demo_app(spec, host), sock) for spec, sock in zip(specs, sockets, strict=True)]
        with run_asgi_apps(apps, thread_name="demo-mcp-servers", startup_timeout=startup_timeout):
            yield handles
    finally:
        for sock in sockets:
            sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bundled demo servers in the foreground until SIGINT/SIGTERM; print one line per server."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.demo.servers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port-base", type=int, default=0, help="first port (0 = pick free ports)")
    args = parser.parse_args(argv)
    ports = {spec.name: args.port_base + i for i, spec in enumerate(DEMO_SERVERS)} if args.port_base else None

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with run_demo_servers(DEMO_SERVERS, host=args.host, ports=ports) as handles:
            for handle in handles:
                print(f"{handle.name} {handle.url} {handle.transport}", flush=True)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
