"""Pure scoring of one test run: classification, parameter metrics, confidence, reasoning, recommendations.

No I/O, no database, no network, no randomness; the same inputs always give the same :class:`Score`, and
untrusted model output (non-object arguments, huge strings, nested junk) never makes :func:`score` raise.

Inputs: the expected (server, tool, parameters), the tool snapshot offered to the model, and one or more
samples of the model's answer to the same request. The FIRST sample is the scored answer; the others only feed
confidence. Within a sample the FIRST call is the selection; further calls are reported in ``extra_calls`` and
the reasoning (with a "spurious call" note when they are not the expected tool) but never change the verdict.

Classification (tool identity is the pair (server, tool))
---------------------------------------------------------
* A tool is expected unless ``Expected.server`` and ``Expected.tool`` are both ``None``. (If only one of them is
  ``None`` it is a wildcard: any server / any tool name is accepted for that part.)
* A call is *malformed* when ``ToolCall.malformed`` is set, when its server or tool is ``None`` (the name matched
  no offered tool), or when its arguments are not a JSON object. ``arguments=None`` without a malformed reason
  means "no arguments" and is treated as ``{}``.
* Tool expected: **TP** when the selection is a well-formed call to the expected server and tool; **FN**
  otherwise -- a different tool, the right tool name on the wrong server (said explicitly), no call at all, or
  a malformed call (even one naming the expected tool).
* No tool expected: **TN** when the first sample has no call; **FP** when it has any call, *including a
  malformed one* (unparseable arguments, unknown tool name): a malformed call is still a call, not an
  abstention (BFCL wrongly credits it as one).
* ``tool_selection_correct`` is true exactly for TP and TN.

Parameters (scored only for TP)
-------------------------------
* FN/FP: completeness 0.0, correctness 0.0, type conformance false, no hallucinated keys. TN: 1.0, 1.0, true --
  there is nothing to get wrong, so a correct abstention is not penalised in aggregates.
* ``expected_parameters`` null or ``{}``: completeness = correctness = 1.0 (nothing demanded); type
  conformance and hallucinations are still checked against the schema.
* *Required* expected keys are those whose expected value is neither ``$optional`` nor ``$absent``.
  completeness = share of required keys that were sent (1.0 when there are none).
* correctness = share of all expected keys whose value matches (:func:`shared.matchers.match_value` with the
  property's schema): an unsent ``$optional`` key matches, an ``$absent`` key matches when not sent, an unsent
  required key does not match (1.0 when there are no expected keys).
* type conformance = the arguments validate against the tool's ``input_schema`` with the ``jsonschema``
  library, using the schema's own ``$schema`` draft (Draft 2020-12 when it declares none). References are
  resolved only inside the schema (never fetched). A schema that is itself invalid, or cannot be used (e.g. an
  unresolvable ``$ref``), makes conformance false with a note -- never an exception.
* hallucinated = argument keys the schema does not define: the key is not in ``properties``, matches no
  ``patternProperties`` regex, and ``additionalProperties`` is ``false`` or *absent*. Absent counts as "not
  defined" because MCP tool schemas rarely set it, while a key the schema never mentions is still a key the
  model invented. ``additionalProperties: true`` or a schema object allows extra keys. A schema with no
  ``properties`` at all defines nothing to compare with, so no key is hallucinated unless
  ``additionalProperties`` is ``false``.

Confidence
----------
* Each sample's choice is its first call, clustered by (server, tool, normalised arguments); normalised
  arguments = canonical JSON with strings NFC-normalised, case-folded and whitespace-collapsed and integral
  floats equal to ints (:func:`shared.matchers.canonical_json`). No call (abstention) is one cluster; malformed
  calls cluster by raw name.
* ``confidence_score`` = share of samples in the first sample's cluster; ``None`` with a single sample (k=1).
* ``confidence_category``: ``robust`` when score >= ``Thresholds.high_confidence`` and the classification is
  correct (TP/TN); ``needs_clarity`` when below and correct; ``misleading`` when at/above and wrong (FP/FN);
  ``None`` when below and wrong, or when the score is ``None``.

Reasoning and recommendations are built from this evidence only. Every echoed model value, name or description
is truncated to about 200 characters, and long lists are capped.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from referencing import Registry

from shared.matchers import (
    ECHO_LIMIT,
    MISSING,
    canonical_json,
    describe_value,
    is_absent,
    is_optional,
    json_type_name,
    match_value,
    normalize_json,
    schema_for_property,
    truncate,
    validate_expected_parameters,
)

__all__ = [
    "DEFAULT_THRESHOLDS",
    "Classification",
    "ConfidenceCategory",
    "Expected",
    "Sample",
    "Score",
    "Thresholds",
    "ToolCall",
    "ToolSpec",
    "TypeCheck",
    "call_problem",
    "check_type_conformance",
    "choice_key",
    "distinguishing_terms",
    "hallucinated_keys",
    "score",
]

Classification = Literal["TP", "FP", "TN", "FN"]
ConfidenceCategory = Literal["robust", "needs_clarity", "misleading"]

MAX_LISTED: Final = 20
MAX_KEYS: Final = 100
MAX_RECOMMENDATIONS: Final = 20


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool as offered to the model (snapshot)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call from the model, already mapped back to (server, tool) by the caller."""

    server: str | None
    tool: str | None
    arguments: dict[str, Any] | None
    raw_name: str
    raw_arguments: str
    malformed: str | None = None


