"""Table-driven tests for the pure scoring functions (worker_service.scoring)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from worker_service.scoring import (
    Expected,
    Sample,
    Score,
    Thresholds,
    ToolCall,
    ToolSpec,
    check_type_conformance,
    choice_key,
    distinguishing_terms,
    hallucinated_keys,
    score,
)

pytestmark = pytest.mark.unit

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"

FORECAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "days": {"type": "integer", "description": "Number of days ahead"},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    "required": ["city"],
}
TOOLS = [
    ToolSpec(
        "weather", "get_forecast", "Get the weather forecast for a city for upcoming days", FORECAST_SCHEMA
    ),
    ToolSpec(
        "weather",
        "get_current",
        "Get current weather conditions now for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    ToolSpec("geo", "get_forecast", "Geological activity forecast for a region", {"type": "object"}),
]
EXPECTED = Expected("weather", "get_forecast", {"city": "Paris", "days": 3})
NONE_EXPECTED = Expected(None, None, None)


def call(
    server: str | None, tool: str | None, arguments: Any = None, malformed: str | None = None
) -> ToolCall:
    """Build a ToolCall as the caller would after mapping the namespaced name back."""
    raw = json.dumps(arguments) if arguments is not None else "{"
    return ToolCall(server, tool, arguments, f"{server}__{tool}", raw, malformed)


GOOD = call("weather", "get_forecast", {"city": "paris", "days": 3})
OTHER_TOOL = call("weather", "get_current", {"city": "Paris"})
WRONG_SERVER = call("geo", "get_forecast", {"city": "Paris"})
BAD_ARGS = call("weather", "get_forecast", None, malformed="arguments are not valid JSON")
UNKNOWN = ToolCall(None, None, None, "weather__get_forcast", "{}", "unknown tool name")

# (id, expected, first sample, classification, reasoning substring)
CLASSIFICATION_CASES: list[tuple[str, Expected, Sample, str, str]] = [
    ("tp", EXPECTED, Sample([GOOD]), "TP", "TP: the expected tool weather.get_forecast was selected"),
    ("fn-wrong-tool", EXPECTED, Sample([OTHER_TOOL]), "FN", "a different tool was chosen"),
    ("fn-wrong-server", EXPECTED, Sample([WRONG_SERVER]), "FN", "right tool name on the wrong server"),
    ("fn-no-call", EXPECTED, Sample([], text="It will rain."), "FN", "made no tool call"),
    (
        "fn-malformed-args",
        EXPECTED,
        Sample([BAD_ARGS]),
        "FN",
        "malformed call (arguments are not valid JSON)",
    ),
    ("fn-unknown-tool", EXPECTED, Sample([UNKNOWN]), "FN", "malformed call (unknown tool name)"),
    (
        "fn-non-object-arguments",
        EXPECTED,
        Sample([call("weather", "get_forecast", ["Paris"])]),
        "FN",
        "arguments are not a JSON object",
    ),
    (
        "fp",
        NONE_EXPECTED,
        Sample([GOOD]),
        "FP",
        "no tool was expected but the model called weather.get_forecast",
    ),
    ("fp-malformed", NONE_EXPECTED, Sample([BAD_ARGS]), "FP", "a malformed call is still a call"),
    ("fp-unknown-tool", NONE_EXPECTED, Sample([UNKNOWN]), "FP", "malformed call (unknown tool name)"),
    ("tn", NONE_EXPECTED, Sample([], text="Hello!"), "TN", "TN: no tool was expected and none was called"),
    ("tn-no-samples", NONE_EXPECTED, Sample([]), "TN", "Expected: no tool call."),
    (
        "tp-server-wildcard",
        Expected(None, "get_forecast", None),
        Sample([WRONG_SERVER]),
        "TP",
        "Expected: *.get_forecast",
    ),
]


@pytest.mark.parametrize(
    ("expected", "sample", "classification", "needle"),
    [case[1:] for case in CLASSIFICATION_CASES],
    ids=[case[0] for case in CLASSIFICATION_CASES],
)
def test_classification(expected: Expected, sample: Sample, classification: str, needle: str) -> None:
    """Each (expected, first call) combination gets the right class and says why in the reasoning."""
    result = score(expected, TOOLS, [sample])
    assert result.classification == classification
    assert needle in result.reasoning
    assert result.tool_selection_correct is (classification in ("TP", "TN"))
    if classification in ("FN", "FP"):
        assert (result.parameter_completeness, result.parameter_correctness) == (0.0, 0.0)
        assert result.parameter_type_conformance is False
        assert result.hallucinated_parameters == []
    if classification == "TN":
        assert (result.parameter_completeness, result.parameter_correctness) == (1.0, 1.0)
        assert result.parameter_type_conformance is True


def test_no_samples_is_abstention() -> None:
    """An empty sample list scores as no call, with a note, never an exception."""
    result = score(EXPECTED, TOOLS, [])
    assert result.classification == "FN"
    assert result.selected is None
    assert result.sample_choices == []
    assert "no samples were given" in result.reasoning


# (id, expected parameters, arguments, completeness, correctness, conformance, hallucinated, missing, mismatched)
PARAMETER_CASES: list[
    tuple[str, Any, dict[str, Any], float, float, bool, list[str], list[str], list[str]]
] = [
    ("all-match", {"city": "Paris", "days": 3}, {"city": " PARIS", "days": 3}, 1.0, 1.0, True, [], [], []),
    ("int-float-promotion", {"days": 3}, {"city": "x", "days": 3.0}, 1.0, 1.0, True, [], [], []),
    ("string-vs-int", {"days": 3}, {"city": "x", "days": "3"}, 1.0, 0.0, False, [], [], ["days"]),
    ("missing-key", {"city": "Paris", "days": 3}, {"city": "Paris"}, 0.5, 0.5, True, [], ["days"], []),
    (
        "wrong-value",
        {"city": "Paris", "days": 3},
        {"city": "Lyon", "days": 3},
        1.0,
        0.5,
        True,
        [],
        [],
        ["city"],
    ),
    ("null-expected", None, {"city": "Paris"}, 1.0, 1.0, True, [], [], []),
    ("empty-expected", {}, {"city": "Paris", "days": "x"}, 1.0, 1.0, False, [], [], []),
    (
        "optional-omitted",
        {"city": "Paris", "units": {"$optional": "metric"}},
        {"city": "Paris"},
        1.0,
        1.0,
        True,
        [],
        [],
        [],
    ),
    (
        "optional-wrong",
        {"city": "Paris", "units": {"$optional": "metric"}},
        {"city": "Paris", "units": "imperial"},
        1.0,
        0.5,
        True,
        [],
        [],
        ["units"],
    ),
    (
        "absent-respected",
        {"city": "Paris", "days": {"$absent": True}},
        {"city": "Paris"},
        1.0,
        1.0,
        True,
        [],
        [],
        [],
    ),
    (
        "absent-violated",
        {"city": "Paris", "days": {"$absent": True}},
        {"city": "Paris", "days": 2},
        1.0,
        0.5,
        True,
        [],
        [],
        ["days"],
    ),
    ("only-optional-keys", {"units": {"$optional": "metric"}}, {"city": "x"}, 1.0, 1.0, True, [], [], []),
    (
        "hallucinated-key",
        {"city": "Paris"},
        {"city": "Paris", "cty": "Paris", "verbose": True},
        1.0,
        1.0,
        True,
        ["cty", "verbose"],
        [],
        [],
    ),
    ("schema-required-missing", {"days": 3}, {"days": 3}, 1.0, 1.0, False, [], [], []),
    (
        "matchers",
        {"city": {"$regex": "(?i)par.*"}, "days": {"$oneOf": [2, 3]}},
        {"city": "Paris", "days": 2},
        1.0,
        1.0,
        True,
        [],
        [],
        [],
    ),
]


@pytest.mark.parametrize(
    (
        "params",
        "arguments",
        "completeness",
        "correctness",
        "conformance",
        "hallucinated",
        "missing",
        "mismatched",
    ),
    [case[1:] for case in PARAMETER_CASES],
    ids=[case[0] for case in PARAMETER_CASES],
)
def test_parameter_metrics(
    params: Any,
    arguments: dict[str, Any],
    completeness: float,
    correctness: float,
    conformance: bool,
    hallucinated: list[str],
    missing: list[str],
    mismatched: list[str],
) -> None:
    """For TP, completeness/correctness/conformance/hallucinations follow the documented formulas."""
    result = score(
        Expected("weather", "get_forecast", params),
        TOOLS,
        [Sample([call("weather", "get_forecast", arguments)])],
    )
    assert result.classification == "TP"
    assert result.parameter_completeness == pytest.approx(completeness)
    assert result.parameter_correctness == pytest.approx(correctness)
    assert result.parameter_type_conformance is conformance
    assert result.hallucinated_parameters == hallucinated
    assert result.missing_parameters == missing
    assert result.mismatched_parameters == mismatched


# (id, schema, arguments, ok, note substring or None)
CONFORMANCE_CASES: list[tuple[str, Any, Any, bool, str | None]] = [
    ("2020-default-ok", {"type": "object", "properties": {"n": {"type": "integer"}}}, {"n": 1}, True, None),
    (
        "2020-default-bad",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        {"n": "1"},
        False,
        None,
    ),
    (
        "draft7-float-integer-ok",
        {"$schema": DRAFT7, "properties": {"n": {"type": "integer"}}},
        {"n": 1.0},
        True,
        None,
    ),
    (
        "draft4-float-integer-bad",
        {"$schema": DRAFT4, "properties": {"n": {"type": "integer"}}},
        {"n": 1.0},
        False,
        None,
    ),
    (
        "draft7-tuple-items-ok",
        {
            "$schema": DRAFT7,
            "properties": {"p": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
        },
        {"p": ["a", 1]},
        True,
        None,
    ),
    (
        "draft7-tuple-items-bad",
        {
            "$schema": DRAFT7,
            "properties": {"p": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
        },
        {"p": ["a", "b"]},
        False,
        None,
    ),
    (
        "2020-tuple-items-invalid-schema",
        {"$schema": DRAFT2020, "properties": {"p": {"items": [{"type": "string"}]}}},
        {"p": ["a"]},
        False,
        "input schema is invalid",
    ),
    (
        "2020-prefix-items-bad",
        {
            "$schema": DRAFT2020,
            "properties": {"p": {"prefixItems": [{"type": "string"}, {"type": "integer"}]}},
        },
        {"p": ["a", "b"]},
        False,
        None,
    ),
    (
        "draft4-exclusive-minimum-boolean",
        {"$schema": DRAFT4, "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}}},
        {"n": 0},
        False,
        None,
    ),
    (
        "draft7-exclusive-minimum-number",
        {"$schema": DRAFT7, "properties": {"n": {"type": "number", "exclusiveMinimum": 0}}},
        {"n": 0.5},
        True,
        None,
    ),
    ("invalid-schema-type", {"type": "objectt"}, {}, False, "input schema is invalid"),
    ("remote-ref-not-fetched", {"$ref": "https://example.invalid/s.json"}, {}, False, "could not be used"),
    (
        "local-ref",
        {"$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}},
        {"n": 2},
        True,
        None,
    ),
    ("unknown-draft-uses-default", {"$schema": "https://example.com/mine", "type": "object"}, {}, True, None),
    ("boolean-schema", True, {"x": 1}, True, None),
    ("required-missing", {"type": "object", "required": ["a"]}, {}, False, None),
    ("non-object-arguments", {"type": "object"}, ["x"], False, None),
]


@pytest.mark.parametrize(
    ("schema", "arguments", "ok", "note"),
    [case[1:] for case in CONFORMANCE_CASES],
    ids=[case[0] for case in CONFORMANCE_CASES],
)
def test_type_conformance(schema: Any, arguments: Any, ok: bool, note: str | None) -> None:
    """Arguments are validated with jsonschema using the schema's own draft; bad schemas give a note."""
    check = check_type_conformance(arguments, schema)
    assert check.ok is ok
    if note is None:
        assert check.note is None
        assert bool(check.errors) is (not ok)
    else:
        assert check.note is not None
        assert note in check.note


