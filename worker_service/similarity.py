"""Inter-tool similarity: which tools an LLM is likely to confuse, and how to tell them apart.

Pure functions over plain data. The only I/O is calling the :class:`~worker_service.embeddings.Embedder`
passed in. Outputs follow the seed's "Similarity Analysis Models (002)": :class:`SimilarityScore`,
:class:`SimilarityMatrix`, :class:`OverlapMatrix`, :class:`DifferentiationRecommendation`; plus a
deterministic description lint (:func:`lint_tools`) and behaviour grounding (:func:`ground_in_behaviour`).

Texts compared:

* ``similarity_score`` — cosine of the embeddings of the *description text*: the tool name as words
  followed by its description (the name is part of what the model reads when it picks a tool).
* ``full_similarity_score`` — the same plus the parameters (name, type, required, description).

Suggested thresholds per method (:data:`SUGGESTED_THRESHOLDS`): the seed's default 0.85 suits large
remote embedding models; the offline MiniLM backend and TF-IDF produce lower cosines for the same
degree of overlap (see the constants).

Scale: pairs are found by blocked matrix products (``block_rows`` rows of float32 at a time) keeping
only the best ``max_pairs``, so 10,000 tools never materialise the 10,000² matrix; the dense matrix is
built only by the matrix functions.
"""

from __future__ import annotations

import difflib
import logging
import re
import unicodedata
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import msgspec
import numpy as np
from numpy.typing import NDArray

from shared.similarity_wire import (
    DifferentiationIssue,
    DifferentiationRecommendation,
    IssueType,
    LintFinding,
    ObservedConfusion,
    Priority,
    RecommendationItem,
    RevisionSource,
    Severity,
    SimilarityScore,
    SimilarityTool,
)
from worker_service.embeddings import Embedder, EmbeddingMethod
from worker_service.lexical import (
    TfidfModel,
    clean_text,
    cosine_rows,
    fit_tfidf,
    humanize_identifier,
    tfidf_vectors,
    tokenize,
    tokenize_with_surface,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "OVERLAP_DIMENSIONS",
    "SUGGESTED_OVERLAP_THRESHOLD",
    "SUGGESTED_THRESHOLDS",
    "DifferentiationIssue",
    "DifferentiationRecommendation",
    "GroundedPair",
    "GroundingReport",
    "LintFinding",
    "ObservedConfusion",
    "OverlapMatrix",
    "PairSelection",
    "RecommendationItem",
    "RewriteFn",
    "SimilarityAnalysis",
    "SimilarityMatrix",
    "SimilarityScore",
    "SimilarityTool",
    "build_recommendations",
    "compute_overlap_matrix",
    "compute_similarity",
    "compute_similarity_matrix",
    "description_overlap_matrix",
    "description_text",
    "diagnose_pair",
    "flagged_clusters",
    "full_text",
    "ground_in_behaviour",
    "lint_tools",
    "overlap_clusters",
    "parameter_overlap",
    "parameter_overlap_matrix",
    "suggested_threshold",
    "template_revision",
    "top_pairs",
]

logger = logging.getLogger(__name__)

#: The seed's default flagging threshold.
DEFAULT_THRESHOLD: Final = 0.85
#: Suggested flagging thresholds by backend, calibrated on the seed catalogs (six RAG pipeline tools,
#: five todo tools, unrelated GitHub/Jira/AWS tools). Remote embedding models: the seed's 0.85.
#: Offline MiniLM: the RAG variants and list_todos/search_todos score 0.43-0.65 on description text
#: and 0.6-0.8 with parameters, unrelated tools at most ~0.4, so 0.5. TF-IDF only counts exact shared
#: terms: with parameters (``compute_full_similarity``) confusable pairs score 0.32-0.6 and unrelated
#: ones at most ~0.19, so 0.3; on descriptions alone it separates poorly (use ~0.2 and expect noise).
SUGGESTED_THRESHOLDS: Final[Mapping[str, float]] = {
    "embedding": DEFAULT_THRESHOLD,
    "all-MiniLM-L6-v2-onnx-int8": 0.5,
    "description_overlap": 0.3,
}
#: Suggested threshold for :func:`overlap_clusters` (RAG variants >= 0.39, unrelated tools <= 0.24).
SUGGESTED_OVERLAP_THRESHOLD: Final = 0.3
#: Weights of the overlap matrix dimensions (seed 002).
OVERLAP_DIMENSIONS: Final[Mapping[str, float]] = {"semantic": 0.5, "parameters": 0.3, "description": 0.2}

_MAX_PARAMS: Final = 512
_MAX_DESCRIPTION_CHARS: Final = 20_000
_MIN_DESCRIPTION_CHARS: Final = 20
_MIN_DESCRIPTION_WORDS: Final = 4
_LONG_DESCRIPTION_CHARS: Final = 1_500
_MAX_REVISED_BASE_CHARS: Final = 2_000
_MAX_LLM_REVISION_CHARS: Final = 4_000
_TOOL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --------------------------------------------------------------------------------------------- types
# The tool and every type of a reply (SimilarityScore, LintFinding, DifferentiationRecommendation,
# ObservedConfusion, ...) are defined once in `shared.similarity_wire`; these stay inside the worker.


class SimilarityAnalysis(msgspec.Struct, frozen=True, kw_only=True):
    """Result of :func:`compute_similarity`: the best ``max_pairs`` pairs, sorted by the flagging score
    descending, plus exact counts over all pairs."""

    method: EmbeddingMethod
    model: str
    threshold: float
    tool_ids: list[str]
    pairs: list[SimilarityScore]
    total_pairs: int
    flagged_count: int
    truncated: bool


