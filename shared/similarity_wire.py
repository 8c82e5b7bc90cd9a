"""Similarity over NATS request-reply: the job the API sends, the results a worker answers with,
compression, and replies in chunks.

The API validates a similarity request, turns it into a :class:`SimilarityJob` and sends it in a
`shared.messages.SimilarityRequest` on `SIMILARITY_SUBJECT` (core NATS, queue group
`SIMILARITY_QUEUE`: one worker answers). Nothing is persisted anywhere.

Replies can be far larger than NATS' `max_payload` (a 2,000-tool matrix is tens of megabytes), so a
worker publishes the encoded `SimilarityReply` in numbered chunks (header `Mcpeval-Chunk: i/n`) to the
request's reply inbox, and :func:`request_chunked` reassembles them. NATS keeps the order of one
publisher's messages, and the index makes a missing chunk detectable anyway.

The result types (:class:`AnalysisResult`, :class:`MatrixResult`, :class:`OverlapResult`,
:class:`RecommendationsResult` and their parts) are defined once, here: the worker builds them, the API
decodes the reply straight into them and returns them (its OpenAPI document is generated from them).
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from datetime import datetime
from typing import Any, Literal

import msgspec
from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError

CHUNK_HEADER = "Mcpeval-Chunk"
#: Room left in each message for headers and protocol framing.
_HEADROOM = 8192
_MAX_CHUNKS = 20_000
#: Decompressed size limit: a job or a reply larger than this is refused (no zlib bombs).
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024


IssueType = Literal[
    "scope_clarity",
    "example_distinctiveness",
    "parameter_uniqueness",
    "naming_clarity",
    "terminology_overlap",
]
Priority = Literal["high", "medium", "low"]
Severity = Literal["error", "warning", "info"]
RevisionSource = Literal["template", "llm"]


# ------------------------------------------------------------------------------------------------ job


class SimilarityTool(msgspec.Struct, frozen=True, kw_only=True):
    """A tool to compare, with an id unique in the request (given by the API, or `label/name` by the
    worker for `url_list` servers). `input_schema` is untrusted: anything that is not a JSON Schema
    object is treated as "no parameters"."""

    id: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    server: str | None = None


class JobUrl(msgspec.Struct, frozen=True, kw_only=True):
    """An MCP server the worker fetches tools from. `label` names the server in tool ids
    (the registered server's name when the url is registered, else the url); `field` is the request
    field to name in errors (e.g. `url_list[2]`)."""

    url: str
    transport: str
    label: str
    field: str


class Confusion(msgspec.Struct, frozen=True, kw_only=True):
    """`count` completed runs expected (expected_server, expected_tool) and the model chose
    (selected_server, selected_tool)."""

    expected_server: str | None
    expected_tool: str
    selected_server: str
    selected_tool: str
    count: int


class Behaviour(msgspec.Struct, frozen=True, kw_only=True):
    """Observed tool confusions of completed runs matching the request's `test_run_filter`."""

    runs_considered: int
    confusions: list[Confusion]


class SimilarityJob(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker needs for one similarity request. Exactly one of `tools` / `urls` is non-empty.

    `operation` limits: at most `max_tools` tools after extraction, and exactly `exact_tools` when set."""

    tools: list[SimilarityTool] = msgspec.field(default_factory=list)
    urls: list[JobUrl] = msgspec.field(default_factory=list)
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    threshold: float = 0.85
    compute_full_similarity: bool = False
    include_recommendations: bool = False
    model: str | None = None
    base_url: str | None = None
    max_pairs: int = 1000
    max_tools: int = 10_000
    exact_tools: int | None = None
    behaviour: Behaviour | None = None


# --------------------------------------------------------------------------------------------- results
#
# `method` is the embedding backend's `worker_service.embeddings.EmbeddingMethod`
# ("embedding" or "description_overlap").


class ToolRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    server: str | None


class SimilarityScore(msgspec.Struct, frozen=True, kw_only=True):
    """Pairwise similarity of two tools (seed 002)."""

    tool_a_id: str
    tool_b_id: str
    similarity_score: float
    full_similarity_score: float | None
    method: str
    flagged: bool


class ObservedConfusion(msgspec.Struct, frozen=True, kw_only=True):
    """A model chose `selected` where `expected` was right, `count` times (tool ids when resolved)."""

    expected: str
    selected: str
    count: int
    tool_a_id: str | None = None
    tool_b_id: str | None = None
    similarity_score: float | None = None


class FlaggedPair(msgspec.Struct, frozen=True, kw_only=True):
    """A flagged pair; with grounding, the confusions observed between its two tools (either way)."""

    tool_a_id: str
    tool_b_id: str
    similarity_score: float
    full_similarity_score: float | None
    method: str
    observed_confusions: int | None = None
    confusions: list[ObservedConfusion] | None = None


class Grounding(msgspec.Struct, frozen=True, kw_only=True):
    """Similarity checked against behaviour: `missed_confusions` happened between two known tools whose
    pair was not flagged (their `similarity_score` is None when the pair is not among `pairs`);
    `unresolved_confusions` name a tool that is not in the analysed set."""

    runs_considered: int
    confusions_total: int
    missed_confusions: list[ObservedConfusion]
    unresolved_confusions: list[ObservedConfusion]


class LintFinding(msgspec.Struct, frozen=True, kw_only=True):
    """A problem in one tool definition found without any model."""

    tool_id: str
    rule: str
    severity: Severity
    message: str


class DifferentiationIssue(msgspec.Struct, frozen=True, kw_only=True):
    """Why two tools are confusable, with the evidence found."""

    issue_type: IssueType
    description: str
    evidence: dict[str, Any]


class RecommendationItem(msgspec.Struct, frozen=True, kw_only=True):
    """One action. `tool_id` is None when it concerns both tools. `apply_commands` are RFC 6902
    JSON-patch operations against the tool definition (`/description`, `/input_schema/...`)."""

    issue: IssueType
    tool_id: str | None
    recommendation: str
    rationale: str
    priority: Priority
    revised_description: str | None = None
    revised_description_source: RevisionSource | None = None
    apply_commands: list[dict[str, Any]] = msgspec.field(default_factory=list)


class DifferentiationRecommendation(msgspec.Struct, frozen=True, kw_only=True):
    """Guidance for one flagged pair (seed 002)."""

    tool_pair: list[str]
    similarity_score: float
    issues: list[DifferentiationIssue]
    recommendations: list[RecommendationItem]


class AnalysisResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to `/similarity/analyze`."""

    method: str
    model: str
    threshold: float
    suggested_threshold: float
    threshold_note: str
    compute_full_similarity: bool
    tool_count: int
    tools: list[ToolRef]
    total_pairs: int
    flagged_count: int
    truncated: bool
    pairs: list[SimilarityScore]
    flagged_pairs: list[FlaggedPair]
    clusters: list[list[str]]
    lint: list[LintFinding]
    recommendations: list[DifferentiationRecommendation] | None
    grounding: Grounding | None
    generated_at: datetime


class MatrixResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to `/similarity/matrix`."""

    method: str
    model: str
    include_parameters: bool
    tool_ids: list[str]
    tools: list[ToolRef]
    matrix: list[list[float]]
    suggested_threshold: float
    generated_at: datetime


class OverlapResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to `/similarity/overlap-matrix`."""

    method: str
    model: str
    tool_ids: list[str]
    tools: list[ToolRef]
    matrix: list[list[float]]
    dimensions: dict[str, float]
    threshold: float
    suggested_threshold: float
    clusters: list[list[str]]
    generated_at: datetime


class RecommendationsResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to `/similarity/recommendations`."""

    method: str
    model: str
    threshold: float
    suggested_threshold: float
    tools: list[ToolRef]
    tool_pair: list[str]
    similarity_score: float
    full_similarity_score: float | None
    flagged: bool
    issues: list[DifferentiationIssue]
    recommendations: list[RecommendationItem]
    generated_at: datetime


# ------------------------------------------------------------------------------------------- transport


class NoResponderError(Exception):
    """No worker is subscribed to the subject."""


class ReplyTimeoutError(Exception):
    """No complete reply arrived in time."""


def compress(data: bytes) -> bytes:
    return zlib.compress(data, 6)


def decompress(data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Inflate `data`, refusing output larger than `limit` (ValueError)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit)
    except zlib.error as exc:
        raise ValueError(f"corrupt compressed payload: {exc}") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"payload inflates to more than {limit} bytes")
    return out


def chunk_size(nc: NatsClient) -> int:
    return max(1024, int(nc.max_payload) - _HEADROOM)


async def publish_chunked(nc: NatsClient, subject: str, data: bytes) -> None:
    """Publish `data` to `subject` in as many messages as `max_payload` requires, then flush."""
    size = chunk_size(nc)
    parts = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    for index, part in enumerate(parts, 1):
        await nc.publish(subject, part, headers={CHUNK_HEADER: f"{index}/{len(parts)}"})
    await nc.flush()


def _chunk_marker(value: str) -> tuple[int, int]:
    index_text, _, count_text = value.partition("/")
    index, count = int(index_text), int(count_text)
    if not 1 <= index <= count <= _MAX_CHUNKS:
        raise ValueError(f"bad chunk marker {value!r}")
    return index, count


async def request_chunked(nc: NatsClient, subject: str, data: bytes, timeout: float) -> bytes:
    """Send `data` as a request and return the reply reassembled from its chunks.

    Raises NoResponderError when nobody listens on `subject`, ReplyTimeoutError when the whole reply
    has not arrived within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subject, data, reply=inbox)
        parts: dict[int, bytes] = {}
        total: int | None = None
        while total is None or len(parts) < total:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ReplyTimeoutError(f"no complete reply within {timeout:g} s")
            try:
                msg = await sub.next_msg(timeout=remaining)
            except (NatsTimeoutError, TimeoutError):
                raise ReplyTimeoutError(f"no complete reply within {timeout:g} s") from None
            headers = msg.headers or {}
            if headers.get("Status") == "503":
                raise NoResponderError(subject)
            marker = headers.get(CHUNK_HEADER)
            if marker is None:
                return bytes(msg.data)
            index, count = _chunk_marker(marker)
            if total is not None and count != total:
                raise ValueError("chunks of different replies interleaved")
            total = count
            parts[index] = bytes(msg.data)
        return b"".join(parts[i] for i in range(1, total + 1))
    finally:
        # The connection may be closing; the inbox dies with it then.
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