def test_type_errors_name_the_key() -> None:
    """A mistyped argument is listed with jsonschema's message and pointed at in recommendations."""
    result = score(
        Expected("weather", "get_forecast", {"city": "Paris"}),
        TOOLS,
        [Sample([call("weather", "get_forecast", {"city": "Paris", "units": "kelvin"})])],
    )
    assert result.mistyped_parameters == ["units"]
    assert result.type_errors == ["units: 'kelvin' is not one of ['metric', 'imperial']"]
    assert "Type errors: units: 'kelvin' is not one of" in result.reasoning
    assert any("'units'" in r and 'enum=["metric", "imperial"]' in r for r in result.recommendations)


def test_invalid_tool_schema_never_raises() -> None:
    """A TP against a tool whose schema is itself invalid scores conformance False with a note."""
    tools = [ToolSpec("s", "t", "d", {"type": 12, "properties": {"a": {"pattern": "("}}})]
    result = score(Expected("s", "t", {"a": "x"}), tools, [Sample([call("s", "t", {"a": "x"})])])
    assert result.classification == "TP"
    assert result.parameter_type_conformance is False
    assert any("input schema" in n for n in result.notes)
    assert result.parameter_correctness == 1.0


# (id, schema, arguments, hallucinated)
HALLUCINATION_CASES: list[tuple[str, Any, dict[str, Any], list[str]]] = [
    ("defined", {"properties": {"a": {}}}, {"a": 1}, []),
    ("additional-absent", {"properties": {"a": {}}}, {"a": 1, "b": 2}, ["b"]),
    ("additional-false", {"properties": {"a": {}}, "additionalProperties": False}, {"b": 2}, ["b"]),
    ("additional-true", {"properties": {"a": {}}, "additionalProperties": True}, {"b": 2}, []),
    (
        "additional-schema",
        {"properties": {"a": {}}, "additionalProperties": {"type": "string"}},
        {"b": "x"},
        [],
    ),
    (
        "pattern-properties",
        {"properties": {"a": {}}, "patternProperties": {"^x_": {}}},
        {"x_1": 1, "y": 2},
        ["y"],
    ),
    ("bad-pattern-ignored", {"properties": {}, "patternProperties": {"(": {}}}, {"y": 2}, ["y"]),
    ("no-properties", {"type": "object"}, {"b": 2}, []),
    ("no-properties-additional-false", {"type": "object", "additionalProperties": False}, {"b": 2}, ["b"]),
    ("empty-properties", {"type": "object", "properties": {}}, {"b": 2}, ["b"]),
    ("non-object-schema", True, {"b": 2}, []),
]


