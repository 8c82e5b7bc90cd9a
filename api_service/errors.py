"""One exception hierarchy, mapped to RFC 9457 problem+json in one place (`exception_handlers`)."""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.exc import StaleDataError

log = logging.getLogger("mcpeval.api")

PROBLEM_JSON = "application/problem+json"


class FieldError(msgspec.Struct):
    field: str
    reason: str


class Problem(msgspec.Struct, omit_defaults=True):
    """RFC 9457 problem details, plus `errors` naming each offending field."""

    title: str
    status: int
    detail: str
    type: str = "about:blank"
    instance: str | None = None
    errors: list[FieldError] = msgspec.field(default_factory=list)


class ApiError(Exception):
    """Base of every error the API answers on purpose."""

    status = 400
    title = "Bad Request"

    def __init__(self, detail: str, errors: list[FieldError] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []


class InvalidInputError(ApiError):
    status = 422
    title = "Unprocessable Content"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", [FieldError(field=field, reason=reason)])


class UnauthorizedError(ApiError):
    status = 401
    title = "UnauthorizedError"


class NotFoundError(ApiError):
    status = 404
    title = "Not Found"


class ConflictError(ApiError):
    status = 409
    title = "ConflictError"


class ServiceUnavailableError(ApiError):
    status = 503
    title = "Service Unavailable"


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response[Problem]:
    return Response(content=problem, status_code=problem.status, media_type=PROBLEM_JSON, headers=headers)


def _api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[Problem]:
    return problem_response(
        Problem(
            title=exc.title,
            status=exc.status,
            detail=exc.detail,
            instance=request.url.path,
            errors=exc.errors,
        )
    )


_AT_PATH = re.compile(r"\s*-\s*at `\$(?P<path>[^`]*)`")


_REGEX = re.compile(r"Expected `str` matching regex '(?P<pattern>.*)'$", re.DOTALL)


def _humanise(message: str) -> str:
    from api_service.common import PATTERN_REASONS

    match = _REGEX.match(message.strip())
    if match:
        return PATTERN_REASONS.get(
            match.group("pattern").encode().decode("unicode_escape"), "has an invalid format"
        )
    return message


def _validation_error(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Problem]:
    """Litestar/msgspec validation: name the field (`$.a.b` → `a.b`) and say why, never echo the body."""
    errors: list[FieldError] = []
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if not isinstance(item, dict):
            continue
        message = str(item.get("message", "invalid value"))
        key = item.get("key")
        match = _AT_PATH.search(message)
        if match:
            field = match.group("path").lstrip(".") or "body"
            message = _AT_PATH.sub("", message)
        else:
            field = str(key) if key else "body"
        errors.append(FieldError(field=field, reason=_humanise(message)))
    malformed = any("malformed" in e.reason.lower() or "JSON is" in e.reason for e in errors)
    status = 400 if malformed or not errors else 422
    detail = "; ".join(f"{e.field}: {e.reason}" for e in errors) or "the request is not valid"
    title = "Bad Request" if status == 400 else "Unprocessable Content"
    return problem_response(
        Problem(title=title, status=status, detail=detail, instance=request.url.path, errors=errors)
    )


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Problem]:
    status = exc.status_code
    detail = str(exc.detail) if exc.detail else "request failed"
    if status == 413:
        detail = "the request body is larger than the limit"
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    headers = dict(exc.headers) if exc.headers else None
    return problem_response(
        Problem(title=title, status=status, detail=detail, instance=request.url.path), headers
    )


def _lost_race(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    """A concurrent request deleted or changed what this one was writing: a conflict, not a server fault."""
    log.info("concurrent change on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return problem_response(
        Problem(
            title="Conflict",
            status=409,
            detail="another request changed or deleted this resource at the same time; read it again and retry",
            instance=request.url.path,
        )
    )


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    # The traceback goes to the log; the client gets no internals.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(
        Problem(
            title="Internal Server Error",
            status=HTTP_500_INTERNAL_SERVER_ERROR,
            detail="an unexpected error occurred; it has been logged",
            instance=request.url.path,
        )
    )


exception_handlers: dict[type[Exception] | int, Any] = {
    ApiError: _api_error,
    ValidationException: _validation_error,
    NotFoundException: _http_error,
    HTTPException: _http_error,
    StaleDataError: _lost_race,
    IntegrityError: _lost_race,
    Exception: _unexpected,
}

__all__ = [
    "PROBLEM_JSON",
    "ApiError",
    "ConflictError",
    "FieldError",
    "InvalidInputError",
    "NotFoundError",
    "Problem",
    "ServiceUnavailableError",
    "UnauthorizedError",
    "exception_handlers",
]