class SimilarityMatrix(msgspec.Struct, frozen=True, kw_only=True):
    """Dense pairwise similarity (the matrix endpoint)."""

    tool_ids: list[str]
    matrix: list[list[float]]
    method: EmbeddingMethod


class OverlapMatrix(msgspec.Struct, frozen=True, kw_only=True):
    """Multi-dimensional capability overlap (seed 002)."""

    tool_ids: list[str]
    matrix: list[list[float]]
    dimensions: dict[str, float]
    generated_at: datetime


class PairSelection(NamedTuple):
    """Output of :func:`top_pairs`: ``(i, j, score)`` with ``i < j``, and the exact number of pairs whose
    score is at least the threshold."""

    pairs: list[tuple[int, int, float]]
    flagged_count: int


#: ``rewrite(tool, other, issues)`` returns an improved description for ``tool`` (e.g. from an LLM).
RewriteFn = Callable[[SimilarityTool, SimilarityTool, list[DifferentiationIssue]], Awaitable[str]]


# ----------------------------------------------------------------------------------------- parameters


class _Param(NamedTuple):
    name: str
    key: str
    type: str
    required: bool
    description: str


def _param_key(name: str) -> str:
    # "top_k", "topK" and "Top-K" are the same parameter to a model.
    return "".join(ch for ch in unicodedata.normalize("NFKC", name).casefold() if ch.isalnum()) or name


def _schema_type(prop: object) -> str:
    if not isinstance(prop, dict):
        return "any"
    typ = prop.get("type")
    if isinstance(typ, str):
        return typ
    if isinstance(typ, list):
        return "|".join(sorted(t for t in typ if isinstance(t, str))) or "any"
    return "any"


def _params(tool: SimilarityTool) -> list[_Param]:
    schema: object = tool.input_schema
    if not isinstance(schema, dict):
        return []
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    required_raw = schema.get("required")
    required = {r for r in required_raw if isinstance(r, str)} if isinstance(required_raw, list) else set()
    out: list[_Param] = []
    for name, prop in list(props.items())[:_MAX_PARAMS]:
        if not isinstance(name, str):
            continue
        desc = prop.get("description") if isinstance(prop, dict) else None
        out.append(
            _Param(
                name=clean_text(name, 200),
                key=_param_key(clean_text(name, 200)),
                type=_schema_type(prop),
                required=name in required,
                description=clean_text(desc, 2_000) if isinstance(desc, str) else "",
            )
        )
    return out


def _param_features(params: Sequence[_Param]) -> tuple[set[str], set[str], set[str]]:
    names = {p.key for p in params}
    typed = {f"{p.key}\x00{p.type}" for p in params}
    req = {f"{p.key}\x00{p.required}" for p in params}
    return names, typed, req


# A shared name counts 0.6; agreeing on type and on required-ness adds the rest.
_W_NAME, _W_TYPE, _W_REQUIRED = 0.6, 0.25, 0.15


def parameter_overlap(a: SimilarityTool, b: SimilarityTool) -> float:
    """Weighted Jaccard similarity of the parameter sets of ``a`` and ``b`` in ``[0, 1]``.

    Each shared (normalised) parameter name counts 0.6, plus 0.25 if both declare the same type and
    0.15 if both agree on required-ness; the sum is divided by the number of distinct names of the two
    tools. Two tools without parameters score 0 (no evidence of overlap)."""
    na, ta, ra = _param_features(_params(a))
    nb, tb, rb = _param_features(_params(b))
    union = len(na | nb)
    if union == 0:
        return 0.0
    inter = _W_NAME * len(na & nb) + _W_TYPE * len(ta & tb) + _W_REQUIRED * len(ra & rb)
    return round(min(inter / union, 1.0), 6)


def _incidence(feature_sets: Sequence[set[str]]) -> NDArray[np.float32]:
    vocab = {f: i for i, f in enumerate(sorted(set().union(*feature_sets)))} if feature_sets else {}
    out = np.zeros((len(feature_sets), max(len(vocab), 1)), dtype=np.float32)
    for row, feats in enumerate(feature_sets):
        for f in feats:
            out[row, vocab[f]] = 1.0
    return out


def parameter_overlap_matrix(tools: Sequence[SimilarityTool]) -> NDArray[np.float32]:
    """Dense ``n x n`` :func:`parameter_overlap` of every pair (diagonal 1.0)."""
    feats = [_param_features(_params(t)) for t in tools]
    names = _incidence([f[0] for f in feats])
    typed = _incidence([f[1] for f in feats])
    req = _incidence([f[2] for f in feats])
    shared = names @ names.T
    sizes = names.sum(axis=1)
    union = sizes[:, None] + sizes[None, :] - shared
    inter = _W_NAME * shared + _W_TYPE * (typed @ typed.T) + _W_REQUIRED * (req @ req.T)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0).astype(np.float32)
    out = np.clip(out, 0.0, 1.0)
    np.fill_diagonal(out, 1.0)
    return out


# ---------------------------------------------------------------------------------------------- texts


def _description(tool: SimilarityTool) -> str:
    return clean_text(tool.description, _MAX_DESCRIPTION_CHARS).strip()


def description_text(tool: SimilarityTool) -> str:
    """The text behind ``similarity_score``: the name as words, a colon, then the description."""
    return f"{humanize_identifier(tool.name)}: {_description(tool)}".strip()


def full_text(tool: SimilarityTool) -> str:
    """The text behind ``full_similarity_score``: :func:`description_text` plus every parameter's name,
    type, required-ness and description."""
    parts = []
    for p in _params(tool):
        req = ", required" if p.required else ""
        desc = f": {p.description}" if p.description else ""
        parts.append(f"{humanize_identifier(p.name)} ({p.type}{req}){desc}")
    params = f" Parameters: {'; '.join(parts)}." if parts else ""
    return f"{description_text(tool)}{params}"