@pytest.mark.parametrize(
    ("schema", "arguments", "hallucinated"),
    [case[1:] for case in HALLUCINATION_CASES],
    ids=[case[0] for case in HALLUCINATION_CASES],
)
def test_hallucinated_keys(schema: Any, arguments: dict[str, Any], hallucinated: list[str]) -> None:
    """A key is hallucinated when the schema does not define it and does not allow extra keys."""
    assert hallucinated_keys(arguments, schema) == hallucinated


def test_hallucination_reasoning_and_recommendation() -> None:
    """Hallucinated keys are echoed with their values and the closest schema property is suggested."""
    result = score(
        Expected("weather", "get_forecast", {"city": "Paris"}),
        TOOLS,
        [Sample([call("weather", "get_forecast", {"city": "Paris", "dayz": 4})])],
    )
    assert result.hallucinated_parameters == ["dayz"]
    assert "dayz=4 (integer)" in result.reasoning
    assert any("did it mean 'days'" in r for r in result.recommendations)


SAME = call("weather", "get_forecast", {"city": "Paris", "days": 3})
SAME_NORMALISED = call("weather", "get_forecast", {"days": 3.0, "city": "  PARIS "})
DIFFERENT_ARGS = call("weather", "get_forecast", {"city": "Lyon", "days": 3})

