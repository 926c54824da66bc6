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


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        # drop "body" and the single/batch form tag from the location
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "single", "batch"))
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        if exc.status >= 500 and exc.status != 503:
            log.error("request failed", extra={"path": request.url.path, "code": exc.code, "detail": exc.message})
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_input", _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body json.loads cannot take beyond a JSON syntax error
            # (invalid UTF-8, nesting too deep): malformed JSON, so the same 422 as a syntax error
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "unparseable body"
            return error_response(422, "invalid_input", f"body: not valid UTF-8 JSON ({cause})")
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    # Starlette runs this one in its outermost ServerErrorMiddleware: the client gets the JSON
    # body and the exception is still re-raised to the server, which logs it and carries on.
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path, "error_type": type(exc).__name__})
        return error_response(500, "internal_error", "internal server error")
