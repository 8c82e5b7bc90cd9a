"""/mcp-servers, /test-cases and /tools over real HTTP, with what the database stored checked directly."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.demo.servers import DemoServerHandle
from shared.embedded import free_port

pytestmark = pytest.mark.integration

PROBLEM_JSON = "application/problem+json"
POLL_SECONDS = 10.0


def assert_problem(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem (title, status, detail) and a client error unless told."""
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.text
    body: dict[str, Any] = response.json()
    assert {"title", "status", "detail"} <= body.keys(), body
    assert body["status"] == response.status_code
    if status is None:
        assert 400 <= response.status_code < 500, response.text
    else:
        assert response.status_code == status, response.text
    return body


def error_fields(body: dict[str, Any]) -> list[str]:
    return [str(e["field"]) for e in body.get("errors", [])]


async def create_server(
    api: httpx.AsyncClient, name: str, url: str | None = None, **extra: Any
) -> dict[str, Any]:
    response = await api.post(
        "/mcp-servers", json={"name": name, "url": url or f"http://127.0.0.1:9/{name}/mcp", **extra}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def wait_for_status(api: httpx.AsyncClient, server_id: str, wanted: str) -> dict[str, Any]:
    """Poll the server until its status is `wanted` (or fail after POLL_SECONDS)."""
    deadline = time.monotonic() + POLL_SECONDS
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = await api.get(f"/mcp-servers/{server_id}")
        assert response.status_code == 200, response.text
        body = response.json()
        if body["status"] == wanted:
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"server never became {wanted!r}; last seen {body}")


async def stored_server(engine: AsyncEngine, server_id: str) -> Any:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                text("SELECT name, url, transport, status, last_error FROM mcp_servers WHERE id = :id"),
                {"id": uuid.UUID(server_id)},
            )
        ).one_or_none()


async def linked_server_names(engine: AsyncEngine, case_id: str) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT s.name FROM test_case_mcp_servers l JOIN mcp_servers s ON s.id = l.mcp_server_id "
                "WHERE l.test_case_id = :id ORDER BY s.name"
            ),
            {"id": uuid.UUID(case_id)},
        )
        return [r[0] for r in rows]


# --- /mcp-servers -------------------------------------------------------------------------------------


