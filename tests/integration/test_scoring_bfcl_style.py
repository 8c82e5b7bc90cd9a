"""Function-calling cases in the style of a public benchmark (BFCL's "simple"/"relevance" categories, our
own cases), run through the whole pipeline: real MCP server, scripted LLM over HTTP, queue, worker, Postgres.
Each row states the verdict the README's scoring rules predict, worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.catalog import DemoServerSpec, DemoTool
from shared.demo.servers import DemoServerHandle, run_demo_servers
from tests.support.pipeline import create_case, openai_config, register_servers
from tests.support.scripted_llm import Rule, ScriptedLLM, ToolCall

pytestmark = pytest.mark.integration

TRIANGLE = DemoTool(
    name="calculate_triangle_area",
    description="Calculate the area of a triangle from its base and height.",
    input_schema={
        "type": "object",
        "properties": {
            "base": {"type": "integer", "description": "The base of the triangle."},
            "height": {"type": "integer", "description": "The height of the triangle."},
            "unit": {"type": "string", "description": "Unit of measure.", "default": "units"},
            "exact": {"type": "boolean", "description": "Return an exact fraction.", "default": False},
        },
        "required": ["base", "height"],
    },
)
RESTAURANTS = DemoTool(
    name="find_restaurants",
    description="Find restaurants near a location by cuisine within a radius.",
    input_schema={
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "City and state, e.g. 'Berkeley, CA'."},
            "cuisine": {"type": "string", "enum": ["italian", "thai", "mexican", "indian"]},
            "radius": {"type": "number", "description": "Search radius."},
            "unit": {"type": "string", "enum": ["km", "miles"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["location", "cuisine"],
        "additionalProperties": False,
    },
)
SPECS = [
    DemoServerSpec(name="geometry", transport="streamable-http", tools=[TRIANGLE]),
    DemoServerSpec(name="places", transport="sse", tools=[RESTAURANTS]),
]
TRIANGLE_EXPECTED: dict[str, Any] = {
    "base": 10,
    "height": 5,
    "unit": {"$optional": {"$oneOf": ["units", "cm"]}},
    "exact": {"$optional": False},
}
SEARCH_EXPECTED: dict[str, Any] = {
    "location": "Berkeley, CA",
    "cuisine": "thai",
    "radius": {"$optional": {"$approx": 5, "$tol": 0.5}},
    "unit": {"$optional": {"$oneOf": ["km", "miles"]}},
    "tags": {"$optional": {"$unordered": ["vegan", "cheap"]}},
}


class Row:
    def __init__(
        self,
        key: str,
        tool: str | None,
        answers: list[Any],
        classification: str,
        completeness: float,
        correctness: float,
        conformance: bool,
        hallucinated: list[str] | None = None,
        reasoning_has: str | None = None,
    ) -> None:
        self.key = key
        self.tool = tool
        self.answers = answers
        self.classification = classification
        self.completeness = completeness
        self.correctness = correctness
        self.conformance = conformance
        self.hallucinated = hallucinated or []
        self.reasoning_has = reasoning_has


def tri(**args: Any) -> list[ToolCall]:
    return [ToolCall("calculate_triangle_area", args)]


def find(**args: Any) -> list[ToolCall]:
    return [ToolCall("find_restaurants", args)]


ROWS = [
    # Exact arguments: every expected key matches, the optional ones are omitted.
    Row("tri-exact", "tri", [tri(base=10, height=5)], "TP", 1.0, 1.0, True),
    # 10.0 for integer 10: the value matches and JSON Schema 2020-12 accepts 10.0 as an integer.
    Row("tri-float", "tri", [tri(base=10.0, height=5)], "TP", 1.0, 1.0, True),
    # "10" for an integer: a mismatch (base) and a type error; height matches and the two omitted optionals
    # match by being omitted: 3 of 4 expected keys.
    Row("tri-string", "tri", [tri(base="10", height=5)], "TP", 1.0, 0.75, False, reasoning_has="base"),
    # Optional key sent with an accepted alternative: all four expected keys match.
    Row("tri-optional", "tri", [tri(base=10, height=5, unit="CM", exact=False)], "TP", 1.0, 1.0, True),
    # Optional key sent with a wrong value: 3 of 4 expected keys match.
    Row("tri-optional-wrong", "tri", [tri(base=10, height=5, exact=True)], "TP", 1.0, 0.75, True),
    # A required key missing: completeness 1/2, correctness 3/4 (the optionals match by being omitted),
    # and the call violates the schema's `required`.
    Row("tri-missing", "tri", [tri(base=10)], "TP", 0.5, 0.75, False, reasoning_has="height"),
    # An invented key: hallucinated (the schema does not define it), yet additionalProperties is absent so
    # the call still validates.
    Row("tri-hallucinated", "tri", [tri(base=10, height=5, color="red")], "TP", 1.0, 1.0, True, ["color"]),
    # Case and whitespace do not matter for strings; $approx, enum alternatives and $unordered all match.
    Row(
        "find-normalised",
        "find",
        [find(location="berkeley,   ca", cuisine="Thai", radius=5.2, unit="miles", tags=["cheap", "vegan"])],
        "TP",
        1.0,
        1.0,
        False,  # "Thai" is not in the case-sensitive enum: the value matches, the schema rejects it
    ),
    # Outside the tolerance and a missing list element: 3 of 5 expected keys match.
    Row(
        "find-mismatch",
        "find",
        [find(location="Berkeley, CA", cuisine="thai", radius=9, tags=["vegan"])],
        "TP",
        1.0,
        0.6,
        True,
    ),
    # additionalProperties false: an invented key is hallucinated AND a schema violation.
    Row(
        "find-extra",
        "find",
        [find(location="Berkeley, CA", cuisine="thai", price="$$")],
        "TP",
        1.0,
        1.0,
        False,
        ["price"],
    ),
    # The wrong tool for the query: FN, no parameter credit.
    Row("tri-wrong-tool", "tri", [find(location="x", cuisine="thai")], "FN", 0.0, 0.0, False),
    # Text only when a tool was expected: FN.
    Row("tri-no-call", "tri", ["I cannot compute that."], "FN", 0.0, 0.0, False),
    # Relevance: nothing fits and the model says so: TN, full parameter marks.
    Row("none-abstain", None, ["That is not something these tools do."], "TN", 1.0, 1.0, True),
    # Relevance: nothing fits but the model calls a tool anyway: FP.
    Row("none-called", None, [tri(base=1, height=1)], "FP", 0.0, 0.0, False),
    # Relevance: a malformed call is a call, not an abstention: FP "malformed call".
    Row(
        "none-malformed",
        None,
        [[ToolCall("calculate_triangle_area", "{base: 1,")]],
        "FP",
        0.0,
        0.0,
        False,
        reasoning_has="malformed",
    ),
    # Several calls: the first is scored; the extra one is reported as spurious.
    Row(
        "tri-extra-call",
        "tri",
        [
            [
                ToolCall("calculate_triangle_area", {"base": 10, "height": 5}),
                ToolCall("find_restaurants", {"location": "x", "cuisine": "thai"}),
            ]
        ],
        "TP",
        1.0,
        1.0,
        True,
        reasoning_has="find_restaurants",
    ),
]


@pytest.fixture(scope="module")
def bfcl_servers() -> Iterator[list[DemoServerHandle]]:
    with run_demo_servers(SPECS) as handles:
        yield handles


async def run_triangle_case(
    api: httpx.AsyncClient,
    servers: list[DemoServerHandle],
    llm: ScriptedLLM,
    marker: str,
    **config: Any,
) -> dict[str, Any]:
    """Register the servers, create the triangle case tagged with `marker`, run it with the scripted LLM
    (as it is scripted now) and return the result of the completed run (the result answers 200 only then)."""
    await register_servers(api, servers)
    case_id = await create_case(
        api,
        query=f"Area of a triangle with base 10 and height 5 {marker}",
        servers=["geometry", "places"],
        expected_server="geometry",
        expected_tool="calculate_triangle_area",
        expected_parameters=TRIANGLE_EXPECTED,
    )
    run = await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={"model_config": openai_config(llm.base_url, **config)},
        headers={"X-Model-API-Key": "sk-test"},
    )
    assert run.status_code == 200, run.text
    result = await api.get(f"/test-runs/{run.json()['id']}/result")
    assert result.status_code == 200, result.text
    body: dict[str, Any] = result.json()
    return body


@pytest.mark.parametrize("row", ROWS, ids=[r.key for r in ROWS])
async def test_verdict_matches_the_readme_rules(
    row: Row,
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    bfcl_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """The pipeline's verdict and parameter scores equal the ones the README's rules predict by hand."""
    await register_servers(api, bfcl_servers)
    marker = f"[{row.key}]"
    query = {
        "tri": f"What is the area of a triangle with base 10 and height 5? {marker}",
        "find": f"Find thai restaurants within 5 miles of Berkeley, CA that are vegan and cheap {marker}",
        None: f"Tell me a joke about penguins {marker}",
    }[row.tool]
    expected = {
        "tri": ("geometry", "calculate_triangle_area", TRIANGLE_EXPECTED),
        "find": ("places", "find_restaurants", SEARCH_EXPECTED),
        None: (None, None, None),
    }[row.tool]
    case_id = await create_case(
        api,
        query=query,
        servers=["geometry", "places"],
        expected_server=expected[0],
        expected_tool=expected[1],
        expected_parameters=expected[2],
        name=row.key,
    )
    llm.script(Rule(match=marker, answers=row.answers))

    run = await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={"model_config": openai_config(llm.base_url)},
        headers={"X-Model-API-Key": "sk-test"},
    )
    assert run.status_code == 200, run.text
    result = await api.get(f"/test-runs/{run.json()['id']}/result")

    assert result.status_code == 200, result.text
    body = result.json()
    assert body["classification"] == row.classification, body["reasoning"]
    assert body["parameter_completeness"] == pytest.approx(row.completeness), body["reasoning"]
    assert body["parameter_correctness"] == pytest.approx(row.correctness), body["reasoning"]
    assert body["parameter_type_conformance"] is row.conformance, body["reasoning"]
    assert sorted(body["hallucinated_parameters"] or []) == row.hallucinated
    if row.reasoning_has:
        assert row.reasoning_has in body["reasoning"]


@pytest.mark.parametrize(
    ("answers", "score", "category"),
    [
        ([tri(base=10, height=5)] * 3, 1.0, "robust"),
        (
            [tri(base=10, height=5), tri(base=10, height=5), find(location="x", cuisine="thai")],
            0.6667,
            "needs_clarity",
        ),
        ([find(location="x", cuisine="thai")] * 3, 1.0, "misleading"),
    ],
    ids=["robust", "needs-clarity", "misleading"],
)
async def test_confidence_is_measured_from_samples(
    answers: list[Any],
    score: float,
    category: str,
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    bfcl_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """samples: 3 draws three answers (n=3); confidence is the first answer's share and sets the category."""
    llm.script(Rule(match="[confidence]", answers=answers))

    result = await run_triangle_case(api, bfcl_servers, llm, "[confidence]", samples=3)

    assert result["confidence_score"] == pytest.approx(score, abs=1e-3)
    assert result["confidence_category"] == category
    chat = [r for r in llm.requests if r.path.endswith("/chat/completions")]
    assert chat[-1].json is not None
    assert chat[-1].json["n"] == 3