# (id, expected, samples, confidence, category)
CONFIDENCE_CASES: list[tuple[str, Expected, list[Sample], float | None, str | None]] = [
    ("single-sample", EXPECTED, [Sample([SAME])], None, None),
    ("robust", EXPECTED, [Sample([SAME]), Sample([SAME_NORMALISED]), Sample([SAME])], 1.0, "robust"),
    (
        "needs-clarity-args-differ",
        EXPECTED,
        [Sample([SAME]), Sample([DIFFERENT_ARGS]), Sample([SAME]), Sample([OTHER_TOOL])],
        0.5,
        "needs_clarity",
    ),
    ("misleading", EXPECTED, [Sample([OTHER_TOOL])] * 4, 1.0, "misleading"),
    ("wrong-and-unsure", EXPECTED, [Sample([OTHER_TOOL]), Sample([SAME]), Sample([])], 1 / 3, None),
    (
        "tn-robust",
        NONE_EXPECTED,
        [Sample([]), Sample([], text="other"), Sample([]), Sample([SAME])],
        0.75,
        "robust",
    ),
    ("tn-needs-clarity", NONE_EXPECTED, [Sample([]), Sample([SAME])], 0.5, "needs_clarity"),
    (
        "malformed-cluster-by-name",
        EXPECTED,
        [Sample([UNKNOWN]), Sample([UNKNOWN]), Sample([BAD_ARGS])],
        2 / 3,
        None,
    ),
    (
        "wrong-server-is-other-cluster",
        EXPECTED,
        [Sample([SAME]), Sample([call("geo", "get_forecast", {"city": "Paris", "days": 3})])],
        0.5,
        "needs_clarity",
    ),
    ("threshold-boundary", EXPECTED, [Sample([SAME])] * 7 + [Sample([])] * 3, 0.7, "robust"),
]


