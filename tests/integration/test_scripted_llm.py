"""The scripted OpenAI-compatible server behaves as scripted when driven by the real `openai` SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionToolParam

from tests.support.scripted_llm import Rule, ScriptedLLM, ToolCall, hash_embedding

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 10.0


def _tool(name: str) -> ChatCompletionToolParam:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    }


TOOLS = [_tool("list_todos"), _tool("create_todo"), _tool("get_issue")]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLM]:
    """One scripted LLM for the module (each test resets it)."""
    with ScriptedLLM() as llm:
        yield llm


@pytest.fixture
def llm(server: ScriptedLLM) -> ScriptedLLM:
    """The module's scripted LLM with no rules and no recorded requests."""
    server.reset()
    return server


@pytest.fixture
async def client(llm: ScriptedLLM) -> AsyncIterator[AsyncOpenAI]:
    """An `AsyncOpenAI` client on the scripted LLM, with no retries and a short timeout."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key="k", max_retries=0, timeout=TIMEOUT_S) as c:
        yield c


async def _ask(client: AsyncOpenAI, text: str, **kwargs: Any) -> Any:
    return await client.chat.completions.create(
        model="scripted-model", messages=[{"role": "user", "content": text}], tools=TOOLS, **kwargs
    )


def _calls(choice: Any) -> list[tuple[str, str]]:
    calls = choice.message.tool_calls or []
    assert all(isinstance(call, ChatCompletionMessageFunctionToolCall) for call in calls)
    return [(call.function.name, call.function.arguments) for call in calls]


async def test_scripted_tool_calls_and_recorded_request(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """A matching rule answers its tool calls as JSON argument strings; the request and its key are recorded."""
    llm.script(
        Rule(match="GROCERIES", answers=[[("create_todo", {"title": "Buy groceries", "priority": 2})]])
    )
    response = await _ask(client, "please add buy groceries to my list")
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    [(name, arguments)] = _calls(choice)
    assert name == "create_todo"
    assert json.loads(arguments) == {"title": "Buy groceries", "priority": 2}
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    [request] = llm.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer k"
    assert request.json["tools"][0]["function"]["name"] == "list_todos"


async def test_n_choices_cycle_through_answers(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """With n=3 each choice takes the next scripted answer, cycling; the cycle continues across requests."""
    llm.script(
        Rule(answers=[[ToolCall("list_todos", {"x": 1})], [("get_issue", {"x": 2})], "no tool needed"])
    )
    response = await _ask(client, "anything", n=3)
    assert len(response.choices) == 3
    assert _calls(response.choices[0]) == [("list_todos", '{"x":1}')]
    assert _calls(response.choices[1]) == [("get_issue", '{"x":2}')]
    assert response.choices[2].message.content == "no tool needed"
    assert response.choices[2].message.tool_calls is None
    again = await _ask(client, "anything")
    assert _calls(again.choices[0]) == [("list_todos", '{"x":1}')]


async def test_text_only_answer(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """A text answer has content, no tool calls and finish_reason stop."""
    llm.script(Rule(match="hello", answers=["Hello! How can I help?"]))
    response = await _ask(client, "Hello there")
    assert response.choices[0].message.content == "Hello! How can I help?"
    assert response.choices[0].message.tool_calls is None
    assert response.choices[0].finish_reason == "stop"


async def test_malformed_arguments_and_unknown_tool(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """String arguments are sent verbatim (not JSON), and a tool name that was never offered is returned as is."""
    llm.script(Rule(match="broken", answers=[[("create_todo", '{"title": "unterminated')]]))
    llm.script(Rule(match="unknown", answers=[[("delete_everything", {})]]))
    [(name, arguments)] = _calls((await _ask(client, "broken args")).choices[0])
    assert name == "create_todo"
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    [(name, _)] = _calls((await _ask(client, "unknown tool")).choices[0])
    assert name == "delete_everything"


async def test_echo_pick_default(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """Unscripted, the offered tool named in the query is called with {}; otherwise the first offered tool."""
    assert _calls((await _ask(client, "call get_issue please")).choices[0]) == [("get_issue", "{}")]
    assert _calls((await _ask(client, "whatever")).choices[0]) == [("list_todos", "{}")]
    plain = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content


async def test_429_then_success_with_retries(llm: ScriptedLLM) -> None:
    """Two 429s with Retry-After are retried by the SDK (max_retries=2) and the third request succeeds."""
    llm.script(Rule(status=429, retry_after=0.01, times=2))
    llm.script(Rule(answers=[[("get_issue", {"x": 7})]]))
    async with AsyncOpenAI(base_url=llm.base_url, api_key="k", max_retries=2, timeout=TIMEOUT_S) as retrying:
        response = await _ask(retrying, "get the issue")
    assert _calls(response.choices[0]) == [("get_issue", '{"x":7}')]
    assert len(llm.requests) == 3
    assert llm.rule_uses() == [2, 1]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
async def test_error_statuses(
    llm: ScriptedLLM, client: AsyncOpenAI, status: int, error: type[Exception]
) -> None:
    """A scripted status surfaces as the SDK's matching exception; the rule is spent after `times` requests."""
    llm.script(Rule(status=status, error_message="scripted failure", times=1))
    with pytest.raises(error, match="scripted failure"):
        await _ask(client, "fail")
    assert _calls((await _ask(client, "list_todos")).choices[0]) == [("list_todos", "{}")]


