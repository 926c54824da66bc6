"""The service's one ASGI entry point: request metrics for the inference endpoints and
the task endpoints' hot path, in the outermost middleware.

Every request to an inference endpoint (the task endpoints, /v2 inference) is counted and timed
here, by the status of the response actually sent, and answered with `x-total-time` (ms).

A task endpoint's request that needs nothing but the happy path is answered here, without the
layers below: `POST` with a JSON content-type, a Host and API key that pass (when those checks
are configured), a body within the limits (read by the same `BodyReader` as every other POST),
validated against the task's body model straight from its bytes (pydantic's `validate_json`,
in a thread for a large body). The answer comes from the same `routes.answer` FastAPI's routes
call, and is sent as two ASGI messages built here. An expected failure on the way (a full
queue, a deadline, an unknown model) is answered with the body its exception handler gives it,
and a body that fails validation with the route's 422 (`validation_error_response`), so no body
is parsed and validated twice.

Anything else goes down the full stack - Host allow-list, API keys, body limit, FastAPI's
routing, its route and its exception handlers - with the body replayed if it was read, so every
other refusal (400, 401, 413, 415, a 422 for a body that is not JSON) is answered by the one
place that always answered it. FastAPI keeps the routes for the OpenAPI schema and /docs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.tasks import TASKS
from service.http.auth import ApiKeyMiddleware, HostAllowListMiddleware
from service.http.errors import error_response, service_error_response, validation_error_response
from service.inference.errors import ServiceError, set_by
from service.inference.registry import Service
from service.http import tokenize as tokenize_endpoint
from service.http import zero_shot
from service.http.routes import TASK_BODIES, answer
from service.tracing import TRACE_RESPONSE_HEADER

log = logging.getLogger("service.http.entry")
JSON = b"application/json"
CLIENT_CLOSED = 499  # nginx's status for "client closed the request"
# a body over this is parsed and validated in a thread (a 1 MiB body: tens of milliseconds)
OFFLOAD_BODY_BYTES = 64 << 10
# Paths of the inference endpoints -> the `endpoint` metric label.
ENDPOINTS = {task.endpoint: task.label for task in TASKS.values()}
# zero-shot runs entailment models under its own label; no hot path (the full stack answers it)
ENDPOINTS[zero_shot.ENDPOINT] = zero_shot.LABEL
ENDPOINTS[tokenize_endpoint.ENDPOINT] = tokenize_endpoint.LABEL  # no hot path either
# Open Inference Protocol inference (service.http.oip): one `endpoint` label for every model
_V2_INFER = re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$")


def endpoint_of(path: str) -> str | None:
    """The `endpoint` metric label of an inference path, None for other paths."""
    return ENDPOINTS.get(path) or ("v2_infer" if _V2_INFER.match(path) else None)


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


def is_json(scope: Scope) -> bool:
    """The content-type is application/json (any parameters): the only one the hot path takes."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == JSON
    return False