async def test_explain_appends_the_models_prose_marked_as_model_written(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    bfcl_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """explain: true asks the same model to rewrite the reasoning; the prose is appended and labelled."""
    llm.script(Rule(match="[explain]", answers=[tri(base="10", height=5)]))
    llm.script(Rule(match="Expected: geometry.calculate_triangle_area", answers=["Send base as a number."]))

    result = await run_triangle_case(api, bfcl_servers, llm, "[explain]", explain=True)

    assert result["classification"] == "TP"
    assert result["reasoning"].startswith("Expected: geometry.calculate_triangle_area")
    assert "Model-written explanation (scripted-model" in result["reasoning"]
    assert result["reasoning"].endswith("Send base as a number.")
    explain_request = [r for r in llm.requests if r.json and "tools" not in r.json][-1]
    assert explain_request.json is not None
    assert "Mismatched parameters" in explain_request.json["messages"][-1]["content"]


async def test_samples_fall_back_to_single_requests_when_n_is_refused(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    bfcl_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """A provider that answers 400 to n=3 still gets its three samples, as three single requests."""
    llm.script(Rule(match="[no-n]", status=400, error_message="n must be 1", times=1))
    llm.script(Rule(match="[no-n]", answers=[tri(base=10, height=5)]))

    result = await run_triangle_case(api, bfcl_servers, llm, "[no-n]", samples=3)

    assert result["run"]["status"] == "completed"
    assert result["confidence_score"] == pytest.approx(1.0)
    chat = [r for r in llm.requests if r.path.endswith("/chat/completions")]
    assert [r.json.get("n") if r.json else None for r in chat] == [3, None, None, None]