async def test_create_server_answers_201_inactive_and_stores_it(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """POST /mcp-servers answers 201 at once with status inactive and the row is stored as sent."""
    response = await api.post(
        "/mcp-servers", json={"name": "aws", "url": "http://127.0.0.1:9/aws/mcp", "transport": "sse"}
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "inactive"
    assert (body["name"], body["url"], body["transport"]) == ("aws", "http://127.0.0.1:9/aws/mcp", "sse")
    row = await stored_server(clean_db, body["id"])
    assert (row.name, row.url, row.transport) == ("aws", "http://127.0.0.1:9/aws/mcp", "sse")


async def test_transport_alias_streamable_http_is_stored_hyphenated(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """transport "streamable_http" is accepted and stored as "streamable-http"; the default is the same."""
    aliased = await create_server(api, "gh", transport="streamable_http")
    defaulted = await create_server(api, "jira")

    assert aliased["transport"] == "streamable-http"
    assert defaulted["transport"] == "streamable-http"
    assert (await stored_server(clean_db, aliased["id"])).transport == "streamable-http"


async def test_list_get_patch_delete_server(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """A server can be listed, read, renamed (status back to inactive) and deleted (then 404)."""
    server = await create_server(api, "aws")
    # 'failed' is also what a worker's connectivity check of this closed port writes, so a check racing
    # this test cannot change the state it reads.
    async with clean_db.begin() as conn:
        await conn.execute(text("UPDATE mcp_servers SET status = 'failed' WHERE name = 'aws'"))

    listed = await api.get("/mcp-servers")
    got = await api.get(f"/mcp-servers/{server['id']}")
    patched = await api.patch(
        f"/mcp-servers/{server['id']}", json={"name": "aws2", "url": "http://127.0.0.1:9/aws2/mcp"}
    )
    stored = await stored_server(clean_db, server["id"])
    deleted = await api.delete(f"/mcp-servers/{server['id']}")
    after = await api.get(f"/mcp-servers/{server['id']}")

    assert listed.status_code == 200
    assert [s["id"] for s in listed.json()["items"]] == [server["id"]]
    assert got.status_code == 200
    assert got.json()["status"] == "failed"
    assert patched.status_code == 200, patched.text
    assert (patched.json()["name"], patched.json()["status"]) == ("aws2", "inactive")
    assert (stored.name, stored.url) == ("aws2", "http://127.0.0.1:9/aws2/mcp")
    assert deleted.status_code == 204
    assert_problem(after, 404)
    assert await stored_server(clean_db, server["id"]) is None


async def test_duplicate_name_and_url_answer_409_naming_which(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """A duplicate name or url is a 409 whose detail says which one clashed; nothing extra is stored."""
    await create_server(api, "aws", "http://127.0.0.1:9/aws/mcp")

    same_name = await api.post("/mcp-servers", json={"name": "aws", "url": "http://127.0.0.1:9/other/mcp"})
    same_url = await api.post("/mcp-servers", json={"name": "other", "url": "http://127.0.0.1:9/aws/mcp"})

    assert "named 'aws'" in assert_problem(same_name, 409)["detail"]
    assert "url 'http://127.0.0.1:9/aws/mcp'" in assert_problem(same_url, 409)["detail"]
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM mcp_servers")) == 1


async def test_patch_to_an_existing_name_answers_409(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """Renaming a server to another server's name is a 409 and leaves both unchanged."""
    await create_server(api, "aws")
    github = await create_server(api, "github")

    response = await api.patch(f"/mcp-servers/{github['id']}", json={"name": "aws"})

    assert "named 'aws'" in assert_problem(response, 409)["detail"]
    assert (await stored_server(clean_db, github["id"])).name == "github"


async def test_check_marks_a_demo_server_active(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine, demo_servers: list[DemoServerHandle]
) -> None:
    """POST /mcp-servers/{id}/check answers 202 and a worker then marks a reachable server active."""
    handle = demo_servers[0]
    server = await create_server(api, handle.name, handle.url, transport=handle.transport)

    response = await api.post(f"/mcp-servers/{server['id']}/check")

    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"
    body = await wait_for_status(api, server["id"], "active")
    assert body["last_error"] is None
    assert body["last_connected_at"] is not None
    assert (await stored_server(clean_db, server["id"])).status == "active"


async def test_check_marks_a_closed_port_failed_with_the_error(
    api: httpx.AsyncClient, worker: None, clean_db: AsyncEngine
) -> None:
    """A server on a closed port ends up failed, with last_error saying why."""
    server = await create_server(api, "nowhere", f"http://127.0.0.1:{free_port()}/mcp")

    response = await api.post(f"/mcp-servers/{server['id']}/check")

    assert response.status_code == 202, response.text
    body = await wait_for_status(api, server["id"], "failed")
    assert body["last_error"]
    assert body["last_checked_at"] is not None
    assert (await stored_server(clean_db, server["id"])).last_error == body["last_error"]


async def test_check_of_unknown_server_is_404(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """Checking a server that does not exist is a 404 problem."""
    response = await api.post(f"/mcp-servers/{uuid.uuid4()}/check")

    assert_problem(response, 404)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(
            {
                "mcpServers": {
                    "aws": {"url": "http://127.0.0.1:9/aws/mcp"},
                    "events": {"url": "http://127.0.0.1:9/events/sse"},
                    "local": {"command": "npx", "args": ["-y", "some-mcp"]},
                }
            },
            id="claude-desktop",
        ),
        pytest.param(
            {
                "servers": {
                    "aws": {"type": "http", "url": "http://127.0.0.1:9/aws/mcp"},
                    "events": {"type": "sse", "url": "http://127.0.0.1:9/events/sse"},
                    "local": {"type": "stdio", "command": "uvx", "args": ["some-mcp"]},
                }
            },
            id="vs-code",
        ),
    ],
)
async def test_import_creates_url_servers_skips_commands_and_reports_existing(
    api: httpx.AsyncClient, clean_db: AsyncEngine, document: dict[str, Any]
) -> None:
    """Importing an mcp.json creates url servers, skips command ones with a reason, and a re-import reports them existing."""
    first = await api.post("/mcp-servers/import", json=document)
    second = await api.post("/mcp-servers/import", json=document)

    assert first.status_code == 200, first.text
    created = {s["name"]: s for s in first.json()["created"]}
    assert set(created) == {"aws", "events"}
    assert created["aws"]["transport"] == "streamable-http"
    assert created["events"]["transport"] == "sse"
    assert [s["name"] for s in first.json()["skipped"]] == ["local"]
    assert first.json()["skipped"][0]["reason"]
    assert second.status_code == 200, second.text
    assert second.json()["created"] == []
    assert sorted(second.json()["existing"]) == ["aws", "events"]
    async with clean_db.connect() as conn:
        rows = (await conn.execute(text("SELECT name, transport FROM mcp_servers ORDER BY name"))).all()
    assert [tuple(r) for r in rows] == [("aws", "streamable-http"), ("events", "sse")]


async def test_import_of_a_document_without_servers_is_422(
    api: httpx.AsyncClient, clean_db: AsyncEngine
) -> None:
    """An import body with neither mcpServers nor servers is a 422 naming mcpServers."""
    response = await api.post("/mcp-servers/import", json={"something": {}})

    assert "mcpServers" in error_fields(assert_problem(response, 422))


# --- /test-cases --------------------------------------------------------------------------------------


async def test_create_case_links_available_servers(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """A test case is stored with its expectation and one link row per available server."""
    await create_server(api, "aws")
    await create_server(api, "github")

    response = await api.post(
        "/test-cases",
        json={
            "name": "buckets",
            "query": "List the S3 buckets",
            "available_mcp_servers": ["aws", "github"],
            "expected_mcp_server_name": "aws",
            "expected_tool_name": "list_s3_buckets",
            "expected_parameters": {"region": {"$any": True}},
        },
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert body["available_mcp_servers"] == ["aws", "github"]
    assert await linked_server_names(clean_db, body["id"]) == ["aws", "github"]
    async with clean_db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT expected_mcp_server_name, expected_tool_name, expected_parameters "
                    "FROM test_cases WHERE id = :id"
                ),
                {"id": uuid.UUID(body["id"])},
            )
        ).one()
    assert tuple(row) == ("aws", "list_s3_buckets", {"region": {"$any": True}})


async def test_case_expecting_no_tool_is_allowed(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """A case with both expected names null (no tool expected) is created and stored with NULLs."""
    await create_server(api, "aws")

    response = await api.post(
        "/test-cases", json={"name": "chit-chat", "query": "Hello there", "available_mcp_servers": ["aws"]}
    )

    assert response.status_code == 201, response.text
    assert (response.json()["expected_mcp_server_name"], response.json()["expected_tool_name"]) == (
        None,
        None,
    )
    async with clean_db.connect() as conn:
        row = (
            await conn.execute(text("SELECT expected_mcp_server_name, expected_tool_name FROM test_cases"))
        ).one()
    assert tuple(row) == (None, None)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param(
            {"available_mcp_servers": ["aws", "nope"]}, "available_mcp_servers[1]", id="unknown-server"
        ),
        pytest.param(
            {"expected_mcp_server_name": "github"}, "expected_mcp_server_name", id="expected-not-offered"
        ),
        pytest.param({"expected_tool_name": None}, "expected_tool_name", id="tool-missing"),
        pytest.param(
            {"expected_mcp_server_name": None, "expected_parameters": None},
            "expected_mcp_server_name",
            id="server-missing",
        ),
        pytest.param(
            {"expected_parameters": {"region": {"$bogus": 1}}},
            "expected_parameters.region",
            id="unknown-matcher",
        ),
        pytest.param(
            {"expected_parameters": {"$region": "x"}}, "expected_parameters.$region", id="dollar-param"
        ),
    ],
)
async def test_invalid_case_is_422_naming_the_field(
    api: httpx.AsyncClient, clean_db: AsyncEngine, changes: dict[str, Any], field: str
) -> None:
    """An invalid expectation or server list is a 422 whose errors name the offending field; nothing is stored."""
    await create_server(api, "aws")
    await create_server(api, "github")
    body = {
        "name": "buckets",
        "query": "List the S3 buckets",
        "available_mcp_servers": ["aws"],
        "expected_mcp_server_name": "aws",
        "expected_tool_name": "list_s3_buckets",
        **changes,
    }

    response = await api.post("/test-cases", json=body)

    fields = error_fields(assert_problem(response, 422))
    assert any(f.startswith(field) for f in fields), fields
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM test_cases")) == 0


async def test_patch_case_keeps_links_unless_changed(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """PATCH without available_mcp_servers keeps the links; with it, replaces them."""
    await create_server(api, "aws")
    await create_server(api, "github")
    created = await api.post(
        "/test-cases",
        json={"name": "buckets", "query": "List the S3 buckets", "available_mcp_servers": ["aws", "github"]},
    )
    case_id = created.json()["id"]

    renamed = await api.patch(f"/test-cases/{case_id}", json={"name": "buckets v2"})
    links_after_rename = await linked_server_names(clean_db, case_id)
    relinked = await api.patch(
        f"/test-cases/{case_id}",
        json={
            "available_mcp_servers": ["github"],
            "expected_mcp_server_name": "github",
            "expected_tool_name": "list_repos",
        },
    )
    links_after_relink = await linked_server_names(clean_db, case_id)
    refused = await api.patch(f"/test-cases/{case_id}", json={"available_mcp_servers": ["aws"]})

    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "buckets v2"
    assert links_after_rename == ["aws", "github"]
    assert relinked.status_code == 200, relinked.text
    assert relinked.json()["available_mcp_servers"] == ["github"]
    assert links_after_relink == ["github"]
    assert "expected_mcp_server_name" in error_fields(assert_problem(refused, 422))
    assert await linked_server_names(clean_db, case_id) == ["github"]


async def test_case_get_list_delete(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """A case can be read and listed; deleting it answers 204, then 404, and removes its links."""
    await create_server(api, "aws")
    created = await api.post(
        "/test-cases", json={"name": "c", "query": "q", "available_mcp_servers": ["aws"]}
    )
    case_id = created.json()["id"]

    got = await api.get(f"/test-cases/{case_id}")
    listed = await api.get("/test-cases", params={"name": "c"})
    deleted = await api.delete(f"/test-cases/{case_id}")
    after = await api.get(f"/test-cases/{case_id}")

    assert got.status_code == 200
    assert got.json()["query"] == "q"
    assert listed.json()["total"] == 1
    assert deleted.status_code == 204
    assert_problem(after, 404)
    assert await linked_server_names(clean_db, case_id) == []


async def test_deleting_a_server_removes_it_from_cases(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """Deleting a server unlinks it from the cases offering it (the cases stay)."""
    await create_server(api, "aws")
    github = await create_server(api, "github")
    created = await api.post(
        "/test-cases", json={"name": "c", "query": "q", "available_mcp_servers": ["aws", "github"]}
    )

    deleted = await api.delete(f"/mcp-servers/{github['id']}")

    assert deleted.status_code == 204
    case = await api.get(f"/test-cases/{created.json()['id']}")
    assert case.json()["available_mcp_servers"] == ["aws"]


# --- /tools -------------------------------------------------------------------------------------------


async def make_run(api: httpx.AsyncClient, engine: AsyncEngine) -> tuple[str, str]:
    """A server and a (pending) run of a case offering it, inserted directly: (server_id, run_id)."""
    server = await create_server(api, "aws")
    case = await api.post("/test-cases", json={"name": "c", "query": "q", "available_mcp_servers": ["aws"]})
    async with engine.begin() as conn:
        run_id = await conn.scalar(
            text("INSERT INTO test_runs (test_case_id) VALUES (:id) RETURNING id"),
            {"id": uuid.UUID(case.json()["id"])},
        )
    return server["id"], str(run_id)


def tool_body(server_id: str, run_id: str, name: str = "list_s3_buckets") -> dict[str, Any]:
    return {
        "name": name,
        "description": "List the buckets",
        "input_schema": {"type": "object", "properties": {"region": {"type": "string"}}},
        "mcp_server_id": server_id,
        "test_run_id": run_id,
    }


async def test_tools_create_list_filter_get_delete(api: httpx.AsyncClient, clean_db: AsyncEngine) -> None:
    """Tool snapshots can be created for a run, listed (filtered by run), read and deleted."""
    server_id, run_id = await make_run(api, clean_db)
    async with clean_db.begin() as conn:
        other_run = await conn.scalar(
            text(
                "INSERT INTO test_runs (test_case_id) SELECT test_case_id FROM test_runs LIMIT 1 RETURNING id"
            )
        )

    first = await api.post("/tools", json=tool_body(server_id, run_id))
    second = await api.post("/tools", json=tool_body(server_id, str(other_run), "get_object"))
    filtered = await api.get("/tools", params={"test_run_id": run_id})
    everything = await api.get("/tools")
    got = await api.get(f"/tools/{first.json()['id']}")
    deleted = await api.delete(f"/tools/{first.json()['id']}")
    after = await api.get(f"/tools/{first.json()['id']}")

    assert (first.status_code, second.status_code) == (201, 201), first.text + second.text
    assert [t["name"] for t in filtered.json()["items"]] == ["list_s3_buckets"]
    assert filtered.json()["total"] == 1
    assert everything.json()["total"] == 2
    assert got.status_code == 200
    assert got.json()["input_schema"]["properties"]["region"] == {"type": "string"}
    assert deleted.status_code == 204
    assert_problem(after, 404)
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM tool_definitions")) == 1


@pytest.mark.parametrize("unknown", ["mcp_server_id", "test_run_id"])
async def test_tool_with_unknown_server_or_run_is_422(
    api: httpx.AsyncClient, clean_db: AsyncEngine, unknown: str
) -> None:
    """A tool snapshot pointing at a server or run that does not exist is a 422 naming that field."""
    server_id, run_id = await make_run(api, clean_db)
    body = {**tool_body(server_id, run_id), unknown: str(uuid.uuid4())}

    response = await api.post("/tools", json=body)

    assert error_fields(assert_problem(response, 422)) == [unknown]


# --- pagination ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mcp-servers", "/test-cases", "/tools"])
async def test_pagination_envelope(api: httpx.AsyncClient, clean_db: AsyncEngine, path: str) -> None:
    """Lists answer {items, total, limit, offset}, honour limit and offset, and count the unpaged rows."""
    server_id, run_id = await make_run(api, clean_db)  # one server (aws) and one case (c)
    for name in ("a", "b"):
        await create_server(api, name)
        await api.post("/test-cases", json={"name": name, "query": "q", "available_mcp_servers": ["aws"]})
        await api.post("/tools", json=tool_body(server_id, run_id, f"tool_{name}"))
    await api.post("/tools", json=tool_body(server_id, run_id, "tool_c"))

    first = await api.get(path, params={"limit": 2, "offset": 0})
    rest = await api.get(path, params={"limit": 2, "offset": 2})
    beyond = await api.get(path, params={"offset": 10})

    assert first.status_code == 200, first.text
    body = first.json()
    assert set(body) == {"items", "total", "limit", "offset"}
    assert (body["total"], body["limit"], body["offset"], len(body["items"])) == (3, 2, 0, 2)
    assert (rest.json()["total"], rest.json()["offset"], len(rest.json()["items"])) == (3, 2, 1)
    ids = [i["id"] for i in body["items"] + rest.json()["items"]]
    assert len(set(ids)) == 3
    assert (beyond.json()["items"], beyond.json()["total"], beyond.json()["limit"]) == ([], 3, 50)


@pytest.mark.parametrize("path", ["/mcp-servers", "/test-cases", "/tools"])
@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"offset": -1}, {"limit": "x"}])
async def test_pagination_bounds_are_client_errors(
    api: httpx.AsyncClient, clean_db: AsyncEngine, path: str, params: dict[str, Any]
) -> None:
    """limit outside 1..100 (or not a number) and a negative offset are 4xx problems naming the parameter."""
    response = await api.get(path, params=params)

    body = assert_problem(response)
    assert next(iter(params)) in body["detail"]


# --- bad input ----------------------------------------------------------------------------------------

GOOD_SERVER = {"name": "aws", "url": "http://127.0.0.1:9/aws/mcp"}
GOOD_CASE = {"name": "c", "query": "q", "available_mcp_servers": ["aws"]}

BAD_INPUTS: list[Any] = [
    pytest.param("/mcp-servers", {**GOOD_SERVER, "name": ""}, "name", id="server-empty-name"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "name": "   "}, "name", id="server-blank-name"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "name": "a\x00b"}, "name", id="server-nul-name"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "name": 5}, "name", id="server-name-int"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "name": "n" * 201}, "name", id="server-name-long"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "url": ""}, "url", id="server-empty-url"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "url": "ftp://127.0.0.1/x"}, "url", id="server-ftp-url"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "url": "javascript:alert(1)"}, "url", id="server-js-url"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "url": "http://a b/"}, "url", id="server-url-space"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "transport": "stdio"}, "transport", id="server-transport"),
    pytest.param("/mcp-servers", {**GOOD_SERVER, "status": "active"}, "status", id="server-unknown-field"),
    pytest.param("/mcp-servers", {"url": "http://127.0.0.1:9/x"}, "name", id="server-missing-name"),
    pytest.param("/mcp-servers", ["aws"], "", id="server-body-array"),
    pytest.param("/test-cases", {**GOOD_CASE, "name": ""}, "name", id="case-empty-name"),
    pytest.param("/test-cases", {**GOOD_CASE, "name": " \t "}, "name", id="case-blank-name"),
    pytest.param("/test-cases", {**GOOD_CASE, "query": ""}, "query", id="case-empty-query"),
    pytest.param("/test-cases", {**GOOD_CASE, "query": "q" * 8001}, "query", id="case-query-8001"),
    pytest.param("/test-cases", {**GOOD_CASE, "query": "a\x00b"}, "query", id="case-nul-query"),
    pytest.param("/test-cases", {**GOOD_CASE, "name": "a\x00b"}, "name", id="case-nul-name"),
    pytest.param(
        "/test-cases",
        {
            **GOOD_CASE,
            "expected_mcp_server_name": "aws",
            "expected_tool_name": "t",
            "expected_parameters": {"k": "a\x00"},
        },
        "expected_parameters",
        id="case-nul-parameters",
    ),
    pytest.param(
        "/test-cases",
        {
            **GOOD_CASE,
            "expected_mcp_server_name": "aws",
            "expected_tool_name": "t",
            "expected_parameters": {"k\x00": 1},
        },
        "expected_parameters",
        id="case-nul-parameter-key",
    ),
    pytest.param(
        "/test-cases",
        {
            **GOOD_CASE,
            "expected_mcp_server_name": "aws",
            "expected_tool_name": "t",
            "expected_parameters": [1],
        },
        "expected_parameters",
        id="case-parameters-array",
    ),
    pytest.param(
        "/test-cases",
        {**GOOD_CASE, "available_mcp_servers": "x"},
        "available_mcp_servers",
        id="case-servers-str",
    ),
    pytest.param(
        "/test-cases",
        {**GOOD_CASE, "available_mcp_servers": []},
        "available_mcp_servers",
        id="case-no-servers",
    ),
    pytest.param(
        "/test-cases",
        {**GOOD_CASE, "available_mcp_servers": [""]},
        "available_mcp_servers",
        id="case-server-empty",
    ),
    pytest.param("/test-cases", {**GOOD_CASE, "model": "gpt"}, "model", id="case-unknown-field"),
    pytest.param(
        "/test-cases", {"name": "c", "query": "q"}, "available_mcp_servers", id="case-missing-servers"
    ),
    pytest.param("/tools", {"name": "t"}, "description", id="tool-missing-fields"),
    pytest.param(
        "/tools",
        {"name": "t", "description": "d", "input_schema": {}, "mcp_server_id": "x", "test_run_id": "y"},
        "mcp_server_id",
        id="tool-bad-uuid",
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), BAD_INPUTS)
async def test_bad_input_is_a_4xx_problem_naming_the_field(
    api: httpx.AsyncClient, clean_db: AsyncEngine, path: str, body: Any, field: str
) -> None:
    """Each bad body is refused with a 4xx problem+json (never a 500) whose detail names the field."""
    await create_server(api, "aws")

    response = await api.post(path, json=body)

    problem = assert_problem(response)
    assert field in problem["detail"], problem
    if response.status_code == 422:
        assert problem["errors"], problem
        assert all("field" in e and "reason" in e for e in problem["errors"])


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"name": "aws",', b"not json", b'{"name": "a"}}', b"\xff\xfe"],
    ids=["open-brace", "truncated", "text", "trailing", "not-utf8"],
)
@pytest.mark.parametrize("path", ["/mcp-servers", "/test-cases", "/tools", "/mcp-servers/import"])
async def test_malformed_json_is_400(
    api: httpx.AsyncClient, clean_db: AsyncEngine, raw: bytes, path: str
) -> None:
    """A body that is not JSON is a 400 problem, never a 500."""
    response = await api.post(path, content=raw, headers={"content-type": "application/json"})

    assert_problem(response, 400)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/mcp-servers/not-a-uuid"),
        ("PATCH", "/mcp-servers/123"),
        ("DELETE", "/mcp-servers/zzz"),
        ("POST", "/mcp-servers/zzz/check"),
        ("GET", "/test-cases/not-a-uuid"),
        ("DELETE", "/test-cases/1"),
        ("GET", "/tools/not-a-uuid"),
        ("DELETE", "/tools/x"),
    ],
)
async def test_invalid_uuid_in_path_is_404_or_400(
    api: httpx.AsyncClient, clean_db: AsyncEngine, method: str, path: str
) -> None:
    """A path id that is not a UUID is a 404 or 400 problem, never a 500."""
    response = await api.request(method, path, json={} if method == "PATCH" else None)

    assert_problem(response)
    assert response.status_code in (400, 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/mcp-servers/{id}"),
        ("PATCH", "/mcp-servers/{id}"),
        ("DELETE", "/mcp-servers/{id}"),
        ("GET", "/test-cases/{id}"),
        ("PATCH", "/test-cases/{id}"),
        ("DELETE", "/test-cases/{id}"),
        ("GET", "/tools/{id}"),
        ("DELETE", "/tools/{id}"),
    ],
)
async def test_unknown_id_is_404(
    api: httpx.AsyncClient, clean_db: AsyncEngine, method: str, path: str
) -> None:
    """A well-formed id that names nothing is a 404 problem."""
    response = await api.request(method, path.format(id=uuid.uuid4()), json={} if method == "PATCH" else None)

    assert "no " in assert_problem(response, 404)["detail"]


