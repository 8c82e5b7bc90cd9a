"""Benchmark of the whole run pipeline: runs/second through ONE worker process (a script, not a test).

Starts the embedded PostgreSQL + NATS, migrates, an ad-hoc MCP server with 5 tools (in a thread), the scripted
LLM as a foreground process (`python -m tests.support.scripted_llm --delay-ms D`), the API as a process
(`python -m shared.cli api`) and ONE worker process (`python -m shared.cli worker`). For each LLM delay it
submits N runs of one test case (provider `openai`, a key, samples=1) and measures from the first submit to the
last `completed_at` in Postgres.

Submission (`--submit`): `api` = concurrent `POST /test-cases/{id}/run` (the real path, with the key sealed by
the API); `direct` = the rows are inserted in one transaction and the run messages (key sealed the same way)
are published straight to JetStream, which takes the API out of the measurement.

Goals: >= 300 runs/s per worker with a 0 ms LLM; with a 500 ms LLM >= 90 % of (in-flight slots / 0.5 s),
i.e. of MCPEVAL_WORKER_CONCURRENCY / 0.5 s.

Run from the repository root:
    python -m tests.benchmarks.bench_pipeline [--runs 1000] [--slow-runs 640] [--submit api|direct]
        [--concurrency 64] [--tool-cache 0] [--env MCPEVAL_X=Y ...] [--profile worker.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.crypto import generate_service_key, load_service_key, seal
from shared.db.engine import make_engine
from shared.db.migrate import upgrade
from shared.demo.catalog import DemoServerSpec, DemoTool
from shared.demo.servers import run_demo_servers
from shared.embedded import embedded_stack, free_port, wait_for_port
from shared.messages import RunRequest
from shared.messaging import RUNS_SUBJECT, connect, ensure_streams
from shared.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-bench-key"
GOAL_FAST_RUNS_PER_S = 300.0
GOAL_SLOW_SHARE = 0.9

BENCH_SERVER = DemoServerSpec(
    name="bench",
    transport="streamable-http",
    tools=[
        DemoTool(
            name=f"bench_tool_{i}",
            description=f"Benchmark tool number {i}: does thing {i} to the given item.",
            input_schema={
                "type": "object",
                "properties": {"item": {"type": "string", "description": "The item to act on."}},
                "required": ["item"],
            },
        )
        for i in range(5)
    ],
)


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    assert settings.database_url
    assert settings.nats_url
    assert settings.secret_key
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPEVAL_")}
    env.update(
        MCPEVAL_DATABASE_URL=settings.database_url,
        MCPEVAL_NATS_URL=settings.nats_url,
        MCPEVAL_SECRET_KEY=settings.secret_key,
        MCPEVAL_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def child(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (stdout+stderr to `log`), stopped with SIGTERM (then SIGKILL) on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def wait_for_text(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text(errors="replace")
        if needle in content:
            return content
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited with {proc.returncode}:\n{content}")
        time.sleep(0.05)
    raise SystemExit(f"{needle!r} not seen in {log} within {timeout}s")


async def setup_case(api: httpx.AsyncClient, mcp_url: str, name: str) -> str:
    listed = (await api.get("/mcp-servers", params={"limit": 100})).json()["items"]
    if "bench" not in {s["name"] for s in listed}:
        created = await api.post(
            "/mcp-servers", json={"name": "bench", "url": mcp_url, "transport": "streamable-http"}
        )
        assert created.status_code == 201, created.text
    case = await api.post(
        "/test-cases",
        json={
            "name": name,
            "query": "please run bench_tool_3 on the item apples",
            "available_mcp_servers": ["bench"],
            "expected_mcp_server_name": "bench",
            "expected_tool_name": "bench_tool_3",
        },
    )
    assert case.status_code == 201, case.text
    case_id: str = case.json()["id"]
    return case_id


def model_config(llm_url: str) -> dict[str, object]:
    return {
        "provider": "openai",
        "model": "scripted-model",
        "base_url": llm_url,
        "samples": 1,
        "max_retries": 0,
        "timeout": 30,
    }


async def submit_api(api: httpx.AsyncClient, case_id: str, llm_url: str, n: int, parallel: int) -> None:
    gate = asyncio.Semaphore(parallel)
    body = {"model_config": model_config(llm_url)}

    async def one() -> None:
        async with gate:
            response = await api.post(
                f"/test-cases/{case_id}/run", json=body, headers={"X-Model-API-Key": API_KEY}
            )
            if response.status_code != 202:
                raise SystemExit(f"submit answered {response.status_code}: {response.text}")

    await asyncio.gather(*(one() for _ in range(n)))


async def prepare_direct(
    engine: AsyncEngine, case_id: str, llm_url: str, n: int, settings: Settings
) -> list[bytes]:
    """Insert n pending runs (one model_settings row) and return their sealed run messages."""
    config = model_config(llm_url)
    run_ids = [uuid.uuid4() for _ in range(n)]
    async with engine.begin() as conn:
        settings_id = await conn.scalar(
            text(
                "INSERT INTO model_settings (provider, model, timeout, temperature, max_retries, base_url, "
                "samples, explain) VALUES ('openai', :model, :timeout, 0.4, 0, :url, 1, false) RETURNING id"
            ),
            {"model": config["model"], "timeout": config["timeout"], "url": llm_url},
        )
        await conn.execute(
            text(
                "INSERT INTO test_runs (id, test_case_id, model_settings_id, status) "
                "VALUES (:id, :case, :settings, 'pending')"
            ),
            [{"id": rid, "case": case_id, "settings": settings_id} for rid in run_ids],
        )
    assert settings.secret_key
    key = load_service_key(settings.secret_key)
    return [
        msgspec.json.encode(RunRequest(run_id=str(rid), sealed_api_key=seal(key, str(rid), API_KEY, 3600)))
        for rid in run_ids
    ]


async def publish_direct(settings: Settings, bodies: list[bytes]) -> None:
    assert settings.nats_url
    nc = await connect(settings.nats_url, name="bench-publisher")
    try:
        js = nc.jetstream(timeout=10)
        await ensure_streams(js, settings)
        for start in range(0, len(bodies), 500):
            chunk = bodies[start : start + 500]
            await asyncio.gather(
                *(
                    js.publish(
                        RUNS_SUBJECT, body, headers={"Nats-Msg-Id": msgspec.json.decode(body)["run_id"]}
                    )
                    for body in chunk
                )
            )
    finally:
        await nc.close()


async def wait_finished(engine: AsyncEngine, case_id: str, n: int, timeout: float) -> tuple[int, int, float]:
    """Poll until all n runs of the case finished; return (completed, failed, epoch of the last completion)."""
    deadline = time.monotonic() + timeout
    while True:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT count(*) FILTER (WHERE status = 'completed'), "
                        "count(*) FILTER (WHERE status = 'failed'), "
                        "extract(epoch FROM max(completed_at)) FROM test_runs WHERE test_case_id = :case"
                    ),
                    {"case": case_id},
                )
            ).one()
        completed, failed, last = int(row[0]), int(row[1]), float(row[2] or 0.0)
        if completed + failed >= n:
            return completed, failed, last
        if time.monotonic() > deadline:
            raise SystemExit(f"only {completed} completed + {failed} failed of {n} within {timeout}s")
        await asyncio.sleep(0.05)


async def scenario(
    label: str,
    api: httpx.AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    mcp_url: str,
    llm_url: str,
    n: int,
    submit: str,
) -> float:
    case_id = await setup_case(api, mcp_url, f"bench {label} {uuid.uuid4().hex[:6]}")
    # Warm-up: one run end to end (connections, caches, JIT-free but lazy imports).
    await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={"model_config": model_config(llm_url)},
        headers={"X-Model-API-Key": API_KEY},
    )
    bodies = await prepare_direct(engine, case_id, llm_url, n, settings) if submit == "direct" else []
    started = time.time()
    if submit == "direct":
        await publish_direct(settings, bodies)
    else:
        await submit_api(api, case_id, llm_url, n, parallel=64)
    submitted = time.time()
    completed, failed, last = await wait_finished(engine, case_id, n + 1, timeout=600)
    completed -= 1  # the warm-up run
    async with engine.connect() as conn:
        busy_ms, execution_ms, p95_ms = (
            await conn.execute(
                text(
                    "SELECT avg(extract(epoch FROM completed_at - started_at)) * 1000, avg(execution_time_ms), "
                    "percentile_cont(0.95) WITHIN GROUP (ORDER BY execution_time_ms) "
                    "FROM test_runs WHERE test_case_id = :case AND status = 'completed'"
                ),
                {"case": case_id},
            )
        ).one()
    elapsed = max(1e-6, last - started)
    rate = completed / elapsed
    print(
        f"{label:>10}: {completed} completed, {failed} failed in {elapsed:6.2f} s "
        f"(submitting took {submitted - started:5.2f} s) -> {rate:7.1f} runs/s",
        flush=True,
    )
    print(
        f"{'':>10}  per run: claimed->completed {float(busy_ms):6.1f} ms, execution_time_ms mean "
        f"{float(execution_ms):6.1f} / p95 {float(p95_ms):6.1f} ms (ingest + model + scoring)",
        flush=True,
    )
    return rate


async def bench(args: argparse.Namespace, settings: Settings, mcp_url: str, logs: Path) -> None:
    assert settings.database_url
    engine = make_engine(settings.database_url, pool_size=4)
    api_port = free_port()
    worker_extra = {
        "MCPEVAL_WORKER_CONCURRENCY": str(args.concurrency),
        "MCPEVAL_TOOL_CACHE_SECONDS": str(args.tool_cache),
        **dict(item.split("=", 1) for item in args.env),
    }
    worker_cmd = ["-m", "shared.cli", "worker"]
    if args.profile:
        worker_cmd = ["-m", "cProfile", "-o", args.profile, *worker_cmd]
    results: dict[str, float] = {}
    with ExitStack() as stack:
        api_proc = stack.enter_context(
            child(
                ["-m", "shared.cli", "api"],
                child_env(settings, MCPEVAL_API_PORT=str(api_port)),
                logs / "api.log",
            )
        )
        wait_for_port("127.0.0.1", api_port, 60, api_proc)
        worker_log = logs / "worker.log"
        worker = stack.enter_context(
            child(worker_cmd, child_env(settings, MCPEVAL_LOG_LEVEL="INFO", **worker_extra), worker_log)
        )
        wait_for_text(worker_log, "consuming", worker)
        # Expire idle connections before uvicorn (5 s) closes them, or a reused one fails with ReadError.
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=2.0)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{api_port}", timeout=60, limits=limits
        ) as api:
            for label, delay, n in (("0 ms", 0, args.runs), ("500 ms", 500, args.slow_runs)):
                if n <= 0:
                    continue
                llm_log = logs / f"llm-{delay}.log"
                llm = stack.enter_context(
                    child(
                        ["-m", "tests.support.scripted_llm", "--delay-ms", str(delay)],
                        child_env(settings),
                        llm_log,
                    )
                )
                llm_url = wait_for_text(llm_log, "/v1", llm).strip().splitlines()[-1]
                results[label] = await scenario(
                    label, api, engine, settings, mcp_url, llm_url, n, args.submit
                )
    await engine.dispose()

    print(f"worker concurrency (in-flight slots) {args.concurrency}, submit via {args.submit}", flush=True)
    if "0 ms" in results:
        verdict = "meets" if results["0 ms"] >= GOAL_FAST_RUNS_PER_S else "MISSES"
        print(f"  0 ms LLM:   {results['0 ms']:7.1f} runs/s {verdict} the goal of {GOAL_FAST_RUNS_PER_S:.0f}")
    if "500 ms" in results:
        ceiling = args.concurrency / 0.5
        share = results["500 ms"] / ceiling
        verdict = "meets" if share >= GOAL_SLOW_SHARE else "MISSES"
        print(
            f"  500 ms LLM: {results['500 ms']:7.1f} runs/s = {share:.0%} of the {ceiling:.0f} runs/s ceiling "
            f"({verdict} the {GOAL_SLOW_SHARE:.0%} goal)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_pipeline")
    parser.add_argument("--runs", type=int, default=1000, help="runs with the 0 ms LLM (0 = skip)")
    parser.add_argument("--slow-runs", type=int, default=640, help="runs with the 500 ms LLM (0 = skip)")
    parser.add_argument("--submit", choices=("api", "direct"), default="api")
    parser.add_argument("--concurrency", type=int, default=64, help="MCPEVAL_WORKER_CONCURRENCY")
    parser.add_argument("--tool-cache", type=float, default=0.0, help="MCPEVAL_TOOL_CACHE_SECONDS")
    parser.add_argument(
        "--env", action="append", default=[], help="extra worker env, e.g. MCPEVAL_DB_POOL_SIZE=40"
    )
    parser.add_argument("--profile", default=None, help="write a cProfile of the worker to this file")
    args = parser.parse_args()
    if args.profile:
        args.profile = str(Path(args.profile).resolve())  # the worker runs from the repository root

    data_dir = Path(tempfile.mkdtemp(prefix="mcpeval-bench-"))
    os.chmod(data_dir, 0o755)  # noqa: S103 - the embedded PostgreSQL runs as `nobody` when we are root
    logs = data_dir / "logs"
    logs.mkdir()
    try:
        with (
            embedded_stack(data_dir) as (database_url, nats_url),
            run_demo_servers([BENCH_SERVER]) as handles,
        ):
            upgrade(database_url)
            settings = Settings(
                database_url=database_url,
                nats_url=nats_url,
                secret_key=generate_service_key(),
                data_dir=str(data_dir),
            )
            asyncio.run(bench(args, settings, handles[0].url, logs))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
