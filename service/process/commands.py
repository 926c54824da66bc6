"""`attserve serve` (and `python -m service`): run the service under uvicorn.

Options override the `ATTSERVE_*` environment; everything else comes from `Settings`.
Imports stay light (no torch), so the CLI starts instantly.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Optional

import typer

log = logging.getLogger("service.process.commands")


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

    from service.logs import configure_logging
    from service.inference.registry import StartupError
    from service.inference.runtime import DeviceUnavailable
    from service.process.server import backlog, build_server, run_server
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
            from service.inference.runtime import requested_providers

            # fail here, once, rather than in every worker: DEVICE=cuda without CUDA, and what
            # discovery refuses (a typo in --models, an empty repository, an invalid bundle)
            requested_providers(settings.device)
            check_repositories(settings)
            from service.process.workers import prepare_shared_dir

            shared = prepare_shared_dir()
        else:
            server = build_server(settings)
    except (DeviceUnavailable, StartupError) as exc:
        log.error("cannot start", extra={"error": str(exc)})
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if settings.workers > 1:
        from service.process.workers import run_workers

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
    """Discovery's start-up checks without loading anything (raises StartupError).

    The Service it builds has metrics; with PROMETHEUS_MULTIPROC_DIR set they are
    prometheus-client's multiprocess ones, and a metric without labels writes its file at once.
    The workers' directory may not exist yet, and must hold only the workers' files (or
    prepare_shared_dir refuses it as foreign), so the check's metrics go to a scratch directory."""
    import os
    import tempfile

    from service.inference.registry import Service
    from service.worker_group import MULTIPROC_ENV

    named = os.environ.get(MULTIPROC_ENV)
    if named is None:
        Service(settings).discover()
        return
    with tempfile.TemporaryDirectory(prefix="attserve-check-") as scratch:
        os.environ[MULTIPROC_ENV] = scratch
        try:
            Service(settings).discover()
        finally:
            os.environ[MULTIPROC_ENV] = named