@pytest.mark.parametrize("path", ["/mcp-servers", "/test-cases", "/mcp-servers/import"])
async def test_body_over_the_limit_is_413(api: httpx.AsyncClient, clean_db: AsyncEngine, path: str) -> None:
    """A body larger than max_body_bytes (256 KiB in the tests) is a 413 problem and nothing is stored."""
    body = json.dumps({"name": "big", "url": "http://127.0.0.1:9/x", "padding": "x" * 300_000})

    response = await api.post(path, content=body, headers={"content-type": "application/json"})

    assert_problem(response, 413)
    async with clean_db.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM mcp_servers")) == 0


# --- OpenAPI ------------------------------------------------------------------------------------------


async def test_openapi_lists_every_path(api: httpx.AsyncClient) -> None:
    """GET /schema/openapi.json documents every resource path."""
    response = await api.get("/schema/openapi.json")

    assert response.status_code == 200
    paths = set(response.json()["paths"])
    expected = {
        "/health/live",
        "/health/ready",
        "/mcp-servers",
        "/mcp-servers/{server_id}",
        "/mcp-servers/{server_id}/check",
        "/mcp-servers/import",
        "/test-cases",
        "/test-cases/{case_id}",
        "/tools",
        "/tools/{tool_id}",
    }
    assert expected <= paths, expected - paths


async def test_schema_ui_answers_html(api: httpx.AsyncClient) -> None:
    """GET /schema answers an HTML page (the interactive API reference)."""
    response = await api.get("/schema")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "<html" in response.text.lower()