@pytest.mark.parametrize(
    ("expected", "samples", "confidence", "category"),
    [case[1:] for case in CONFIDENCE_CASES],
    ids=[case[0] for case in CONFIDENCE_CASES],
)
def test_confidence(
    expected: Expected, samples: list[Sample], confidence: float | None, category: str | None
) -> None:
    """Confidence is the share of samples in the first sample's cluster; the category combines it with correctness."""
    result = score(expected, TOOLS, samples)
    if confidence is None:
        assert result.confidence_score is None
    else:
        assert result.confidence_score == pytest.approx(confidence)
    assert result.confidence_category == category


def test_threshold_is_configurable() -> None:
    """A higher high_confidence threshold turns a robust agreement into needs_clarity."""
    samples = [Sample([SAME])] * 3 + [Sample([])]
    assert score(EXPECTED, TOOLS, samples).confidence_category == "robust"
    strict = score(EXPECTED, TOOLS, samples, Thresholds(high_confidence=0.9))
    assert strict.confidence_category == "needs_clarity"
    assert any("samples disagreed" in r for r in strict.recommendations)


def test_sample_choices() -> None:
    """sample_choices records each sample's normalised choice and cluster for storage."""
    samples = [Sample([SAME, OTHER_TOOL]), Sample([SAME_NORMALISED]), Sample([]), Sample([UNKNOWN])]
    choices = score(EXPECTED, TOOLS, samples).sample_choices
    assert choices[0] == {
        "server": "weather",
        "tool": "get_forecast",
        "arguments": {"city": "paris", "days": 3},
        "malformed": None,
        "raw_name": None,
        "calls": 2,
        "cluster": 0,
    }
    assert choices[1]["cluster"] == 0
    assert choices[2]["cluster"] == 1
    assert choices[2]["calls"] == 0
    assert choices[3]["cluster"] == 2
    assert choices[3]["malformed"] == "unknown tool name"
    assert choices[3]["raw_name"] == "weather__get_forcast"
    json.dumps(choices)


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        (Sample([SAME]), Sample([SAME_NORMALISED]), True),
        (Sample([SAME]), Sample([DIFFERENT_ARGS]), False),
        (Sample([]), Sample([], text="x"), True),
        (Sample([UNKNOWN]), Sample([BAD_ARGS]), False),
        (Sample([SAME, OTHER_TOOL]), Sample([SAME]), True),
        (Sample([call("s", "t", {"a": True})]), Sample([call("s", "t", {"a": 1})]), False),
    ],
)
def test_choice_key(left: Sample, right: Sample, same: bool) -> None:
    """Samples cluster by their first call's (server, tool, normalised arguments)."""
    assert (choice_key(left) == choice_key(right)) is same


