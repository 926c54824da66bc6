"""`attserve serve` (and `python -m service`): run the service under uvicorn.

Its flags are generated from `Settings` (one per setting but the secrets, each overriding its
`ATTSERVE_*` variable; a flag not given leaves the environment or the default). Imports stay
light (no torch): building the flags imports pydantic-settings, not the service.
"""

from __future__ import annotations

import inspect
import logging
import sys
from types import UnionType
from typing import Annotated, Any, Callable, Literal, Optional, Union, get_args, get_origin

import typer
import typer.core

log = logging.getLogger("service.process.commands")


def _serve(**options: object) -> None:
    """Serve the model repository's bundles over HTTP (dynamic batching, Prometheus metrics).

    Each flag overrides its ATTSERVE_* environment variable (docs/configuration.md lists them all)."""
    from pydantic import ValidationError

    from service.logs import configure_logging
    from service.inference.registry import StartupError
    from service.inference.runtime import DeviceUnavailable
    from service.process.server import backlog, build_server, run_server
    from service.settings import Settings

    overrides = {name: value for name, value in options.items() if value is not None}  # None: not given
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


def _flag_type(annotation: Any) -> Any:
    """The type typer parses a flag of a field of this annotation as: scalars and a Literal's choices as
    themselves, anything else (paths, lists, the canary table) as text, which Settings' validators parse
    as they parse the environment's."""
    if get_origin(annotation) in (Union, UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = args[0] if len(args) == 1 else str
    return annotation if annotation in (bool, int, float) or get_origin(annotation) is Literal else str


def _flag_help(doc: Any) -> str:
    text = f"{doc.description} [env var: {doc.env_var}] [default: {doc.default}]".replace("**", "").replace("`", "")
    if not getattr(typer.core, "HAS_RICH", True):  # TYPER_USE_RICH=0: click's plain help
        return text
    from rich.markup import escape  # typer's rich help would read "[env var: ...]" as markup

    return escape(text)


def _with_setting_flags(run: Callable[..., None]) -> Callable[..., None]:
    """`run` as a typer command with a flag per setting (service.settings.setting_docs: the flag, its
    environment variable, default and help come from the field), grouped as docs/configuration.md.
    A flag not given is None, so the environment or the default stands."""
    from service.settings import Settings, setting_docs

    params = []
    for doc in setting_docs():
        if doc.flag is None:  # env only (a secret): the reason is in docs/configuration.md
            continue
        flag_type = _flag_type(Settings.model_fields[doc.name].annotation)
        names = [f"{doc.flag}/--no-{doc.flag[2:]}"] if flag_type is bool else [doc.flag]
        option = typer.Option(*names, help=_flag_help(doc), rich_help_panel=doc.group, show_default=False)
        params.append(inspect.Parameter(doc.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[Optional[flag_type], option]))

    def command(**options: Any) -> None:
        run(**options)

    command.__name__, command.__qualname__, command.__doc__ = "serve", "serve", run.__doc__
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {param.name: param.annotation for param in params}
    return command


serve = _with_setting_flags(_serve)


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
