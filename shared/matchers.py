"""The expected-parameter language: literals and matcher objects, validation and matching.

A test case's ``expected_parameters`` is ``null`` or a JSON object mapping parameter names to expected values.
Parameter names must not start with ``$``. Every value is either a *literal* or a *matcher object*. This module
is pure (no I/O) and is used both by the API (validation at creation) and by the worker (matching).

Literals (schema-aware equality; the schema is the JSON Schema of the value's position, if known)
-----------------------------------------------------------------------------------------------------
* ``null`` equals only ``null``.
* Booleans equal only booleans: ``true`` never equals ``1`` and ``1`` never equals ``true``.
* Numbers compare by numeric value, whatever the schema says: integer ``10`` equals ``10.0``. This covers BFCL's
  int->float promotion for ``number`` parameters, and we also accept ``10.0`` where the schema says
  ``integer``: JSON has a single number type and JSON Schema (draft 6 onwards) defines an integer as a number
  with a zero fractional part, so ``10.0`` *is* the integer 10. (BFCL rejects it; we do not.) Whether the model
  used the declared type is scored separately by type conformance, which follows the schema's own draft
  (draft-04 rejects ``10.0`` for ``integer``).
* A string never equals a number, and a number never equals a string, except one case: when the schema of the
  position says ``type: "string"`` (and not also number/integer) and the *expected* literal is a number, the
  model's string matches when it parses as a decimal number with the same value (``"10"`` and ``"10.0"`` match
  expected ``10``). Only the expected literal is interpreted (authors often write ``10`` for a string id); the
  model's value is never coerced, so expected ``"10"`` does not match a sent ``10``.
* Strings are equal after normalisation: Unicode NFC, case-fold, strip, and every run of whitespace collapsed
  to one space (``"Stra\u00dfe"`` equals ``"STRASSE"``; NFD ``"e\u0301"`` equals NFC ``"\u00e9"``).
* Arrays are ordered: same length, element by element, each element checked with the array's ``items`` schema
  (``prefixItems`` / tuple-form ``items`` for positional schemas).
* Objects recurse key by key with the ``properties`` (then ``patternProperties``, then ``additionalProperties``)
  schema. An object literal matches only when the key sets are equal, except that keys whose expected value is
  ``$optional`` may be omitted and keys whose expected value is ``$absent`` must be omitted.

Matchers (an object with at least one key starting with ``$`` must be exactly one of these forms)
---------------------------------------------------------------------------------------------------
* ``{"$oneOf": [v, ...]}`` -- a non-empty list; matches when any alternative (literal or matcher) matches.
* ``{"$optional": v}`` -- the key may be omitted; if present it must match ``v``. Only as an object key's value.
* ``{"$absent": true}`` -- the key must not be sent. Only as an object key's value.
* ``{"$any": true}`` -- present, with any value (including ``null``).
* ``{"$regex": "..."}`` -- the value is a string and ``re.fullmatch`` matches it (the raw string, not
  normalised; use ``(?i)`` for case-insensitivity). Strings longer than 100 000 characters never match.
* ``{"$approx": x, "$tol": t}`` -- a number (not a boolean) within absolute tolerance ``t`` of ``x``;
  ``t >= 0``, default ``1e-6``. ``$tol`` is only valid next to ``$approx``.
* ``{"$unordered": [v, ...]}`` -- an array equal as a multiset: same length and a perfect one-to-one assignment
  of actual elements to expected elements (maximum bipartite matching, not greedy), each checked with ``items``.
* ``{"$exact": "..."}`` -- the value is a string equal character for character (case- and space-sensitive).

``$optional`` and ``$absent`` cannot be nested inside ``$oneOf``, ``$optional``, ``$unordered`` or array
elements. Validation (:func:`validate_expected_parameters`) reports every problem as a :class:`MatcherError`
with a path such as ``expected_parameters.filters.$foo`` (array elements as ``[i]``) and a reason: unknown
``$`` keys, ``$tol`` without ``$approx``, a matcher key combined with another key, wrong payload types, an
invalid regular expression, non-finite numbers, nesting deeper than 64 levels.

Matching (:func:`match_value`) never raises: an invalid matcher simply does not match, with a reason.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

__all__ = [
    "DEFAULT_TOLERANCE",
    "MATCHER_KEYS",
    "MISSING",
    "MatchOutcome",
    "MatcherError",
    "Missing",
    "canonical_json",
    "describe_value",
    "is_absent",
    "is_matcher",
    "is_optional",
    "json_type_name",
    "match_value",
    "normalize_json",
    "normalize_string",
    "schema_for_item",
    "schema_for_property",
    "truncate",
    "validate_expected_parameters",
]

DEFAULT_TOLERANCE: Final = 1e-6
MAX_DEPTH: Final = 64
MAX_REGEX_SUBJECT: Final = 100_000
ECHO_LIMIT: Final = 200

MATCHER_KEYS: Final = frozenset(
    {"$oneOf", "$optional", "$any", "$absent", "$regex", "$approx", "$tol", "$unordered", "$exact"}
)
_SINGLE_KEY_FORMS: Final = ("$oneOf", "$optional", "$any", "$absent", "$regex", "$unordered", "$exact")


class Missing:
    """Type of the :data:`MISSING` sentinel: "the key was not sent"."""

    _instance: Missing | None = None

    def __new__(cls) -> Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = Missing()


@dataclass(frozen=True, slots=True)
class MatcherError:
    """One problem in ``expected_parameters``: where (``path``) and why (``reason``)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class MatchOutcome:
    """Result of :func:`match_value`; ``reason`` is a short human explanation when ``ok`` is false."""

    ok: bool
    reason: str = ""


