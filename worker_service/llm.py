"""Ask a model which tool to call: any OpenAI-compatible endpoint (the `openai` SDK) or the offline baseline.

Tool names are offered to the model as OpenAI function names (`^[A-Za-z0-9_-]{1,64}$`); names that collide
across servers, or are not valid function names, are namespaced as `<server>__<tool>` and mapped back exactly.
Whatever the model answers is untrusted: arguments are parsed, never evaluated, and text is size-capped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx2
import msgspec
import openai

from shared.providers import BASELINE, resolve_base_url
from worker_service.baseline import BaselineTool, choose_tool
from worker_service.scoring import Sample, ToolCall, ToolSpec

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with access to tools. When one of the tools fits the user's request, "
    "call it with the right arguments. When none fits, answer directly without calling a tool."
)
MAX_TEXT_CHARS = 2000
MAX_ARGUMENT_CHARS = 20_000
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class LlmError(Exception):
    """The model endpoint failed. `transient` says a later retry may succeed."""

    def __init__(
        self, message: str, transient: bool, retry_after: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after
        self.status = status


class OfferedTool(msgspec.Struct, frozen=True):
    function_name: str
    spec: ToolSpec


class ToolOffer(msgspec.Struct, frozen=True):
    tools: list[OfferedTool]
    collisions: list[str]

    def by_function_name(self) -> dict[str, OfferedTool]:
        return {t.function_name: t for t in self.tools}


class ModelAnswer(msgspec.Struct):
    samples: list[Sample]
    raw: dict[str, Any]


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def make_offer(specs: Sequence[ToolSpec]) -> ToolOffer:
    """Function names for every tool; namespaced where a name repeats across servers or is not valid."""
    counts = Counter(s.name for s in specs)
    collisions = sorted(name for name, n in counts.items() if n > 1)
    used: set[str] = set()
    offered: list[OfferedTool] = []
    for spec in specs:
        name = spec.name
        if counts[name] > 1 or not _FUNCTION_NAME.match(name):
            name = f"{_safe_name(spec.server)}__{_safe_name(spec.name)}"
        if len(name) > 64 or name in used:
            digest = hashlib.sha256(f"{spec.server}\x00{spec.name}".encode()).hexdigest()[:8]
            name = f"{name[:55]}_{digest}"
        used.add(name)
        offered.append(OfferedTool(function_name=name, spec=spec))
    return ToolOffer(tools=offered, collisions=collisions)


def openai_tools(offer: ToolOffer) -> list[dict[str, Any]]:
    tools = []
    for item in offer.tools:
        schema = dict(item.spec.input_schema) if isinstance(item.spec.input_schema, dict) else {}
        schema.setdefault("type", "object")
        if schema.get("type") == "object":
            schema.setdefault("properties", {})
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": item.function_name,
                    "description": item.spec.description,
                    "parameters": schema,
                },
            }
        )
    return tools


def parse_call(offer: ToolOffer, name: object, arguments: object) -> ToolCall:
    """Map one returned function call back to (server, tool); mark it malformed when it cannot be."""
    raw_name = str(name or "")[:200]
    raw_arguments = (arguments if isinstance(arguments, str) else json.dumps(arguments))[:MAX_ARGUMENT_CHARS]
    tool = offer.by_function_name().get(raw_name)
    if tool is None:
        # Some models drop the namespace; accept a raw tool name when it names exactly one tool.
        matches = [t for t in offer.tools if t.spec.name == raw_name]
        if len(matches) == 1:
            tool = matches[0]
        elif len(matches) > 1:
            servers = ", ".join(sorted(t.spec.server for t in matches))
            return ToolCall(
                server=None,
                tool=raw_name,
                arguments=None,
                raw_name=raw_name,
                raw_arguments=raw_arguments,
                malformed=f"ambiguous tool name {raw_name!r}: offered by servers {servers}",
            )
        else:
            return ToolCall(
                server=None,
                tool=None,
                arguments=None,
                raw_name=raw_name,
                raw_arguments=raw_arguments,
                malformed=f"unknown tool {raw_name!r}",
            )
    problem: str | None = None
    try:
        parsed = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except (json.JSONDecodeError, RecursionError):
        parsed = None
        problem = "arguments are not valid JSON"
    if problem is None and not isinstance(parsed, dict):
        problem = "arguments are not a JSON object"
    return ToolCall(
        server=tool.spec.server,
        tool=tool.spec.name,
        arguments=parsed if problem is None else None,
        raw_name=raw_name,
        raw_arguments=raw_arguments,
        malformed=problem,
    )


def _sample_of(offer: ToolOffer, message: Any) -> tuple[Sample, dict[str, Any]]:
    calls: list[ToolCall] = []
    raw_calls: list[dict[str, Any]] = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None)
        parsed = parse_call(offer, name, arguments)
        calls.append(parsed)
        raw_calls.append({"name": parsed.raw_name, "arguments": parsed.raw_arguments})
    content = getattr(message, "content", None)
    text = content[:MAX_TEXT_CHARS] if isinstance(content, str) else None
    return Sample(calls=calls, text=text), {"tool_calls": raw_calls, "content": text}


def _classify_error(exc: Exception) -> LlmError:
    """Map SDK errors to a precise, secret-free message and a retry decision."""
    if isinstance(exc, openai.APITimeoutError):
        return LlmError("model request timed out", transient=True)
    if isinstance(exc, openai.APIConnectionError):
        return LlmError("cannot connect to the model endpoint", transient=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after: float | None = None
        header = exc.response.headers.get("retry-after") if exc.response is not None else None
        if header:
            try:
                retry_after = float(header)
            except ValueError:
                retry_after = None
        if status == 401:
            return LlmError("model endpoint rejected the API key (401)", transient=False)
        if status == 403:
            return LlmError("model endpoint refused access (403)", transient=False)
        if status == 404:
            return LlmError(
                "model or endpoint not found (404): check model name and base_url", transient=False
            )
        if status == 429:
            return LlmError(
                "model endpoint rate limited the request (429)", transient=True, retry_after=retry_after
            )
        if status >= 500:
            return LlmError(f"model endpoint failed ({status})", transient=True, retry_after=retry_after)
        return LlmError(f"model endpoint rejected the request ({status})", transient=False, status=status)
    return LlmError(f"model call failed ({type(exc).__name__})", transient=False)


async def ask_openai_compatible(
    http_client: httpx2.AsyncClient,
    *,
    provider: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    temperature: float,
    max_retries: int,
    system_prompt: str | None,
    query: str,
    offer: ToolOffer,
    samples: int,
) -> ModelAnswer:
    """k samples of the model's answer to the query with the offered tools (n= where honoured)."""
    endpoint = resolve_base_url(provider, base_url)
    if endpoint is None:
        raise LlmError(f"no base_url for provider {provider!r}", transient=False)
    client = openai.AsyncOpenAI(
        base_url=endpoint,
        api_key=api_key or "not-needed",
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )
    request: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": system_prompt or DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": query},
        ],
        "temperature": temperature,
        # Already plain JSON: passed as extra_body, the SDK sends it as-is instead of re-walking every
        # schema of every tool per request (milliseconds of CPU per run with large catalogs).
        "extra_body": {"tools": openai_tools(offer), "tool_choice": "auto"},
    }

    async def one(n: int) -> Any:
        try:
            if n > 1:
                return await client.chat.completions.create(**request, n=n)
            return await client.chat.completions.create(**request)
        except openai.OpenAIError as exc:
            raise _classify_error(exc) from None

    try:
        responses = [await one(samples)]
    except LlmError as exc:
        if samples == 1 or exc.status != 400:
            raise
        # Some OpenAI-compatible providers refuse `n` > 1 outright: draw the samples one by one instead
        # (a request that is bad for another reason fails again here, and that failure is reported).
        responses = list(await asyncio.gather(*(one(1) for _ in range(samples))))
    choices = [choice for response in responses for choice in (response.choices or [])]
    if len(choices) < samples:
        # The provider ignored `n`: draw the missing samples as parallel single requests.
        extra = await asyncio.gather(*(one(1) for _ in range(samples - len(choices))))
        responses.extend(extra)
        for response in extra:
            choices.extend((response.choices or [])[:1])
    if not choices:
        raise LlmError("model returned no choices", transient=True)
    parsed = [_sample_of(offer, choice.message) for choice in choices[:samples]]
    usage: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0}
    for response in responses:
        if response.usage is not None:
            usage["prompt_tokens"] += int(response.usage.prompt_tokens or 0)
            usage["completion_tokens"] += int(response.usage.completion_tokens or 0)
    return ModelAnswer(
        samples=[p[0] for p in parsed],
        raw={
            "provider": provider,
            "model": model,
            "baseline": False,
            "function_names": {t.function_name: [t.spec.server, t.spec.name] for t in offer.tools},
            "choices": [p[1] for p in parsed],
            "usage": usage,
        },
    )


