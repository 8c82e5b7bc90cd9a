"""The demo MCP servers serve the catalogs exactly, over both transports, and the sample cases fit them."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from shared.demo.cases import DEMO_CASES
from shared.demo.catalog import COLLIDING_TOOL_NAME, DEMO_SERVERS, DemoServerSpec, DemoTool, demo_server
from shared.demo.servers import DemoServerHandle, run_demo_servers

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def demo_handles() -> Iterator[dict[str, DemoServerHandle]]:
    """All bundled demo servers, running for the whole module."""
    with run_demo_servers() as handles:
        yield {handle.name: handle for handle in handles}


async def _with_session(
    handle: DemoServerHandle, tool: str | None = None, args: dict[str, Any] | None = None
) -> Any:
    """Connect over the handle's transport; return the listed tools, or the result of calling `tool`."""
    if handle.transport == "sse":
        async with (
            sse_client(handle.url, timeout=TIMEOUT_S, sse_read_timeout=TIMEOUT_S) as (read, write),
            ClientSession(read, write, read_timeout_seconds=TIMEOUT_S) as session,
        ):
            await session.initialize()
            if tool is None:
                return (await session.list_tools()).tools
            return await session.call_tool(tool, args or {})
    async with (
        httpx2.AsyncClient(timeout=TIMEOUT_S) as http,
        streamable_http_client(handle.url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=TIMEOUT_S) as session,
    ):
        await session.initialize()
        if tool is None:
            return (await session.list_tools()).tools
        return await session.call_tool(tool, args or {})


def _as_catalog(tools: list[types.Tool]) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [(tool.name, tool.description, tool.input_schema) for tool in tools]


@pytest.mark.parametrize("spec", DEMO_SERVERS, ids=[spec.name for spec in DEMO_SERVERS])
async def test_servers_advertise_catalog_exactly(
    demo_handles: dict[str, DemoServerHandle], spec: DemoServerSpec
) -> None:
    """Each server lists exactly its catalog tools, in order, with identical descriptions and JSON schemas."""
    handle = demo_handles[spec.name]
    assert handle.transport == spec.transport
    tools = await _with_session(handle)
    assert _as_catalog(tools) == [(t.name, t.description, t.input_schema) for t in spec.tools]


def test_both_transports_and_urls(demo_handles: dict[str, DemoServerHandle]) -> None:
    """The demo covers both transports, with `/sse` and `/mcp` URLs on distinct loopback ports."""
    transports = {handle.transport for handle in demo_handles.values()}
    assert transports == {"sse", "streamable-http"}
    for handle in demo_handles.values():
        suffix = "/sse" if handle.transport == "sse" else "/mcp"
        assert handle.url.startswith("http://127.0.0.1:")
        assert handle.url.endswith(suffix)
    assert len({handle.url for handle in demo_handles.values()}) == len(demo_handles)


async def test_high_level_client_over_streamable_http(demo_handles: dict[str, DemoServerHandle]) -> None:
    """`mcp.Client(url)` (auto protocol negotiation) lists the same tools as the session-level client."""
    async with Client(demo_handles["github"].url, read_timeout_seconds=TIMEOUT_S) as client:
        result = await client.list_tools()
    assert [tool.name for tool in result.tools] == [tool.name for tool in demo_server("github").tools]


@pytest.mark.parametrize("server", ["todo", "jira"])
async def test_call_tool_returns_canned_text(demo_handles: dict[str, DemoServerHandle], server: str) -> None:
    """Valid arguments get a canned text result over both transports; invalid ones an is_error result."""
    handle = demo_handles[server]
    ok: tuple[str, dict[str, Any]]
    bad: tuple[str, dict[str, Any]]
    if server == "todo":
        ok, bad = ("delete_todo", {"todo_id": 3}), ("delete_todo", {"todo_id": "three"})
    else:
        ok, bad = ("get_issue", {"issue_key": "PROJ-1"}), ("get_issue", {"issue_key": "not a key"})
    result = await _with_session(handle, *ok)
    assert not result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert ok[0] in result.content[0].text
    result = await _with_session(handle, *bad)
    assert result.is_error


def test_catalog_has_one_deliberate_name_collision() -> None:
    """Exactly one tool name (`get_issue`) exists on two servers, github and jira, with different schemas."""
    owners = collections.defaultdict(list)
    for spec in DEMO_SERVERS:
        for tool in spec.tools:
            owners[tool.name].append(spec.name)
    collisions = {name: servers for name, servers in owners.items() if len(servers) > 1}
    assert collisions == {COLLIDING_TOOL_NAME: ["github", "jira"]}
    github, jira = demo_server("github").tool("get_issue"), demo_server("jira").tool("get_issue")
    assert github.input_schema != jira.input_schema