class BodyReader:
    """Reads a request body whole, within its limits: 413 for a body over `max_bytes`, by its
    Content-Length or, for a chunked body, by the bytes actually streamed.

    The whole body must arrive within `body_timeout_s` of the headers and before the request
    deadline (else 408 / 504, and the connection is closed: its unread rest would be taken for
    the next request); a drain that begins while it is read answers 503 at once instead of
    waiting for a stalled client."""

    def __init__(self, max_bytes: int, service: Service | None = None) -> None:
        self.max_bytes, self.service = max_bytes, service

    async def read(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The body, or None when it was answered here (413, 408, 504, 503) or the client left
        before it arrived."""
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send)
                    return None
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        settings = self.service.settings if self.service is not None else None
        if settings is None:
            reading = None
        else:
            arrival = scope.get("state", {}).get("attserve_arrival", loop.time())
            deadline = arrival + settings.request_timeout_ms / 1000.0
            # one timer for the whole body (asyncio.timeout: a loop.call_at, no extra task per
            # message); a drain moves it to now (Service.begin_drain)
            reading = asyncio.timeout_at(min(loop.time() + settings.body_timeout_s, deadline))
        while True:
            if reading is None:
                message = await receive()
            else:
                try:
                    self.service.body_reads.add(reading)
                    async with reading:
                        if self.service.draining:
                            reading.reschedule(loop.time())
                        message = await receive()
                except TimeoutError:
                    if self.service.draining:
                        await self._error(scope, receive, send, 503, "shutting_down",
                                          "the server is shutting down", {"Retry-After": "1"})
                    elif loop.time() >= deadline:
                        await self._error(scope, receive, send, 504, "deadline_exceeded",
                                          f"no answer within {settings.request_timeout_ms:.0f} ms (body still arriving) "
                                          f"{set_by('request_timeout_ms')}")
                    else:
                        await self._error(scope, receive, send, 408, "request_timeout",
                                          f"request body not received within {settings.body_timeout_s:g} s "
                                          f"{set_by('body_timeout_s')}")
                    return None
                finally:
                    self.service.body_reads.discard(reading)
                if message.get("more_body", False):
                    # an asyncio.Timeout is single-use: the next message gets a fresh one, same deadline
                    reading = asyncio.timeout_at(reading.when())
            if message["type"] != "http.request":
                return None  # client gone before the body arrived (counted as 499)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(scope, receive, send)
                return None
            if not message.get("more_body", False):
                return chunk if not chunks else b"".join([*chunks, chunk])
            chunks.append(chunk)

    async def _error(self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str,
                     headers: dict[str, str] | None = None) -> None:
        # connection: close, because the rest of the body may still come and must not be read
        # as the next request
        response = error_response(status, code, message, {**(headers or {}), "Connection": "close"},
                                  path=scope.get("path", ""))
        await response(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        # the rest of the body is never read: the connection closes after the 413 (kept open,
        # a sender trickling it would hold the connection untimed, and its chunks would be
        # taken for the next request's headers)
        await self._error(scope, receive, send, 413, "body_too_large",
                          f"request body over {self.max_bytes} bytes {set_by('max_body_bytes')}")


class BodyLimitMiddleware:
    """The full stack's body limit (every POST the hot path did not answer): the body is read by
    `BodyReader` and replayed to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int, service: Service | None = None) -> None:
        self.app, self.reader = app, BodyReader(max_bytes, service)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await self.reader.read(scope, receive, send)
        if body is not None:
            await self.app(scope, replaying(body, receive), send)


class _Task:
    """One task endpoint's hot path: its metric label and its body model's JSON validator."""

    __slots__ = ("label", "adapter")

    def __init__(self, label: str, body_type: Any) -> None:
        self.label = label
        self.adapter: TypeAdapter = TypeAdapter(body_type)


