"""`mcpeval demo`, the README's main-job command, as a user runs it: baseline offline, and a real provider
(the scripted OpenAI-compatible server) with the key taken from the environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.demo.cases import DEMO_CASES
from shared.embedded import free_port
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mcpeval-demo-"))
    os.chmod(path, 0o755)  # noqa: S103 - the embedded PostgreSQL runs as `nobody` when we are root
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _demo(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCPEVAL_")}
    environ.update({"MCPEVAL_DATA_DIR": str(data_dir / "state"), "MCPEVAL_API_PORT": str(free_port()), **env})
    return subprocess.run(
        [sys.executable, "-m", "shared.cli", "demo", *args],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_demo_runs_the_sample_suite_offline_and_prints_the_summary(data_dir: Path) -> None:
    """The default demo completes every sample case with the baseline and prints the table and summary."""
    done = _demo(data_dir)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Sample suite: {len(DEMO_CASES)} test cases; provider baseline" in done.stdout
    verdicts = {"TP", "FP", "TN", "FN"}
    # A table row ends with "<verdict> <ms>".
    rows = [
        line for line in done.stdout.splitlines() if len(line.split()) > 2 and line.split()[-2] in verdicts
    ]
    assert len(rows) == len(DEMO_CASES)
    assert (
        f"Summary (offline lexical baseline, no parameters extracted): {len(DEMO_CASES)} completed runs"
        in done.stdout
    )
    assert "INFO" not in done.stderr  # the report is the output; no service chatter by default


def test_demo_with_a_real_provider_sends_the_key_from_the_environment(data_dir: Path) -> None:
    """--provider/--model/--base-url run the suite against an OpenAI-compatible endpoint with the env key."""
    key = "sk-demo-key-from-env"
    with ScriptedLLM(api_key=key) as llm:
        done = _demo(
            data_dir,
            "--provider",
            "openai",
            "--model",
            "scripted-model",
            "--base-url",
            llm.base_url,
            MCPEVAL_DEMO_API_KEY=key,
        )
        chat = [r for r in llm.requests if r.path.endswith("/chat/completions")]

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Sample suite: {len(DEMO_CASES)} test cases; provider openai" in done.stdout
    assert len(chat) == len(DEMO_CASES)
    assert {r.headers.get("authorization") for r in chat} == {f"Bearer {key}"}
    assert key not in done.stdout + done.stderr