class Sample(msgspec.Struct, frozen=True):
    """One model answer; no calls = abstention / text only."""

    calls: list[ToolCall]
    text: str | None = None


class Expected(msgspec.Struct, frozen=True):
    """What the test case expects; server and tool both ``None`` = no tool expected."""

    server: str | None
    tool: str | None
    parameters: dict[str, Any] | None = None


class Thresholds(msgspec.Struct, frozen=True):
    """Tunables for the confidence categories."""

    high_confidence: float = 0.7


DEFAULT_THRESHOLDS: Final = Thresholds()


class Score(msgspec.Struct, kw_only=True):
    """Everything the worker stores for one evaluated test run."""

    classification: Classification
    tool_selection_correct: bool
    parameter_completeness: float
    parameter_correctness: float
    parameter_type_conformance: bool
    hallucinated_parameters: list[str]
    confidence_score: float | None
    confidence_category: ConfidenceCategory | None
    reasoning: str
    recommendations: list[str]
    selected: ToolCall | None
    extra_calls: list[ToolCall]
    sample_choices: list[dict[str, Any]]
    missing_parameters: list[str] = msgspec.field(default_factory=list)
    mismatched_parameters: list[str] = msgspec.field(default_factory=list)
    mistyped_parameters: list[str] = msgspec.field(default_factory=list)
    type_errors: list[str] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)


class TypeCheck(msgspec.Struct, frozen=True):
    """Outcome of validating arguments against an input schema."""

    ok: bool
    errors: list[str]  # "path: message" (path "/"-joined, "(arguments)" for the root), sorted, truncated
    mistyped: list[str]  # top-level argument keys with at least one error, in error order
    by_key: dict[str, list[str]] = msgspec.field(default_factory=dict)  # key -> messages
    root: list[str] = msgspec.field(default_factory=list)  # messages about the arguments object itself
    note: str | None = None  # set when the schema itself could not be used


# --------------------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------------------


def _s(value: object, limit: int = ECHO_LIMIT) -> str:
    """Untrusted value as a short plain string."""
    return truncate(value if isinstance(value, str) else repr(value), limit)


def _tool_label(server: object, tool: object) -> str:
    return f"{'*' if server is None else _s(server, 100)}.{'*' if tool is None else _s(tool, 100)}"


def _quote(text: object) -> str:
    if not isinstance(text, str):
        return "(no description)"
    return f'"{truncate(" ".join(text.split()), ECHO_LIMIT)}"' if text.strip() else "(no description)"


def _listing(items: Sequence[str], limit: int = MAX_LISTED) -> str:
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} more" if len(items) > limit else shown


