"""`attserve serve` (and `python -m service`): run the service under uvicorn.

Options override the `ATTSERVE_*` environment; everything else comes from `Settings`.
Imports stay light (no torch), so the CLI starts instantly.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from types import FrameType
from typing import Annotated, Optional

import typer

log = logging.getLogger("service.commands")


def serve(
    host: Annotated[Optional[str], typer.Option(help="Interface to bind (env ATTSERVE_HOST, default 127.0.0.1).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (env ATTSERVE_PORT, default 8000).")] = None,
    model_repository: Annotated[
        Optional[str], typer.Option(help="Directory of bundles, or several separated by commas "
                                         "(env ATTSERVE_MODEL_REPOSITORY).")
    ] = None,
    models: Annotated[Optional[str], typer.Option(help="Comma-separated bundle names to serve (default: all).")] = None,
    device: Annotated[Optional[str], typer.Option(help="auto | cpu | cuda (env ATTSERVE_DEVICE).")] = None,
    allow_partial_start: Annotated[Optional[bool], typer.Option(
        "--allow-partial-start/--no-allow-partial-start",
        help="Serve the healthy bundles when one is invalid (env ATTSERVE_ALLOW_PARTIAL_START; default: refuse to start).",
    )] = None,
    log_level: Annotated[Optional[str], typer.Option(help="Log level (env ATTSERVE_LOG_LEVEL).")] = None,
    workers: Annotated[
        Optional[int], typer.Option(help="Server processes behind the port (env ATTSERVE_WORKERS, default 1).")
    ] = None,
) -> None:
    """Serve the model repository's bundles over HTTP (dynamic batching, Prometheus metrics)."""
    from pydantic import ValidationError

    from service.app import StartupError
    from service.logs import configure_logging
    from service.runtime import DeviceUnavailable
    from service.settings import Settings

    overrides = {k: v for k, v in dict(host=host, port=port, model_repository=model_repository, models=models,
                                       device=device, log_level=log_level, workers=workers,
                                       allow_partial_start=allow_partial_start).items() if v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg'].replace('Input should be', 'must be')}"
                             for e in exc.errors())
        typer.echo(f"invalid settings: {problems}", err=True)
        raise typer.Exit(2) from None
    configure_logging(settings.log_level)
    busy = port_in_use(settings.host, settings.port)
    if busy:  # before any bundle loads: exit code 3 means a bundle that failed to load
        log.error("cannot start", extra={"error": busy})
        typer.echo(f"error: {busy}", err=True)
        raise typer.Exit(PORT_IN_USE_EXIT)
    try:
        if settings.workers > 1:
            from service.runtime import requested_providers

            # fail here, once, rather than in every worker: DEVICE=cuda without CUDA, and what
            # discovery refuses (a typo in --models, an empty repository, an invalid bundle)
            requested_providers(settings.device)
            check_repositories(settings)
            from service.workers import prepare_shared_dir

            shared = prepare_shared_dir()
        else:
            server = build_server(settings)
    except (DeviceUnavailable, StartupError) as exc:
        log.error("cannot start", extra={"error": str(exc)})
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if settings.workers > 1:
        from service.workers import run_workers

        sys.exit(run_workers(settings, backlog(settings), shared))
    sys.exit(run_server(server))


# Exit codes (README "Configuration"): 2 bad settings, a bad config.json or bundle name, or a
# device that is missing; 3 a bundle that fails to load (or the server could not start);
# 4 the port is already in use.
PORT_IN_USE_EXIT = 4


def port_in_use(host: str, port: int) -> str | None:
    """Why the service cannot listen on host:port when another program holds it, else None
    (any other bind error is left to uvicorn)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT is no obstacle
            sock.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"port {port} on {host} is already in use; stop what holds it or choose another (--port or ATTSERVE_PORT)"
    return None


def check_repositories(settings) -> None:
    """Discovery's start-up checks without loading anything (raises StartupError)."""
    from service.app import Service

    Service(settings).discover()


def run_server(server: "DrainingServer", sockets=None) -> int:
    """Serve until stopped; the exit code: 3 when a bundle failed to load or the server
    could not start, else 0."""
    server.run(sockets=sockets)
    if server.service.fatal is not None:
        typer.echo(f"error: {server.service.fatal}", err=True)
        return 3
    if server.started is False:
        return 3
    return 0


def backlog(settings) -> int:
    # a burst of connections beyond the accept queue is dropped by the kernel after the
    # handshake (the client believes it is connected, the server never sees it); the kernel
    # caps this at net.core.somaxconn
    return max(2048, settings.max_connections)


def build_server(settings) -> "DrainingServer":
    """The app and its uvicorn server for these settings (one process; service.workers runs
    one per worker). Raises DeviceUnavailable for DEVICE=cuda without CUDA."""
    import uvicorn

    from service.app import create_app
    from service.http import guarded_protocol

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # our JSON handler on the root logger formats uvicorn's records too
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
        lifespan="on",
        # header timeout, header size limit and connection cap: service.http
        http=guarded_protocol(settings),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        backlog=backlog(settings),
    )
    service = app.state.service
    service.discover()  # before the port opens: raises StartupError
    server = DrainingServer(config, service)

    def stop(message: str) -> None:  # a bundle failed to load (runs on the event loop)
        server.should_exit = True

    service.on_fatal = stop
    return server


try:  # uvicorn is a base dependency, but keep `--help` alive without it
    import uvicorn as _uvicorn
except ModuleNotFoundError:  # pragma: no cover
    _uvicorn = None


if _uvicorn is not None:

    class DrainingServer(_uvicorn.Server):
        """uvicorn's Server that flips the service into draining mode the moment SIGTERM /
        SIGINT arrives, so requests still arriving on open connections get a 503 JSON answer
        while queued and in-flight work finishes."""

        def __init__(self, config: "_uvicorn.Config", service) -> None:
            super().__init__(config)
            self.service = service
            self._loop: asyncio.AbstractEventLoop | None = None

        async def serve(self, sockets=None) -> None:
            self._loop = asyncio.get_running_loop()
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self._loop is not None and sig in (signal.SIGTERM, signal.SIGINT):
                # signal handlers run between bytecodes; hand the work to the loop safely
                self._loop.call_soon_threadsafe(self.service.begin_drain)
            super().handle_exit(sig, frame)
