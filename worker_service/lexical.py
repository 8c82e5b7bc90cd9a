"""Lexical text processing shared by tool similarity and the offline ``baseline`` provider.

Two pieces, numpy only:

* :func:`tokenize` — NFKC + casefold, Unicode-aware word split that also splits ``snake_case``,
  ``kebab-case`` and ``camelCase``/``HTTPServer`` identifiers, a tiny English stopword list and a light
  plural stemmer (``todos`` → ``todo``, ``searches`` → ``search``), so a tool name and the prose
  describing it produce the same terms.
* :class:`TfidfModel` / :func:`fit_tfidf` — TF-IDF with sublinear term frequency (``1 + ln tf``),
  smoothed IDF (``ln((1 + n) / (1 + df)) + 1``) and L2-normalised dense float32 rows, so the dot
  product of two rows is their cosine similarity.

Everything here is deterministic and total: any ``str`` (empty, huge, lone surrogates, control
characters) is accepted and never raises.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_TEXT_CHARS",
    "STOPWORDS",
    "TfidfModel",
    "clean_text",
    "cosine_rows",
    "fit_tfidf",
    "humanize_identifier",
    "stem",
    "tfidf_vectors",
    "tokenize",
    "tokenize_with_surface",
]

#: Longest text (in characters) looked at; untrusted tool descriptions can be megabytes long and
#: nothing useful for tool selection lives past this point.
MAX_TEXT_CHARS: Final = 100_000

#: Deliberately tiny: domain words such as "list", "get", "search" or "file" carry the meaning of a
#: tool and must survive.
STOPWORDS: Final[frozenset[str]] = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it",
        "its", "of", "on", "or", "than", "that", "the", "their", "then", "this", "to", "was", "were", "which",
        "will", "with", "you", "your",
    }
)  # fmt: skip

# Letters and digits only: "_" is a word character for `\w` but a separator inside identifiers.
_WORD_RE: Final = re.compile(r"[^\W_]+")
# camelCase and acronym boundaries: "listTodos" → "list Todos", "HTTPServer" → "HTTP Server".
_CAMEL_RE: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_ES_SUFFIXES: Final = ("ches", "shes", "sses", "xes", "zes")


def clean_text(text: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Return a safe ``str`` for any input: non-strings become ``""``, lone surrogates become ``?``,
    NUL characters are dropped and the result is cut to ``limit`` characters."""
    if not isinstance(text, str):
        return ""
    cut = text[:limit]
    # Lone surrogates cannot be encoded as UTF-8 and would crash JSON/HTTP/tokenizer layers later.
    safe = cut.encode("utf-8", "replace").decode("utf-8")
    return safe.replace("\x00", "")


def stem(word: str) -> str:
    """Return ``word`` with a plural/third-person ``s`` removed (a Harman-style S-stemmer).

    Conservative on purpose: ``status``, ``class``, ``analysis``, ``bus`` are left alone."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(_ES_SUFFIXES):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize_with_surface(text: object) -> list[tuple[str, str]]:
    """Return ``(term, surface)`` pairs in order: ``term`` is the stemmed, casefolded form used for
    matching and ``surface`` the casefolded word as written (for human-readable evidence).

    Stopwords and one-character words (except digits) are dropped."""
    normalised = unicodedata.normalize("NFKC", clean_text(text))
    out: list[tuple[str, str]] = []
    for chunk in _WORD_RE.findall(normalised):
        for part in _CAMEL_RE.split(chunk):
            surface = part.casefold()
            if not surface or surface in STOPWORDS:
                continue
            if len(surface) == 1 and not surface.isdigit():
                continue
            out.append((stem(surface), surface))
    return out


def tokenize(text: object) -> list[str]:
    """Return the matching terms of ``text`` (see :func:`tokenize_with_surface`), in order."""
    return [term for term, _surface in tokenize_with_surface(text)]


def humanize_identifier(name: object) -> str:
    """Return an identifier as words: ``"searchTodos"``/``"search_todos"`` → ``"search todos"``."""
    words: list[str] = []
    for chunk in _WORD_RE.findall(unicodedata.normalize("NFKC", clean_text(name, 1_000))):
        words.extend(p.casefold() for p in _CAMEL_RE.split(chunk) if p)
    return " ".join(words)


class TfidfModel:
    """A fitted TF-IDF vocabulary: term → column, and the IDF weight of each column."""

    __slots__ = ("idf", "vocabulary")

    def __init__(self, vocabulary: dict[str, int], idf: NDArray[np.float32]) -> None:
        self.vocabulary = vocabulary
        self.idf = idf

    @property
    def dimension(self) -> int:
        """Number of columns of the vectors :meth:`transform` returns."""
        return len(self.vocabulary)

    def transform(self, docs: Sequence[Sequence[str]]) -> NDArray[np.float32]:
        """Return an ``(len(docs), dimension)`` float32 matrix of L2-normalised TF-IDF rows.

        Terms outside the vocabulary are ignored; a document with no known term is a zero row."""
        out = np.zeros((len(docs), max(self.dimension, 1)), dtype=np.float32)
        for row, doc in enumerate(docs):
            counts = Counter(t for t in doc if t in self.vocabulary)
            if not counts:
                continue
            cols = np.fromiter((self.vocabulary[t] for t in counts), dtype=np.int64, count=len(counts))
            tf = np.fromiter(
                (1.0 + math.log(c) for c in counts.values()), dtype=np.float32, count=len(counts)
            )
            weights = tf * self.idf[cols]
            norm = float(np.linalg.norm(weights))
            if norm > 0.0:
                out[row, cols] = weights / norm
        return out


def fit_tfidf(docs: Iterable[Sequence[str]], max_features: int = 4096) -> TfidfModel:
    """Fit a vocabulary on tokenised ``docs``.

    At most ``max_features`` terms are kept — the ones in the most documents, ties broken
    alphabetically — so 10,000 tools stay a bounded dense matrix (10,000 x 4,096 float32 ≈ 164 MB)."""
    df: Counter[str] = Counter()
    n_docs = 0
    for doc in docs:
        n_docs += 1
        df.update(set(doc))
    ranked = sorted(df.items(), key=lambda kv: (-kv[1], kv[0]))[: max(max_features, 1)]
    terms = sorted(term for term, _ in ranked)
    vocabulary = {term: i for i, term in enumerate(terms)}
    idf = np.array(
        [math.log((1.0 + n_docs) / (1.0 + df[term])) + 1.0 for term in terms] or [1.0],
        dtype=np.float32,
    )
    return TfidfModel(vocabulary, idf)


def tfidf_vectors(texts: Sequence[str], max_features: int = 4096) -> NDArray[np.float32]:
    """Tokenise ``texts``, fit TF-IDF on them and return their L2-normalised rows (zero rows for texts
    without terms). Vectors are only comparable within one call."""
    docs = [tokenize(t) for t in texts]
    return fit_tfidf(docs, max_features).transform(docs)


def cosine_rows(a: NDArray[np.float32], b: NDArray[np.float32]) -> NDArray[np.float32]:
    """Return ``a @ b.T`` for L2-normalised rows, clipped to ``[0, 1]``."""
    prod: NDArray[np.float32] = np.asarray(a @ b.T, dtype=np.float32)
    np.clip(prod, 0.0, 1.0, out=prod)
    return prod
