"""Tool selection of the offline ``baseline`` provider: a lexical retriever, not a language model.

The baseline ranks every offered tool by the TF-IDF cosine between the user's query and the tool's
name, description and parameter names, picks the best one, and abstains when even the best score is
below a threshold. It never extracts arguments. It exists so the demo and the tests run with no
network, and every result it produces must be labelled as a baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from worker_service.lexical import fit_tfidf, humanize_identifier, tokenize

__all__ = ["DEFAULT_THRESHOLD", "BaselineChoice", "BaselineTool", "ToolScore", "choose_tool"]

#: Minimum cosine for the baseline to choose a tool rather than abstain.
#:
#: Why 0.12: the cosine between a short query and a tool text grows with the share of the query's
#: informative terms the tool uses. A query sharing nothing with any tool scores exactly 0; a query
#: sharing only one term that appears in almost every tool (such as "todo" on a todo server or "rag"
#: on a RAG server) scores about 0.05-0.10 because such terms have the lowest IDF and the tool texts
#: are long; a query naming what a tool does ("search my todos for 'dentist'", "list my open todos")
#: shares two or more terms, at least one of them distinctive, and scores 0.2-0.5. 0.12 sits between
#: those bands, so the baseline abstains on small talk and off-topic requests (true negatives) and
#: still answers on-topic ones. Callers may pass another value (0 means never abstain unless nothing
#: at all matches).
DEFAULT_THRESHOLD: Final = 0.12


class BaselineTool(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the baseline sees it: identity plus the text it is matched against."""

    server: str
    name: str
    description: str = ""
    parameters: tuple[str, ...] = ()


class ToolScore(msgspec.Struct, frozen=True, kw_only=True):
    """The cosine between the query and one tool."""

    server: str
    name: str
    score: float


class BaselineChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome: the chosen tool (both ``None`` when abstaining), its score and all scores."""

    server: str | None
    name: str | None
    score: float
    threshold: float
    scores: list[ToolScore]

    @property
    def abstained(self) -> bool:
        """True when no tool was chosen."""
        return self.name is None


def _tool_terms(tool: BaselineTool) -> list[str]:
    params = " ".join(humanize_identifier(p) for p in tool.parameters[:256])
    # The name is what the model sees first and is usually the most specific text: count it twice.
    name = humanize_identifier(tool.name)
    return tokenize(f"{name} {name} {tool.description} {params}")


def choose_tool(
    query: str, tools: Sequence[BaselineTool], threshold: float = DEFAULT_THRESHOLD
) -> BaselineChoice:
    """Rank ``tools`` for ``query`` and choose the best one unless its score is below ``threshold``.

    Promises: ``scores`` has one entry per tool, sorted by score descending then (server, name), so
    ties are broken the same way on every run; scores are in ``[0, 1]`` rounded to 6 decimals; with no
    tools, an empty query or a best score under ``threshold`` (or equal to 0) the choice abstains
    (``server`` and ``name`` are ``None``). Never raises on odd text."""
    if not tools:
        return BaselineChoice(server=None, name=None, score=0.0, threshold=threshold, scores=[])
    docs = [_tool_terms(t) for t in tools]
    model = fit_tfidf(docs)
    tool_vecs = model.transform(docs)
    query_vec = model.transform([tokenize(query)])[0]
    raw = tool_vecs @ query_vec
    scores = sorted(
        (
            ToolScore(server=t.server, name=t.name, score=round(min(max(float(s), 0.0), 1.0), 6))
            for t, s in zip(tools, raw, strict=True)
        ),
        key=lambda ts: (-ts.score, ts.server, ts.name),
    )
    best = scores[0]
    if best.score <= 0.0 or best.score < threshold:
        return BaselineChoice(server=None, name=None, score=best.score, threshold=threshold, scores=scores)
    return BaselineChoice(
        server=best.server, name=best.name, score=best.score, threshold=threshold, scores=scores
    )