# (id, expected, calls, classification, reasoning substrings)
SEVERAL_CALLS_CASES: list[tuple[str, Expected, list[ToolCall], str, list[str]]] = [
    (
        "tp-then-spurious",
        EXPECTED,
        [GOOD, OTHER_TOOL],
        "TP",
        ["1 further call(s)", "#2 weather.get_current", "spurious call: not the expected tool"],
    ),
    (
        "fn-expected-later",
        EXPECTED,
        [OTHER_TOOL, GOOD],
        "FN",
        ["#2 weather.get_forecast", "(the expected tool)", "only the first call is scored"],
    ),
    ("fp-several", NONE_EXPECTED, [GOOD, OTHER_TOOL], "FP", ["spurious call", "weather.get_current"]),
]


@pytest.mark.parametrize(
    ("expected", "calls", "classification", "needles"),
    [case[1:] for case in SEVERAL_CALLS_CASES],
    ids=[case[0] for case in SEVERAL_CALLS_CASES],
)
def test_several_calls(
    expected: Expected, calls: list[ToolCall], classification: str, needles: list[str]
) -> None:
    """Only the first call is scored; the others are listed in extra_calls and the reasoning."""
    result = score(expected, TOOLS, [Sample(calls)])
    assert result.classification == classification
    assert result.selected == calls[0]
    assert result.extra_calls == calls[1:]
    for needle in needles:
        assert needle in result.reasoning


# (id, expected, call, recommendation substrings)
RECOMMENDATION_CASES: list[tuple[str, Expected, Sample, list[str]]] = [
    (
        "wrong-tool-quotes-descriptions",
        EXPECTED,
        Sample([OTHER_TOOL]),
        [
            '"Get the weather forecast for a city for upcoming days"',
            '"Get current weather conditions now for a city"',
            "Terms only in weather.get_forecast's description: forecast, upcoming, days",
            "only in weather.get_current's: current, conditions, now",
        ],
    ),
    (
        "wrong-server-distinct-names",
        EXPECTED,
        Sample([WRONG_SERVER]),
        [
            "ambiguous across servers (offered by geo, weather)",
            "distinct names",
            '"Geological activity forecast',
        ],
    ),
    ("no-call", EXPECTED, Sample([]), ["without calling a tool", "which requests it handles"]),
    ("malformed", EXPECTED, Sample([BAD_ARGS]), ["malformed"]),
    (
        "fp",
        NONE_EXPECTED,
        Sample([OTHER_TOOL]),
        ["narrow its description", '"Get current weather conditions'],
    ),
    (
        "missing-required",
        Expected("weather", "get_forecast", {"city": "Paris", "days": 2}),
        Sample([call("weather", "get_forecast", {"days": 2})]),
        ["'city'", "already listed as required"],
    ),
    (
        "wrong-value-points-at-schema",
        Expected("weather", "get_forecast", {"city": "Paris", "days": 2}),
        Sample([call("weather", "get_forecast", {"city": "Paris", "days": 5})]),
        ["'days'", 'type="integer"', 'description="Number of days ahead"'],
    ),
]


@pytest.mark.parametrize(
    ("expected", "sample", "needles"),
    [case[1:] for case in RECOMMENDATION_CASES],
    ids=[case[0] for case in RECOMMENDATION_CASES],
)
def test_recommendations(expected: Expected, sample: Sample, needles: list[str]) -> None:
    """Recommendations are concrete and built from the evidence (descriptions, schema, names)."""
    text = "\n".join(score(expected, TOOLS, [sample]).recommendations)
    for needle in needles:
        assert needle in text


