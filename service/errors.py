"""The service's errors and the one JSON error body: `{"error": {"code", "message"}}`.

Every non-2xx answer (our own, FastAPI's validation errors, Starlette's 404/405, unexpected
exceptions) goes through `error_response`, so clients parse one shape.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("service.errors")


class ServiceError(Exception):
    """An expected failure with its HTTP status, a stable machine-readable code and headers."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class InvalidInput(ServiceError):
    status, code = 422, "invalid_input"


class TooManyInputs(ServiceError):
    status, code = 422, "too_many_inputs"


class TooManyEvidence(ServiceError):
    status, code = 422, "too_many_evidence"


class UnknownModel(ServiceError):
    status, code = 422, "unknown_model"


class WrongTask(ServiceError):
    status, code = 422, "wrong_task"


class BodyTooLarge(ServiceError):
    status, code = 413, "body_too_large"


class AnswerTooLarge(ServiceError):
    status, code = 422, "answer_too_large"


class QueueFull(ServiceError):
    status, code = 429, "queue_full"


class DeadlineExceeded(ServiceError):
    status, code = 504, "deadline_exceeded"


class NoModelForTask(ServiceError):
    # not 503: no model of the task is configured (or every one failed), so retrying is useless
    status, code = 404, "no_model_for_task"


class NotReady(ServiceError):
    status, code = 503, "not_ready"


class ShuttingDown(ServiceError):
    status, code = 503, "shutting_down"


class ClientClosed(ServiceError):
    # nginx's code for "client closed the request"; nobody reads it, the metrics do.
    status, code = 499, "client_closed_request"


class InferenceFailed(ServiceError):
    status, code = 500, "inference_failed"


EXCERPT_CHARS = 40


def excerpt(value: str, limit: int = EXCERPT_CHARS) -> str:
    """A short, escaped quote of user input for an error message: repr() of at most `limit`
    characters (control and invisible characters come out as escapes), and the full length
    when cut."""
    if len(value) <= limit:
        return ascii(value)
    return f"{ascii(value[:limit])}... ({len(value)} characters)"


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   path: str = "") -> JSONResponse:
    """The task API's error body; under /v2 the Open Inference Protocol's `{"error": "..."}`."""
    if path == "/v2" or path.startswith("/v2/"):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


# What each endpoint takes, for "what to send instead".
EXAMPLES = {
    "/classify": '{"text": "..."} or {"inputs": [{"text": "..."}, ...]}',
    "/entailment": '{"premise": "...", "hypothesis": "..."} or {"inputs": [{"premise": "...", "hypothesis": "..."}, ...]}',
    "/verify": '{"claim": "...", "evidence": ["...", ...]} or {"inputs": [{"claim": "...", "evidence": ["..."]}, ...]}',
}
FIELDS = {
    "/classify": ("text",), "/entailment": ("premise", "hypothesis"), "/verify": ("claim", "evidence"),
}
MAX_REPORTED = 3


class UnsupportedMediaType(ServiceError):
    status, code = 415, "unsupported_media_type"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "something else"


def json_path(loc: tuple) -> str:
    """pydantic's location as a JSON path of the body: inputs[0].text, evidence[2]; the
    single/batch form tag and the union member names are dropped."""
    out = ""
    for part in loc:
        if part in ("body", "single", "batch", "str", "none"):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe(err: dict, path: str) -> str:
    """One validation error in the service's words: where, what was wrong, what to send."""
    kind = err.get("type", "")
    where = json_path(tuple(err.get("loc", ()))) or "body"
    got = _json_type(err.get("input"))
    example = EXAMPLES.get(path, "a JSON object")
    field = where.rsplit(".", 1)[-1]
    if kind == "json_invalid":
        detail = (err.get("ctx") or {}).get("error", "")
        position = next((p for p in err.get("loc", ()) if isinstance(p, int)), None)
        detail = str(detail).strip() or "unparseable"
        if position is not None:
            detail += f" character {position}" if detail.endswith(" at") else f" at character {position}"
        return f"body: not valid JSON ({detail}); send {example}"
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        return f"{where}: expected a JSON object, got {got}; send {example}"
    if kind == "missing":
        if where == "body":
            return f"body: empty; send a JSON object: {example}"
        return f"{where}: required field missing; send {example}"
    if kind == "extra_forbidden":
        if field in ("inputs", *FIELDS.get(path, ())) and "[" not in where:
            return (f"{where}: not expected here: send either one input or a batch under \"inputs\", "
                    f"not both: {example}")
        return f"{where}: unknown field; send {example}"
    if kind == "string_type":
        return f"{where}: expected a string, got {got}"
    if kind == "list_type":
        return f"{where}: expected a list, got {got}"
    if kind == "too_short":
        return f"{where}: empty list; send at least one item"
    if kind == "value_error":
        error = (err.get("ctx") or {}).get("error")
        return f"{where}: {error if error is not None else 'invalid value'}"
    # anything else: pydantic's text, without its "Input should be" phrasing
    msg = str(err.get("msg", "invalid")).replace("Input should be", "expected")
    return f"{where}: {msg}"


def _validation_message(exc: RequestValidationError, path: str = "") -> str:
    errors = list(exc.errors())
    parts = [_describe(err, path) for err in errors[:MAX_REPORTED]]
    if len(errors) > MAX_REPORTED:
        parts.append(f"and {len(errors) - MAX_REPORTED} more problems")
    return "; ".join(parts) or "invalid request"


def _media_type_problem(request: Request, exc: RequestValidationError) -> str | None:
    """The body was not read as JSON because of its content-type (FastAPI then validates the
    raw bytes): say so rather than 'expected a JSON object'."""
    if not any(isinstance(err.get("input"), (bytes, bytearray)) for err in exc.errors()):
        return None
    content_type = request.headers.get("content-type")
    got = f"content-type {content_type.split(';')[0].strip()!r}" if content_type else "no content-type header"
    return (f"the body must be JSON sent with the header 'content-type: application/json' (got {got}); "
            f"with curl: -H 'content-type: application/json' -d '{{...}}'")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        if exc.status >= 500 and exc.status != 503:
            log.error("request failed", extra={"path": request.url.path, "code": exc.code, "detail": exc.message})
        return error_response(exc.status, exc.code, exc.message, exc.headers, path=request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        media = _media_type_problem(request, exc)
        if media is not None:
            return error_response(UnsupportedMediaType.status, UnsupportedMediaType.code, media, path=request.url.path)
        return error_response(422, "invalid_input", _validation_message(exc, request.url.path), path=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body json.loads cannot take beyond a JSON syntax error
            # (invalid UTF-8, nesting too deep): malformed JSON, so the same 422 as a syntax error
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "unparseable body"
            return error_response(422, "invalid_input", f"body: not valid UTF-8 JSON ({cause})", path=request.url.path)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None), path=request.url.path)

    # Starlette runs this one in its outermost ServerErrorMiddleware: the client gets the JSON
    # body and the exception is still re-raised to the server, which logs it and carries on.
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path, "error_type": type(exc).__name__})
        return error_response(500, "internal_error", "internal server error", path=request.url.path)
