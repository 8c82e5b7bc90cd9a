"""Issue #3: runs through the API, a real worker, real MCP servers and the scripted LLM are classified
TP / FP / TN / FN exactly as the scoring rules say, and the run's evidence is stored in Postgres."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.catalog import demo_server
from shared.demo.servers import DemoServerHandle
from tests.support.pipeline import create_case, openai_config, register_servers
from tests.support.scripted_llm import ChoiceAnswer, Rule, ScriptedLLM, ToolCall

pytestmark = pytest.mark.integration

API_KEY = "sk-classification-test-key-0123456789"
HEADERS = {"X-Model-API-Key": API_KEY}
ISSUE_ARGS = {"owner": "octo", "repo": "widgets", "issue_number": 42}
ISSUE_QUERY = "Show me GitHub issue 42 in octo/widgets"


@dataclass(frozen=True)
class Scenario:
    id: str
    query: str
    servers: list[str]
    expected: tuple[str, str] | None
    answers: list[ChoiceAnswer]
    classification: str
    selected: tuple[str, str] | None
    extracted: Any = None
    malformed: str | None = None
    expected_parameters: dict[str, Any] | None = None
    result: dict[str, Any] = field(default_factory=dict)


SCENARIOS = [
    Scenario(
        id="TP right tool right server",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        expected_parameters=ISSUE_ARGS,
        answers=[[("github__get_issue", ISSUE_ARGS)]],
        classification="TP",
        selected=("github", "get_issue"),
        extracted=ISSUE_ARGS,
        result={
            "tool_selection_correct": True,
            "parameter_completeness": 1.0,
            "parameter_correctness": 1.0,
            "parameter_type_conformance": True,
            "hallucinated_parameters": [],
        },
    ),
    Scenario(
        id="TP with wrong and invented parameters",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        expected_parameters=ISSUE_ARGS,
        answers=[[("github__get_issue", {**ISSUE_ARGS, "issue_number": 43, "verbose": True})]],
        classification="TP",
        selected=("github", "get_issue"),
        extracted={**ISSUE_ARGS, "issue_number": 43, "verbose": True},
        result={
            "tool_selection_correct": True,
            "parameter_completeness": 1.0,
            "parameter_correctness": round(2 / 3, 4),
            "parameter_type_conformance": False,
            "hallucinated_parameters": ["verbose"],
        },
    ),
    Scenario(
        id="FN wrong tool",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        answers=[[("search_repositories", {"query": "widgets"})]],
        classification="FN",
        selected=("github", "search_repositories"),
        extracted={"query": "widgets"},
        result={"tool_selection_correct": False, "parameter_completeness": 0.0},
    ),
    Scenario(
        id="FN right tool name on the wrong server",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        answers=[[("jira__get_issue", {"issue_key": "WID-42"})]],
        classification="FN",
        selected=("jira", "get_issue"),
        extracted={"issue_key": "WID-42"},
        result={"tool_selection_correct": False},
    ),
    Scenario(
        id="FN no call",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        answers=["I would need to look that issue up, sorry."],
        classification="FN",
        selected=None,
        result={"tool_selection_correct": False},
    ),
    Scenario(
        id="FN un-namespaced colliding name is ambiguous",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        answers=[[("get_issue", ISSUE_ARGS)]],
        classification="FN",
        selected=None,
        malformed="ambiguous tool name 'get_issue'",
    ),
    Scenario(
        id="FN unknown tool name",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        answers=[[("delete_everything", {"confirm": True})]],
        classification="FN",
        selected=None,
        malformed="unknown tool 'delete_everything'",
    ),
    Scenario(
        id="FP call when no tool expected",
        query="What is the capital of France?",
        servers=["github"],
        expected=None,
        answers=[[("search_repositories", {"query": "france"})]],
        classification="FP",
        selected=("github", "search_repositories"),
        extracted={"query": "france"},
        result={"tool_selection_correct": False, "parameter_completeness": 0.0},
    ),
    Scenario(
        id="TN text only when no tool expected",
        query="What is the capital of France?",
        servers=["github"],
        expected=None,
        answers=["Paris."],
        classification="TN",
        selected=None,
        result={
            "tool_selection_correct": True,
            "parameter_completeness": 1.0,
            "parameter_correctness": 1.0,
            "parameter_type_conformance": True,
        },
    ),
    Scenario(
        id="FP malformed call when no tool expected",
        query="What is the capital of France?",
        servers=["github"],
        expected=None,
        answers=[[ToolCall("search_repositories", '{"query": "france"')]],
        classification="FP",
        selected=("github", "search_repositories"),
        malformed="not valid JSON",
        result={"tool_selection_correct": False},
    ),
]


def tool_count(servers: list[str]) -> int:
    return sum(len(demo_server(name).tools) for name in servers)


async def run_scenario(
    api: httpx.AsyncClient, llm: ScriptedLLM, scenario: Scenario, samples: int = 1
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the case, script the LLM, run with ?wait=30; return (run, result) as the API shows them."""
    case_id = await create_case(
        api,
        query=scenario.query,
        servers=scenario.servers,
        expected_server=scenario.expected[0] if scenario.expected else None,
        expected_tool=scenario.expected[1] if scenario.expected else None,
        expected_parameters=scenario.expected_parameters,
    )
    llm.script(Rule(answers=scenario.answers))
    response = await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={"model_config": openai_config(llm.base_url, samples=samples)},
        headers=HEADERS,
    )
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["status"] == "completed", run
    fetched = await api.get(f"/test-runs/{run['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == run
    result = await api.get(f"/test-runs/{run['id']}/result")
    assert result.status_code == 200, result.text
    return run, result.json()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
async def test_run_is_classified_and_stored(
    scenario: Scenario,
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """Each model answer ends in the classification the scoring rules give, in the API and in Postgres."""
    await register_servers(api, demo_servers)

    run, result = await run_scenario(api, llm, scenario)

    assert run["classification"] == scenario.classification
    assert result["classification"] == scenario.classification
    selected = run["selected_tool"]
    if scenario.selected is None:
        assert selected is None
    else:
        assert (selected["mcp_server_name"], selected["name"]) == scenario.selected
    assert run["extracted_parameters"] == scenario.extracted
    for key, value in scenario.result.items():
        assert result[key] == value, key
    assert result["run"]["id"] == run["id"]
    assert run["execution_time_ms"] >= 1
    assert run["model_settings"]["provider"] == "openai"
    assert API_KEY not in json.dumps(run) + json.dumps(result)

    async with clean_db.connect() as conn:
        row = (
            (await conn.execute(text("SELECT * FROM test_runs WHERE id = :id"), {"id": run["id"]}))
            .mappings()
            .one()
        )
        evaluations = (
            (
                await conn.execute(
                    text("SELECT * FROM evaluation_results WHERE test_run_id = :id"), {"id": run["id"]}
                )
            )
            .mappings()
            .all()
        )
        snapshot = (
            (
                await conn.execute(
                    text(
                        "SELECT t.id, t.name, s.name AS server FROM tool_definitions t "
                        "JOIN mcp_servers s ON s.id = t.mcp_server_id WHERE t.test_run_id = :id"
                    ),
                    {"id": run["id"]},
                )
            )
            .mappings()
            .all()
        )
    assert row["status"] == "completed"
    assert row["classification"] == scenario.classification
    assert row["attempt"] == 1
    assert row["error_message"] is None
    assert len(evaluations) == 1
    assert evaluations[0]["classification"] == scenario.classification
    # The snapshot is this run's copy of every tool of every offered server.
    assert len(snapshot) == tool_count(scenario.servers)
    assert {(t["server"], t["name"]) for t in snapshot} == {
        (name, tool.name) for name in scenario.servers for tool in demo_server(name).tools
    }
    if scenario.selected is None:
        assert row["selected_tool_id"] is None
    else:
        pointed = [t for t in snapshot if t["id"] == row["selected_tool_id"]]
        assert len(pointed) == 1, "selected_tool_id must point into this run's snapshot"
        assert (pointed[0]["server"], pointed[0]["name"]) == scenario.selected
    raw = row["llm_response_raw"]
    assert API_KEY not in json.dumps(raw)
    assert raw["provider"] == "openai"
    assert len(raw["choices"]) == 1
    assert len(raw["sample_choices"]) == 1
    if scenario.malformed is not None:
        assert scenario.malformed in raw["sample_choices"][0]["malformed"]
        assert row["extracted_parameters"] is None
    # The colliding name is offered namespaced on both servers; the others keep their own names.
    offered = {t["function"]["name"] for t in llm.requests[0].json["tools"]}
    if {"github", "jira"} <= set(scenario.servers):
        assert {"github__get_issue", "jira__get_issue", "search_repositories", "search_issues"} <= offered
        assert "get_issue" not in offered
        assert raw["function_names"]["jira__get_issue"] == ["jira", "get_issue"]


async def test_samples_are_drawn_with_n_and_measure_confidence(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """samples=3 sends one request with n=3 and the key as a bearer token; agreeing samples are robust."""
    await register_servers(api, demo_servers)

    run, result = await run_scenario(api, llm, SCENARIOS[0], samples=3)

    assert len(llm.requests) == 1
    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.json["n"] == 3
    assert request.json["model"] == "scripted-model"
    assert request.json["messages"][-1] == {"role": "user", "content": ISSUE_QUERY}
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert run["classification"] == "TP"
    assert run["confidence_score"] == 1.0
    assert run["model_settings"]["samples"] == 3
    assert result["confidence_category"] == "robust"
    assert result["confidence_score"] == 1.0
    async with clean_db.connect() as conn:
        raw, confidence, category = (
            await conn.execute(
                text(
                    "SELECT r.llm_response_raw, r.confidence_score, e.confidence_category FROM test_runs r "
                    "JOIN evaluation_results e ON e.test_run_id = r.id WHERE r.id = :id"
                ),
                {"id": run["id"]},
            )
        ).one()
    assert confidence == 1.0
    assert category == "robust"
    assert len(raw["choices"]) == 3
    assert [c["cluster"] for c in raw["sample_choices"]] == [0, 0, 0]
    assert API_KEY not in json.dumps(raw)


@pytest.mark.parametrize(
    ("answers", "classification", "confidence", "category"),
    [
        (
            [
                [("github__get_issue", ISSUE_ARGS)],
                [("github__get_issue", ISSUE_ARGS)],
                [("jira__get_issue", {"issue_key": "WID-42"})],
            ],
            "TP",
            0.6667,
            "needs_clarity",
        ),
        ([[("jira__get_issue", {"issue_key": "WID-42"})]], "FN", 1.0, "misleading"),
    ],
    ids=["disagreeing samples need clarity", "confidently wrong is misleading"],
)
async def test_confidence_category_follows_sample_agreement(
    answers: list[ChoiceAnswer],
    classification: str,
    confidence: float,
    category: str,
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """Confidence is the first sample's share of agreeing samples, and the category follows from it."""
    await register_servers(api, demo_servers)
    scenario = Scenario(
        id="confidence",
        query=ISSUE_QUERY,
        servers=["github", "jira"],
        expected=("github", "get_issue"),
        expected_parameters=ISSUE_ARGS,
        answers=answers,
        classification=classification,
        selected=None,
    )

    run, result = await run_scenario(api, llm, scenario, samples=3)

    assert [r.json["n"] for r in llm.requests] == [3]
    assert run["classification"] == classification
    assert run["confidence_score"] == confidence
    assert result["confidence_category"] == category
