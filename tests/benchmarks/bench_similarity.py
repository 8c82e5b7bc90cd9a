"""Benchmark of pairwise similarity at scale (a script, not a test).

For 1,000 and 10,000 synthetic tools it times :func:`worker_service.similarity.compute_similarity` on
precomputed random unit embeddings (384-d, like MiniLM; 1% of tools are planted near-duplicates so some
pairs are flagged), with and without full similarity, and the TF-IDF backend end to end on synthetic
descriptions. Each scenario runs in a fresh interpreter so peak RSS is its own.

Run from the repository root: ``python tests/benchmarks/bench_similarity.py``. Goal: < 10 s and < 1 GB
for 10,000 tools after embeddings.
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import numpy as np
from numpy.typing import NDArray

DIM = 384
WORDS = [
    "list",
    "search",
    "create",
    "update",
    "delete",
    "todo",
    "issue",
    "bucket",
    "commit",
    "repository",
    "document",
    "query",
    "graph",
    "vector",
    "user",
    "project",
    "file",
    "folder",
    "message",
    "channel",
    "invoice",
    "payment",
    "customer",
    "order",
    "report",
    "metric",
    "alert",
    "log",
    "event",
    "calendar",
    "meeting",
    "ticket",
    "branch",
    "release",
    "deploy",
    "secret",
    "key",
    "region",
    "cluster",
    "node",
    "pod",
    "image",
]


class _Precomputed:
    """An Embedder returning fixed vectors: description rows first call, full rows second."""

    def __init__(self, *matrices: NDArray[np.float32]) -> None:
        self._queue = list(matrices)

    @property
    def method(self) -> str:
        return "embedding"

    @property
    def model(self) -> str:
        return "synthetic"

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        return self._queue.pop(0)

    async def aclose(self) -> None:
        return None


def _unit_vectors(n: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    dupes = max(1, n // 100)
    # Near-duplicates of the first tools, so the flagged path is exercised.
    vecs[n - dupes :] = vecs[:dupes] + 0.2 * rng.standard_normal((dupes, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs


def _tools(n: int) -> list[Any]:
    from worker_service.similarity import SimilarityTool

    rng = np.random.default_rng(n)
    tools = []
    for i in range(n):
        words = [WORDS[k] for k in rng.integers(0, len(WORDS), 12)]
        props = {f"{WORDS[k]}_{i % 7}": {"type": "string"} for k in rng.integers(0, len(WORDS), 3)}
        tools.append(
            SimilarityTool(
                id=f"t{i}",
                name=f"{words[0]}_{words[1]}_{i}",
                description=" ".join(words),
                input_schema={"type": "object", "properties": props},
            )
        )
    return tools


def _scenario(kind: str, n: int) -> dict[str, Any]:
    from worker_service.embeddings import TfidfEmbedder
    from worker_service.similarity import compute_similarity

    tools = _tools(n)
    embedder: Any
    if kind == "tfidf":
        embedder, full = TfidfEmbedder(), True
        threshold = 0.3
    else:
        full = kind == "vectors+full"
        mats = [_unit_vectors(n, 1)] + ([_unit_vectors(n, 2)] if full else [])
        embedder, threshold = _Precomputed(*mats), 0.85
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.perf_counter()
    result = asyncio.run(
        compute_similarity(tools, embedder, threshold=threshold, compute_full_similarity=full, max_pairs=1000)
    )
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "scenario": kind,
        "tools": n,
        "seconds": round(elapsed, 3),
        "traced_peak_mb": round(peak / 2**20, 1),
        "maxrss_delta_mb": round((rss_after - rss_before) / 1024, 1),
        "maxrss_mb": round(rss_after / 1024, 1),
        "flagged": result.flagged_count,
        "pairs_returned": len(result.pairs),
    }


def main() -> None:
    if len(sys.argv) == 3:
        print(json.dumps(_scenario(sys.argv[1], int(sys.argv[2]))))
        return
    print(
        f"{'scenario':<14}{'tools':>7}{'seconds':>9}{'traced MB':>11}{'RSS delta MB':>14}{'RSS MB':>9}{'flagged':>9}"
    )
    for kind in ("vectors", "vectors+full", "tfidf"):
        for n in (1_000, 10_000):
            out = subprocess.run(
                [sys.executable, __file__, kind, str(n)], capture_output=True, text=True, check=True
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"{r['scenario']:<14}{r['tools']:>7}{r['seconds']:>9}{r['traced_peak_mb']:>11}"
                f"{r['maxrss_delta_mb']:>14}{r['maxrss_mb']:>9}{r['flagged']:>9}"
            )


if __name__ == "__main__":
    main()
