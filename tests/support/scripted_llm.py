"""A scripted, OpenAI-compatible HTTP server for tests and benchmarks.

`ScriptedLLM` serves `POST /v1/chat/completions`, `POST /v1/embeddings` and `GET /v1/models` on a loopback port
from a background thread (uvicorn + a raw ASGI callable, kept lean for > 1,000 req/s). What it answers is
scripted with `Rule`s; every request it receives is recorded.

    with ScriptedLLM() as llm:
        llm.script(Rule(match="weather", answers=[[("get_weather", {"city": "Paris"})]]))
        llm.script(Rule(status=429, retry_after=0.01, times=2))   # the next 2 requests get 429, then on
        client = AsyncOpenAI(base_url=llm.base_url, api_key="k")
        ...
        assert llm.requests[-1].headers["authorization"] == "Bearer k"

Rules are tried in the order scripted; the first live rule whose `match` is a case-insensitive substring of the
last user message (or that has no `match`) decides the answer. A rule with `times=K` is spent after K requests.
When no rule matches - or the matching rule only delays - the default answer is "echo-pick": call the offered
tool whose name appears in the last user message (the longest such name) with `{}`, else the first offered tool;
with no tools offered, a text answer.

Foreground mode for benchmarks: `python -m tests.support.scripted_llm --port 8600 --delay-ms 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import itertools
import math
import re
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from shared.demo.servers import bind_socket, run_asgi_apps

__all__ = ["ChoiceAnswer", "RecordedRequest", "Rule", "ScriptedLLM", "ToolCall", "hash_embedding"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call in an answer; `arguments` given as a `str` is sent verbatim (e.g. malformed JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)


ChoiceAnswer = str | Sequence[ToolCall | tuple[str, Mapping[str, Any] | str]]
"""What one choice answers: a `str` is a text-only answer; a sequence is tool calls (`ToolCall` or a
`(name, arguments)` pair)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """How to answer the requests it matches.

    - `match`: case-insensitive substring of the last user message (chat) or of any input (embeddings);
      `None` matches every request of `endpoint`.
    - `answers`: choice answers, handed out in a cycle that advances one step per choice served (so `n=3`
      gets the first three, and three `n=1` requests get them too). Empty: the default answer.
    - `status`: answer this HTTP error status instead (with `retry_after` seconds as `Retry-After` /
      `retry-after-ms` headers when given, and an OpenAI-style error body carrying `error_message`).
    - `delay_ms`: wait this long before answering (non-blocking; cut short if the client disconnects).
    - `hang`: never answer (until the client disconnects or the server stops); use with a client timeout.
    - `times`: the rule is spent after this many requests; `None` = never.
    """

    match: str | None = None
    answers: Sequence[ChoiceAnswer] = ()
    status: int | None = None
    retry_after: float | None = None
    error_message: str | None = None
    delay_ms: float = 0.0
    hang: bool = False
    times: int | None = None
    endpoint: Literal["chat", "embeddings"] = "chat"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as received: method, path, headers (names lower-cased) and the decoded JSON body (or None)."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any


@dataclass(slots=True)
class _LiveRule:
    rule: Rule
    used: int = 0
    cursor: int = 0


def hash_embedding(text: str, dimensions: int = 64) -> list[float]:
    """Return a deterministic, L2-normalised bag-of-words vector: texts sharing words get a positive cosine."""
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dimensions
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        # Empty or word-less text: a fixed unit vector keeps cosine similarity defined.
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