@pytest.mark.parametrize(
    ("expected", "sample"),
    [(EXPECTED, Sample([SAME])), (NONE_EXPECTED, Sample([]))],
    ids=["clean-tp", "clean-tn"],
)
def test_clean_results_need_no_recommendations(expected: Expected, sample: Sample) -> None:
    """A clean TP or TN produces no recommendations."""
    assert score(expected, TOOLS, [sample]).recommendations == []


def test_reasoning_names_mismatch_values() -> None:
    """The reasoning quotes expected vs got for mismatched keys and lists missing keys."""
    result = score(
        Expected("weather", "get_forecast", {"city": "Paris", "days": 3, "units": "metric"}),
        TOOLS,
        [Sample([call("weather", "get_forecast", {"city": "Paris", "days": "3"})])],
    )
    assert 'days: expected 3 (integer), got "3" (string)' in result.reasoning
    assert "Missing required parameters: units." in result.reasoning
    assert (
        'Expected: weather.get_forecast with {"city": "Paris", "days": 3, "units": "metric"}.'
        in result.reasoning
    )


def test_invalid_expected_parameters_noted() -> None:
    """Invalid expected_parameters are reported in notes and simply fail to match."""
    result = score(
        Expected("weather", "get_forecast", {"city": {"$regexp": "P.*"}}),
        TOOLS,
        [Sample([call("weather", "get_forecast", {"city": "Paris"})])],
    )
    assert result.parameter_correctness == 0.0
    assert any("expected_parameters.city.$regexp" in n for n in result.notes)


@pytest.mark.parametrize(
    "arguments",
    [
        {"city": "x" * 1_000_000},
        {"city": {"nested": [[[{"junk": None}]]]}, "k" * 10_000: "v" * 10_000},
        {str(i): i for i in range(5000)},
        {"city": float("nan")},
        {"city": 10**400},
    ],
    ids=["huge-string", "nested-junk-long-key", "many-keys", "nan", "huge-int"],
)
def test_untrusted_output_is_truncated_and_safe(arguments: dict[str, Any]) -> None:
    """Weird model output never raises and echoed values stay short."""
    result = score(EXPECTED, TOOLS, [Sample([call("weather", "get_forecast", arguments)])] * 2)
    assert result.classification == "TP"
    assert len(result.reasoning) < 20_000
    assert all(len(r) < 3_000 for r in result.recommendations)
    assert all(len(k) <= 200 for k in result.hallucinated_parameters)
    assert len(result.hallucinated_parameters) <= 100


def test_junk_call_fields_never_raise() -> None:
    """Non-string names and non-dict arguments smuggled past the types are treated as malformed."""
    junk = ToolCall(server=None, tool=None, arguments="nope", raw_name="x" * 100_000, raw_arguments="")  # type: ignore[arg-type]
    result = score(EXPECTED, TOOLS, [Sample([junk], text="t" * 100_000)] * 2)
    assert result.classification == "FN"
    assert len(result.reasoning) < 5_000
    assert result.confidence_score == 1.0
    assert result.confidence_category == "misleading"


def test_deterministic_and_serialisable() -> None:
    """The same inputs give the same Score, and it round-trips through msgspec JSON."""
    samples = [Sample([SAME, OTHER_TOOL]), Sample([DIFFERENT_ARGS]), Sample([])]
    first = score(EXPECTED, TOOLS, samples)
    assert first == score(EXPECTED, TOOLS, samples)
    decoded = msgspec.json.decode(msgspec.json.encode(first), type=Score)
    assert decoded == first


@pytest.mark.parametrize(
    ("first", "second", "only_first", "only_second"),
    [
        ("Search the web for pages", "Search local files for pages", ["web"], ["local", "files"]),
        ("Same words here", "same WORDS here", [], []),
        ("", "Delete a file", [], ["delete", "file"]),
    ],
)
def test_distinguishing_terms(first: str, second: str, only_first: list[str], only_second: list[str]) -> None:
    """distinguishing_terms returns the content words unique to each description, in order."""
    assert distinguishing_terms(first, second) == (only_first, only_second)
