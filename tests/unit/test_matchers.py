"""Table-driven tests for the expected-parameter language (shared.matchers)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.matchers import (
    MISSING,
    MatcherError,
    MatchOutcome,
    canonical_json,
    describe_value,
    is_absent,
    is_optional,
    match_value,
    normalize_json,
    normalize_string,
    schema_for_item,
    schema_for_property,
    truncate,
    validate_expected_parameters,
)

pytestmark = pytest.mark.unit

NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
STRING = {"type": "string"}
NFC_E = "caf\u00e9"
NFD_E = "cafe\u0301"

# (id, expected, actual, schema, ok)
MATCH_CASES: list[tuple[str, Any, Any, dict[str, Any] | None, bool]] = [
    # numbers: int/float promotion both ways
    ("int-eq-float-number-schema", 10, 10.0, NUMBER, True),
    ("float-eq-int-number-schema", 10.0, 10, NUMBER, True),
    ("int-eq-float-integer-schema", 10, 10.0, INTEGER, True),
    ("int-eq-float-no-schema", 10, 10.0, None, True),
    ("int-ne-nonintegral-float", 10, 10.5, INTEGER, False),
    ("float-eq-float", 2.5, 2.5, NUMBER, True),
    ("int-ne-int", 10, 11, INTEGER, False),
    ("huge-int-vs-float", 10**30, 1e30, NUMBER, False),
    # "10" vs 10
    ("number-ne-string-number-schema", 10, "10", NUMBER, False),
    ("number-ne-string-no-schema", 10, "10", None, False),
    ("number-eq-string-string-schema", 10, "10", STRING, True),
    ("number-eq-string-decimal-string-schema", 10, " 10.0 ", STRING, True),
    ("number-ne-other-string-string-schema", 10, "11", STRING, False),
    ("number-ne-word-string-schema", 10, "ten", STRING, False),
    ("number-ne-nan-string-schema", 10, "NaN", STRING, False),
    ("number-string-schema-also-number", 10, "10", {"type": ["string", "number"]}, False),
    ("string-ne-number-string-schema", "10", 10, STRING, False),
    ("string-eq-string", "10", "10", STRING, True),
    # booleans never equal numbers
    ("true-ne-1", True, 1, None, False),
    ("1-ne-true", 1, True, INTEGER, False),
    ("false-ne-0", False, 0, {"type": "boolean"}, False),
    ("0-ne-false", 0, False, NUMBER, False),
    ("true-eq-true", True, True, None, True),
    ("false-ne-true", False, True, None, False),
    ("true-ne-string-true", True, "true", None, False),
    # null
    ("null-eq-null", None, None, None, True),
    ("null-ne-empty-string", None, "", None, False),
    ("null-ne-missing", None, MISSING, None, False),
    # strings: NFC, casefold, whitespace
    ("nfc-eq-nfd", NFC_E, NFD_E, STRING, True),
    ("nfd-eq-nfc", NFD_E, NFC_E, STRING, True),
    ("casefold-strasse", "Stra\u00dfe", "STRASSE", STRING, True),
    ("case-insensitive", "Paris", "pARIS", STRING, True),
    ("whitespace-collapse", "New York", "  new \t\n york ", STRING, True),
    ("inner-space-matters", "newyork", "new york", STRING, False),
    ("different-string", "Paris", "London", STRING, False),
    ("string-ne-list", "a", ["a"], None, False),
    # arrays: ordered, element-wise with the items schema
    ("array-eq", [1, "a"], [1.0, "A"], None, True),
    ("array-order-matters", [1, 2], [2, 1], None, False),
    ("array-length", [1, 2], [1, 2, 3], None, False),
    ("array-items-string-schema", [1, 2], ["1", "2"], {"type": "array", "items": STRING}, True),
    ("array-items-number-schema", [1, 2], ["1", "2"], {"type": "array", "items": NUMBER}, False),
    ("array-prefix-items", [1, 2], ["1", 2], {"prefixItems": [STRING, INTEGER]}, True),
    ("array-tuple-items", [1, 2], [1, "2"], {"items": [INTEGER, STRING]}, True),
    ("array-ne-object", [1], {"0": 1}, None, False),
    ("array-with-matcher-element", [{"$any": True}, 2], ["x", 2], None, True),
    # objects: recurse key by key, key sets equal
    ("object-eq", {"a": 1, "b": {"c": "X"}}, {"b": {"c": "x "}, "a": 1.0}, None, True),
    ("object-extra-key", {"a": 1}, {"a": 1, "b": 2}, None, False),
    ("object-missing-key", {"a": 1, "b": 2}, {"a": 1}, None, False),
    ("object-nested-mismatch", {"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, None, False),
    (
        "object-property-schema",
        {"zip": 12345},
        {"zip": "12345"},
        {"type": "object", "properties": {"zip": STRING}},
        True,
    ),
    (
        "object-pattern-properties-schema",
        {"x_id": 7},
        {"x_id": "7"},
        {"patternProperties": {"_id$": STRING}},
        True,
    ),
    ("object-additional-properties-schema", {"k": 7}, {"k": "7"}, {"additionalProperties": STRING}, True),
    ("object-optional-omitted", {"a": 1, "b": {"$optional": 2}}, {"a": 1}, None, True),
    ("object-optional-present-ok", {"a": 1, "b": {"$optional": 2}}, {"a": 1, "b": 2}, None, True),
    ("object-optional-present-bad", {"a": 1, "b": {"$optional": 2}}, {"a": 1, "b": 3}, None, False),
    ("object-absent-ok", {"a": 1, "b": {"$absent": True}}, {"a": 1}, None, True),
    ("object-absent-sent", {"a": 1, "b": {"$absent": True}}, {"a": 1, "b": None}, None, False),
    ("object-ne-list", {"a": 1}, [["a", 1]], None, False),
    # $oneOf
    ("oneof-first", {"$oneOf": ["C", "celsius"]}, "c", None, True),
    ("oneof-second", {"$oneOf": ["C", "celsius"]}, "Celsius", None, True),
    ("oneof-none", {"$oneOf": ["C", "celsius"]}, "F", None, False),
    ("oneof-nested-matcher", {"$oneOf": [{"$regex": "[0-9]+"}, None]}, None, None, True),
    ("oneof-missing", {"$oneOf": [1, 2]}, MISSING, None, False),
    # $optional
    ("optional-missing", {"$optional": "x"}, MISSING, None, True),
    ("optional-match", {"$optional": "x"}, "X", None, True),
    ("optional-mismatch", {"$optional": "x"}, "y", None, False),
    ("optional-matcher-inside", {"$optional": {"$approx": 1, "$tol": 0.1}}, 1.05, None, True),
    # $any
    ("any-string", {"$any": True}, "anything", None, True),
    ("any-null", {"$any": True}, None, None, True),
    ("any-missing", {"$any": True}, MISSING, None, False),
    # $absent
    ("absent-missing", {"$absent": True}, MISSING, None, True),
    ("absent-sent", {"$absent": True}, "x", None, False),
    ("absent-sent-null", {"$absent": True}, None, None, False),
    # $regex
    ("regex-fullmatch", {"$regex": "[A-Z]{3}-[0-9]+"}, "ABC-123", None, True),
    ("regex-partial-rejected", {"$regex": "[A-Z]{3}"}, "ABCD", None, False),
    ("regex-case-sensitive", {"$regex": "abc"}, "ABC", None, False),
    ("regex-inline-flag", {"$regex": "(?i)abc"}, "ABC", None, True),
    ("regex-non-string", {"$regex": "[0-9]+"}, 123, None, False),
    ("regex-missing", {"$regex": ".*"}, MISSING, None, False),
    ("regex-too-long", {"$regex": "a*"}, "a" * 100_001, None, False),
    # $approx / $tol
    ("approx-default-tol", {"$approx": 0.1}, 0.1 + 1e-9, None, True),
    ("approx-default-tol-fail", {"$approx": 0.1}, 0.1001, None, False),
    ("approx-tol", {"$approx": 37.77, "$tol": 0.01}, 37.775, None, True),
    ("approx-tol-fail", {"$approx": 37.77, "$tol": 0.01}, 37.79, None, False),
    ("approx-int", {"$approx": 10, "$tol": 0}, 10, None, True),
    ("approx-bool", {"$approx": 1, "$tol": 0.5}, True, None, False),
    ("approx-string", {"$approx": 1}, "1", None, False),
    ("approx-huge-int", {"$approx": 1.0}, 10**400, None, False),
    # $unordered (bipartite, not greedy)
    ("unordered-permutation", {"$unordered": ["a", "b", "c"]}, ["C", "a", "b"], None, True),
    ("unordered-multiset", {"$unordered": [1, 1, 2]}, [1, 2, 1], None, True),
    ("unordered-multiset-counts", {"$unordered": [1, 1, 2]}, [1, 2, 2], None, False),
    ("unordered-length", {"$unordered": [1, 2]}, [1, 2, 3], None, False),
    ("unordered-not-array", {"$unordered": [1]}, 1, None, False),
    (
        "unordered-needs-bipartite",
        {"$unordered": [{"$regex": "a.*"}, "ab"]},
        ["ab", "ax"],
        None,
        True,
    ),
    (
        "unordered-items-schema",
        {"$unordered": [1, 2]},
        ["2", "1"],
        {"type": "array", "items": STRING},
        True,
    ),
    ("unordered-empty", {"$unordered": []}, [], None, True),
    # $exact
    ("exact-eq", {"$exact": "New York"}, "New York", None, True),
    ("exact-case", {"$exact": "New York"}, "new york", None, False),
    ("exact-space", {"$exact": "New York"}, "New  York", None, False),
    ("exact-non-string", {"$exact": "1"}, 1, None, False),
    # literal vs missing / invalid matchers never raise
    ("literal-missing", "x", MISSING, None, False),
    ("invalid-matcher-does-not-match", {"$regexp": "x"}, "x", None, False),
    ("mixed-matcher-does-not-match", {"$any": True, "a": 1}, {"a": 1}, None, False),
]


@pytest.mark.parametrize(
    ("expected", "actual", "schema", "ok"),
    [case[1:] for case in MATCH_CASES],
    ids=[case[0] for case in MATCH_CASES],
)
def test_match_value(expected: Any, actual: Any, schema: dict[str, Any] | None, ok: bool) -> None:
    """match_value accepts or rejects each literal/matcher case as the language defines."""
    outcome = match_value(expected, actual, schema)
    assert outcome.ok is ok, outcome.reason
    assert (outcome.reason == "") is ok


# (id, expected, actual, schema, reason substring)
REASON_CASES: list[tuple[str, Any, Any, dict[str, Any] | None, str]] = [
    ("number-vs-string", 10, "10", NUMBER, 'expected 10 (integer), got "10" (string)'),
    ("bool-vs-int", True, 1, None, "expected true (boolean), got 1 (integer)"),
    ("nested-path", {"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, None, "at a.b[1]: expected 2"),
    ("missing", "x", MISSING, None, "missing"),
    ("absent", {"$absent": True}, "v", None, "must not be sent"),
    ("oneof", {"$oneOf": ["a", "b"]}, "c", None, 'expected one of ["a", "b"]'),
    ("regex", {"$regex": "[0-9]+"}, "x", None, "matching /[0-9]+/"),
    ("approx", {"$approx": 1.5, "$tol": 0.1}, 2, None, "1.5 \u00b1 0.1"),
    ("unordered", {"$unordered": [1, 2]}, [1, 3], None, "unmatched expected element(s): 2"),
    ("extra-key", {"a": 1}, {"a": 1, "zz": 2}, None, "unexpected key(s) zz"),
    ("invalid", {"$regexp": "x"}, "x", None, "invalid matcher"),
    ("truncated", "x", "y" * 5000, None, "\u2026"),
]


@pytest.mark.parametrize(
    ("expected", "actual", "schema", "needle"),
    [case[1:] for case in REASON_CASES],
    ids=[case[0] for case in REASON_CASES],
)
def test_match_reason(expected: Any, actual: Any, schema: dict[str, Any] | None, needle: str) -> None:
    """A failed match carries a short human reason naming expected and actual values."""
    outcome = match_value(expected, actual, schema)
    assert not outcome.ok
    assert needle in outcome.reason
    assert len(outcome.reason) < 1000


VALID_PARAMETERS: list[tuple[str, Any]] = [
    ("null", None),
    ("empty", {}),
    ("literals", {"a": 1, "b": "x", "c": [1, {"d": None}], "e": True, "f": 1.5}),
    (
        "every-matcher",
        {
            "a": {"$oneOf": [1, {"$regex": "x+"}]},
            "b": {"$optional": {"$approx": 1}},
            "c": {"$any": True},
            "d": {"$absent": True},
            "e": {"$regex": "^[a-z]+$"},
            "f": {"$approx": 1.0, "$tol": 0.5},
            "g": {"$unordered": [1, {"$exact": "A"}]},
            "h": {"$exact": "Case Sensitive"},
        },
    ),
    ("nested-optional-in-literal-object", {"filters": {"limit": {"$optional": 10}, "q": "x"}}),
    ("absent-in-nested-object", {"filters": {"deleted": {"$absent": True}}}),
    ("approx-without-tol", {"x": {"$approx": 3}}),
]


@pytest.mark.parametrize(
    "value", [case[1] for case in VALID_PARAMETERS], ids=[c[0] for c in VALID_PARAMETERS]
)
def test_validate_accepts(value: Any) -> None:
    """Well-formed expected_parameters produce no validation errors."""
    assert validate_expected_parameters(value) == []


# (id, value, path, reason substring)
INVALID_PARAMETERS: list[tuple[str, Any, str, str]] = [
    ("not-object", [1, 2], "expected_parameters", "must be an object or null"),
    ("dollar-parameter-name", {"$regex": "x"}, "expected_parameters.$regex", "cannot start with '$'"),
    ("unknown-key", {"q": {"$regexp": "x"}}, "expected_parameters.q.$regexp", "did you mean '$regex'"),
    (
        "unknown-key-nested",
        {"filters": {"$foo": 1}},
        "expected_parameters.filters.$foo",
        "unknown matcher key '$foo'",
    ),
    (
        "unknown-key-deep",
        {"a": {"b": [1, {"c": {"$nope": 1}}]}},
        "expected_parameters.a.b[1].c.$nope",
        "unknown matcher key",
    ),
    ("tol-without-approx", {"x": {"$tol": 0.1}}, "expected_parameters.x.$tol", "only allowed together"),
    (
        "optional-combined",
        {"x": {"$optional": 1, "$any": True}},
        "expected_parameters.x.$any",
        "cannot be combined with '$optional'",
    ),
    (
        "approx-combined",
        {"x": {"$approx": 1, "$exact": "1"}},
        "expected_parameters.x.$exact",
        "cannot be combined with '$approx'",
    ),
    ("mixed-literal-key", {"x": {"$any": True, "y": 1}}, "expected_parameters.x.y", "cannot be mixed"),
    ("oneof-not-list", {"x": {"$oneOf": 1}}, "expected_parameters.x.$oneOf", "must be an array"),
    ("oneof-empty", {"x": {"$oneOf": []}}, "expected_parameters.x.$oneOf", "at least one"),
    (
        "oneof-element-invalid",
        {"x": {"$oneOf": [1, {"$bad": 1}]}},
        "expected_parameters.x.$oneOf[1].$bad",
        "unknown matcher key",
    ),
    ("any-not-true", {"x": {"$any": 1}}, "expected_parameters.x.$any", "must be true"),
    ("absent-not-true", {"x": {"$absent": False}}, "expected_parameters.x.$absent", "must be true"),
    ("regex-invalid", {"x": {"$regex": "("}}, "expected_parameters.x.$regex", "invalid regular expression"),
    ("regex-not-string", {"x": {"$regex": 1}}, "expected_parameters.x.$regex", "must be a string"),
    ("approx-not-number", {"x": {"$approx": "1"}}, "expected_parameters.x.$approx", "finite number"),
    ("approx-bool", {"x": {"$approx": True}}, "expected_parameters.x.$approx", "finite number"),
    ("tol-negative", {"x": {"$approx": 1, "$tol": -1}}, "expected_parameters.x.$tol", ">= 0"),
    ("unordered-not-list", {"x": {"$unordered": "ab"}}, "expected_parameters.x.$unordered", "array"),
    ("exact-not-string", {"x": {"$exact": 1}}, "expected_parameters.x.$exact", "must be a string"),
    (
        "optional-in-array",
        {"x": [{"$optional": 1}]},
        "expected_parameters.x[0].$optional",
        "only allowed as the value of an object key",
    ),
    (
        "absent-in-oneof",
        {"x": {"$oneOf": [{"$absent": True}]}},
        "expected_parameters.x.$oneOf[0].$absent",
        "only allowed as the value",
    ),
    (
        "optional-in-optional",
        {"x": {"$optional": {"$optional": 1}}},
        "expected_parameters.x.$optional.$optional",
        "only allowed as the value",
    ),
    ("non-finite", {"x": float("inf")}, "expected_parameters.x", "finite"),
    ("unsupported-type", {"x": {1, 2}}, "expected_parameters.x", "unsupported value type"),
]


@pytest.mark.parametrize(
    ("value", "path", "needle"),
    [case[1:] for case in INVALID_PARAMETERS],
    ids=[case[0] for case in INVALID_PARAMETERS],
)
def test_validate_rejects(value: Any, path: str, needle: str) -> None:
    """Malformed expected_parameters yield an error at the offending path with a reason."""
    errors = validate_expected_parameters(value)
    assert any(e.path == path and needle in e.reason for e in errors), errors
    assert all(isinstance(e, MatcherError) for e in errors)


def test_validate_reports_every_error() -> None:
    """Validation collects all problems instead of stopping at the first."""
    errors = validate_expected_parameters({"a": {"$x": 1}, "b": {"c": {"$y": 2}}})
    assert [e.path for e in errors] == ["expected_parameters.a.$x", "expected_parameters.b.c.$y"]


def test_validate_deep_nesting() -> None:
    """Absurdly deep nesting is reported, not a crash."""
    value: Any = 1
    for _ in range(200):
        value = {"k": value}
    errors = validate_expected_parameters({"x": value})
    assert errors
    assert "nested deeper" in errors[0].reason


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        (NFD_E, NFC_E),
        ("Stra\u00dfe", "strasse"),
        ("  Hello \t World\n", "hello world"),
        ("\u00c9COLE", "\u00e9cole"),
        ("", ""),
    ],
)
def test_normalize_string(raw: str, normalised: str) -> None:
    """Strings normalise to NFC, case-folded, stripped, with single spaces."""
    assert normalize_string(raw) == normalised


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        ({"a": 10, "b": "X"}, {"b": "x", "a": 10.0}, True),
        ({"a": [1, 2]}, {"a": [2, 1]}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": NFD_E}, {"a": NFC_E.upper()}, True),
        ({"a": 1.5}, {"a": 1.5}, True),
        ({"A": 1}, {"a": 1}, False),
    ],
)
def test_canonical_json(left: Any, right: Any, equal: bool) -> None:
    """canonical_json is equal exactly for values equivalent under normalisation."""
    assert (canonical_json(left) == canonical_json(right)) is equal


def test_normalize_json_junk() -> None:
    """normalize_json never raises on junk: deep nesting, NaN, non-JSON objects."""
    deep: Any = []
    for _ in range(500):
        deep = [deep]
    assert "<too deep>" in canonical_json(deep)
    assert normalize_json(float("nan")) == "nan"
    assert normalize_json({1: object()}) == {"1": "<object>"}


@pytest.mark.parametrize(
    ("value", "optional", "absent"),
    [
        ({"$optional": 1}, True, False),
        ({"$absent": True}, False, True),
        ({"$absent": False}, False, False),
        ({"$any": True}, False, False),
        (1, False, False),
    ],
)
def test_is_optional_absent(value: Any, optional: bool, absent: bool) -> None:
    """is_optional/is_absent recognise exactly their matcher forms."""
    assert is_optional(value) is optional
    assert is_absent(value) is absent


@pytest.mark.parametrize(
    ("schema", "key", "sub"),
    [
        ({"properties": {"a": STRING}}, "a", STRING),
        ({"properties": {"a": STRING}, "patternProperties": {"^b": INTEGER}}, "bx", INTEGER),
        ({"additionalProperties": NUMBER}, "z", NUMBER),
        ({"additionalProperties": False}, "z", None),
        ({"properties": "junk", "patternProperties": {"(": STRING}}, "a", None),
        (None, "a", None),
    ],
)
def test_schema_for_property(schema: dict[str, Any] | None, key: str, sub: dict[str, Any] | None) -> None:
    """schema_for_property picks properties, then patternProperties, then additionalProperties."""
    assert schema_for_property(schema, key) == sub


@pytest.mark.parametrize(
    ("schema", "index", "sub"),
    [
        ({"items": STRING}, 3, STRING),
        ({"prefixItems": [STRING], "items": INTEGER}, 0, STRING),
        ({"prefixItems": [STRING], "items": INTEGER}, 1, INTEGER),
        ({"items": [STRING], "additionalItems": NUMBER}, 1, NUMBER),
        ({"items": [STRING]}, None, None),
        (None, 0, None),
    ],
)
def test_schema_for_item(
    schema: dict[str, Any] | None, index: int | None, sub: dict[str, Any] | None
) -> None:
    """schema_for_item handles items, prefixItems and draft-07 tuple items."""
    assert schema_for_item(schema, index) == sub


@pytest.mark.parametrize(
    "actual",
    [
        {"a": {"b": {"c": [1, 2, {"d": None}]}}},
        "x" * 1_000_000,
        [[[[[]]]]],
        float("nan"),
        float("inf"),
        10**500,
        object(),
    ],
)
@pytest.mark.parametrize(
    "expected",
    [
        {"a": 1},
        [1, 2],
        "x",
        3,
        {"$approx": 1},
        {"$regex": "x+"},
        {"$unordered": [1]},
        {"$oneOf": [1, "x"]},
        {"$exact": "x"},
    ],
)
def test_match_never_raises(expected: Any, actual: Any) -> None:
    """Untrusted, weird actual values produce an outcome, never an exception."""
    outcome = match_value(expected, actual, {"type": "object"})
    assert isinstance(outcome, MatchOutcome)
    assert len(outcome.reason) < 1000


def test_missing_sentinel() -> None:
    """MISSING is a falsy singleton that prints as MISSING."""
    assert not MISSING
    assert repr(MISSING) == "MISSING"
    assert type(MISSING)() is MISSING
    assert describe_value(MISSING) == "nothing (key not sent)"


@pytest.mark.parametrize(("text", "limit", "out"), [("abc", 5, "abc"), ("abcdef", 4, "abc\u2026")])
def test_truncate(text: str, limit: int, out: str) -> None:
    """truncate shortens long text and marks the cut."""
    assert truncate(text, limit) == out
