"""A generated suite for batch tests and the batch benchmark: N single-server cases over the demo servers whose
queries name their tool (so the scripted LLM's echo-pick answers right), and rules that make a second model
worse: every 10th case (offset 3) it always gets wrong, every 10th (offset 7) it gets wrong once per 3 repeats,
and every 10th (offset 9) expects no tool at all (both models answer with text)."""

from __future__ import annotations

from typing import Any

import httpx

from shared.demo.catalog import DEMO_SERVERS
from shared.demo.servers import DemoServerHandle
from tests.support.scripted_llm import Rule, ScriptedLLM

GOOD_MODEL = "good-model"
BAD_MODEL = "bad-model"


def suite_cases(count: int) -> list[dict[str, Any]]:
    """`count` test-case bodies; case i's query starts with `Case i:` (the rules match on that)."""
    tools = [(server.name, tool.name) for server in DEMO_SERVERS for tool in server.tools]
    cases = []
    for i in range(count):
        server, tool = tools[i % len(tools)]
        if i % 10 == 9:
            cases.append(
                {
                    "name": f"case {i:03d} no tool",
                    "query": f"Case {i}: just some chit-chat, no tool please",
                    "expected_mcp_server_name": None,
                    "expected_tool_name": None,
                    "available_mcp_servers": [server],
                }
            )
            continue
        cases.append(
            {
                "name": f"case {i:03d} {server}.{tool}",
                "query": f"Case {i}: please call {tool} now",
                "expected_mcp_server_name": server,
                "expected_tool_name": tool,
                "available_mcp_servers": [server],
            }
        )
    return cases


def wrong_tool(server: str, tool: str) -> str:
    names = [t.name for s in DEMO_SERVERS if s.name == server for t in s.tools]
    return next(n for n in names if n != tool and tool not in n and n not in tool)


def script_models(good: ScriptedLLM, bad: ScriptedLLM, cases: list[dict[str, Any]]) -> tuple[int, int]:
    """Script both LLMs; returns (always-wrong cases, flaky cases) of the bad model."""
    chit_chat = Rule(match="chit-chat", answers=["No tool is needed for that."])
    good.script(chit_chat)
    bad.script(chit_chat)
    broken = flaky = 0
    for i, case in enumerate(cases):
        if case["expected_tool_name"] is None:
            continue
        right = case["expected_tool_name"]
        wrong = wrong_tool(case["expected_mcp_server_name"], right)
        if i % 10 == 3:
            bad.script(Rule(match=f"Case {i}:", answers=[[(wrong, {})]]))
            broken += 1
        elif i % 10 == 7:
            bad.script(Rule(match=f"Case {i}:", answers=[[(wrong, {})], [(right, {})], [(right, {})]]))
            flaky += 1
    return broken, flaky


async def register(
    api: httpx.AsyncClient, servers: list[DemoServerHandle], cases: list[dict[str, Any]]
) -> None:
    for handle in servers:
        body = {"name": handle.name, "url": handle.url, "transport": handle.transport}
        response = await api.post("/mcp-servers", json=body)
        assert response.status_code == 201, response.text
    for case in cases:
        response = await api.post("/test-cases", json=case)
        assert response.status_code == 201, response.text


def model_configs(good: ScriptedLLM, bad: ScriptedLLM) -> list[dict[str, Any]]:
    """The good model draws 3 samples per run (so its confidence is measured); the bad one draws 1 (so its
    flaky rule fails exactly one repeat in three)."""
    return [
        {"provider": "scripted", "model": GOOD_MODEL, "base_url": good.base_url, "samples": 3},
        {"provider": "scripted", "model": BAD_MODEL, "base_url": bad.base_url, "samples": 1},
    ]