_JSON_HEADERS = [(b"content-type", b"application/json")]
_HANG_S = 3600.0
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def _last_user_text(messages: Any) -> str:
    """The text of the last `user` message (string content or the text parts of a content list)."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part
                )
            return ""
    return ""


def _offered_tools(body: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            name = tool["function"].get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _echo_pick(query: str, tools: Sequence[str]) -> ChoiceAnswer:
    """The default answer: the offered tool named in the query (longest name wins), else the first tool."""
    if not tools:
        return "Scripted answer: no tools were offered."
    named = [name for name in tools if name in query]
    return [(max(named, key=len) if named else tools[0], {})]


def _tokens(text: str) -> int:
    # A rough 4-characters-per-token estimate: usage only has to be plausible and deterministic.
    return max(1, len(text) // 4)


class ScriptedLLM:
    """The scripted OpenAI-compatible server; a context manager that starts and stops it.

    `base_url` (`http://127.0.0.1:PORT/v1`) is valid inside the `with` block. All public methods are
    thread-safe. `api_key`, when set, makes requests without `Authorization: Bearer <api_key>` answer 401.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = ("scripted-model",),
        api_key: str | None = None,
        default_delay_ms: float = 0.0,
        embedding_dimensions: int = 64,
        max_recorded: int | None = 100_000,
    ) -> None:
        self.host = host
        self.port = port
        self.models = list(models)
        self.api_key = api_key
        self.default_delay_ms = default_delay_ms
        self.embedding_dimensions = embedding_dimensions
        self._lock = threading.Lock()
        self._rules: list[_LiveRule] = []
        self._vectors: dict[str, list[float]] = {}
        self._requests: deque[RecordedRequest] = deque(maxlen=max_recorded)
        self._ids = itertools.count(1)
        self._stack: contextlib.ExitStack | None = None
        # Set (from the server loop) when the server stops, so delayed or hanging handlers end at once.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None

    # ------------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> ScriptedLLM:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bind the port and serve from a background thread; return once the server accepts connections."""
        if self._stack is not None:
            raise RuntimeError("ScriptedLLM already started")
        sock = bind_socket(self.host, self.port, backlog=2048)
        self.port = sock.getsockname()[1]
        stack = contextlib.ExitStack()
        stack.callback(sock.close)
        with contextlib.ExitStack() as guard:
            guard.push(stack)  # closes the socket if the server fails to start
            stack.enter_context(run_asgi_apps([(self, sock)], thread_name="scripted-llm"))
            guard.pop_all()
        self._stack = stack

    def stop(self) -> None:
        """Stop the server (pending delayed or hanging requests end first) and join its thread."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(closing.set)
        stack.close()
        self._loop = self._closing = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. `http://127.0.0.1:41234/v1`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # ------------------------------------------------------------------------------------------------ scripting
    def script(self, rule: Rule) -> None:
        """Append `rule`; rules are tried in the order scripted."""
        with self._lock:
            self._rules.append(_LiveRule(rule))

    def script_embedding(self, text: str, vector: Sequence[float]) -> None:
        """Answer exactly `text` with `vector` on `/v1/embeddings` (instead of the hash embedding)."""
        with self._lock:
            self._vectors[text] = [float(v) for v in vector]

    def reset(self) -> None:
        """Forget all rules, scripted vectors and recorded requests."""
        with self._lock:
            self._rules.clear()
            self._vectors.clear()
            self._requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def rule_uses(self) -> list[int]:
        """How many requests each scripted rule has decided so far, in scripting order."""
        with self._lock:
            return [live.used for live in self._rules]

    def _take_rule(self, endpoint: str, texts: Sequence[str]) -> _LiveRule | None:
        lowered = [text.lower() for text in texts]
        with self._lock:
            for live in self._rules:
                rule = live.rule
                if rule.endpoint != endpoint or (rule.times is not None and live.used >= rule.times):
                    continue
                if rule.match is None or any(rule.match.lower() in text for text in lowered):
                    live.used += 1
                    return live
        return None

    def _next_answers(self, live: _LiveRule, n: int) -> list[ChoiceAnswer]:
        answers = live.rule.answers
        with self._lock:
            picked = [answers[(live.cursor + i) % len(answers)] for i in range(n)]
            live.cursor += n
        return picked

    # ---------------------------------------------------------------------------------------------------- ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        payload: Any = None
        bad_json = False
        if body:
            try:
                payload = _decoder.decode(body)
            except msgspec.DecodeError:
                bad_json = True
        method: str = scope["method"]
        path: str = scope["path"]
        with self._lock:
            self._requests.append(RecordedRequest(method, path, headers, payload))

        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            await self._error(send, 401, "Incorrect API key provided.", "invalid_api_key")
        elif bad_json or (method == "POST" and not isinstance(payload, dict)):
            await self._error(send, 400, "The request body is not a JSON object.", "invalid_request_error")
        elif method == "POST" and path == "/v1/chat/completions":
            await self._chat(payload, receive, send)
        elif method == "POST" and path == "/v1/embeddings":
            await self._embeddings(payload, receive, send)
        elif method == "GET" and path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in self.models]
            await self._json(send, 200, {"object": "list", "data": data})
        else:
            await self._error(send, 404, f"Unknown endpoint {method} {path}.", "not_found")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop = asyncio.get_running_loop()
                self._closing = asyncio.Event()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _json(
        self, send: Send, status: int, obj: Any, extra: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        data = _encoder.encode(obj)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(data)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _error(
        self, send: Send, status: int, message: str, code: str, retry_after: float | None = None
    ) -> None:
        extra: list[tuple[bytes, bytes]] = []
        if retry_after is not None:
            extra.append((b"retry-after", str(math.ceil(retry_after)).encode()))
            extra.append((b"retry-after-ms", str(round(retry_after * 1000)).encode()))
        error_type = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        await self._json(send, status, body, extra)

    async def _wait(self, seconds: float, receive: Receive) -> bool:
        """Sleep up to `seconds`; return False early if the client disconnected or the server is stopping."""
        if seconds <= 0:
            return True
        closing = self._closing
        waiters: list[asyncio.Task[Any]] = [asyncio.ensure_future(self._disconnected(receive))]
        if closing is not None:
            waiters.append(asyncio.ensure_future(closing.wait()))
        try:
            done, _ = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return not done

    @staticmethod
    async def _disconnected(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _apply_rule_effects(self, live: _LiveRule | None, receive: Receive, send: Send) -> bool:
        """Delay / hang / error as the rule says; return True when the request has been answered (or dropped)."""
        delay = self.default_delay_ms / 1000
        if live is not None:
            rule = live.rule
            delay = _HANG_S if rule.hang else rule.delay_ms / 1000
        if not await self._wait(delay, receive):
            return True  # client gone or server stopping: nobody to answer
        status = live.rule.status if live is not None else None
        if live is not None and status is not None:
            message = live.rule.error_message or f"Scripted error {status}."
            await self._error(send, status, message, f"scripted_{status}", live.rule.retry_after)
            return True
        return False

    async def _chat(self, body: Mapping[str, Any], receive: Receive, send: Send) -> None:
        query = _last_user_text(body.get("messages"))
        live = self._take_rule("chat", [query])
        if await self._apply_rule_effects(live, receive, send):
            return
        n = body.get("n") or 1
        if not isinstance(n, int) or n < 1 or n > 128:
            await self._error(send, 400, "n must be an integer between 1 and 128.", "invalid_n")
            return
        tools = _offered_tools(body)
        if live is not None and live.rule.answers:
            answers = self._next_answers(live, n)
        elif body.get("tool_choice") == "none":
            answers = ["Scripted answer: tool_choice is none."] * n
        else:
            answers = [_echo_pick(query, tools)] * n
        request_id = next(self._ids)
        choices = []
        completion_chars = 0
        for index, answer in enumerate(answers):
            message: dict[str, Any]
            if isinstance(answer, str):
                message = {"role": "assistant", "content": answer, "refusal": None}
                finish = "stop"
                completion_chars += len(answer)
            else:
                calls = []
                for number, call in enumerate(answer):
                    name, arguments = (call.name, call.arguments) if isinstance(call, ToolCall) else call
                    text = arguments if isinstance(arguments, str) else _encoder.encode(arguments).decode()
                    completion_chars += len(name) + len(text)
                    calls.append(
                        {
                            "id": f"call_{request_id}_{index}_{number}",
                            "type": "function",
                            "function": {"name": name, "arguments": text},
                        }
                    )
                message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}
                finish = "tool_calls"
            choices.append({"index": index, "message": message, "finish_reason": finish, "logprobs": None})
        prompt_tokens = _tokens(_encoder.encode(body.get("messages") or []).decode())
        completion_tokens = _tokens("x" * completion_chars)
        await self._json(
            send,
            200,
            {
                "id": f"chatcmpl-scripted-{request_id}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model", self.models[0] if self.models else "scripted-model")),
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    async def _embeddings(self, body: Mapping[str, Any], receive: Receive, send: Send) -> None:
        raw = body.get("input")
        inputs: list[str]
        if isinstance(raw, str):
            inputs = [raw]
        elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
            inputs = list(raw)
        elif isinstance(raw, list) and raw and all(isinstance(item, int) for item in raw):
            inputs = [" ".join(map(str, raw))]  # one pre-tokenised input
        elif isinstance(raw, list) and all(isinstance(item, list) for item in raw):
            inputs = [" ".join(map(str, item)) for item in raw]
        else:
            await self._error(send, 400, "input must be a string or a list of strings.", "invalid_input")
            return
        live = self._take_rule("embeddings", inputs)
        if await self._apply_rule_effects(live, receive, send):
            return
        dimensions = body.get("dimensions") or self.embedding_dimensions
        if not isinstance(dimensions, int) or dimensions < 1:
            await self._error(send, 400, "dimensions must be a positive integer.", "invalid_dimensions")
            return
        as_base64 = body.get("encoding_format") == "base64"
        with self._lock:
            scripted = {text: self._vectors[text] for text in inputs if text in self._vectors}
        data = []
        for index, text in enumerate(inputs):
            vector = scripted.get(text) or hash_embedding(text, dimensions)
            encoded: Any = vector
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(_tokens(text) for text in inputs)
        await self._json(
            send,
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model", "scripted-embedding")),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the scripted LLM in the foreground (echo-pick default answers) until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.scripted_llm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = a free port")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay before every default answer")
    parser.add_argument("--api-key", default=None, help="require this bearer key (default: accept any)")
    parser.add_argument(
        "--text",
        default=None,
        help="answer every chat request with this text instead of echo-pick tool calls",
    )
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    # Benchmarks send unbounded request counts: keep only a small window of recorded requests.
    llm = ScriptedLLM(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        default_delay_ms=args.delay_ms,
        max_recorded=1000,
    )
    if args.text is not None:
        llm.script(Rule(answers=[args.text], delay_ms=args.delay_ms))
    try:
        with llm:
            print(llm.base_url, flush=True)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