def test_catalog_schemas_are_object_schemas() -> None:
    """Every tool has a description and an object schema whose required keys are declared properties."""
    for spec in DEMO_SERVERS:
        names = [tool.name for tool in spec.tools]
        assert len(set(names)) == len(names), spec.name
        for tool in spec.tools:
            assert tool.description
            schema = tool.input_schema
            assert schema["type"] == "object"
            assert set(schema["required"]) <= set(schema["properties"]), tool.name
    assert [tool.name for tool in demo_server("rag").tools] == [
        "rag_basic",
        "rag_basic_rerank",
        "rag_crag",
        "rag_graphrag",
        "rag_pylate_colbert",
        "rag_iris_global_graphrag",
    ]


def test_cases_reference_existing_servers_tools_and_keys() -> None:
    """Cases name existing servers and tools, and every expected parameter key is in that tool's schema."""
    servers = {spec.name: spec for spec in DEMO_SERVERS}
    names = [case.name for case in DEMO_CASES]
    assert len(set(names)) == len(names)
    assert 30 <= len(DEMO_CASES) <= 45
    for case in DEMO_CASES:
        assert case.available_mcp_servers, case.name
        assert set(case.available_mcp_servers) <= set(servers), case.name
        assert (case.expected_mcp_server_name is None) == (case.expected_tool_name is None), case.name
        if case.expected_mcp_server_name is None:
            assert case.expected_parameters is None, case.name
            continue
        assert case.expected_mcp_server_name in case.available_mcp_servers, case.name
        assert case.expected_tool_name is not None
        tool = servers[case.expected_mcp_server_name].tool(case.expected_tool_name)
        assert set(case.expected_parameters or {}) <= set(tool.input_schema["properties"]), case.name


def test_cases_cover_the_interesting_situations() -> None:
    """The suite has ≥ 5 no-tool cases, two-server cases, both colliding tools, and every matcher operator."""
    assert sum(case.expected_tool_name is None for case in DEMO_CASES) >= 5
    two_server = [c for c in DEMO_CASES if len(c.available_mcp_servers) >= 2 and c.expected_tool_name]
    assert len(two_server) >= 3
    collision_servers = {
        c.expected_mcp_server_name for c in two_server if c.expected_tool_name == "get_issue"
    }
    assert collision_servers == {"github", "jira"}
    operators: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            operators.update(key for key in value if key.startswith("$"))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for case in DEMO_CASES:
        walk(case.expected_parameters)
    assert operators >= {
        "$oneOf",
        "$optional",
        "$any",
        "$absent",
        "$regex",
        "$approx",
        "$tol",
        "$unordered",
        "$exact",
    }
    body = DEMO_CASES[0].as_request_body()
    assert set(body) == {
        "name",
        "query",
        "expected_mcp_server_name",
        "expected_tool_name",
        "expected_parameters",
        "available_mcp_servers",
    }


async def test_ad_hoc_spec_with_fixed_port() -> None:
    """A test-defined spec (a triangle tool) is served with its own schema, also on a requested port."""
    triangle = DemoTool(
        name="triangle_area",
        description="Area of a triangle from its base and height.",
        input_schema={
            "type": "object",
            "properties": {"base": {"type": "number"}, "height": {"type": "number"}},
            "required": ["base", "height"],
        },
    )
    specs = [
        DemoServerSpec(name="geometry", transport="streamable-http", tools=[triangle]),
        DemoServerSpec(name="geometry-sse", transport="sse", tools=[triangle]),
    ]
    with run_demo_servers(specs) as first:
        port = int(first[0].url.rsplit(":", 1)[1].split("/")[0])
    # The port is free again once the context exits, so asking for it explicitly works.
    with run_demo_servers(specs, ports={"geometry": port}) as handles:
        assert handles[0].url == f"http://127.0.0.1:{port}/mcp"
        for handle in handles:
            tools = await _with_session(handle)
            assert _as_catalog(tools) == [(triangle.name, triangle.description, triangle.input_schema)]
            result = await _with_session(handle, "triangle_area", {"base": 3, "height": 4})
            assert not result.is_error


def test_duplicate_server_names_are_rejected() -> None:
    """Two specs with one name cannot be served together (names identify servers)."""
    spec = DemoServerSpec(name="dup", transport="sse", tools=[])
    with pytest.raises(ValueError, match="duplicate"), run_demo_servers([spec, spec]):
        pass


def test_foreground_entry_point_prints_and_stops_on_sigterm() -> None:
    """`python -m shared.demo.servers` prints one `name url transport` line per server and exits 0 on SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "shared.demo.servers", "--port-base", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        # A watchdog, so a server that never prints cannot block readline() forever.
        watchdog = threading.Timer(3 * TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().split() for _ in DEMO_SERVERS]
            assert [line[0] for line in lines] == [spec.name for spec in DEMO_SERVERS]
            assert [line[2] for line in lines] == [spec.transport for spec in DEMO_SERVERS]
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=TIMEOUT_S)
        finally:
            watchdog.cancel()
            watchdog.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