def ask_baseline(query: str, offer: ToolOffer) -> ModelAnswer:
    """The offline baseline: lexical retrieval over tool texts, no arguments (labelled as a baseline)."""
    tools = [
        BaselineTool(
            server=t.spec.server,
            name=t.spec.name,
            description=t.spec.description,
            parameters=tuple(str(k) for k in (t.spec.input_schema.get("properties") or {})),
        )
        for t in offer.tools
    ]
    choice = choose_tool(query, tools)
    calls: list[ToolCall] = []
    if choice.server is not None and choice.name is not None:
        calls.append(
            ToolCall(
                server=choice.server, tool=choice.name, arguments={}, raw_name=choice.name, raw_arguments="{}"
            )
        )
    return ModelAnswer(
        samples=[Sample(calls=calls)],
        raw={
            "provider": BASELINE,
            "model": "lexical-tfidf",
            "baseline": True,
            "threshold": choice.threshold,
            "top_scores": [{"server": s.server, "tool": s.name, "score": s.score} for s in choice.scores[:5]],
        },
    )


EXPLAIN_PROMPT = (
    "You review how an AI assistant chose among tools. Rewrite the evaluation below as a short explanation "
    "for the author of the tools (at most 120 words, plain prose, no lists): what happened and what to change "
    "in the tool descriptions or schemas. Do not invent facts beyond the evaluation."
)


async def explain_reasoning(
    http_client: httpx2.AsyncClient,
    *,
    provider: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    reasoning: str,
) -> str | None:
    """The same model's prose rewrite of the evidence-based reasoning, or None if it cannot give one."""
    endpoint = resolve_base_url(provider, base_url)
    if endpoint is None:
        return None
    client = openai.AsyncOpenAI(
        base_url=endpoint,
        api_key=api_key or "not-needed",
        timeout=timeout,
        max_retries=1,
        http_client=http_client,
    )
    try:
        response = await client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": EXPLAIN_PROMPT},
                {"role": "user", "content": reasoning[:8000]},
            ],
            temperature=0.2,
        )
    except openai.OpenAIError:
        return None
    content = response.choices[0].message.content if response.choices else None
    return content.strip()[:MAX_TEXT_CHARS] if isinstance(content, str) and content.strip() else None