def call_problem(call: ToolCall) -> str | None:
    """Why a call is malformed (``None`` when it is usable)."""
    if call.malformed:
        return _s(call.malformed)
    if call.server is None or call.tool is None:
        return "tool name matched no offered tool"
    if call.arguments is not None and not isinstance(call.arguments, dict):
        return f"arguments are not a JSON object (got {json_type_name(call.arguments)})"
    return None


def _arguments(call: ToolCall) -> dict[str, Any]:
    return call.arguments if isinstance(call.arguments, dict) else {}


def choice_key(sample: Sample) -> tuple[str, ...]:
    """The confidence cluster of a sample: its first call (server, tool, canonical arguments)."""
    if not sample.calls:
        return ("abstain",)
    call = sample.calls[0]
    if call_problem(call) is not None:
        return ("malformed", _s(call.raw_name, 10_000))
    return ("call", str(call.server), str(call.tool), canonical_json(_arguments(call)))


def check_type_conformance(arguments: object, schema: object) -> TypeCheck:
    """Validate ``arguments`` against ``schema`` with the schema's own draft; never raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls = validators.validator_for(schema, default=Draft202012Validator)  # type: ignore[arg-type]
            cls.check_schema(schema)  # type: ignore[arg-type]
            validator = cls(schema, registry=Registry())  # type: ignore[arg-type]
            raw = list(validator.iter_errors(arguments))  # type: ignore[arg-type]
    except SchemaError as exc:
        return TypeCheck(False, [], [], note=f"the tool's input schema is invalid: {truncate(exc.message)}")
    except Exception as exc:  # untrusted schema: unresolvable $ref, bad pattern, recursion, ...
        return TypeCheck(False, [], [], note=f"the tool's input schema could not be used: {_s(str(exc))}")
    entries: list[tuple[list[str], str]] = []
    for error in raw:
        path = [str(p) for p in error.absolute_path]
        entries.append((path, truncate(error.message)))
    entries.sort()
    by_key: dict[str, list[str]] = {}
    root: list[str] = []
    for path, message in entries:
        if path:
            by_key.setdefault(path[0], []).append(message)
        else:
            root.append(message)
    errors = [f"{'/'.join(path) or '(arguments)'}: {message}" for path, message in entries]
    return TypeCheck(not entries, errors, list(by_key), by_key, root)


def hallucinated_keys(arguments: Mapping[str, Any], schema: object) -> list[str]:
    """Argument keys the schema does not define (see the module docstring for the exact rule)."""
    if not isinstance(schema, Mapping):
        return []
    props = schema.get("properties")
    additional = schema.get("additionalProperties", MISSING)
    if additional is not MISSING and additional is not False:
        return []
    if not isinstance(props, Mapping):
        if additional is not False:
            return []
        props = {}
    patterns = schema.get("patternProperties")
    pattern_list = [p for p in patterns if isinstance(p, str)] if isinstance(patterns, Mapping) else []

    def allowed_by_pattern(key: str) -> bool:
        for pattern in pattern_list:
            try:
                if re.search(pattern, key):
                    return True
            except re.error:
                continue
        return False

    return [k for k in arguments if k not in props and not allowed_by_pattern(str(k))]


_STOPWORDS: Final = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "from",
        "with",
        "without",
        "into",
        "onto",
        "over",
        "under",
        "about",
        "as",
        "is",
        "are",
        "be",
        "was",
        "were",
        "been",
        "being",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "you",
        "your",
        "we",
        "our",
        "they",
        "their",
        "them",
        "he",
        "she",
        "his",
        "her",
        "can",
        "will",
        "would",
        "should",
        "could",
        "may",
        "might",
        "must",
        "do",
        "does",
        "did",
        "done",
        "not",
        "no",
        "yes",
        "all",
        "any",
        "each",
        "every",
        "some",
        "such",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "just",
        "also",
        "via",
        "per",
        "use",
        "used",
        "uses",
        "using",
        "given",
        "returns",
        "return",
        "get",
        "gets",
        "set",
        "sets",
        "tool",
        "tools",
        "e.g",
        "i.e",
        "etc",
    }
)


def _terms(text: str) -> list[str]:
    seen: list[str] = []
    for word in re.findall(r"[^\W\d_]{3,}", text.casefold()):
        if word not in _STOPWORDS and word not in seen:
            seen.append(word)
    return seen


def distinguishing_terms(first: str, second: str, limit: int = 8) -> tuple[list[str], list[str]]:
    """Words (>= 3 letters, no stopwords) in ``first`` but not ``second``, and vice versa, in text order."""
    a, b = _terms(str(first)), _terms(str(second))
    set_a, set_b = set(a), set(b)
    return [w for w in a if w not in set_b][:limit], [w for w in b if w not in set_a][:limit]


# --------------------------------------------------------------------------------------------------------------
# score()
# --------------------------------------------------------------------------------------------------------------


class _Params(msgspec.Struct):
    completeness: float = 1.0
    correctness: float = 1.0
    conformance: bool = True
    hallucinated: list[str] = msgspec.field(default_factory=list)
    missing: list[str] = msgspec.field(default_factory=list)
    mismatched: list[str] = msgspec.field(default_factory=list)
    mismatch_reasons: dict[str, str] = msgspec.field(default_factory=dict)
    type_check: TypeCheck | None = None
    required: int = 0
    present: int = 0
    matched: int = 0
    total: int = 0


def _score_parameters(
    expected_params: object, arguments: dict[str, Any], schema: object, notes: list[str]
) -> _Params:
    result = _Params()
    problems = validate_expected_parameters(expected_params)
    if problems:
        notes.append(
            "expected_parameters is invalid: "
            + "; ".join(f"{p.path}: {p.reason}" for p in problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    schema_map = schema if isinstance(schema, Mapping) else None
    demanded = expected_params if isinstance(expected_params, Mapping) else {}
    for raw_key, expected_value in demanded.items():
        key = str(raw_key)
        actual = arguments.get(key, MISSING)
        required = not is_optional(expected_value) and not is_absent(expected_value)
        result.total += 1
        if required:
            result.required += 1
            if actual is MISSING:
                result.missing.append(key)
            else:
                result.present += 1
        outcome = match_value(expected_value, actual, schema_for_property(schema_map, key))
        if outcome.ok:
            result.matched += 1
        elif actual is not MISSING:
            result.mismatched.append(key)
            result.mismatch_reasons[key] = outcome.reason
    result.completeness = result.present / result.required if result.required else 1.0
    result.correctness = result.matched / result.total if result.total else 1.0
    result.type_check = check_type_conformance(arguments, schema)
    result.conformance = result.type_check.ok
    if result.type_check.note:
        notes.append(result.type_check.note)
    result.hallucinated = [str(k) for k in hallucinated_keys(arguments, schema)]
    return result


def score(
    expected: Expected,
    tools: Sequence[ToolSpec],
    samples: Sequence[Sample],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Score:
    """Score the first sample against ``expected``; the other samples only feed confidence."""
    notes: list[str] = []
    specs: dict[tuple[str, str], ToolSpec] = {}
    for spec in tools:
        specs.setdefault((spec.server, spec.name), spec)

    tool_expected = not (expected.server is None and expected.tool is None)
    first = samples[0] if samples else Sample(calls=[])
    if not samples:
        notes.append("no samples were given; scored as an answer without a tool call")
    calls = list(first.calls)
    selected = calls[0] if calls else None
    extra = calls[1:]
    problem = call_problem(selected) if selected is not None else None

    def is_expected(call: ToolCall) -> bool:
        return (
            call_problem(call) is None
            and (expected.server is None or call.server == expected.server)
            and (expected.tool is None or call.tool == expected.tool)
        )

    classification: Classification
    wrong_server = False
    if not tool_expected:
        classification = "TN" if selected is None else "FP"
    elif selected is not None and is_expected(selected):
        classification = "TP"
    else:
        classification = "FN"
        wrong_server = (
            selected is not None
            and problem is None
            and selected.tool == expected.tool
            and selected.server != expected.server
        )

    params: _Params | None = None
    if classification == "TP" and selected is not None:
        scored_spec = specs.get((str(selected.server), str(selected.tool)))
        if scored_spec is None:
            notes.append("the selected tool is not among the offered tools; its schema is unknown")
        schema: object = scored_spec.input_schema if scored_spec is not None else {}
        params = _score_parameters(expected.parameters, _arguments(selected), schema, notes)
    elif (
        selected is not None
        and call_problem(selected) is None
        and tools
        and (selected.server, selected.tool) not in specs
    ):
        notes.append("the selected tool is not among the offered tools")

    if classification == "TN":
        completeness, correctness, conformance = 1.0, 1.0, True
    elif params is not None:
        completeness, correctness, conformance = params.completeness, params.correctness, params.conformance
    else:
        completeness, correctness, conformance = 0.0, 0.0, False

    # Confidence.
    keys = [choice_key(s) for s in samples]
    cluster_ids: dict[tuple[str, ...], int] = {}
    for key in keys:
        cluster_ids.setdefault(key, len(cluster_ids))
    confidence: float | None = None
    category: ConfidenceCategory | None = None
    agreeing = 0
    if len(samples) >= 2:
        agreeing = sum(1 for key in keys if key == keys[0])
        confidence = agreeing / len(samples)
        correct = classification in ("TP", "TN")
        high = confidence >= thresholds.high_confidence
        if correct:
            category = "robust" if high else "needs_clarity"
        elif high:
            category = "misleading"

    sample_choices = [_sample_choice(s, cluster_ids[k]) for s, k in zip(samples, keys, strict=True)]

    reasoning = _reasoning(
        expected=expected,
        tool_expected=tool_expected,
        first=first,
        selected=selected,
        problem=problem,
        classification=classification,
        wrong_server=wrong_server,
        params=params,
        extra=extra,
        is_expected=is_expected,
        confidence=confidence,
        category=category,
        agreeing=agreeing,
        n_samples=len(samples),
        notes=notes,
    )
    recommendations = _recommendations(
        expected=expected,
        specs=specs,
        selected=selected,
        problem=problem,
        classification=classification,
        wrong_server=wrong_server,
        params=params,
        confidence=confidence,
        category=category,
        agreeing=agreeing,
        n_samples=len(samples),
    )
    return Score(
        classification=classification,
        tool_selection_correct=classification in ("TP", "TN"),
        parameter_completeness=completeness,
        parameter_correctness=correctness,
        parameter_type_conformance=conformance,
        hallucinated_parameters=[truncate(k) for k in params.hallucinated[:MAX_KEYS]] if params else [],
        confidence_score=confidence,
        confidence_category=category,
        reasoning=reasoning,
        recommendations=recommendations[:MAX_RECOMMENDATIONS],
        selected=selected,
        extra_calls=extra,
        sample_choices=sample_choices,
        missing_parameters=[truncate(k) for k in params.missing[:MAX_KEYS]] if params else [],
        mismatched_parameters=[truncate(k) for k in params.mismatched[:MAX_KEYS]] if params else [],
        mistyped_parameters=[truncate(k) for k in params.type_check.mistyped[:MAX_KEYS]]
        if params and params.type_check
        else [],
        type_errors=params.type_check.errors[:MAX_KEYS] if params and params.type_check else [],
        notes=notes,
    )


def _sample_choice(sample: Sample, cluster: int) -> dict[str, Any]:
    calls = list(sample.calls)
    if not calls:
        return {
            "server": None,
            "tool": None,
            "arguments": None,
            "malformed": None,
            "raw_name": None,
            "calls": 0,
            "cluster": cluster,
        }
    call = calls[0]
    problem = call_problem(call)
    return {
        "server": call.server if isinstance(call.server, str) else None,
        "tool": call.tool if isinstance(call.tool, str) else None,
        "arguments": None if problem else normalize_json(_arguments(call)),
        "malformed": problem,
        "raw_name": _s(call.raw_name) if problem else None,
        "calls": len(calls),
        "cluster": cluster,
    }


def _fmt_value(value: object) -> str:
    return describe_value(value)


def _describe_call(call: ToolCall) -> str:
    problem = call_problem(call)
    if problem is not None:
        return f"a malformed call to '{_s(call.raw_name)}' ({problem})"
    args = _arguments(call)
    return f"{_tool_label(call.server, call.tool)} with arguments {truncate(_compact(args))}"


def _compact(value: object) -> str:
    text = describe_value(value)
    return text.rsplit(" (", 1)[0]


def _reasoning(
    *,
    expected: Expected,
    tool_expected: bool,
    first: Sample,
    selected: ToolCall | None,
    problem: str | None,
    classification: Classification,
    wrong_server: bool,
    params: _Params | None,
    extra: list[ToolCall],
    is_expected: Callable[[ToolCall], bool],
    confidence: float | None,
    category: ConfidenceCategory | None,
    agreeing: int,
    n_samples: int,
    notes: list[str],
) -> str:
    lines: list[str] = []
    exp_label = _tool_label(expected.server, expected.tool)
    if tool_expected:
        demanded = expected.parameters if isinstance(expected.parameters, Mapping) else {}
        shown = truncate(_compact(demanded)) if demanded else "no particular parameters"
        lines.append(f"Expected: {exp_label} with {shown}.")
    else:
        lines.append("Expected: no tool call.")
    if selected is None:
        text = (
            f" (answered in text: {_quote(first.text)})" if isinstance(first.text, str) and first.text else ""
        )
        lines.append(f"Chosen: no tool call{text}.")
    else:
        lines.append(f"Chosen: {_describe_call(selected)}.")

    chosen_label = _tool_label(selected.server, selected.tool) if selected is not None else ""
    if classification == "TP":
        lines.append(f"TP: the expected tool {exp_label} was selected on the expected server.")
    elif classification == "TN":
        lines.append(
            "TN: no tool was expected and none was called; parameter scores are 1.0/1.0/conformant by "
            "convention (nothing to get wrong)."
        )
    elif classification == "FP":
        if problem is not None:
            lines.append(
                f"FP: no tool was expected but the model made a malformed call ({problem}); a malformed call "
                "is still a call, not an abstention."
            )
        else:
            lines.append(f"FP: no tool was expected but the model called {chosen_label}.")
    elif selected is None:
        lines.append(f"FN: the model made no tool call although {exp_label} was expected.")
    elif problem is not None:
        same = (
            " The name matched the expected tool, but the call was unusable."
            if selected.server == expected.server and selected.tool == expected.tool
            else ""
        )
        lines.append(f"FN: malformed call ({problem}); it cannot count as selecting {exp_label}.{same}")
    elif wrong_server:
        lines.append(f"FN: right tool name on the wrong server: chose {chosen_label}, expected {exp_label}.")
    else:
        lines.append(f"FN: a different tool was chosen ({chosen_label} instead of {exp_label}).")

    if params is not None:
        lines.append(
            f"Parameters: completeness {params.completeness:.2f} ({params.present}/{params.required} required "
            f"present), correctness {params.correctness:.2f} ({params.matched}/{params.total} match), type "
            f"conformance {'yes' if params.conformance else 'no'}."
        )
        if params.total == 0:
            lines.append("No parameters were demanded (expected_parameters empty).")
        if params.missing:
            lines.append(f"Missing required parameters: {_listing([_s(k) for k in params.missing])}.")
        if params.mismatched:
            details = [
                f"{_s(k, 100)}: {truncate(params.mismatch_reasons[k], 2 * ECHO_LIMIT)}"
                for k in params.mismatched[:MAX_LISTED]
            ]
            lines.append(f"Mismatched parameters: {'; '.join(details)}.")
        if params.type_check is not None and params.type_check.errors:
            lines.append(f"Type errors: {_listing(params.type_check.errors, 10)}.")
        if params.hallucinated:
            args = _arguments(selected) if selected is not None else {}
            details = [f"{_s(k, 100)}={_fmt_value(args.get(k))}" for k in params.hallucinated[:MAX_LISTED]]
            lines.append(f"Hallucinated parameters (not defined by the schema): {_listing(details)}.")

    if extra:
        described = []
        for index, call in enumerate(extra[:MAX_LISTED], start=2):
            if not tool_expected or not is_expected(call):
                described.append(f"#{index} {_describe_call(call)} (spurious call: not the expected tool)")
            else:
                described.append(f"#{index} {_describe_call(call)} (the expected tool)")
        more = f" and {len(extra) - MAX_LISTED} more" if len(extra) > MAX_LISTED else ""
        lines.append(
            f"The model made {len(extra)} further call(s), not scored: {'; '.join(described)}{more}."
        )
        if classification == "FN" and tool_expected and any(is_expected(c) for c in extra):
            lines.append("The expected tool was called later, but only the first call is scored.")

    if confidence is None:
        lines.append("Confidence: not measured (a single sample).")
    else:
        lines.append(
            f"Confidence {confidence:.2f}: {agreeing} of {n_samples} samples made the same choice as the "
            f"scored one; category {category or 'none (low agreement on a wrong answer)'}."
        )
    if notes:
        lines.append(f"Notes: {'; '.join(notes)}.")
    return "\n".join(lines)


def _schema_hint(schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        return "it has no schema entry"
    parts = []
    for field in ("type", "enum", "format", "pattern"):
        if field in schema:
            parts.append(f"{field}={truncate(_compact(schema[field]), 100)}")
    description = schema.get("description")
    parts.append(f"description={_quote(description) if isinstance(description, str) else '(none)'}")
    return ", ".join(parts)


def _recommendations(
    *,
    expected: Expected,
    specs: Mapping[tuple[str, str], ToolSpec],
    selected: ToolCall | None,
    problem: str | None,
    classification: Classification,
    wrong_server: bool,
    params: _Params | None,
    confidence: float | None,
    category: ConfidenceCategory | None,
    agreeing: int,
    n_samples: int,
) -> list[str]:
    recs: list[str] = []
    exp_label = _tool_label(expected.server, expected.tool)
    exp_spec = (
        specs.get((expected.server, expected.tool))
        if expected.server is not None and expected.tool is not None
        else None
    )
    chosen_spec = (
        specs.get((str(selected.server), str(selected.tool)))
        if selected is not None and problem is None
        else None
    )
    chosen_label = _tool_label(selected.server, selected.tool) if selected is not None else ""

    if classification == "FN":
        if selected is None:
            current = f" (currently {_quote(exp_spec.description)})" if exp_spec else ""
            recs.append(
                f"The model answered without calling a tool; make {exp_label}'s description state plainly "
                f"which requests it handles{current}."
            )
        elif problem is not None:
            recs.append(
                f"The model's call was malformed ({problem}); check that the tool names are easy to reproduce "
                f"exactly and that {exp_label}'s input schema is simple and well described."
            )
        elif wrong_server:
            servers = sorted({server for server, name in specs if name == expected.tool})
            where = f" (offered by {', '.join(_s(s, 60) for s in servers)})" if len(servers) > 1 else ""
            rec = (
                f"The tool name '{_s(expected.tool)}' is ambiguous across servers{where}: the model picked "
                f"server '{_s(selected.server)}' instead of '{_s(expected.server)}'. Give the tools distinct "
                "names (e.g. prefixed with the server's domain) or descriptions that say which system each acts on."
            )
            if exp_spec and chosen_spec:
                rec += f" {exp_label}: {_quote(exp_spec.description)}; {chosen_label}: {_quote(chosen_spec.description)}."
            recs.append(rec)
        else:
            rec = f"The model chose {chosen_label} instead of {exp_label}."
            if exp_spec and chosen_spec:
                only_expected, only_chosen = distinguishing_terms(
                    exp_spec.description, chosen_spec.description
                )
                rec += (
                    f" {exp_label}: {_quote(exp_spec.description)}. {chosen_label}: "
                    f"{_quote(chosen_spec.description)}."
                )
                if only_expected or only_chosen:
                    rec += (
                        f" Terms only in {exp_label}'s description: {', '.join(only_expected) or '(none)'}; "
                        f"only in {chosen_label}'s: {', '.join(only_chosen) or '(none)'}. Make {exp_label}'s "
                        f"description say when to use it and {chosen_label}'s when not to, leading with what "
                        "distinguishes them."
                    )
                else:
                    rec += " Their descriptions use the same terms; rewrite them to state distinct purposes."
            else:
                rec += f" Make {exp_label}'s description say when to use it and how it differs from {chosen_label}."
            recs.append(rec)
    elif classification == "FP":
        if problem is not None:
            recs.append(
                f"No tool was expected but the model made a malformed call ({problem}); it should have answered "
                "without a tool. State in the tool descriptions what they do not do, and keep names easy to "
                "reproduce exactly."
            )
        else:
            current = f" (currently {_quote(chosen_spec.description)})" if chosen_spec else ""
            recs.append(
                f"No tool was expected but the model called {chosen_label}; narrow its description so it does "
                f"not claim requests like this one{current}."
            )
    elif classification == "TP" and params is not None and selected is not None:
        spec = specs.get((str(selected.server), str(selected.tool)))
        schema = spec.input_schema if spec is not None and isinstance(spec.input_schema, Mapping) else None
        label = _tool_label(selected.server, selected.tool)
        props = schema.get("properties") if schema is not None else None
        prop_names = [str(k) for k in props] if isinstance(props, Mapping) else []
        required = schema.get("required") if schema is not None else None
        required_names = [str(k) for k in required] if isinstance(required, list) else []
        for key in params.missing[:MAX_LISTED]:
            if key in required_names:
                tail = "it is already listed as required; make its description say what value to pass."
            else:
                tail = "list it under `required` and describe it so the model knows to supply it."
            recs.append(f"Parameter '{_s(key)}' of {label} was not sent; {tail}")
        type_check = params.type_check
        if type_check is not None:
            for key in type_check.mistyped[:MAX_LISTED]:
                messages = type_check.by_key.get(key, [])
                recs.append(
                    f"Parameter '{_s(key)}' of {label} did not validate ({truncate('; '.join(messages[:2]))}); "
                    f"its schema: {_schema_hint(schema_for_property(schema, key))}. State the expected type "
                    "and format explicitly in its description."
                )
            if type_check.root:
                recs.append(
                    f"The arguments did not validate against {label}'s input schema: "
                    f"{truncate('; '.join(type_check.root[:3]), 2 * ECHO_LIMIT)}."
                )
        for key in params.mismatched[:MAX_LISTED]:
            if type_check is not None and key in type_check.mistyped:
                continue
            recs.append(
                f"Parameter '{_s(key)}' of {label} had the wrong value ({truncate(params.mismatch_reasons[key])}); "
                f"describe the accepted values or format in its schema ({_schema_hint(schema_for_property(schema, key))}), "
                "or use an enum."
            )
        for key in params.hallucinated[:MAX_LISTED]:
            close = difflib.get_close_matches(key, prop_names, n=1, cutoff=0.6)
            hint = (
                f"; did it mean '{_s(close[0])}'? Make that parameter's name and description clearer"
                if close
                else ""
            )
            recs.append(
                f"The model sent '{_s(key)}', which {label}'s input schema does not define{hint}. If the parameter "
                "is legitimate, document it in the schema's properties."
            )

    if confidence is not None:
        if category == "needs_clarity":
            recs.append(
                f"The samples disagreed (only {agreeing} of {n_samples} made the scored choice): the request or "
                "the tool descriptions are ambiguous; clarify when each tool applies."
            )
        elif category == "misleading":
            recs.append(
                f"The model made this wrong choice consistently ({agreeing} of {n_samples} samples): the "
                "descriptions point it the wrong way; fix them as suggested above."
            )
    return recs
