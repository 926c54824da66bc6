"""The FastAPI application: the model registry (service.registry) behind the task routes
(service.routes, one per task of core.tasks), the Open Inference Protocol (service.oip) and the
UI; the lifespan (discover, load and warm up in the background, drain) and the middleware.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import re
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.tasks import TASKS
from service.auth import ApiKeyMiddleware, HostAllowListMiddleware
from service.errors import error_response, install_error_handlers, set_by
from service.fastpath import install as install_fast_path, replaying
from service.metrics import Metrics
from service.oip import router as oip_router
from service.registry import Service
from service.routes import TASK_BODIES, predict, router
from service.settings import Settings
from service.ui import mount_ui
from service.worker_group import WorkerGroup

log = logging.getLogger("service.app")

# Paths of the inference endpoints -> the `endpoint` metric label.
CLIENT_CLOSED = 499  # nginx's status for "client closed the request"
ENDPOINTS = {task.endpoint: task.label for task in TASKS.values()}
# Open Inference Protocol inference (service.oip): one `endpoint` label for every model
_V2_INFER = re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$")


def endpoint_of(path: str) -> str | None:
    """The `endpoint` metric label of an inference path, None for other paths."""
    return ENDPOINTS.get(path) or ("v2_infer" if _V2_INFER.match(path) else None)


# --- middleware -----------------------------------------------------------------------------

class RequestMetricsMiddleware:
    """Counts and times the inference endpoints (status from the response actually sent) and
    adds `x-total-time` (ms). The route names the model in scope["state"]."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = endpoint_of(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = scope.setdefault("state", {})
        # The request deadline's start: the request's first byte, stamped by service.http's
        # protocol; now, under a server without it (tests' ASGI transport).
        state.setdefault("attserve_arrival", asyncio.get_running_loop().time())
        status: int | None = None
        disconnected = False

        async def receive_watched() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def send_timed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-total-time", f"{(time.perf_counter() - start) * 1000:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive_watched, send_timed)
        finally:
            if status is None:
                # no answer sent: the client left (nginx's 499), else the app failed (500)
                status = CLIENT_CLOSED if disconnected else 500
            model = state.get("attserve_model", "")
            self.metrics.series(self.metrics.requests, endpoint, model, str(status)).inc()
            self.metrics.series(self.metrics.request_duration, endpoint, model).observe(time.perf_counter() - start)


class BodyLimitMiddleware:
    """413 for a body over `max_bytes`, by its Content-Length or, for a chunked body, by the
    bytes actually streamed. The (small) body is read here and replayed to the app.

    The whole body must arrive within `body_timeout_s` of the headers and before the request
    deadline (else 408 / 504, and the connection is closed: its unread rest would be taken for
    the next request); a drain that begins while it is read answers 503 at once instead of
    waiting for a stalled client."""

    def __init__(self, app: ASGIApp, max_bytes: int, service: "Service | None" = None) -> None:
        self.app, self.max_bytes, self.service = app, max_bytes, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send)
                    return
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
                    return
                finally:
                    self.service.body_reads.discard(reading)
                if message.get("more_body", False):
                    # an asyncio.Timeout is single-use: the next message gets a fresh one, same deadline
                    reading = asyncio.timeout_at(reading.when())
            if message["type"] != "http.request":
                return  # client gone before the body arrived (counted as 499)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replaying(b"".join(chunks), receive), send)

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


# --- memory ---------------------------------------------------------------------------------

def malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


async def release_memory(every_s: float) -> None:
    """Every `every_s` seconds, malloc_trim(0) in a thread (ctypes releases the GIL): glibc
    gives the pages requests freed back to the OS only from the top of its heaps, so a burst
    (40 clients' explanations, dropped at the write timeout) left RSS 410 MB up for good;
    trimmed, 65 MB. ~0.1 ms when there is nothing to give back, a few ms after a burst."""
    trim = malloc_trim()
    if trim is None or every_s <= 0:
        return
    while True:
        await asyncio.sleep(every_s)
        await asyncio.to_thread(trim)


# --- the app --------------------------------------------------------------------------------

def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not service.discovered:  # `attserve serve` discovers before uvicorn starts
            service.discover()
        loader = asyncio.create_task(service.load_all(), name="load-models")
        trimmer = asyncio.create_task(release_memory(settings.memory_trim_s), name="release-memory")
        try:
            yield
        finally:
            trimmer.cancel()
            service.begin_drain()
            if not loader.done():
                # a session load runs in a thread and cannot be interrupted; wait for it
                await asyncio.wait({loader}, timeout=settings.shutdown_timeout_s)
            await service.shutdown()

    app = FastAPI(
        title="attserve",
        version="0.1.0",
        description="Entailment, claim verification and text classification with attentive-convolution networks.",
        lifespan=lifespan,
        # Swagger UI and ReDoc load their scripts from a CDN: blank pages on an air-gapped host,
        # and third-party code on our origin. Off unless ATTSERVE_DOCS=true.
        docs_url="/docs" if settings.docs else None,
        redoc_url="/redoc" if settings.docs else None,
    )
    app.state.service = service
    app.state.worker_group = WorkerGroup.from_environment()  # None unless run by service.workers
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(oip_router)
    install_fast_path(app, router, TASK_BODIES, predict)  # in front of the task routes, which keep the schema
    if settings.ui:
        mount_ui(app)
    # Outermost first: metrics also see the 400s of the Host allow-list, the 401s of the API
    # keys and the 413s of the body limit; host and key are checked before the body is read.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, service=service)
    if settings.api_keys:
        app.add_middleware(ApiKeyMiddleware, settings=settings)
        log.info("API keys required", extra={"keys": len(settings.api_keys),
                                             "metrics_require_key": settings.metrics_require_key})
    if settings.allowed_hosts:
        app.add_middleware(HostAllowListMiddleware, settings=settings)
    app.add_middleware(RequestMetricsMiddleware, metrics=service.metrics)
    return app
