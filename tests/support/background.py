"""Run the API (a real uvicorn server) and workers in background threads, each with its own event loop,
so a test's own loop never blocks them (and they never block each other)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import uvicorn

from api_service.app import create_app
from shared.embedded import free_port, wait_for_port
from shared.settings import Settings
from worker_service.main import run_worker

# Longer than a client's idle expiry (httpx: 5 s), so the server never closes a connection a client reuses.
KEEP_ALIVE_SECONDS = 30


@contextlib.contextmanager
def loop_thread(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]], name: str) -> Iterator[None]:
    """Run main(stop) in a daemon thread; on exit set stop and join (errors are re-raised here)."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        box["loop"] = loop
        stop = asyncio.Event()
        box["stop"] = stop
        ready.set()
        try:
            loop.run_until_complete(main(stop))
        except BaseException as exc:
            box["error"] = exc
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield
    finally:
        loop: asyncio.AbstractEventLoop = box["loop"]
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(box["stop"].set)
        thread.join(60)
        if "error" in box:
            raise box["error"]


@contextlib.contextmanager
def api_server(settings: Settings) -> Iterator[str]:
    """The API on a free loopback port; yields its base url."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)

    async def main(stop: asyncio.Event) -> None:
        serving = asyncio.create_task(server.serve())
        await stop.wait()
        server.should_exit = True
        await serving

    with loop_thread(main, "mcpeval-api"):
        wait_for_port("127.0.0.1", port, 30)
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def worker_thread(settings: Settings, name: str = "mcpeval-worker") -> Iterator[None]:
    """One worker (the real run_worker) until the block ends; it drains like on SIGTERM."""

    async def main(stop: asyncio.Event) -> None:
        await run_worker(settings, stop)

    with loop_thread(main, name):
        yield