_OK: Final = MatchOutcome(True)


# --------------------------------------------------------------------------------------------------------------
# Small helpers (also used by scoring)
# --------------------------------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def truncate(text: str, limit: int = ECHO_LIMIT) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "\u2026"


def normalize_string(value: str) -> str:
    """NFC, case-fold, strip and collapse whitespace runs to one space (then NFC again)."""
    folded = unicodedata.normalize("NFC", value).casefold()
    return unicodedata.normalize("NFC", _WS.sub(" ", folded).strip())


def json_type_name(value: object) -> str:
    """The JSON type name of a decoded JSON value (``integer`` for int, ``number`` for float)."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _dump(value: object, limit: int) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return truncate(text, limit)


def describe_value(value: object, limit: int = ECHO_LIMIT) -> str:
    """Render a value for a human: compact JSON truncated to ``limit`` characters plus its JSON type."""
    if value is MISSING:
        return "nothing (key not sent)"
    return f"{_dump(value, limit)} ({json_type_name(value)})"


def normalize_json(value: object, _depth: int = 0) -> Any:
    """Normalised copy of a JSON value for clustering: strings normalised, integral floats as ints.

    Object keys are kept as sent (parameter names are identifiers). Values nested deeper than 64 levels and
    non-JSON values are replaced by marker strings, so this never raises.
    """
    if _depth > MAX_DEPTH:
        return "<too deep>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return normalize_string(value)
    if isinstance(value, list | tuple):
        return [normalize_json(v, _depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {str(k): normalize_json(v, _depth + 1) for k, v in value.items()}
    return f"<{type(value).__name__}>"


def canonical_json(value: object) -> str:
    """Canonical JSON text of :func:`normalize_json` (sorted keys, no spaces) -- equal for equivalent values."""
    return json.dumps(normalize_json(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dollar_keys(value: Mapping[Any, Any]) -> list[str]:
    return [k for k in value if isinstance(k, str) and k.startswith("$")]


def is_matcher(value: object) -> bool:
    """True when ``value`` is an object with at least one ``$`` key (a matcher, valid or not)."""
    return isinstance(value, Mapping) and bool(_dollar_keys(value))


def is_optional(value: object) -> bool:
    """True for ``{"$optional": ...}``."""
    return isinstance(value, Mapping) and len(value) == 1 and "$optional" in value


def is_absent(value: object) -> bool:
    """True for ``{"$absent": true}``."""
    return isinstance(value, Mapping) and len(value) == 1 and value.get("$absent") is True


def _schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    if schema is None:
        return set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def _as_schema(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def schema_for_property(schema: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    """Subschema for object key ``key``: ``properties``, then ``patternProperties``, then
    ``additionalProperties`` (when it is a schema object); ``None`` when unknown."""
    if schema is None:
        return None
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return _as_schema(props[key])
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping):
        for pattern, sub in patterns.items():
            try:
                if isinstance(pattern, str) and re.search(pattern, key):
                    return _as_schema(sub)
            except re.error:
                continue
    return _as_schema(schema.get("additionalProperties"))


def schema_for_item(schema: Mapping[str, Any] | None, index: int | None) -> Mapping[str, Any] | None:
    """Subschema for array element ``index`` (``None`` = any position): ``prefixItems`` / tuple ``items``
    for positional schemas, else ``items`` (or draft-07 ``additionalItems`` past a tuple)."""
    if schema is None:
        return None
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(prefix, list):
        if index is not None and index < len(prefix):
            return _as_schema(prefix[index])
        return _as_schema(items)
    if isinstance(items, list):
        if index is not None and index < len(items):
            return _as_schema(items[index])
        return _as_schema(schema.get("additionalItems"))
    return _as_schema(items)


# --------------------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------------------

Position = Literal["property", "element"]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unknown_key_reason(key: str) -> str:
    close = difflib.get_close_matches(key, sorted(MATCHER_KEYS), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    known = ", ".join(sorted(MATCHER_KEYS - {"$tol"}))
    return f"unknown matcher key '{truncate(key, 60)}' (known: {known}){hint}"


def validate_expected_parameters(value: object, path: str = "expected_parameters") -> list[MatcherError]:
    """Check an ``expected_parameters`` value; return every problem (empty list = valid).

    ``value`` must be ``None`` or an object of parameter names (not starting with ``$``) to literals/matchers.
    """
    errors: list[MatcherError] = []
    if value is None:
        return errors
    if not isinstance(value, Mapping):
        errors.append(MatcherError(path, f"must be an object or null, got {json_type_name(value)}"))
        return errors
    try:
        for key, sub in value.items():
            if not isinstance(key, str):
                errors.append(MatcherError(path, f"parameter names must be strings, got {key!r}"))
                continue
            sub_path = f"{path}.{key}"
            if key.startswith("$"):
                errors.append(
                    MatcherError(
                        sub_path,
                        f"parameter names cannot start with '$' ('{truncate(key, 60)}'); "
                        "matchers belong in a parameter's value",
                    )
                )
                continue
            _validate(sub, sub_path, "property", errors, 1)
    except RecursionError:
        errors.append(MatcherError(path, f"nested deeper than {MAX_DEPTH} levels"))
    return errors


def _validate(value: object, path: str, position: Position, errors: list[MatcherError], depth: int) -> None:
    if depth > MAX_DEPTH:
        errors.append(MatcherError(path, f"nested deeper than {MAX_DEPTH} levels"))
        return
    if value is None or isinstance(value, bool | str | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            errors.append(MatcherError(path, "numbers must be finite"))
        return
    if isinstance(value, list):
        for i, element in enumerate(value):
            _validate(element, f"{path}[{i}]", "element", errors, depth + 1)
        return
    if not isinstance(value, Mapping):
        errors.append(MatcherError(path, f"unsupported value type {type(value).__name__}"))
        return
    for key in value:
        if not isinstance(key, str):
            errors.append(MatcherError(path, f"object keys must be strings, got {key!r}"))
            return
    dollar = _dollar_keys(value)
    if not dollar:
        for key, sub in value.items():
            _validate(sub, f"{path}.{key}", "property", errors, depth + 1)
        return
    _validate_matcher(value, dollar, path, position, errors, depth)


def _validate_matcher(
    value: Mapping[str, Any],
    dollar: list[str],
    path: str,
    position: Position,
    errors: list[MatcherError],
    depth: int,
    recurse: bool = True,
) -> None:
    first = dollar[0]
    for key in value:
        if not key.startswith("$"):
            errors.append(
                MatcherError(
                    f"{path}.{key}",
                    f"literal key '{truncate(key, 60)}' cannot be mixed with matcher key '{first}'",
                )
            )
    unknown = [k for k in dollar if k not in MATCHER_KEYS]
    for key in unknown:
        errors.append(MatcherError(f"{path}.{key}", _unknown_key_reason(key)))
    known = [k for k in dollar if k in MATCHER_KEYS]
    if not known:
        return
    if "$approx" in known:
        for key in known:
            if key not in ("$approx", "$tol"):
                errors.append(MatcherError(f"{path}.{key}", f"'{key}' cannot be combined with '$approx'"))
        target = value["$approx"]
        if not _is_number(target) or not math.isfinite(target):
            errors.append(
                MatcherError(f"{path}.$approx", f"must be a finite number, got {json_type_name(target)}")
            )
        if "$tol" in value:
            tol = value["$tol"]
            if not _is_number(tol) or not math.isfinite(tol) or tol < 0:
                errors.append(MatcherError(f"{path}.$tol", "must be a finite number >= 0"))
        return
    if "$tol" in known:
        errors.append(MatcherError(f"{path}.$tol", "'$tol' is only allowed together with '$approx'"))
        return
    primary = known[0]
    if len(known) > 1:
        for key in known[1:]:
            errors.append(
                MatcherError(
                    f"{path}.{key}",
                    f"'{key}' cannot be combined with '{primary}'; a matcher object has exactly one matcher key",
                )
            )
        return
    payload = value[primary]
    sub_path = f"{path}.{primary}"
    if primary in ("$optional", "$absent") and position != "property":
        errors.append(
            MatcherError(
                sub_path,
                f"'{primary}' is only allowed as the value of an object key, not inside "
                "$oneOf/$optional/$unordered or an array",
            )
        )
    if primary == "$oneOf" or primary == "$unordered":
        if not isinstance(payload, list):
            errors.append(MatcherError(sub_path, f"must be an array, got {json_type_name(payload)}"))
            return
        if primary == "$oneOf" and not payload:
            errors.append(MatcherError(sub_path, "must list at least one acceptable value"))
        if recurse:
            for i, element in enumerate(payload):
                _validate(element, f"{sub_path}[{i}]", "element", errors, depth + 1)
    elif primary == "$optional":
        if recurse:
            _validate(payload, sub_path, "element", errors, depth + 1)
    elif primary in ("$any", "$absent"):
        if payload is not True:
            errors.append(MatcherError(sub_path, "must be true"))
    elif primary == "$regex":
        if not isinstance(payload, str):
            errors.append(MatcherError(sub_path, f"must be a string, got {json_type_name(payload)}"))
            return
        try:
            re.compile(payload)
        except re.error as exc:
            errors.append(MatcherError(sub_path, f"invalid regular expression: {exc}"))
        except (RecursionError, OverflowError, ValueError) as exc:  # pragma: no cover - pathological pattern
            errors.append(MatcherError(sub_path, f"invalid regular expression: {type(exc).__name__}"))
    elif primary == "$exact" and not isinstance(payload, str):
        errors.append(MatcherError(sub_path, f"must be a string, got {json_type_name(payload)}"))


# --------------------------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------------------------


def match_value(expected: object, actual: object, schema: Mapping[str, Any] | None = None) -> MatchOutcome:
    """Does the model's ``actual`` value (or :data:`MISSING`) satisfy ``expected``?

    ``schema`` is the JSON Schema of this position (e.g. the tool's property schema), used for
    literal-number-vs-string and to descend into arrays/objects. Never raises.
    """
    try:
        return _match(expected, actual, _as_schema(schema), "", 0)
    except RecursionError:
        return MatchOutcome(False, "value nested too deeply to compare")


def _fail(path: str, message: str) -> MatchOutcome:
    return MatchOutcome(False, f"at {path.lstrip('.')}: {message}" if path else message)


def _mismatch(path: str, expected: object, actual: object) -> MatchOutcome:
    return _fail(path, f"expected {describe_value(expected)}, got {describe_value(actual)}")


def _describe_expected(expected: object) -> str:
    return _dump(expected, ECHO_LIMIT)


def _match(
    expected: object, actual: object, schema: Mapping[str, Any] | None, path: str, depth: int
) -> MatchOutcome:
    if depth > MAX_DEPTH:
        return _fail(path, "expected value nested too deeply")
    if isinstance(expected, Mapping) and _dollar_keys(expected):
        return _match_matcher(expected, actual, schema, path, depth)
    if actual is MISSING:
        return _fail(path, f"missing (expected {describe_value(expected)})")
    if expected is None:
        return _OK if actual is None else _mismatch(path, expected, actual)
    if isinstance(expected, bool):
        return _OK if isinstance(actual, bool) and actual == expected else _mismatch(path, expected, actual)
    if isinstance(expected, int | float):
        return _match_number(expected, actual, schema, path)
    if isinstance(expected, str):
        if isinstance(actual, str) and normalize_string(actual) == normalize_string(expected):
            return _OK
        return _mismatch(path, expected, actual)
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return _mismatch(path, expected, actual)
        if len(actual) != len(expected):
            return _fail(path, f"expected an array of {len(expected)} element(s), got {len(actual)}")
        for i, (exp_item, act_item) in enumerate(zip(expected, actual, strict=True)):
            outcome = _match(exp_item, act_item, schema_for_item(schema, i), f"{path}[{i}]", depth + 1)
            if not outcome.ok:
                return outcome
        return _OK
    if isinstance(expected, Mapping):
        return _match_object(expected, actual, schema, path, depth)
    return _fail(path, f"unsupported expected value type {type(expected).__name__}")


def _match_number(
    expected: float, actual: object, schema: Mapping[str, Any] | None, path: str
) -> MatchOutcome:
    if _is_number(actual):
        assert isinstance(actual, int | float)
        return _OK if actual == expected else _mismatch(path, expected, actual)
    types = _schema_types(schema)
    if isinstance(actual, str) and "string" in types and not types & {"number", "integer"}:
        text = actual.strip()
        if len(text) <= 100:
            try:
                if Decimal(text).is_finite() and Decimal(text) == Decimal(repr(expected)):
                    return _OK
            except (InvalidOperation, ValueError):
                pass
    return _mismatch(path, expected, actual)


def _match_object(
    expected: Mapping[Any, Any], actual: object, schema: Mapping[str, Any] | None, path: str, depth: int
) -> MatchOutcome:
    if not isinstance(actual, Mapping):
        return _mismatch(path, expected, actual)
    for key, exp_value in expected.items():
        sub_path = f"{path}.{key}"
        outcome = _match(
            exp_value,
            actual.get(key, MISSING),
            schema_for_property(schema, str(key)),
            sub_path,
            depth + 1,
        )
        if not outcome.ok:
            return outcome
    extra = [k for k in actual if k not in expected]
    if extra:
        shown = ", ".join(truncate(str(k), 60) for k in extra[:5])
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        return _fail(path, f"unexpected key(s) {shown}{more}")
    return _OK


def _match_matcher(
    expected: Mapping[Any, Any], actual: object, schema: Mapping[str, Any] | None, path: str, depth: int
) -> MatchOutcome:
    problems = _validate_local(expected)
    if problems:
        return _fail(path, f"invalid matcher: {problems}")
    if "$approx" in expected:
        kind = "$approx"
    else:
        (kind,) = tuple(expected)
    payload = expected[kind]
    if kind == "$optional":
        if actual is MISSING:
            return _OK
        return _match(payload, actual, schema, path, depth + 1)
    if kind == "$absent":
        if actual is MISSING:
            return _OK
        return _fail(path, f"must not be sent, got {describe_value(actual)}")
    if actual is MISSING:
        return _fail(path, f"missing (expected {_describe_expected(expected)})")
    if kind == "$any":
        return _OK
    if kind == "$oneOf":
        for alternative in payload:
            if _match(alternative, actual, schema, path, depth + 1).ok:
                return _OK
        return _fail(path, f"expected one of {_describe_expected(payload)}, got {describe_value(actual)}")
    if kind == "$regex":
        if not isinstance(actual, str):
            return _fail(
                path, f"expected a string matching /{truncate(payload)}/, got {describe_value(actual)}"
            )
        if len(actual) > MAX_REGEX_SUBJECT:
            return _fail(path, f"string of {len(actual)} characters is too long for $regex")
        if re.fullmatch(payload, actual):
            return _OK
        return _fail(path, f"expected a string matching /{truncate(payload)}/, got {describe_value(actual)}")
    if kind == "$exact":
        if isinstance(actual, str) and actual == payload:
            return _OK
        return _mismatch(path, payload, actual)
    if kind == "$approx":
        return _match_approx(payload, expected.get("$tol", DEFAULT_TOLERANCE), actual, path)
    # kind == "$unordered"
    return _match_unordered(payload, actual, schema, path, depth)


def _validate_local(expected: Mapping[Any, Any]) -> str:
    """Shallow validity check of one matcher object for match-time robustness (full check: validation)."""
    errors: list[MatcherError] = []
    _validate_matcher(expected, _dollar_keys(expected), "", "property", errors, 0, recurse=False)
    return "; ".join(f"{e.path.lstrip('.')}: {e.reason}" for e in errors)


def _match_approx(target: float, tol: float, actual: object, path: str) -> MatchOutcome:
    if not _is_number(actual):
        return _fail(path, f"expected a number near {target!r}, got {describe_value(actual)}")
    assert isinstance(actual, int | float)
    try:
        ok = abs(actual - target) <= tol
    except OverflowError:
        ok = False
    if ok:
        return _OK
    return _fail(path, f"expected {target!r} \u00b1 {tol!r}, got {describe_value(actual)}")


def _match_unordered(
    expected: Sequence[Any], actual: object, schema: Mapping[str, Any] | None, path: str, depth: int
) -> MatchOutcome:
    if not isinstance(actual, list):
        return _fail(path, f"expected an array (any order), got {describe_value(actual)}")
    if len(actual) != len(expected):
        return _fail(path, f"expected an array of {len(expected)} element(s) in any order, got {len(actual)}")
    item_schema = schema_for_item(schema, None)
    n = len(expected)
    compatible: list[list[int]] = [
        [j for j, act in enumerate(actual) if _match(exp, act, item_schema, path, depth + 1).ok]
        for exp in expected
    ]
    owner: list[int] = [-1] * n  # actual index -> expected index

    def augment(i: int, seen: list[bool]) -> bool:
        for j in compatible[i]:
            if not seen[j]:
                seen[j] = True
                if owner[j] == -1 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    unmatched = [i for i in range(n) if not augment(i, [False] * n)]
    if not unmatched:
        return _OK
    shown = ", ".join(_describe_expected(expected[i]) for i in unmatched[:3])
    return _fail(path, f"no one-to-one match in any order; unmatched expected element(s): {shown}")