def description_overlap_matrix(tools: Sequence[SimilarityTool]) -> NDArray[np.float32]:
    """Dense ``n x n`` TF-IDF cosine of the descriptions alone (diagonal 1.0)."""
    return _dense(tfidf_vectors([_description(t) for t in tools]))


# ---------------------------------------------------------------------------------------------- pairs


def _best(values: NDArray[np.float32], k: int, cutoff: float) -> NDArray[np.intp]:
    """Flat indices of the ``k`` largest ``values >= cutoff``, ties at the cut-off taken in index order."""
    idx = np.flatnonzero(values >= cutoff)
    if idx.size <= k:
        return idx
    sub = values.ravel()[idx]
    kth = np.partition(sub, sub.size - k)[sub.size - k]
    above = idx[sub > kth]
    # Ties at the cut-off are taken in index order so the selection never depends on partition order.
    ties = idx[sub == kth][: k - above.size]
    return np.concatenate([above, ties])


def top_pairs(
    vectors: NDArray[np.float32], *, threshold: float, max_pairs: int, block_rows: int = 1024
) -> PairSelection:
    """Return the ``max_pairs`` pairs ``i < j`` with the highest cosine (rows must be L2-normalised),
    ordered by score descending then ``(i, j)``, and the exact count of pairs scoring ``>= threshold``.

    Works on blocks of ``block_rows`` rows against the columns at or after the block (each pair is
    computed once), so peak memory is a few ``block_rows x n`` float32 arrays instead of ``n x n``.
    Scores are clipped to ``[0, 1]``; ties are broken by index, so the result is deterministic."""
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    n = vecs.shape[0]
    keep = max(0, max_pairs)
    rows = max(1, block_rows)
    best_s = np.zeros(0, dtype=np.float32)
    best_i = np.zeros(0, dtype=np.intp)
    best_j = np.zeros(0, dtype=np.intp)
    cutoff = 0.0
    flagged = 0
    triu_cache: dict[int, tuple[NDArray[np.intp], NDArray[np.intp]]] = {}
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        size = stop - start
        block = vecs[start:stop] @ vecs[start:].T
        np.clip(block, 0.0, 1.0, out=block)
        tri = triu_cache.setdefault(size, np.triu_indices(size, 1))
        square = block[:, :size][tri]
        rest = block[:, size:]
        flagged += int(np.count_nonzero(square >= threshold)) + int(np.count_nonzero(rest >= threshold))
        if keep == 0:
            continue
        sq_sel = _best(square, keep, cutoff)
        rest_sel = _best(rest, keep, cutoff)
        width = max(rest.shape[1], 1)
        best_s = np.concatenate([best_s, square[sq_sel], rest.ravel()[rest_sel]])
        best_i = np.concatenate([best_i, tri[0][sq_sel] + start, rest_sel // width + start])
        best_j = np.concatenate([best_j, tri[1][sq_sel] + start, rest_sel % width + stop])
        order = np.lexsort((best_j, best_i, -best_s))[:keep]
        best_s, best_i, best_j = best_s[order], best_i[order], best_j[order]
        if best_s.size == keep:
            cutoff = float(best_s[-1])
    return PairSelection(
        [(int(i), int(j), float(s)) for i, j, s in zip(best_i, best_j, best_s, strict=True)], flagged
    )


def _score(value: float) -> float:
    return round(min(max(float(value), 0.0), 1.0), 6)


def suggested_threshold(method: EmbeddingMethod, model: str) -> float:
    """The flagging threshold suggested for a backend (see :data:`SUGGESTED_THRESHOLDS`)."""
    return SUGGESTED_THRESHOLDS.get(model, SUGGESTED_THRESHOLDS[method])


async def compute_similarity(
    tools: Sequence[SimilarityTool],
    embedder: Embedder,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    compute_full_similarity: bool = False,
    max_pairs: int = 1000,
    block_rows: int = 1024,
) -> SimilarityAnalysis:
    """Score pairs of ``tools`` and flag the confusable ones.

    A pair is flagged when its flagging score — ``full_similarity_score`` when
    ``compute_full_similarity`` is set, else ``similarity_score`` — is ``>= threshold``. Returns at most
    ``max_pairs`` pairs, the highest flagging scores first (ties by input order), with exact
    ``flagged_count`` and ``total_pairs`` over all pairs. Scores are in ``[0, 1]`` rounded to 6 decimals.
    Raises what the embedder raises (:class:`~worker_service.embeddings.EmbeddingError`)."""
    n = len(tools)
    ids = [t.id for t in tools]
    desc_vecs = (
        await embedder.embed([description_text(t) for t in tools]) if n else np.zeros((0, 1), np.float32)
    )
    full_vecs = await embedder.embed([full_text(t) for t in tools]) if compute_full_similarity and n else None
    key = full_vecs if full_vecs is not None else desc_vecs
    selection = top_pairs(key, threshold=threshold, max_pairs=max_pairs, block_rows=block_rows)
    pairs: list[SimilarityScore] = []
    for i, j, key_score in selection.pairs:
        desc = _score(float(desc_vecs[i] @ desc_vecs[j]))
        full = _score(key_score) if full_vecs is not None else None
        pairs.append(
            SimilarityScore(
                tool_a_id=ids[i],
                tool_b_id=ids[j],
                similarity_score=desc,
                full_similarity_score=full,
                method=embedder.method,
                flagged=key_score >= threshold,
            )
        )
    total = n * (n - 1) // 2
    return SimilarityAnalysis(
        method=embedder.method,
        model=embedder.model,
        threshold=threshold,
        tool_ids=ids,
        pairs=pairs,
        total_pairs=total,
        flagged_count=selection.flagged_count,
        truncated=len(pairs) < total,
    )


def _dense(vecs: NDArray[np.float32]) -> NDArray[np.float32]:
    out = cosine_rows(vecs, vecs)
    np.fill_diagonal(out, 1.0)
    return out


def _to_lists(matrix: NDArray[np.float32]) -> list[list[float]]:
    rounded: list[list[float]] = np.round(matrix.astype(np.float64), 6).tolist()
    return rounded


async def compute_similarity_matrix(
    tools: Sequence[SimilarityTool], embedder: Embedder, *, include_parameters: bool = False
) -> SimilarityMatrix:
    """Dense cosine matrix in input order (diagonal 1.0, values in ``[0, 1]``, 6 decimals), on
    :func:`description_text` or, with ``include_parameters``, :func:`full_text`. Memory is ``n²``:
    callers bound ``n``."""
    texts = [full_text(t) if include_parameters else description_text(t) for t in tools]
    vecs = await embedder.embed(texts) if tools else np.zeros((0, 1), np.float32)
    return SimilarityMatrix(
        tool_ids=[t.id for t in tools], matrix=_to_lists(_dense(vecs)), method=embedder.method
    )


async def compute_overlap_matrix(
    tools: Sequence[SimilarityTool], embedder: Embedder, *, generated_at: datetime | None = None
) -> OverlapMatrix:
    """Dense overlap ``0.5·semantic + 0.3·parameters + 0.2·description`` in input order: semantic =
    embedding cosine of :func:`description_text`, parameters = :func:`parameter_overlap`, description =
    TF-IDF cosine of the descriptions. Diagonal 1.0, values in ``[0, 1]``, 6 decimals.
    ``generated_at`` defaults to now (UTC); pass it for reproducible output."""
    n = len(tools)
    if n == 0:
        matrix: NDArray[np.float32] = np.zeros((0, 0), np.float32)
    else:
        semantic = _dense(await embedder.embed([description_text(t) for t in tools]))
        matrix = (
            OVERLAP_DIMENSIONS["semantic"] * semantic
            + OVERLAP_DIMENSIONS["parameters"] * parameter_overlap_matrix(tools)
            + OVERLAP_DIMENSIONS["description"] * description_overlap_matrix(tools)
        ).astype(np.float32)
        matrix = np.clip(matrix, 0.0, 1.0)
        np.fill_diagonal(matrix, 1.0)
    return OverlapMatrix(
        tool_ids=[t.id for t in tools],
        matrix=_to_lists(matrix),
        dimensions=dict(OVERLAP_DIMENSIONS),
        generated_at=generated_at or datetime.now(UTC),
    )


def _components(ids: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    parent = {i: i for i in ids}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(find(i), []).append(i)
    found = [sorted(set(g)) for g in groups.values() if len(set(g)) > 1]
    return sorted(found, key=lambda g: (-len(g), g[0]))


def flagged_clusters(pairs: Sequence[SimilarityScore]) -> list[list[str]]:
    """Group tool ids connected by flagged pairs (single linkage). Each cluster has 2+ ids, sorted;
    clusters are ordered by size desc, then first id."""
    edges = [(p.tool_a_id, p.tool_b_id) for p in pairs if p.flagged]
    ids = sorted({i for e in edges for i in e})
    return _components(ids, edges)


def overlap_clusters(overlap: OverlapMatrix, threshold: float) -> list[list[str]]:
    """Group tool ids whose overlap score is ``>= threshold`` (single linkage), ordered as
    :func:`flagged_clusters`."""
    ids = overlap.tool_ids
    edges = [
        (ids[i], ids[j])
        for i, row in enumerate(overlap.matrix)
        for j in range(i + 1, min(len(row), len(ids)))
        if row[j] >= threshold
    ]
    return _components(sorted(set(ids)), edges)


# ------------------------------------------------------------------------------------ differentiation

_SCOPE_RE: Final = re.compile(
    r"\b(use (?:this|it|when|for|only)|only (?:for|when|if|use)|not for|do not use|don't use|instead|"
    r"rather than|unlike|whereas|prefer|as opposed to|in contrast)\b",
    re.IGNORECASE,
)
_EXAMPLE_RE: Final = re.compile(
    r"(?:e\.g\.|for example|for instance|example:|examples:|such as)[^.\n]{0,160}"
    r"|\"[^\"\n]{3,120}\"|“[^”\n]{3,120}”|`[^`\n]{3,120}`",
    re.IGNORECASE,
)


def _examples(text: str) -> list[str]:
    return [m.group(0).strip() for m in _EXAMPLE_RE.finditer(text[:_MAX_DESCRIPTION_CHARS])][:5]


def _weighted_terms(text: str, exclude: set[str], model: TfidfModel) -> list[tuple[str, str, float]]:
    """Distinct terms of ``text`` not in ``exclude`` as (term, surface, idf), by idf desc then order."""
    seen: dict[str, tuple[str, int]] = {}
    for pos, (term, surface) in enumerate(tokenize_with_surface(text)):
        if term not in exclude and term not in seen and not term.isdigit():
            seen[term] = (surface, pos)
    ranked = sorted(
        seen.items(),
        key=lambda kv: (
            -float(model.idf[model.vocabulary[kv[0]]]) if kv[0] in model.vocabulary else -1.0,
            kv[1][1],
        ),
    )
    return [
        (term, surface, float(model.idf[model.vocabulary[term]]) if term in model.vocabulary else 1.0)
        for term, (surface, _pos) in ranked
    ]


def _term_model(tools: Sequence[SimilarityTool]) -> TfidfModel:
    return fit_tfidf([tokenize(f"{t.name} {_description(t)}") for t in tools])


def diagnose_pair(
    a: SimilarityTool,
    b: SimilarityTool,
    similarity_score: float,
    *,
    corpus: Sequence[SimilarityTool] | None = None,
) -> list[DifferentiationIssue]:
    """Return the differentiation issues of a pair, in a fixed order (scope_clarity, terminology_overlap,
    parameter_uniqueness, naming_clarity, example_distinctiveness), each with its evidence.

    ``corpus`` (default: the pair) weights terms by rarity across the tool set. Deterministic."""
    model = _term_model(corpus if corpus else [a, b])
    da, db = _description(a), _description(b)
    issues: list[DifferentiationIssue] = []

    scope_a, scope_b = bool(_SCOPE_RE.search(da)), bool(_SCOPE_RE.search(db))
    if not (scope_a and scope_b):
        issues.append(
            DifferentiationIssue(
                issue_type="scope_clarity",
                description=(
                    f"The descriptions do not say when to use one tool rather than the other "
                    f"(similarity {similarity_score:.2f})."
                ),
                evidence={
                    "similarity_score": _score(similarity_score),
                    "tool_a_states_scope": scope_a,
                    "tool_b_states_scope": scope_b,
                },
            )
        )

    terms_a = {t for t in tokenize(da) if not t.isdigit()}
    terms_b = {t for t in tokenize(db) if not t.isdigit()}
    shared_terms = terms_a & terms_b
    union_terms = terms_a | terms_b
    term_jaccard = len(shared_terms) / len(union_terms) if union_terms else 0.0
    if shared_terms and (len(shared_terms) >= 2 or term_jaccard >= 0.3):
        shared_ranked = [surface for _t, surface, _w in _weighted_terms(da, terms_a - shared_terms, model)][
            :15
        ]
        issues.append(
            DifferentiationIssue(
                issue_type="terminology_overlap",
                description=f"The descriptions share {len(shared_terms)} terms: {', '.join(shared_ranked[:6])}.",
                evidence={"shared_terms": shared_ranked, "term_jaccard": _score(term_jaccard)},
            )
        )

    pa, pb = _params(a), _params(b)
    keys_a = {p.key: p.name for p in pa}
    keys_b = {p.key: p.name for p in pb}
    shared_keys = sorted(set(keys_a) & set(keys_b))
    overlap = parameter_overlap(a, b)
    only_a = sorted(keys_a[k] for k in set(keys_a) - set(keys_b))
    only_b = sorted(keys_b[k] for k in set(keys_b) - set(keys_a))
    if shared_keys and (len(shared_keys) >= 2 or overlap >= 0.5 or not only_a or not only_b):
        issues.append(
            DifferentiationIssue(
                issue_type="parameter_uniqueness",
                description=(
                    f"The tools share parameters {', '.join(keys_a[k] for k in shared_keys[:8])}"
                    f" (parameter overlap {overlap:.2f})."
                ),
                evidence={
                    "shared_parameters": [keys_a[k] for k in shared_keys],
                    "unique_to_a": only_a,
                    "unique_to_b": only_b,
                    "parameter_overlap": overlap,
                },
            )
        )

    name_a, name_b = humanize_identifier(a.name), humanize_identifier(b.name)
    ratio = (
        difflib.SequenceMatcher(None, name_a, name_b, autojunk=False).ratio() if name_a and name_b else 0.0
    )
    ntok_a, ntok_b = set(tokenize(name_a)), set(tokenize(name_b))
    shared_name = sorted(ntok_a & ntok_b)
    half = bool(shared_name) and (len(shared_name) * 2 >= len(ntok_a) or len(shared_name) * 2 >= len(ntok_b))
    if ratio >= 0.6 or half:
        issues.append(
            DifferentiationIssue(
                issue_type="naming_clarity",
                description=f"The names {_name(a)!r} and {_name(b)!r} are alike (similarity {ratio:.2f}).",
                evidence={"name_similarity": _score(ratio), "shared_name_tokens": shared_name},
            )
        )

    ex_a, ex_b = _examples(da), _examples(db)
    ex_overlap = 0.0
    if ex_a and ex_b:
        vecs = tfidf_vectors([" ".join(ex_a), " ".join(ex_b)])
        ex_overlap = float(vecs[0] @ vecs[1])
    if not (ex_a and ex_b) or ex_overlap >= 0.5:
        what = (
            "Their examples are alike"
            if ex_a and ex_b
            else "Neither description gives an example request"
            if not ex_a and not ex_b
            else "Only one description gives an example request"
        )
        issues.append(
            DifferentiationIssue(
                issue_type="example_distinctiveness",
                description=f"{what}, so nothing shows which requests belong to which tool.",
                evidence={"examples_a": ex_a, "examples_b": ex_b, "example_overlap": _score(ex_overlap)},
            )
        )
    return issues


def _name(tool: SimilarityTool) -> str:
    return clean_text(tool.name, 200)


def _join(words: Sequence[str]) -> str:
    return ", ".join(words)


def template_revision(
    tool: SimilarityTool, other: SimilarityTool, *, corpus: Sequence[SimilarityTool] = ()
) -> str:
    """Return a revised description of ``tool`` that states its scope against ``other``, built only from
    the two definitions: the original description, the terms only ``tool`` uses, the terms only
    ``other`` uses, and the parameters only ``tool`` has."""
    model = _term_model(corpus if corpus else [tool, other])
    base = _description(tool)[:_MAX_REVISED_BASE_CHARS].rstrip()
    if not base:
        base = humanize_identifier(tool.name).capitalize() or "This tool"
    if not base.endswith((".", "!", "?")):
        base += "."
    own_name = set(tokenize(tool.name))
    other_name = set(tokenize(other.name))
    terms_tool = set(tokenize(_description(tool)))
    terms_other = set(tokenize(_description(other)))
    mine = [s for _t, s, _w in _weighted_terms(_description(tool), terms_other | own_name, model)][:4]
    theirs = [s for _t, s, _w in _weighted_terms(_description(other), terms_tool | other_name, model)][:4]
    parts = [base]
    if mine:
        parts.append(f"Use `{_name(tool)}` when the request involves: {_join(mine)}.")
    if theirs:
        parts.append(f"For requests involving {_join(theirs)}, use `{_name(other)}` instead.")
    else:
        parts.append(f"Do not use it for what `{_name(other)}` does.")
    other_keys = {p.key for p in _params(other)}
    unique = [p.name for p in _params(tool) if p.key not in other_keys][:6]
    if unique:
        parts.append(f"Inputs specific to this tool: {_join(unique)}.")
    return " ".join(parts)


async def _revision(
    tool: SimilarityTool,
    other: SimilarityTool,
    issues: list[DifferentiationIssue],
    rewrite: RewriteFn | None,
    corpus: Sequence[SimilarityTool],
) -> tuple[str, RevisionSource]:
    if rewrite is not None:
        try:
            text = clean_text(await rewrite(tool, other, issues), _MAX_LLM_REVISION_CHARS).strip()
        except Exception:
            # Rewriting is best effort: the template is always a valid answer.
            logger.warning(
                "description rewrite failed for tool %s; using the template", tool.id, exc_info=True
            )
            text = ""
        if text:
            return text, "llm"
    return template_revision(tool, other, corpus=corpus), "template"


_PRIORITY: Final[Mapping[str, Priority]] = {
    "scope_clarity": "high",
    "terminology_overlap": "medium",
    "parameter_uniqueness": "medium",
    "naming_clarity": "medium",
    "example_distinctiveness": "low",
}


def _patch(revised: str) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/description", "value": revised}]


async def _recommend_pair(
    a: SimilarityTool,
    b: SimilarityTool,
    score: float,
    rewrite: RewriteFn | None,
    corpus: Sequence[SimilarityTool],
) -> DifferentiationRecommendation:
    issues = diagnose_pair(a, b, score, corpus=corpus)
    by_type = {i.issue_type: i for i in issues}
    items: list[RecommendationItem] = []
    revised: set[str] = set()

    async def per_tool(
        issue: IssueType, tool: SimilarityTool, other: SimilarityTool, text: str, why: str
    ) -> None:
        new, source = await _revision(tool, other, issues, rewrite, corpus)
        revised.add(tool.id)
        items.append(
            RecommendationItem(
                issue=issue,
                tool_id=tool.id,
                recommendation=text,
                rationale=why,
                priority=_PRIORITY[issue],
                revised_description=new,
                revised_description_source=source,
                apply_commands=_patch(new),
            )
        )

    if scope := by_type.get("scope_clarity"):
        for tool, other, states in ((a, b, "tool_a_states_scope"), (b, a, "tool_b_states_scope")):
            if not scope.evidence[states]:
                await per_tool(
                    "scope_clarity",
                    tool,
                    other,
                    f"State in the description of `{_name(tool)}` which requests it handles and that "
                    f"`{_name(other)}` handles the others.",
                    "A model choosing between near-identical descriptions picks arbitrarily; an explicit "
                    "boundary turns that into a rule it can follow.",
                )
    if terms := by_type.get("terminology_overlap"):
        shared = _join(terms.evidence["shared_terms"][:6])
        pending = [(t, o) for t, o in ((a, b), (b, a)) if t.id not in revised]
        for tool, other in pending:
            await per_tool(
                "terminology_overlap",
                tool,
                other,
                f"Describe `{_name(tool)}` with words specific to it instead of the shared terms ({shared}).",
                "Shared vocabulary makes the descriptions embed, and read, alike.",
            )
        if not pending:
            items.append(
                RecommendationItem(
                    issue="terminology_overlap",
                    tool_id=None,
                    recommendation=f"Replace the shared terms ({shared}) with wording specific to each tool.",
                    rationale="Shared vocabulary makes the descriptions embed, and read, alike.",
                    priority=_PRIORITY["terminology_overlap"],
                )
            )
    if params := by_type.get("parameter_uniqueness"):
        shared_params = _join(params.evidence["shared_parameters"][:8])
        items.append(
            RecommendationItem(
                issue="parameter_uniqueness",
                tool_id=None,
                recommendation=(
                    f"Describe how the shared parameters ({shared_params}) differ in meaning between "
                    f"`{_name(a)}` and `{_name(b)}`, or give each tool the parameters only it needs."
                ),
                rationale="With the same inputs, nothing in the schema tells the model which tool fits the request.",
                priority=_PRIORITY["parameter_uniqueness"],
            )
        )
    if naming := by_type.get("naming_clarity"):
        shared_tokens = _join(naming.evidence["shared_name_tokens"]) or "most characters"
        items.append(
            RecommendationItem(
                issue="naming_clarity",
                tool_id=None,
                recommendation=(
                    f"Make the names `{_name(a)}` and `{_name(b)}` differ in what the tools do, not only "
                    f"around the shared part ({shared_tokens})."
                ),
                rationale=(
                    "Models weigh tool names heavily. No patch is proposed: renaming a tool breaks "
                    "existing callers, so it is the author's decision."
                ),
                priority=_PRIORITY["naming_clarity"],
            )
        )
    if by_type.get("example_distinctiveness"):
        items.append(
            RecommendationItem(
                issue="example_distinctiveness",
                tool_id=None,
                recommendation=(
                    f"Add to each description one example request that only that tool should handle "
                    f"(one for `{_name(a)}`, one for `{_name(b)}`)."
                ),
                rationale="A contrasting example is the cheapest way to show the boundary between two tools.",
                priority=_PRIORITY["example_distinctiveness"],
            )
        )
    return DifferentiationRecommendation(
        tool_pair=[a.id, b.id], similarity_score=_score(score), issues=issues, recommendations=items
    )


async def build_recommendations(
    tools: Sequence[SimilarityTool],
    scores: Sequence[SimilarityScore],
    *,
    rewrite: RewriteFn | None = None,
    max_pairs: int = 50,
) -> list[DifferentiationRecommendation]:
    """Return one :class:`DifferentiationRecommendation` per flagged pair in ``scores`` (in that order,
    at most ``max_pairs``; pairs naming unknown tool ids are skipped).

    Revised descriptions come from ``rewrite`` (source ``"llm"``) when given and it returns text, else
    from :func:`template_revision` (source ``"template"``); a failing ``rewrite`` falls back to the
    template. Each revised description comes with the JSON patch replacing ``/description``."""
    by_id = {t.id: t for t in tools}
    out: list[DifferentiationRecommendation] = []
    for s in scores:
        if len(out) >= max_pairs:
            break
        if not s.flagged or s.tool_a_id not in by_id or s.tool_b_id not in by_id:
            continue
        score = s.full_similarity_score if s.full_similarity_score is not None else s.similarity_score
        out.append(await _recommend_pair(by_id[s.tool_a_id], by_id[s.tool_b_id], score, rewrite, tools))
    return out


# ----------------------------------------------------------------------------------------------- lint

_MANIPULATION_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("always use", re.compile(r"\balways\s+(?:use|call|choose|pick|prefer|invoke|select)\b", re.IGNORECASE)),
    ("ignore instructions", re.compile(
        r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+)?"
        r"(?:previous|prior|above|earlier|other|system)\b", re.IGNORECASE)),
    ("exclusive use", re.compile(
        r"\b(?:do\s+not|don't|never)\s+(?:use|call|choose|invoke)\s+(?:any\s+)?(?:other|another|different)\s+tools?\b"
        r"|\binstead\s+of\s+(?:any|all)\s+other\s+tools?\b|\bthe\s+only\s+tool\s+(?:you|that)\b", re.IGNORECASE)),
    ("shouted MUST", re.compile(r"\bMUST\b")),
    ("priority claim", re.compile(
        r"\b(?:highest|top)\s+priority\b|\bthis\s+tool\s+(?:takes|has)\s+precedence\b", re.IGNORECASE)),
    ("embedded prompt markup", re.compile(
        r"<\s*/?\s*(?:system|instructions?|important)\s*>|\[\s*(?:system|INST)\s*\]", re.IGNORECASE)),
)  # fmt: skip
_HIDDEN_CHARS: Final = frozenset(
    "\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u00ad"
)


def _name_key(name: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", name).casefold() if ch.isalnum())


def lint_tools(tools: Sequence[SimilarityTool]) -> list[LintFinding]:
    """Check each tool definition with fixed rules and return the findings in tool order, then rule order.

    Rules: ``description_missing`` (error), ``description_too_short`` (warning, under 20 characters or 4
    words), ``description_too_long`` (warning, over 1,500 characters), ``manipulative_instruction``
    (error: "always use this tool", "ignore previous …", "do not use other tools", shouted MUST, prompt
    markup), ``hidden_characters`` (warning: zero-width/bidi controls), ``invalid_name`` (warning: not
    ``^[A-Za-z0-9_-]{1,64}$``, what OpenAI-style function calling accepts), ``confusable_name`` (error:
    names that differ only by case/punctuation from another tool's), ``schema_invalid`` (warning:
    schema or its properties not objects), ``parameter_description_missing`` (warning, one finding
    listing the parameters). Never raises on odd input."""
    findings: list[LintFinding] = []
    groups: dict[str, set[str]] = {}
    for t in tools:
        key = _name_key(clean_text(t.name, 1_000))
        if key:
            groups.setdefault(key, set()).add(clean_text(t.name, 1_000))

    for t in tools:
        tid = t.id
        name = clean_text(t.name, 1_000)
        raw_desc = t.description if isinstance(t.description, str) else ""
        desc = clean_text(raw_desc).strip()

        def add(rule: str, severity: Severity, message: str, tid: str = tid) -> None:
            findings.append(LintFinding(tool_id=tid, rule=rule, severity=severity, message=message))

        if not desc:
            add(
                "description_missing",
                "error",
                f"Tool {name!r} has no description; models pick it by name alone.",
            )
        elif len(desc) < _MIN_DESCRIPTION_CHARS or len(desc.split()) < _MIN_DESCRIPTION_WORDS:
            add(
                "description_too_short",
                "warning",
                f"Description of {name!r} is {len(desc)} characters; say what it does, on what, and when to use it.",
            )
        if len(raw_desc) > _LONG_DESCRIPTION_CHARS:
            add(
                "description_too_long",
                "warning",
                f"Description of {name!r} is {len(raw_desc)} characters (over {_LONG_DESCRIPTION_CHARS}); "
                "long descriptions cost context on every request and bury the scope.",
            )
        hits: list[str] = []
        for label, pattern in _MANIPULATION_PATTERNS:
            m = pattern.search(desc)
            if m:
                hits.append(f"{label} ({m.group(0).strip()[:60]!r})")
        if hits:
            add(
                "manipulative_instruction",
                "error",
                f"Description of {name!r} tries to steer the model instead of describing the tool: {'; '.join(hits)}.",
            )
        hidden = sorted(
            {f"U+{ord(ch):04X}" for ch in raw_desc[:_MAX_DESCRIPTION_CHARS] + name if ch in _HIDDEN_CHARS}
        )
        if hidden:
            add(
                "hidden_characters",
                "warning",
                f"Tool {name!r} contains invisible characters ({', '.join(hidden)}) that can hide text from reviewers.",
            )
        if not _TOOL_NAME_RE.match(name):
            add(
                "invalid_name",
                "warning",
                f"Name {name[:80]!r} is not 1-64 characters of letters, digits, '_' or '-'.",
            )
        twins = sorted(groups.get(_name_key(name), set()) - {name})
        if twins:
            add(
                "confusable_name",
                "error",
                f"Name {name!r} differs only by case or punctuation from {', '.join(repr(x) for x in twins)}.",
            )
        schema: object = t.input_schema
        props = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(schema, dict) or (props is not None and not isinstance(props, dict)):
            add(
                "schema_invalid",
                "warning",
                f"Input schema of {name!r} is not a JSON Schema object with properties.",
            )
        undocumented = [p.name for p in _params(t) if not p.description.strip()]
        if undocumented:
            shown = ", ".join(undocumented[:10]) + (" …" if len(undocumented) > 10 else "")
            add(
                "parameter_description_missing",
                "warning",
                f"Parameters of {name!r} without a description: {shown}.",
            )
    return findings


# ------------------------------------------------------------------------------------------ grounding


class GroundedPair(msgspec.Struct, frozen=True, kw_only=True):
    """A flagged pair with the confusions actually observed between its tools (either direction)."""

    tool_a_id: str
    tool_b_id: str
    similarity_score: float
    full_similarity_score: float | None
    observed_confusions: int
    confusions: list[ObservedConfusion]


class GroundingReport(msgspec.Struct, frozen=True, kw_only=True):
    """Embedding predictions checked against behaviour.

    ``flagged_pairs``: every flagged pair, most-confused first. ``missed_confusions``: confusions between
    two known tools whose pair was not flagged (or not in the scores). ``unresolved_confusions``:
    confusions naming a tool that matches no tool (e.g. no tool chosen, or a hallucinated name)."""

    flagged_pairs: list[GroundedPair]
    missed_confusions: list[ObservedConfusion]
    unresolved_confusions: list[ObservedConfusion]


def _resolve(ref: str, by_id: Mapping[str, str], by_name: Mapping[str, list[str]]) -> list[str]:
    if ref in by_id:
        return [ref]
    return by_name.get(ref, [])


def ground_in_behaviour(
    scores: Sequence[SimilarityScore],
    tools: Sequence[SimilarityTool],
    confusions: Mapping[tuple[str, str], int],
) -> GroundingReport:
    """Annotate flagged pairs with observed confusions and list the confusions embeddings missed.

    ``confusions`` maps ``(expected, selected)`` to a count, where ``expected`` is a tool id or name and
    ``selected`` a tool name (or id). Names shared by several tools (same name on two servers) match all
    of them. Entries with ``expected == selected`` or a count ``<= 0`` are ignored. Output order is
    deterministic: pairs by observed confusions desc, then score desc, then ids; confusion lists by
    count desc, then expected, then selected."""
    by_id = {t.id: t.id for t in tools}
    by_name: dict[str, list[str]] = {}
    for t in tools:
        by_name.setdefault(t.name, []).append(t.id)
    pair_index: dict[frozenset[str], SimilarityScore] = {}
    for s in scores:
        if s.tool_a_id != s.tool_b_id:
            pair_index.setdefault(frozenset((s.tool_a_id, s.tool_b_id)), s)

    per_pair: dict[frozenset[str], list[ObservedConfusion]] = {}
    missed: list[ObservedConfusion] = []
    unresolved: list[ObservedConfusion] = []
    for (expected, selected), count in sorted(
        confusions.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        if count <= 0 or expected == selected:
            continue
        exp_ids, sel_ids = _resolve(expected, by_id, by_name), _resolve(selected, by_id, by_name)
        if not exp_ids or not sel_ids:
            unresolved.append(ObservedConfusion(expected=expected, selected=selected, count=count))
            continue
        candidates = sorted({(e, sel) for e in exp_ids for sel in sel_ids if e != sel})
        if not candidates:
            continue
        flagged_hits = [
            (e, sel, pair_index[frozenset((e, sel))])
            for e, sel in candidates
            if frozenset((e, sel)) in pair_index and pair_index[frozenset((e, sel))].flagged
        ]
        for e, sel, score in flagged_hits:
            per_pair.setdefault(frozenset((e, sel)), []).append(
                ObservedConfusion(
                    expected=expected,
                    selected=selected,
                    count=count,
                    tool_a_id=e,
                    tool_b_id=sel,
                    similarity_score=score.similarity_score,
                )
            )
        if not flagged_hits:
            e, sel = candidates[0]
            known = pair_index.get(frozenset((e, sel)))
            missed.append(
                ObservedConfusion(
                    expected=expected,
                    selected=selected,
                    count=count,
                    tool_a_id=e,
                    tool_b_id=sel,
                    similarity_score=known.similarity_score if known else None,
                )
            )

    def conf_key(c: ObservedConfusion) -> tuple[int, str, str]:
        return (-c.count, c.expected, c.selected)

    grounded = []
    for key, s in pair_index.items():
        if not s.flagged:
            continue
        found = sorted(per_pair.get(key, []), key=conf_key)
        grounded.append(
            GroundedPair(
                tool_a_id=s.tool_a_id,
                tool_b_id=s.tool_b_id,
                similarity_score=s.similarity_score,
                full_similarity_score=s.full_similarity_score,
                observed_confusions=sum(c.count for c in found),
                confusions=found,
            )
        )
    grounded.sort(
        key=lambda g: (
            -g.observed_confusions,
            -(g.full_similarity_score if g.full_similarity_score is not None else g.similarity_score),
            g.tool_a_id,
            g.tool_b_id,
        )
    )
    return GroundingReport(
        flagged_pairs=grounded,
        missed_confusions=sorted(missed, key=conf_key),
        unresolved_confusions=sorted(unresolved, key=conf_key),
    )
