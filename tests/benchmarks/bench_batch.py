"""Benchmark of a batch at the issue's scale (a script, not a test): 200 cases x 2 models x 3 repeats = 1,200
runs through the real queue (embedded PostgreSQL + NATS, the API and one worker in threads, the demo MCP
servers, two scripted LLMs), then the CLI's report and gate. Prints the wall time of each phase.

Run from the repository root: ``PYTHONPATH=. python tests/benchmarks/bench_batch.py [--cases 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx

from shared.cli import main as cli_main
from shared.crypto import generate_service_key
from shared.db.migrate import upgrade
from shared.demo.catalog import DEMO_SERVERS
from shared.demo.servers import run_demo_servers
from shared.embedded import embedded_stack
from shared.settings import Settings
from tests.support.background import api_server, worker_thread
from tests.support.batch_suite import model_configs, register, script_models, suite_cases
from tests.support.scripted_llm import ScriptedLLM


async def drive(api_url: str, good: ScriptedLLM, bad: ScriptedLLM, cases: int, repeats: int) -> str:
    async with httpx.AsyncClient(base_url=api_url, timeout=120) as api:
        with run_demo_servers(DEMO_SERVERS) as handles:
            suite = suite_cases(cases)
            started = time.perf_counter()
            await register(api, handles, suite)
            print(f"register {len(suite)} cases      {time.perf_counter() - started:8.2f} s", flush=True)
            script_models(good, bad, suite)
            started = time.perf_counter()
            queued = await api.post(
                "/test-runs/batch",
                json={"model_configs": model_configs(good, bad), "repeats": repeats, "name": "benchmark"},
            )
            queued.raise_for_status()
            batch_id = str(queued.json()["batch_id"])
            runs = queued.json()["run_count"]
            print(f"POST /test-runs/batch ({runs} runs) {time.perf_counter() - started:8.2f} s", flush=True)
            while True:
                batch = (await api.get(f"/test-runs/batch/{batch_id}")).json()
                if batch["done"]:
                    break
                await asyncio.sleep(0.5)
            elapsed = time.perf_counter() - started
            print(
                f"batch finished (incl. summary)   {elapsed:8.2f} s  ({runs / elapsed:.0f} runs/s)",
                flush=True,
            )
            print(f"progress {batch['progress']}", flush=True)
            return batch_id


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="mcpeval-bench-"))
    os.chmod(data_dir, 0o755)  # noqa: S103 - the embedded PostgreSQL runs as `nobody` when we are root
    total = time.perf_counter()
    try:
        with embedded_stack(data_dir) as (db, nats):
            upgrade(db)
            settings = Settings(
                database_url=db,
                nats_url=nats,
                secret_key=generate_service_key(),
                data_dir=str(data_dir),
                worker_concurrency=64,
                log_level="WARNING",
            )
            with (
                api_server(settings) as api_url,
                worker_thread(settings),
                ScriptedLLM() as good,
                ScriptedLLM() as bad,
            ):
                batch_id = asyncio.run(drive(api_url, good, bad, args.cases, args.repeats))
                for label, argv in (
                    ("mcpeval report (table)", ["report", "--batch", batch_id]),
                    ("mcpeval report (html)", ["report", "--batch", batch_id, "--format", "html"]),
                    ("mcpeval report (junit)", ["report", "--batch", batch_id, "--format", "junit"]),
                    (
                        "mcpeval gate",
                        ["gate", "--batch", batch_id, "--min-f1", "0.9", "--min-pass-rate", "0.95"],
                    ),
                ):
                    started = time.perf_counter()
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out):
                        code = cli_main([*argv[:1], "--url", api_url, *argv[1:]])
                    print(
                        f"{label:<32} {time.perf_counter() - started:8.2f} s  exit {code}, "
                        f"{len(out.getvalue())} chars",
                        flush=True,
                    )
                    if label == "mcpeval gate":
                        print("  " + out.getvalue().strip().replace("\n", "\n  "), flush=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"total wall time                  {time.perf_counter() - total:8.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