async def test_api_key_enforced() -> None:
    """With `api_key` set, a request carrying another key gets 401 and the right key succeeds."""
    with ScriptedLLM(api_key="right") as llm:
        async with AsyncOpenAI(
            base_url=llm.base_url, api_key="wrong", max_retries=0, timeout=TIMEOUT_S
        ) as bad:
            with pytest.raises(openai.AuthenticationError):
                await bad.models.list()
        async with AsyncOpenAI(
            base_url=llm.base_url, api_key="right", max_retries=0, timeout=TIMEOUT_S
        ) as good:
            assert [model.id async for model in good.models.list()] == ["scripted-model"]


async def test_delay_then_answer(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """A delay rule answers (the default echo-pick) after at least the scripted delay."""
    llm.script(Rule(match="slow", delay_ms=150))
    started = time.perf_counter()
    response = await _ask(client, "slow list_todos")
    assert time.perf_counter() - started >= 0.15
    assert _calls(response.choices[0]) == [("list_todos", "{}")]


@pytest.mark.parametrize("rule", [Rule(delay_ms=5_000), Rule(hang=True)], ids=["delay", "hang"])
async def test_client_timeout(llm: ScriptedLLM, client: AsyncOpenAI, rule: Rule) -> None:
    """A delay or hang longer than the client timeout raises `openai.APITimeoutError` quickly."""
    llm.script(rule)
    started = time.perf_counter()
    with pytest.raises(openai.APITimeoutError):
        await _ask(client, "anything", timeout=0.2)
    assert time.perf_counter() - started < 2.0


async def test_embeddings_float_and_base64(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """Embeddings are deterministic hash vectors (or scripted ones), in both float and base64 encodings."""
    llm.script_embedding("pinned", [1.0, 0.0, 0.0, 0.0])
    texts = ["list my todos", "list all todos", "pinned"]
    as_base64 = await client.embeddings.create(model="e", input=texts)  # the SDK asks for base64 by default
    as_float = await client.embeddings.create(model="e", input=texts, encoding_format="float")
    assert llm.requests[0].json["encoding_format"] == "base64"
    for response in (as_base64, as_float):
        vectors = [item.embedding for item in response.data]
        assert vectors[0] == pytest.approx(hash_embedding(texts[0]), abs=1e-6)
        assert vectors[2] == [1.0, 0.0, 0.0, 0.0]
        assert len(vectors[0]) == 64
    first, second = as_float.data[0].embedding, as_float.data[1].embedding
    assert sum(a * b for a, b in zip(first, second, strict=True)) > 0.3
    sized = await client.embeddings.create(model="e", input="x", dimensions=8, encoding_format="float")
    assert len(sized.data[0].embedding) == 8


async def test_embedding_error_rule(llm: ScriptedLLM, client: AsyncOpenAI) -> None:
    """Rules for the embeddings endpoint apply to embeddings only."""
    llm.script(Rule(endpoint="embeddings", status=500, times=1))
    with pytest.raises(openai.InternalServerError):
        await client.embeddings.create(model="e", input="x")
    assert (await client.embeddings.create(model="e", input="x")).data


async def test_models(client: AsyncOpenAI) -> None:
    """GET /v1/models lists the configured model names."""
    assert [model.id async for model in client.models.list()] == ["scripted-model"]


def test_foreground_entry_point() -> None:
    """`python -m tests.support.scripted_llm` prints its base URL and exits 0 on SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--delay-ms", "0"],
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
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:")
            assert base_url.endswith("/v1")
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=TIMEOUT_S)
        finally:
            watchdog.cancel()
            watchdog.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
