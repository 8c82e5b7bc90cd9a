"""`mcpeval up` as a user runs it: a real process tree (embedded PostgreSQL + NATS, API, worker) that answers
ready, keeps its data across restarts, and stops everything it started on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.embedded import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _start(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPEVAL_")}
    env.update(
        {"MCPEVAL_DATA_DIR": str(data_dir), "MCPEVAL_API_PORT": str(port), "MCPEVAL_LOG_LEVEL": "WARNING"}
    )
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shared.cli", "up"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_ready(
    url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mcpeval up exited with {proc.returncode}:\n{log.read_text()}")
        try:
            ready = httpx.get(f"{url}/health/ready", timeout=2)
            if ready.status_code == 200:
                body: dict[str, object] = ready.json()
                return body
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"not ready within {timeout}s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def _children_of_data_dir(data_dir: Path) -> list[str]:
    """Command lines of live processes that still use the data folder (postgres, nats-server)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_dir) in cmdline and ("postgres" in cmdline or "nats-server" in cmdline):
            found.append(cmdline)
    return found


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mcpeval-up-"))
    os.chmod(path, 0o755)  # noqa: S103 - the embedded PostgreSQL runs as `nobody` when we are root
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_up_serves_ready_keeps_data_and_stops_everything_on_sigterm(data_dir: Path) -> None:
    """up answers /health/ready, a second up finds the first one's data, and SIGTERM leaves nothing running."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = data_dir / "up.log"

    first = _start(data_dir / "state", port, log)
    try:
        ready = _wait_ready(url, first, log)
        created = httpx.post(
            f"{url}/mcp-servers",
            json={"name": "kept", "url": "http://127.0.0.1:9/mcp", "transport": "streamable-http"},
            timeout=10,
        )
    finally:
        first_code = _stop(first)

    assert ready["database"] == "ok"
    assert ready["nats"] == "ok"
    assert created.status_code == 201, created.text
    assert first_code == 0, log.read_text()
    assert _children_of_data_dir(data_dir) == []
    assert (data_dir / "state" / "secret.key").exists()

    second = _start(data_dir / "state", port, log)
    try:
        _wait_ready(url, second, log)
        listed = httpx.get(f"{url}/mcp-servers", timeout=10).json()
    finally:
        second_code = _stop(second)

    assert [s["name"] for s in listed["items"]] == ["kept"]
    assert second_code == 0, log.read_text()
    assert _children_of_data_dir(data_dir) == []
    printed = log.read_text()
    assert "API         http://127.0.0.1:" in printed
    assert "stopped." in printed


def test_up_refuses_a_busy_api_port_with_a_clear_message(data_dir: Path) -> None:
    """When the API port is taken, up exits 2 saying which port and which variable to change."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        log = data_dir / "busy.log"
        proc = _start(data_dir / "state", port, log)
        code = proc.wait(timeout=90)

    assert code == 2
    assert f"127.0.0.1:{port} is in use" in log.read_text()
    assert "MCPEVAL_API_PORT" in log.read_text()
    assert _children_of_data_dir(data_dir) == []
