"""`/similarity/*`: stateless inter-tool similarity analysis, computed by a worker over NATS request-reply.

The API validates the request, gives every tool a unique id, reads observed confusions from Postgres
when `test_run_filter` asks for behaviour grounding, and sends one `SimilarityRequest` to the
`similarity-workers` queue group. The worker fetches `url_list` servers, embeds, scores and answers;
nothing is persisted. The `X-Model-API-Key` header (for a remote embeddings endpoint and for the model
that rewrites descriptions) only travels sealed, bound to this request and the timeout.

Why grounding is read here and not in the worker: it is one aggregate SQL read over tables the API
already reads for `/metrics/summary` with the same filter (dates, test cases, batch), it lets the
API answer a bad filter with 422 before any work is queued, and it keeps the worker's similarity
handler free of database access (a pure function of the job it receives).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec
from litestar import Controller, Request, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import JSONBody
from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from api_service.common import Description, Name, Services, ServicesDep, Url
from api_service.errors import ApiError, FieldError, InvalidInputError, ServiceUnavailableError
from shared.crypto import seal
from shared.db.tables import McpServer, TestCase, TestRun, ToolDefinition
from shared.messages import SimilarityReply, SimilarityRequest
from shared.messaging import SIMILARITY_SUBJECT
from shared.similarity_wire import (
    AnalysisResult,
    Behaviour,
    Confusion,
    JobUrl,
    MatrixResult,
    NoResponderError,
    OverlapResult,
    RecommendationsResult,
    ReplyTimeoutError,
    SimilarityJob,
    SimilarityTool,
    compress,
    decompress,
    request_chunked,
)

log = logging.getLogger("mcpeval.api")

API_KEY_HEADER = "X-Model-API-Key"
DEFAULT_THRESHOLD = 0.85
MAX_ANALYZE_TOOLS = 10_000
MAX_MATRIX_TOOLS = 2_000
MAX_URLS = 50
MAX_CONFUSIONS = 10_000
NO_RESPONDER_GRACE_SECONDS = 3.0

Operation = Literal["analyze", "matrix", "overlap-matrix", "recommendations"]
T = TypeVar("T")

ToolId = Annotated[str, msgspec.Meta(min_length=1, max_length=500, pattern=r"^[^\x00]*\S[^\x00]*$")]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[^\x00\s][^\x00]*$")]
Threshold = Annotated[
    float,
    msgspec.Meta(
        ge=0.0,
        le=1.0,
        description=(
            "Flag pairs scoring at or above this (0-1, default 0.85, the seed's value for large remote "
            "embedding models). Offline backends score lower for the same overlap: use about 0.5 for "
            "MiniLM and 0.3 for TF-IDF with compute_full_similarity; every response reports the "
            "backend's `suggested_threshold`."
        ),
    ),
]
Schema = Annotated[dict[str, Any], msgspec.Meta(description="The tool's JSON Schema for its arguments")]


# --------------------------------------------------------------------------------------------- request


class ServerToolIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A tool inside `server_list[].tools` (MCP's `inputSchema` spelling is accepted too)."""

    name: Name
    description: Description = ""
    input_schema: Schema | None = None
    input_schema_mcp: Schema | None = msgspec.field(default=None, name="inputSchema")
    id: ToolId | None = None


class ToolIn(ServerToolIn, forbid_unknown_fields=True, kw_only=True):
    """A tool of `tool_list`; `server` (optional) names the server it belongs to."""

    server: Name | None = None


class ServerIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An MCP server with its tools embedded (nothing is fetched)."""

    name: Name
    tools: Annotated[list[ServerToolIn], msgspec.Meta(max_length=MAX_ANALYZE_TOOLS)]
    url: Url | None = None
    transport: Literal["sse", "streamable-http", "streamable_http"] | None = None
    description: Description = ""


class UrlIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An MCP server the worker fetches the tools of. Without `transport`, a url whose path ends in
    `/sse` is read over `sse`, any other over `streamable-http`. `name` labels the server in tool ids
    (default: the registered server's name for that url, else the url)."""

    url: Url
    transport: Literal["sse", "streamable-http", "streamable_http"] | None = None
    name: Name | None = None