class ServiceEntry:
    """The outermost middleware: metrics for the inference endpoints, the task endpoints' hot
    path, and the full stack (`app`) for everything else."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service, self.metrics = app, service, service.metrics
        settings = service.settings
        self.body = BodyReader(settings.max_body_bytes, service)
        self.tasks = {path: _Task(label, body_type) for path, (label, body_type) in TASK_BODIES.items()}
        self.hosts = HostAllowListMiddleware(app, settings) if settings.allowed_hosts else None
        self.keys = ApiKeyMiddleware(app, settings) if settings.api_keys else None
        self.slow_request_s = settings.slow_request_ms / 1000.0  # 0: off

    def _passes(self, scope: Scope) -> bool:
        """The Host and the key (if checked) pass: the request may be traced and, if `_plain`,
        take the hot path; else the full stack refuses it."""
        return ((self.hosts is None or self.hosts.allowed(scope))
                and (self.keys is None or self.keys.authorized(scope) is True))

    def _plain(self, scope: Scope) -> bool:
        """Nothing left to refuse before the body of a request that `_passes`: it is JSON."""
        return is_json(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = endpoint_of(path)
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = scope.setdefault("state", {})
        # The request deadline's start: the request's first byte, stamped by service.http.http's
        # protocol; now, under a server without it (tests' ASGI transport).
        state.setdefault("attserve_arrival", asyncio.get_running_loop().time())
        status: int | None = None
        disconnected = False
        sent_headers: list | None = None
        passes = self._passes(scope)
        # the request's server span, the task's current trace until it ends (None: off, unsampled,
        # or refused by the Host or key check, which costs no span)
        tracing = self.service.tracing  # service.tracing.Tracing; None unless ATTSERVE_OTLP_ENDPOINT is set
        trace = tracing.begin(scope, endpoint) if tracing is not None and passes else None

        async def receive_watched() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def send_timed(message: Message) -> None:
            nonlocal status, sent_headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = sent_headers = list(message.get("headers", []))
                headers.append((b"x-total-time", f"{(time.perf_counter() - start) * 1000:.3f}".encode()))
                if trace is not None:
                    headers.append((TRACE_RESPONSE_HEADER, trace.response_header()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            task = self.tasks.get(path)
            if task is not None and scope["method"] == "POST" and passes and self._plain(scope):
                await self._hot(task, scope, receive_watched, send_timed)
            else:
                await self.app(scope, receive_watched, send_timed)
        finally:
            if status is None:
                # no answer sent: the client left (nginx's 499), else the app failed (500)
                status = CLIENT_CLOSED if disconnected else 500
            model = state.get("attserve_model", "")
            elapsed = time.perf_counter() - start
            self.metrics.series(self.metrics.requests, endpoint, model, str(status)).inc()
            self.metrics.series(self.metrics.request_duration, endpoint, model).observe(elapsed)
            version = state.get("attserve_model_version")
            if version is not None:
                self.metrics.series(self.metrics.version_requests, endpoint, model, version, str(status)).inc()
                self.metrics.series(self.metrics.version_request_duration, model, version).observe(elapsed)
            if self.slow_request_s and elapsed >= self.slow_request_s:
                log_slow(scope, endpoint, status, model, version, elapsed, sent_headers, trace)
            if trace is not None:
                trace.end(status, model)

    async def _hot(self, task: _Task, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await self.body.read(scope, receive, send)
        if raw is None:
            return  # answered (413, 408, 504, 503) or the client left
        cache = self.service.response_cache  # service.http.cache; None when off
        if cache is not None:
            scope["state"]["attserve_raw_body"] = raw  # stored with the answer: a repeat of these bytes
            try:
                hit = cache.raw_hit(self.service, scope["state"], task.label, raw)
            except ServiceError as exc:  # admitting the stored body's model: draining, or it went
                await service_error_response(exc, scope["path"])(scope, receive, send)
                return
            if hit is not None:  # answered before validation (the same bytes validate the same)
                await send_json(send, *hit)
                return
        try:
            # parsing and validating a large body takes milliseconds: off the event loop
            body = await asyncio.to_thread(task.adapter.validate_json, raw) if len(raw) > OFFLOAD_BODY_BYTES \
                else task.adapter.validate_json(raw)
        except ValidationError as exc:
            errors = exc.errors()
            if any(e["type"] == "json_invalid" for e in errors):
                # not JSON: the route's own 422, worded from FastAPI's parse of the body
                await self.app(scope, replaying(raw, receive), send)
            else:
                # the route's 422, from this validation (the body is not parsed and validated twice)
                await validation_error_response(errors, scope["path"])(scope, receive, send)
            return
        try:
            content, headers = await answer(self.service, scope["state"], receive, task.label, body)
        except ServiceError as exc:
            response = service_error_response(exc, scope["path"])
            await response(scope, receive, send)
            return
        await send_json(send, content, headers)


def log_slow(scope: Scope, endpoint: str, status: int, model: str, version: str | None, elapsed_s: float,
             headers: list | None, trace: Any) -> None:
    """One WARNING line for a request over ATTSERVE_SLOW_REQUEST_MS: where its time went (its
    queue wait and inference, as its x-queue-time and x-inference-time headers say; `other_ms`
    the rest: body read, parse, render, waits on the event loop) and its trace id when traced."""
    sent = {name: value.decode("latin-1") for name, value in headers or ()}
    queue_ms, inference_ms = float(sent.get(b"x-queue-time", 0)), float(sent.get(b"x-inference-time", 0))
    total_ms = elapsed_s * 1000
    arrival = scope.get("state", {}).get("attserve_arrival")
    log.warning("slow request", extra={
        "endpoint": endpoint, "path": scope["path"], "status": status, "model": model, "version": version,
        "total_ms": round(total_ms, 3), "queue_ms": queue_ms, "inference_ms": inference_ms,
        "other_ms": round(max(0.0, total_ms - queue_ms - inference_ms), 3),
        "since_first_byte_ms": round((asyncio.get_running_loop().time() - arrival) * 1000, 3) if arrival else None,
        "cache": sent.get(b"x-cache"),
        "trace_id": f"{trace.context.trace_id:032x}" if trace is not None else None})


async def send_json(send: Send, content: bytes, headers: dict[str, str]) -> None:
    """A 200 JSON answer as two ASGI messages."""
    raw_headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    raw_headers += [(b"content-length", str(len(content)).encode()), (b"content-type", JSON)]
    await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
    await send({"type": "http.response.body", "body": content})
