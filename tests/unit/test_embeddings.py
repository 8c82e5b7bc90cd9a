"""Embedding backends: TF-IDF, offline MiniLM and an OpenAI-compatible endpoint over loopback HTTP."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from worker_service.embeddings import (
    Embedder,
    EmbeddingError,
    MiniLMEmbedder,
    OpenAIEmbedder,
    TfidfEmbedder,
    make_embedder,
    minilm_available,
)

needs_minilm = pytest.mark.skipif(not minilm_available(), reason="offline MiniLM packages not installed")


def _vector(text: str, dim: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [float(b) - 127.5 for b in digest[:dim]]


class _FakeEmbeddings:
    """A canned OpenAI-compatible ``/embeddings`` server on 127.0.0.1 that records requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.mode = "ok"
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                inputs = body["input"]
                if fake.mode == "error":
                    payload: dict[str, Any] = {
                        "error": {"message": "model not found", "type": "invalid_request"}
                    }
                    self._send(404, payload)
                    return
                data = [
                    {"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(inputs)
                ]
                if fake.mode == "short":
                    data = data[:-1]
                # Real servers may answer out of order; the client must reorder by index.
                data.reverse()
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def fake_endpoint() -> Iterator[_FakeEmbeddings]:
    fake = _FakeEmbeddings()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(timeout=5)


@pytest.mark.unit
def test_factory_names() -> None:
    """Documented names map to the documented backends; remote names need a base_url."""
    assert isinstance(make_embedder("tfidf", None, None), TfidfEmbedder)
    assert isinstance(make_embedder("Description_Overlap", None, None), TfidfEmbedder)
    auto = make_embedder(None, None, None)
    assert isinstance(auto, MiniLMEmbedder if minilm_available() else TfidfEmbedder)
    assert isinstance(make_embedder("auto", None, None), type(auto))
    with pytest.raises(ValueError, match="base_url"):
        make_embedder("text-embedding-3-small", None, None)
    remote = make_embedder("text-embedding-3-small", "http://127.0.0.1:9/v1", "k")
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.method, remote.model) == ("embedding", "text-embedding-3-small")
    assert isinstance(remote, Embedder)


@pytest.mark.unit
async def test_tfidf_embedder_rows() -> None:
    """TF-IDF vectors are float32, unit-norm (zero for empty text) and labelled description_overlap."""
    emb = TfidfEmbedder()
    vecs = await emb.embed(["Lists todos", "Searches todos", "", "\ud800"])
    assert emb.method == "description_overlap"
    assert vecs.dtype == np.float32
    assert np.linalg.norm(vecs, axis=1) == pytest.approx([1.0, 1.0, 0.0, 0.0], abs=1e-6)
    assert (await emb.embed([])).shape[0] == 0
    await emb.aclose()


@pytest.mark.unit
@needs_minilm
async def test_minilm_embeds_offline_deterministically() -> None:
    """MiniLM gives 384-d unit vectors, the same on every call, closer for paraphrases than unrelated text."""
    emb = make_embedder("minilm", None, None)
    texts = [
        "Searches todos by keyword in title or description",
        "Find todo items whose text contains a word",
        "List the Amazon S3 buckets in the AWS account",
        "",
        "\ud800\u202e" + "ünïcödé " * 5_000,
    ]
    first = await emb.embed(texts)
    second = await emb.embed(list(reversed(texts)))
    assert first.shape == (5, 384)
    assert first.dtype == np.float32
    assert np.linalg.norm(first, axis=1) == pytest.approx([1.0] * 5, abs=1e-4)
    assert np.allclose(first, second[::-1], atol=1e-5)
    assert float(first[0] @ first[1]) > float(first[0] @ first[2]) + 0.2
    assert (emb.method, emb.model) == ("embedding", "all-MiniLM-L6-v2-onnx-int8")
    assert (await emb.embed([])).shape == (0, 384)


@pytest.mark.integration
async def test_openai_compatible_endpoint_batches_and_normalises(fake_endpoint: _FakeEmbeddings) -> None:
    """Texts go out in batches with the key as a bearer token and come back unit-norm in input order."""
    emb = OpenAIEmbedder(
        "my-embed", base_url=fake_endpoint.base_url, api_key="sk-test", max_retries=0, batch_size=2
    )
    texts = ["alpha", "beta", "", "delta", "epsilon"]
    try:
        vecs = await emb.embed(texts)
    finally:
        await emb.aclose()
    assert vecs.shape == (5, 8)
    assert vecs.dtype == np.float32
    assert np.linalg.norm(vecs, axis=1) == pytest.approx([1.0] * 5, abs=1e-6)
    expected = np.array(_vector("alpha"), dtype=np.float32)
    assert vecs[0] == pytest.approx(expected / np.linalg.norm(expected), abs=1e-6)
    assert [r["input"] for r in fake_endpoint.requests] == [["alpha", "beta"], [" ", "delta"], ["epsilon"]]
    assert {r["model"] for r in fake_endpoint.requests} == {"my-embed"}
    assert fake_endpoint.headers[0]["authorization"] == "Bearer sk-test"


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["error", "short"])
async def test_openai_compatible_endpoint_failures(fake_endpoint: _FakeEmbeddings, mode: str) -> None:
    """HTTP errors and responses with the wrong number of vectors raise EmbeddingError."""
    fake_endpoint.mode = mode
    emb = make_embedder("my-embed", fake_endpoint.base_url, None, max_retries=0)
    try:
        with pytest.raises(EmbeddingError):
            await emb.embed(["alpha", "beta"])
    finally:
        await emb.aclose()
