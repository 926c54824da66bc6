"""The FastAPI application: the model registry (service.inference.registry) behind the task routes
(service.http.routes, one per task of core.tasks), the Open Inference Protocol (service.http.oip) and the
UI; the lifespan (discover, load and warm up in the background, drain) and the middleware, with
the entry point (service.http.entry: metrics and the task endpoints' hot path) outermost.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import hashlib
import logging
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import AsyncIterator, Callable

from fastapi import FastAPI

from service.http.auth import ApiKeyMiddleware, HostAllowListMiddleware
from service.http.cache import ResponseCache
from service.http.entry import BodyLimitMiddleware, ServiceEntry
from service.http.errors import install_error_handlers
from service.metrics import sample_worker_process, watch_event_loop
from service.inference.model_control import ModelControl
from service.http.oip import router as oip_router
from service.http.predict import router as predict_router
from service.inference.registry import Service
from service.http.repository_api import router as repository_router
from service.http.routes import router
from service.settings import Settings
from service.http.tokenize import router as tokenize_router
from service.tracing import Tracing
from service.http.ui import mount_ui
from service.worker_group import WorkerGroup
from service.http.zero_shot import router as zero_shot_router

log = logging.getLogger("service.http.app")


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
    (many clients' explanations, dropped at the write timeout) left RSS far up for good; a trim
    is cheap when there is nothing to give back (the figures: docs/configuration.md,
    ATTSERVE_MEMORY_TRIM_S)."""
    trim = malloc_trim()
    if trim is None or every_s <= 0:
        return
    while True:
        await asyncio.sleep(every_s)
        await asyncio.to_thread(trim)


# --- the app --------------------------------------------------------------------------------

def _lifespan(service: Service, settings: Settings) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: load the models, then run model control (app.state.model_control), trim
    memory and sample the event loop and process while serving; drain and shut down after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not service.discovered:  # `attserve serve` discovers before uvicorn starts
            service.discover()
        loader = asyncio.create_task(service.load_all(), name="load-models")

        async def control_after_load() -> None:
            await loader
            await app.state.model_control.run()

        controller = asyncio.create_task(control_after_load(), name="model-control")
        trimmer = asyncio.create_task(release_memory(settings.memory_trim_s), name="release-memory")
        lag = asyncio.create_task(watch_event_loop(service.metrics), name="event-loop-lag")
        process = asyncio.create_task(sample_worker_process(service.metrics), name="process-metrics")
        try:
            yield
        finally:
            trimmer.cancel()
            lag.cancel()
            process.cancel()
            controller.cancel()
            service.begin_drain()
            if not loader.done():
                # a session load runs in a thread and cannot be interrupted; wait for it
                await asyncio.wait({loader}, timeout=settings.shutdown_timeout_s)
            await service.shutdown()
            if service.tracing is not None:  # export the spans still buffered
                await asyncio.to_thread(service.tracing.shutdown)

    return lifespan


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    service = Service(settings, response_cache=ResponseCache.from_settings, tracing=Tracing.from_settings(settings))

    app = FastAPI(
        title="attserve",
        version="0.1.0",
        description="Entailment, claim verification and text classification with attentive-convolution networks.",
        lifespan=_lifespan(service, settings),
        # Starlette's slash redirect builds its Location from the Host header; the 404 handler
        # redirects with a relative one instead (service.http.errors.slash_twin)
        redirect_slashes=False,
        # Swagger UI and ReDoc load their scripts from a CDN: blank pages on an air-gapped host,
        # and third-party code on our origin. Off unless ATTSERVE_DOCS=true.
        docs_url="/docs" if settings.docs else None,
        redoc_url="/redoc" if settings.docs else None,
        # FastAPI's native OpenTelemetry metrics and logs: off unless ATTSERVE_OPENTELEMETRY=true,
        # since even with no provider configured it looks the providers up on every request.
        # Never its spans: traces are service.tracing's (ATTSERVE_OTLP_ENDPOINT), which see the
        # hot path's requests too, and one server span per request is what a trace should hold.
        telemetry={"tracing": False, "metrics": settings.opentelemetry, "logs": settings.opentelemetry},
    )
    app.state.service = service
    app.state.worker_group = WorkerGroup.from_environment()  # None unless run by service.process.workers
    control = ModelControl(service, app.state.worker_group)
    service.pick = control.pick
    app.state.model_control = control
    app.state.control_key_digests = [hashlib.sha256(k.get_secret_value().encode()).digest()
                                     for k in settings.control_api_keys]
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(zero_shot_router)  # an entailment composition, no task of its own
    app.include_router(predict_router)  # Text Embeddings Inference's contract over the tasks
    if settings.model_control_mode != "none":
        app.include_router(repository_router)  # before the protocol's /v2/models routes
    app.include_router(oip_router)
    app.include_router(tokenize_router)
    if settings.ui:
        mount_ui(app)
    # Outermost first: the entry (metrics, the task endpoints' hot path) also sees the 400s of
    # the Host allow-list, the 401s of the API keys and the 413s of the body limit; host and key
    # are checked before the body is read.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, service=service)
    if settings.api_keys:
        app.add_middleware(ApiKeyMiddleware, settings=settings)
        log.info("API keys required", extra={"keys": len(settings.api_keys),
                                             "metrics_require_key": settings.metrics_require_key})
    if settings.allowed_hosts:
        app.add_middleware(HostAllowListMiddleware, settings=settings)
    app.add_middleware(ServiceEntry, service=service)
    return app
