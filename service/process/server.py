"""One server process: the app and its uvicorn server for the settings, with the drain on
SIGTERM. `attserve serve` runs one; each worker of service.process.workers runs its own."""

from __future__ import annotations

import asyncio
import signal
from types import FrameType

import typer


def run_server(server: "DrainingServer", sockets=None) -> int:
    """Serve until stopped; the exit code: 3 when a bundle failed to load or the server
    could not start, else 0 (SIGTERM / SIGINT included: DrainingServer drains, and does not
    die by the signal)."""
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
    """The app and its uvicorn server for these settings (one process; service.process.workers runs
    one per worker). Raises DeviceUnavailable for DEVICE=cuda without CUDA."""
    import uvicorn

    from service.http.app import create_app
    from service.http.http import guarded_protocol

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
        # header timeout, header size limit and connection cap: service.http.http
        http=guarded_protocol(settings),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        server_header=False,  # no "server: uvicorn": what runs here is nobody's business
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
            # uvicorn's own handler does the same two steps and also records the signal, to
            # raise it again once it has shut down: the process would then die by SIGTERM (143)
            # after a clean drain. A drained stop is this service's normal end, exit 0 (README's
            # exit codes; run_server), so the signal is handled here and not raised again.
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True  # a second Ctrl-C: stop without waiting for the drain
            else:
                self.should_exit = True
