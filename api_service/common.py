"""What every resource module shares: the app's services, field types, pagination and JSON checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from litestar.di import NamedDependency
from litestar.params import QueryParameter
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError, InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api_service.errors import InvalidInputError, NotFoundError
from shared.settings import Settings

T = TypeVar("T")

# No NUL anywhere (PostgreSQL text cannot hold it) and at least one non-space character
# (`\S` alone would let that one character be the NUL).
_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"

URL_PATTERN = r"^https?://[^\s\x00/?#]+[^\s\x00]*$"

# msgspec reports a failed pattern as the raw regex; say what it means instead.
PATTERN_REASONS = {
    _TEXT: "must be non-empty text without NUL characters",
    URL_PATTERN: "must be an absolute http:// or https:// URL without spaces",
    r"^[^\x00]*$": "must not contain NUL characters",
}

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=_TEXT)]
Query = Annotated[str, msgspec.Meta(min_length=1, max_length=8000, pattern=_TEXT)]
Description = Annotated[str, msgspec.Meta(max_length=20_000, pattern=r"^[^\x00]*$")]
Url = Annotated[str, msgspec.Meta(max_length=2048, pattern=URL_PATTERN)]
# Litestar ignores msgspec.Meta bounds on query parameters; they must sit on the QueryParameter.
LimitParam = Annotated[int, QueryParameter(ge=1, le=100)]
OffsetParam = Annotated[int, QueryParameter(ge=0)]

MAX_JSON_DEPTH = 32


@dataclass
class Services:
    """Process-wide clients made in the app's lifespan and handed to handlers by dependency injection."""

    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    nats: NatsClient
    js: JetStreamContext
    service_key: bytes


# Handler parameters name their dependencies explicitly (Litestar 3 drops inferred ones).
SessionDep = NamedDependency[AsyncSession]
ServicesDep = NamedDependency["Services"]


class Page(msgspec.Struct, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


async def paginate(
    session: AsyncSession, query: Select[Any], limit: int, offset: int
) -> tuple[list[Any], int]:
    """Rows of one page and the total count of the unpaged query."""
    total = await session.scalar(select(func.count()).select_from(query.order_by(None).subquery()))
    rows = (await session.scalars(query.limit(limit).offset(offset))).all()
    return list(rows), int(total or 0)


async def refreshed(session: AsyncSession, row: Any, what: str) -> None:
    """Reload a row after commit (triggers and defaults); 404 when a concurrent request deleted it meanwhile."""
    try:
        await session.refresh(row)
    except InvalidRequestError:
        raise NotFoundError(f"the {what} was deleted by another request") from None


def check_json_value(value: Any, field: str, depth: int = 0) -> None:
    """Reject what PostgreSQL jsonb cannot store (NUL in strings) and absurd nesting, naming the field."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidInputError(field, f"nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(field, "contains a NUL character")
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise InvalidInputError(field, "contains a NUL character in a key")
            check_json_value(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_value(item, f"{field}[{index}]", depth + 1)


def constraint_name(exc: IntegrityError) -> str | None:
    """The violated constraint's name, as asyncpg reports it (names come from the naming convention)."""
    cause = getattr(exc.orig, "__cause__", None)
    name = getattr(cause, "constraint_name", None) or getattr(exc.orig, "constraint_name", None)
    return str(name) if name else None


def normalise_transport(value: str) -> str:
    return "streamable-http" if value == "streamable_http" else value
