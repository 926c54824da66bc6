"""The task endpoints' hot path. A request to /classify, /entailment or /verify whose body is
JSON that validates is parsed straight from its bytes (pydantic's `validate_json`, the same body
models) and handed to the same `routes.predict` FastAPI's route calls; FastAPI's own route (its
dependency resolution, a second body read, form/cookie handling) is skipped. Anything else - a
body that fails validation, another content-type - goes on to FastAPI's route for that path,
which answers exactly as it always has (the error bodies come from one place).

FastAPI keeps the routes for the OpenAPI schema and /docs: these Starlette routes are put in
front of them, so they match first and are not in the schema."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send
from starlette.routing import Route

JSON = b"application/json"
Predict = Callable[[Request, str, Any], Awaitable[Response]]


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over `body`, already read, as one http.request message, then
    passes on the connection's own messages (its http.disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _is_json(scope: dict[str, Any]) -> bool:
    """The content-type is application/json (any parameters): the only one the hot path takes."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == JSON
    return False


class _FastEndpoint:
    """An ASGI app for one task path: the hot path, else FastAPI's route with the body replayed.
    Exceptions (a queue full, a deadline, an answer too large) propagate to the app's exception
    handlers as they do from FastAPI's route."""

    def __init__(self, api_route: APIRoute, endpoint_name: str, body_type: Any, predict: Predict) -> None:
        self.api_route = api_route
        self.endpoint_name = endpoint_name
        self.adapter: TypeAdapter = TypeAdapter(body_type)
        self.predict = predict

    @staticmethod
    async def _body(receive: Receive) -> bytes:
        """The request body from its http.request messages: one message in the service, where
        BodyLimitMiddleware has read the body and replays it whole (Request.body()'s stream is an
        async generator, which costs more than the loop)."""
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # client gone: the answer will not be read, an empty body fails validation
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_json(scope):
            return await self.api_route.handle(scope, receive, send)
        raw = await self._body(receive)
        request = Request(scope, receive, send)
        try:
            body = self.adapter.validate_json(raw)
        except ValidationError:
            return await self.api_route.handle(scope, replaying(raw, receive), send)
        response = await self.predict(request, self.endpoint_name, body)
        await response(scope, receive, send)


def install(app: FastAPI, router: APIRouter, endpoints: dict[str, tuple[str, Any]], predict: Predict) -> None:
    """Put a hot-path route in front of each task route of `router` (included in `app`).
    `endpoints`: path -> (endpoint name, body type), e.g. "/entailment" -> ("entailment",
    EntailmentBody); `predict(request, endpoint name, body)` answers a validated body (the one
    FastAPI's routes call)."""
    fast = [Route(route.path, _FastEndpoint(route, *endpoints[route.path], predict), methods=["POST"],
                  include_in_schema=False, name=f"{route.name}_fast")
            for route in router.routes if isinstance(route, APIRoute) and route.path in endpoints and "POST" in route.methods]
    assert len(fast) == len(endpoints), "a task route is missing"
    app.router.routes[:0] = fast
