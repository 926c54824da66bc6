"""The one JSON error body: `{"error": {"code", "message"}}`, and what the HTTP layer says in it.

Every non-2xx answer (our own, FastAPI's validation errors, Starlette's 404/405, unexpected
exceptions) goes through `error_response`, so clients parse one shape; a 404 adds the list of
`endpoints`, a 405 the `allowed_methods`. A limit's error names the setting that raises it
(`set_by`). docs/errors.md documents them all. The errors themselves (ServiceError and its
kinds, `set_by`, `excerpt`) live in service.inference.errors, which imports no web framework.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from core.tasks import TASKS, Task
from service.inference.errors import ServiceError, UnsupportedMediaType, unquoted_excerpt

log = logging.getLogger("service.http.errors")


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


@functools.lru_cache(maxsize=1024)
def close_field(name: str, known: tuple[str, ...]) -> str | None:
    """The field of `known` that `name` looks like a misspelling of ("modle", "Text",
    "hypothesys", "texts"), or None. Cheap for any name: one much longer than every field
    cannot be a near miss (difflib's ratio >= 0.75 needs lengths within a factor of 1.67) and is
    never compared; the answers are cached, since clients repeat the same metadata fields."""
    if name in known:
        return name
    if len(name) > 2 * max(map(len, known), default=0):
        return None
    squashed = {_squash(k): k for k in known}
    if _squash(name) in squashed:
        return squashed[_squash(name)]
    match = difflib.get_close_matches(_squash(name), list(squashed), n=1, cutoff=0.75)
    return squashed[match[0]] if match else None


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   path: str = "", extra: dict[str, Any] | None = None) -> JSONResponse:
    """The task API's error body (`extra`: more fields beside code and message); under /v2 the
    Open Inference Protocol's `{"error": "..."}`, with the same `code` beside it under
    /v2/repository (tritonclient shows the string; an object there breaks its exception)."""
    if path.startswith("/v2/repository/"):
        return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)
    if path == "/predict":  # Text Embeddings Inference's shape, which its clients parse
        return JSONResponse({"error": message, "error_type": tei_error_type(status), "code": code},
                            status_code=status, headers=headers)
    if path == "/v2" or path.startswith("/v2/"):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    return JSONResponse({"error": {"code": code, "message": message, **(extra or {})}}, status_code=status,
                        headers=headers)


def tei_error_type(status: int) -> str:
    """Text Embeddings Inference's `error_type` for a status (its router's ErrorType)."""
    return {429: "overloaded", 503: "unhealthy"}.get(status, "validation" if status < 500 else "backend")


def endpoints(app: Any) -> list[str]:
    """Every endpoint of the app as "METHOD /path" (HEAD left out), in route order: what a 404
    lists. /docs and /redoc appear only where they are enabled (ATTSERVE_DOCS)."""
    out: list[str] = []

    def walk(routes: Any, prefix: str) -> None:
        for route in routes:
            if hasattr(route, "original_router"):  # an included router (FastAPI >= 0.16x)
                context = getattr(route, "include_context", None)
                walk(route.original_router.routes, prefix + (getattr(context, "prefix", "") or ""))
                continue
            path = prefix + getattr(route, "path", "")
            if path.endswith("/oauth2-redirect"):
                continue
            if isinstance(route, Mount):
                if f"GET {path}" not in out:
                    out.append(f"GET {path}/")
                continue
            methods = sorted(set(getattr(route, "methods", None) or {"GET"}) - {"HEAD"})
            line = f"{','.join(methods)} {path}"
            if line not in out:
                out.append(line)

    walk(app.routes, "")
    # the task endpoints first, the protocol's and the schema's last
    last = ("/openapi.json", "/docs", "/redoc")
    return sorted(out, key=lambda e: (e.split(" ")[1].startswith("/v2"), e.split(" ")[1] in last))


def _not_found(request: Request) -> tuple[str, dict[str, Any]]:
    listed = endpoints(request.app)
    where = f"{request.method} {unquoted_excerpt(request.url.path)}"
    if request.url.path == "/v2" or request.url.path.startswith("/v2/"):
        # the protocol's error is one string: the /v2 endpoints go in it
        return f"no endpoint {where}; the Open Inference Protocol endpoints: " + \
            ", ".join(e for e in listed if " /v2" in e), {}
    inference = ", ".join(f"POST {path}" for path in inference_endpoints())
    return (f"no endpoint {where}; the endpoints are listed in \"endpoints\" (inference: {inference})"), \
        {"endpoints": listed}


def slash_twin(request: Request) -> str | None:
    """For a path that no route takes but would with its trailing slash added or removed, that
    path (and the query), relative, for a 307: what Starlette's `redirect_slashes` does, except
    that its Location is built from the Host header, so a forged Host sent the client elsewhere
    (the app is made with redirect_slashes=False)."""
    path = request.scope["path"]
    if path == "/":
        return None
    twin = path[:-1] if path.endswith("/") else path + "/"
    scope = {**request.scope, "path": twin}
    if not any(route.matches(scope)[0] != Match.NONE for route in request.app.router.routes):
        return None
    query = request.scope.get("query_string", b"")
    return request.scope.get("root_path", "") + quote(twin) + (f"?{query.decode('latin-1')}" if query else "")


def _method_not_allowed(request: Request, headers: dict[str, str] | None) -> tuple[str, dict[str, Any]]:
    allowed = [m.strip() for m in (headers or {}).get("Allow", "").split(",") if m.strip()]
    listed = ", ".join(m for m in allowed if m != "HEAD") or "none"
    return (f"{request.method} is not allowed on {unquoted_excerpt(request.url.path)}; it takes {listed}",
            {"allowed_methods": allowed})


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def generic_input(fields: Sequence[tuple[str, bool]]) -> str:
    """One input with a placeholder for each text, as the messages write it: `fields` are
    (name, holds a list of texts): {"claim": "...", "evidence": ["...", ...]}."""
    return "{" + ", ".join(f'"{name}": ' + ('["...", ...]' if many else '"..."') for name, many in fields) + "}"


@dataclass(frozen=True)
class EndpointBody:
    """What an endpoint's JSON body takes, as its error messages say it: an example of each
    form (the "send ..." hint), the fields of one input, and every field the body takes
    anywhere (the did-you-mean candidates). Registered by the module that defines the body
    (service.http.schemas for every task of core.tasks, made from its registry entry by `of_task`;
    service.http.zero_shot), so no message lists a field the endpoint does not take."""

    example: str
    input_fields: tuple[str, ...]
    fields: tuple[str, ...]
    batch: bool  # the body also takes `inputs`, a list of inputs

    @property
    def request_fields(self) -> tuple[str, ...]:
        """The fields that go once per request, at the top level (model, explain, ...)."""
        return tuple(f for f in self.fields if f not in self.input_fields and f != "inputs")

    @classmethod
    def of_task(cls, task: Task, fields: Sequence[str], batch: bool) -> "EndpointBody":
        """A task's body from its registry entry: the example is the task's own (`Task.example`,
        else a placeholder for each of its texts), the batch form's a list of placeholders;
        `fields`: every field the body takes (the schema's), `batch`: whether it has the batch form."""
        generic = generic_input([(f.name, f.many) for f in task.fields])
        one = json.dumps(task.example, ensure_ascii=False) if task.example else generic
        example = f'{one} or {{"inputs": [{generic}, ...]}}' if batch else one
        return cls(example, task.field_names, tuple(fields), batch)


# path -> its body, in registration order
ENDPOINT_BODIES: dict[str, EndpointBody] = {}


def register_body(path: str, body: EndpointBody) -> None:
    ENDPOINT_BODIES[path] = body


def inference_endpoints() -> list[str]:
    """The inference endpoints a 404 names: every task's of the registry, then the others with a
    registered body (/zero-shot)."""
    tasks = [task.endpoint for task in TASKS.values()]
    return tasks + [path for path in ENDPOINT_BODIES if path not in tasks]


MAX_REPORTED = 3


def json_type(value: object) -> str:
    """What a JSON value is, as an error message names it ("a number", "null", ...)."""
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


# parts of pydantic's location that are no field of the body: FastAPI's root, the form tags,
# union member names
_NOT_FIELDS = frozenset({"body", "single", "batch", "str", "none"})


def json_path(loc: tuple) -> str:
    """pydantic's location as a JSON path of the body: inputs[0].text, evidence[2]; the
    single/batch form tag and the union member names are dropped, each name `_field_name`."""
    out = ""
    for part in loc:
        if part in _NOT_FIELDS:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{unquoted_excerpt(str(part))}" if out else unquoted_excerpt(str(part))
    return out


def _describe(err: dict, path: str) -> str:
    """One validation error in the service's words: where, what was wrong, what to send (the
    "; send ..." hint: `_validation_message` says it once for the whole message)."""
    kind = err.get("type", "")
    where = json_path(tuple(err.get("loc", ()))) or "body"
    got = json_type(err.get("input"))
    spec = ENDPOINT_BODIES.get(path)
    example = spec.example if spec is not None else "a JSON object"
    # the field itself (a name of the body, uncut), for the checks below
    field = next((p for p in reversed(err.get("loc", ())) if isinstance(p, str) and p not in _NOT_FIELDS), "")
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
        # unknown fields are ignored (service.http.schemas); what reaches here is a field of another
        # form or place, or a near miss of a field the endpoint takes
        if spec is not None and spec.batch and field in ("inputs", *spec.input_fields) and "[" not in where:
            return (f"{where}: not expected here: send either one input or a batch under \"inputs\", "
                    f"not both: {example}")
        if spec is not None and field in spec.request_fields and "[" in where:
            return f"{where}: not expected inside an input: \"{field}\" goes at the top level, once per request"
        guess = close_field(field, spec.fields) if spec is not None else None
        if guess is not None:
            return (f"{where}: unknown field; did you mean {guess!r}? (other unknown fields are ignored, "
                    f"a near miss of a field this endpoint takes is refused); send {example}")
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


def _validation_message(errors: Sequence[dict], path: str = "") -> str:
    """Up to MAX_REPORTED problems, then the count of the others; a "send ..." hint several
    of them end with is said once, at the end (two missing fields of one input, or the same
    field missing from every input, gave it two or three times)."""
    parts, hints = [], []
    for err in errors[:MAX_REPORTED]:
        text = _describe(err, path)
        problem, sep, hint = text.partition("; send ")
        if sep and not hint.startswith("a JSON object:"):
            parts.append(problem)
            if hint not in hints:
                hints.append(hint)
        else:
            parts.append(text)
    if len(errors) > MAX_REPORTED:
        parts.append(f"and {len(errors) - MAX_REPORTED} more problems")
    message = "; ".join(parts) or "invalid request"
    return message + "".join(f"; send {hint}" for hint in hints)


def _media_type_problem(request: Request, exc: RequestValidationError) -> str | None:
    """The body was not read as JSON because of its content-type (FastAPI then validates the
    raw bytes): say so rather than 'expected a JSON object'."""
    if not any(isinstance(err.get("input"), (bytes, bytearray)) for err in exc.errors()):
        return None
    content_type = request.headers.get("content-type")
    got = f"content-type {content_type.split(';')[0].strip()!r}" if content_type else "no content-type header"
    return (f"the body must be JSON sent with the header 'content-type: application/json' (got {got}); "
            f"with curl: -H 'content-type: application/json' -d '{{...}}'")


def service_error_response(exc: ServiceError, path: str) -> JSONResponse:
    """The answer to an expected failure (its handler's, and the hot path's in service.http.entry);
    a server-side failure is logged."""
    if exc.status >= 500 and exc.status != 503:
        log.error("request failed", extra={"path": path, "code": exc.code, "detail": exc.message})
    return error_response(exc.status, exc.code, exc.message, exc.headers, path=path)


def validation_error_response(errors: Sequence[dict], path: str) -> JSONResponse:
    """The 422 of a body that failed validation (`errors`: pydantic's), as the route and the hot
    path (service.http.entry) both answer it."""
    return error_response(422, "invalid_input", _validation_message(errors, path), path=path)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return service_error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        media = _media_type_problem(request, exc)
        if media is not None:
            return error_response(UnsupportedMediaType.status, UnsupportedMediaType.code, media, path=request.url.path)
        return validation_error_response(exc.errors(), request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body json.loads cannot take beyond a JSON syntax error
            # (invalid UTF-8, nesting too deep): malformed JSON, so the same 422 as a syntax error
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "unparseable body"
            return error_response(422, "invalid_input", f"body: not valid UTF-8 JSON ({cause})", path=request.url.path)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        headers = getattr(exc, "headers", None)
        message, extra = str(exc.detail), None
        # Starlette's bare "Not Found" / "Method Not Allowed" (routing, static files): say what exists
        if exc.status_code == 404 and exc.detail == "Not Found":
            twin = slash_twin(request)
            if twin is not None:
                return RedirectResponse(twin, status_code=307)
            message, extra = _not_found(request)
        elif exc.status_code == 405 and exc.detail == "Method Not Allowed":
            message, extra = _method_not_allowed(request, headers)
        return error_response(exc.status_code, code, message, headers, path=request.url.path, extra=extra)

    # Starlette runs this one in its outermost ServerErrorMiddleware: the client gets the JSON
    # body and the exception is still re-raised to the server, which logs it and carries on.
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path, "error_type": type(exc).__name__})
        return error_response(500, "internal_error", "internal server error", path=request.url.path)