class TestRunFilter(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Which completed runs ground the analysis: all of them when every field is empty."""

    __test__ = False  # not a pytest class

    batch_id: uuid.UUID | None = None
    from_date: datetime | None = None
    to_date: datetime | None = None
    test_case_ids: Annotated[list[uuid.UUID], msgspec.Meta(max_length=1000)] | None = None


class SimilarityBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Exactly one of `server_list`, `tool_list`, `url_list`; at least 2 tools after extraction."""

    server_list: Annotated[list[ServerIn], msgspec.Meta(max_length=1000)] | None = None
    tool_list: Annotated[list[ToolIn], msgspec.Meta(max_length=MAX_ANALYZE_TOOLS)] | None = None
    url_list: Annotated[list[Url | UrlIn], msgspec.Meta(max_length=MAX_URLS)] | None = None
    embedding_model: ModelName | None = None
    embedding_base_url: Url | None = None
    similarity_threshold: Threshold = DEFAULT_THRESHOLD
    compute_full_similarity: bool = False
    include_recommendations: bool = False
    model: ModelName | None = None
    base_url: Url | None = None
    max_pairs: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    test_run_filter: TestRunFilter | None = None


# ---------------------------------------------------------------------------------------------- errors


class WorkerAnswerError(ApiError):
    """The worker answered with an error: its status (422, 502, 504 …) and reason are passed on."""

    def __init__(self, status: int, detail: str, field: str | None) -> None:
        super().__init__(detail, [FieldError(field=field, reason=detail)] if field else None)
        self.status = status
        self.title = {
            422: "Unprocessable Content",
            502: "Bad Gateway",
            503: "Service Unavailable",
            504: "Gateway Timeout",
        }.get(status, "Error")


class PayloadTooLargeError(ApiError):
    status = 413
    title = "Content Too Large"


class GatewayTimeoutError(ApiError):
    status = 504
    title = "Gateway Timeout"


# -------------------------------------------------------------------------------------- building a job


def _guess_transport(url: str) -> str:
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable-http"


def _transport(value: str | None, url: str) -> str:
    if value is None:
        return _guess_transport(url)
    return "streamable-http" if value == "streamable_http" else value


def _schema(tool: ServerToolIn, field: str) -> dict[str, Any]:
    if tool.input_schema is not None and tool.input_schema_mcp is not None:
        raise InvalidInputError(f"{field}.input_schema", "give input_schema or inputSchema, not both")
    return tool.input_schema if tool.input_schema is not None else (tool.input_schema_mcp or {})


def _unique_ids(tools: list[tuple[SimilarityTool, str]]) -> list[SimilarityTool]:
    seen: dict[str, str] = {}
    for tool, field in tools:
        if tool.id in seen:
            raise InvalidInputError(
                field,
                f"tool id {tool.id!r} is already used by {seen[tool.id]}; give tools unique ids "
                "(or different servers)",
            )
        seen[tool.id] = field
    return [tool for tool, _ in tools]


def _tool(tool: ServerToolIn, server: str | None, field: str) -> tuple[SimilarityTool, str]:
    """The job's tool for one request tool (id: the given one, else `server/name` or `name`), and the
    request field it came from."""
    return (
        SimilarityTool(
            id=tool.id or (f"{server}/{tool.name}" if server else tool.name),
            name=tool.name,
            description=tool.description,
            input_schema=_schema(tool, field),
            server=server,
        ),
        field,
    )


def _from_servers(servers: list[ServerIn]) -> list[SimilarityTool]:
    names: dict[str, int] = {}
    out: list[tuple[SimilarityTool, str]] = []
    for s_index, server in enumerate(servers):
        if server.name in names:
            raise InvalidInputError(
                f"server_list[{s_index}].name",
                f"server {server.name!r} appears twice (also server_list[{names[server.name]}])",
            )
        names[server.name] = s_index
        out.extend(
            _tool(tool, server.name, f"server_list[{s_index}].tools[{t_index}]")
            for t_index, tool in enumerate(server.tools)
        )
    return _unique_ids(out)


def _from_tools(tools: list[ToolIn]) -> list[SimilarityTool]:
    return _unique_ids([_tool(tool, tool.server, f"tool_list[{index}]") for index, tool in enumerate(tools)])


def _chosen_input(body: SimilarityBody) -> str:
    given = [
        name
        for name, value in (
            ("server_list", body.server_list),
            ("tool_list", body.tool_list),
            ("url_list", body.url_list),
        )
        if value is not None
    ]
    if not given:
        raise InvalidInputError("body", "give exactly one of server_list, tool_list or url_list (none given)")
    if len(given) > 1:
        raise InvalidInputError(
            given[1], f"give exactly one of server_list, tool_list or url_list (got {' and '.join(given)})"
        )
    return given[0]


def _tool_limits(operation: Operation) -> tuple[int, int | None]:
    """(max tools, exact count or None) for an operation."""
    if operation == "recommendations":
        return 2, 2
    if operation in ("matrix", "overlap-matrix"):
        return MAX_MATRIX_TOOLS, None
    return MAX_ANALYZE_TOOLS, None


def _check_count(operation: Operation, field: str, count: int) -> None:
    limit, exact = _tool_limits(operation)
    if exact is not None and count != exact:
        raise InvalidInputError(field, f"/similarity/{operation} compares exactly {exact} tools, got {count}")
    if count < 2:
        raise InvalidInputError(field, f"at least 2 tools are needed, got {count}")
    if count > limit:
        raise InvalidInputError(field, f"at most {limit} tools for /similarity/{operation}, got {count}")


def _check_options(operation: Operation, body: SimilarityBody, api_key: str | None) -> None:
    if body.model is not None and body.base_url is None:
        raise InvalidInputError("base_url", "required with model (the OpenAI-compatible endpoint to call)")
    if body.base_url is not None and body.model is None:
        raise InvalidInputError("model", "required with base_url (the model that rewrites descriptions)")
    if body.model is not None and operation in ("matrix", "overlap-matrix"):
        raise InvalidInputError("model", f"/similarity/{operation} writes no descriptions; omit model")
    if body.model is not None and operation == "analyze" and not body.include_recommendations:
        raise InvalidInputError("model", "only used with include_recommendations: true")
    if body.include_recommendations and operation != "analyze":
        raise InvalidInputError(
            "include_recommendations",
            "only for /similarity/analyze (/similarity/recommendations always recommends)",
        )
    if body.test_run_filter is not None and operation != "analyze":
        raise InvalidInputError("test_run_filter", "behaviour grounding is only for /similarity/analyze")
    if body.embedding_base_url is not None and body.embedding_model is None:
        raise InvalidInputError("embedding_model", "required with embedding_base_url")
    if api_key is not None and body.embedding_base_url is None and body.base_url is None:
        raise InvalidInputError(
            API_KEY_HEADER, "only used with embedding_base_url or base_url; nothing would use the key"
        )
    tf = body.test_run_filter
    if tf is not None and tf.from_date and tf.to_date and tf.from_date > tf.to_date:
        raise InvalidInputError("test_run_filter.to_date", "is before from_date")


async def _registered_names(services: Services, urls: list[str]) -> dict[str, str]:
    async with services.sessionmaker() as session:
        rows = await session.execute(select(McpServer.url, McpServer.name).where(McpServer.url.in_(urls)))
        return {str(url): str(name) for url, name in rows}


async def _from_urls(services: Services, entries: list[str | UrlIn]) -> list[JobUrl]:
    items = [UrlIn(url=e) if isinstance(e, str) else e for e in entries]
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if item.url in seen:
            raise InvalidInputError(f"url_list[{index}]", f"{item.url} is listed twice")
        seen[item.url] = index
    registered = await _registered_names(services, [i.url for i in items]) if items else {}
    labels: dict[str, int] = {}
    out: list[JobUrl] = []
    for index, item in enumerate(items):
        label = item.name or registered.get(item.url) or item.url
        if label in labels:
            raise InvalidInputError(
                f"url_list[{index}].name",
                f"server label {label!r} is already used by url_list[{labels[label]}]",
            )
        labels[label] = index
        out.append(
            JobUrl(
                url=item.url,
                transport=_transport(item.transport, item.url),
                label=label,
                field=f"url_list[{index}]",
            )
        )
    return out


# ------------------------------------------------------------------------------------------- grounding


async def observed_confusions(session: AsyncSession, run_filter: TestRunFilter) -> Behaviour:
    """Completed runs matching the filter whose selected (server, tool) differs from the expected one,
    counted per (expected, selected) pair; plus how many completed runs the filter matched."""
    conditions: list[ColumnElement[bool]] = [TestRun.status == "completed"]
    if run_filter.test_case_ids is not None:
        conditions.append(TestRun.test_case_id.in_(run_filter.test_case_ids))
    if run_filter.from_date is not None:
        conditions.append(TestRun.created_at >= run_filter.from_date)
    if run_filter.to_date is not None:
        conditions.append(TestRun.created_at <= run_filter.to_date)
    if run_filter.batch_id is not None:
        conditions.append(TestRun.batch_id == run_filter.batch_id)
    considered = await session.scalar(select(func.count()).select_from(TestRun).where(*conditions))
    count = func.count().label("count")
    rows = await session.execute(
        select(
            TestCase.expected_mcp_server_name,
            TestCase.expected_tool_name,
            McpServer.name,
            ToolDefinition.name,
            count,
        )
        .select_from(TestRun)
        .join(TestCase, TestCase.id == TestRun.test_case_id)
        .join(ToolDefinition, ToolDefinition.id == TestRun.selected_tool_id)
        .join(McpServer, McpServer.id == ToolDefinition.mcp_server_id)
        .where(
            *conditions,
            TestCase.expected_tool_name.is_not(None),
            or_(
                ToolDefinition.name != TestCase.expected_tool_name,
                and_(
                    TestCase.expected_mcp_server_name.is_not(None),
                    McpServer.name != TestCase.expected_mcp_server_name,
                ),
            ),
        )
        .group_by(
            TestCase.expected_mcp_server_name,
            TestCase.expected_tool_name,
            McpServer.name,
            ToolDefinition.name,
        )
        .order_by(count.desc())
        .limit(MAX_CONFUSIONS)
    )
    return Behaviour(
        runs_considered=int(considered or 0),
        confusions=[
            Confusion(
                expected_server=exp_server,
                expected_tool=str(exp_tool),
                selected_server=str(sel_server),
                selected_tool=str(sel_tool),
                count=int(n),
            )
            for exp_server, exp_tool, sel_server, sel_tool, n in rows
        ],
    )


# ---------------------------------------------------------------------------------------------- sending


async def _build_job(operation: Operation, body: SimilarityBody, services: Services) -> SimilarityJob:
    source = _chosen_input(body)
    tools: list[SimilarityTool] = []
    urls: list[JobUrl] = []
    if source == "server_list":
        assert body.server_list is not None
        tools = _from_servers(body.server_list)
        _check_count(operation, "server_list", len(tools))
    elif source == "tool_list":
        assert body.tool_list is not None
        tools = _from_tools(body.tool_list)
        _check_count(operation, "tool_list", len(tools))
    else:
        assert body.url_list is not None
        if not body.url_list:
            raise InvalidInputError("url_list", "at least one MCP server url is needed")
        urls = await _from_urls(services, body.url_list)
    behaviour = None
    if body.test_run_filter is not None:
        async with services.sessionmaker() as session:
            behaviour = await observed_confusions(session, body.test_run_filter)
    limit, exact = _tool_limits(operation)
    return SimilarityJob(
        tools=tools,
        urls=urls,
        embedding_model=body.embedding_model,
        embedding_base_url=body.embedding_base_url,
        threshold=body.similarity_threshold,
        compute_full_similarity=body.compute_full_similarity,
        include_recommendations=body.include_recommendations or operation == "recommendations",
        model=body.model,
        base_url=body.base_url,
        max_pairs=body.max_pairs,
        max_tools=limit,
        exact_tools=exact,
        behaviour=behaviour,
    )


async def _request_with_grace(services: Services, message: bytes, timeout: float) -> bytes:
    """Request-reply, retrying "no responders" for a few seconds: a worker that is (re)starting has
    not subscribed yet, and core NATS does not queue requests for absent subscribers."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    give_up = start + min(NO_RESPONDER_GRACE_SECONDS, timeout)
    delay = 0.05
    while True:
        try:
            return await request_chunked(
                services.nats, SIMILARITY_SUBJECT, message, max(0.1, timeout - (loop.time() - start))
            )
        except NoResponderError:
            if loop.time() + delay > give_up:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


async def run_similarity(
    operation: Operation,
    body: SimilarityBody,
    request: Request[Any, Any, Any],
    services: Services,
    out: type[T],
) -> T:
    """Validate, send the job to a worker and decode its answer as `out`."""
    api_key = request.headers.get(API_KEY_HEADER) or None
    _check_options(operation, body, api_key)
    job = await _build_job(operation, body, services)
    timeout = services.settings.similarity_timeout_seconds
    request_id = str(uuid.uuid4())
    sealed = seal(services.service_key, request_id, api_key, timeout + 30.0) if api_key else None
    message = msgspec.json.encode(
        SimilarityRequest(
            operation=operation,
            payload=compress(msgspec.json.encode(job)),
            compression="zlib",
            sealed_api_key=sealed,
            request_id=request_id,
            deadline=time.time() + timeout,
        )
    )
    if len(message) > services.nats.max_payload:
        raise PayloadTooLargeError(
            f"the request is {len(message)} bytes once compressed, over the message bus limit of "
            f"{services.nats.max_payload} bytes; send fewer tools per request"
        )
    try:
        raw = await _request_with_grace(services, message, timeout)
    except NoResponderError:
        raise ServiceUnavailableError("no similarity worker is running; start a worker and retry") from None
    except ReplyTimeoutError:
        raise GatewayTimeoutError(
            f"no similarity worker answered within {timeout:g} s; retry, or send fewer tools"
        ) from None
    try:
        reply = msgspec.json.decode(raw, type=SimilarityReply)
        if not reply.ok:
            raise WorkerAnswerError(reply.status, reply.error or "similarity analysis failed", reply.field)
        payload = decompress(reply.payload) if reply.compression == "zlib" else reply.payload
        return msgspec.json.decode(payload, type=out)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        log.exception("undecodable similarity reply for %s", operation)
        raise WorkerAnswerError(
            502, "the similarity worker sent an answer this API cannot read", None
        ) from None


_INPUTS = (
    "Give exactly one of `server_list` (servers with their tools), `tool_list` (tools) or `url_list` "
    "(MCP servers the worker connects to); at least 2 tools. `embedding_model`: omitted/`auto` = "
    "offline MiniLM when installed else TF-IDF, `tfidf`, `minilm`, or any model name on the "
    "OpenAI-compatible `embedding_base_url` (its key in the `X-Model-API-Key` header). Stateless."
)


def _endpoint(
    operation: Operation, out: type[msgspec.Struct], summary: str, description: str
) -> HTTPRouteHandler:
    """`POST /similarity/{operation}`, answering with the worker's result decoded as `out` (which the
    OpenAPI document shows as the 200 response)."""

    async def endpoint(
        self: Controller,
        data: JSONBody[SimilarityBody],
        request: Request[Any, Any, Any],
        services: ServicesDep,
    ) -> msgspec.Struct:
        return await run_similarity(operation, data, request, services, out)

    # Litestar reads the response type from the annotation and the operationId from the name.
    endpoint.__annotations__["return"] = out
    endpoint.__name__ = endpoint.__qualname__ = operation.replace("-", "_")
    return post(f"/{operation}", status_code=200, summary=summary, description=description)(endpoint)


class SimilarityController(Controller):
    path = "/similarity"
    tags = ["similarity"]

    analyze = _endpoint(
        "analyze",
        AnalysisResult,
        "Which tools a model may confuse: flagged pairs, clusters, lint, recommendations",
        _INPUTS + " At most 10,000 tools. `test_run_filter` grounds the flagged pairs in the confusions "
        "observed in completed runs. `include_recommendations` adds differentiation advice; revised "
        "descriptions come from a template unless `model` + `base_url` name a model to write them.",
    )
    matrix = _endpoint(
        "matrix",
        MatrixResult,
        "Dense pairwise similarity matrix (at most 2,000 tools)",
        _INPUTS + " `compute_full_similarity` includes the parameters in the compared text.",
    )
    overlap_matrix = _endpoint(
        "overlap-matrix",
        OverlapResult,
        "Capability overlap matrix: 0.5 semantic + 0.3 parameters + 0.2 description (≤ 2,000 tools)",
        _INPUTS + " `clusters` group tools whose overlap reaches `similarity_threshold`.",
    )
    recommendations = _endpoint(
        "recommendations",
        RecommendationsResult,
        "How to tell exactly two tools apart: issues, recommendations, revised descriptions",
        _INPUTS + " Exactly 2 tools; recommendations are given whether or not the pair is flagged.",
    )
