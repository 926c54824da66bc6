"""`ATTSERVE_WORKERS=N` (`attserve serve --workers N`): N server processes behind one port.

One process runs one event loop and, for small requests, is bound by it (the route's parsing,
validation and rendering hold the loop), so more cores need more processes. The supervisor
starts N workers (multiprocessing "spawn": a fresh interpreter each, no forked onnxruntime or
event-loop state); each listens on the port with its own SO_REUSEPORT socket, so the kernel
spreads new connections evenly over them by hash. (One shared listening socket let whichever
worker woke first accept a burst of keep-alive connections: 64 `wrk` connections opened at once
went mostly to one worker, and what two workers gained over one varied widely from run to run;
the figures are in docs/configuration.md, ATTSERVE_WORKERS.)
Each worker loads every model and warms it up itself.

Shared across workers, through one directory per start (`PROMETHEUS_MULTIPROC_DIR`, a fresh
temporary directory unless the environment names one; emptied at start, and only when it is
empty already or carries the service's marker file: another directory stops start-up):
  * metrics: prometheus-client's multiprocess mode; `/metrics` on any worker is the sum over
    all of them (queue depth: the sum over live workers);
  * readiness: a worker writes `workers/<pid>` once its models are ready and removes it when
    it drains; `/health/ready` is 200 only while all N are ready.

SIGTERM or SIGINT to the supervisor is forwarded to every worker, each drains as a single
process does, and the supervisor exits 0 when all of them did. A worker that dies otherwise is
replaced (its metric files of live gauges are dropped); one that dies within
`CRASH_WINDOW_S` of its start `MAX_QUICK_CRASHES` times in a row stops the service (exit 3):
a bundle that kills the process would otherwise restart forever. A worker whose supervisor is
gone (killed with SIGKILL) drains and exits rather than keep serving on the port.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from service.worker_group import MULTIPROC_ENV, WORKER_COUNT_ENV, WorkerGroup

log = logging.getLogger("service.process.workers")

# written into a named PROMETHEUS_MULTIPROC_DIR: the directory is the service's own to empty
MULTIPROC_MARKER = ".attserve-multiproc"
CRASH_WINDOW_S = 10.0
MAX_QUICK_CRASHES = 3
READY_POLL_S = 0.1
SUPERVISOR_POLL_S = 0.5


def watch_readiness(service: Any, group: WorkerGroup) -> threading.Thread:
    """A daemon thread keeping this worker's marker in step with `service.ready` (a worker
    that nobody probes must still count as ready)."""
    pid = os.getpid()

    def run() -> None:
        marked = False
        while True:
            ready = bool(service.ready)
            if ready != marked:
                group.mark(pid, ready)
                marked = ready
            if service.draining:
                group.mark(pid, False)
                return
            time.sleep(READY_POLL_S)

    thread = threading.Thread(target=run, name="worker-readiness", daemon=True)
    thread.start()
    return thread


def watch_supervisor(supervisor_pid: int) -> threading.Thread:
    """A daemon thread that drains this worker (SIGTERM to itself) once its supervisor is gone,
    e.g. killed with SIGKILL: an orphaned worker would otherwise keep serving on the port."""

    def run() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(SUPERVISOR_POLL_S)
        log.error("supervisor gone; draining", extra={"supervisor_pid": supervisor_pid})
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=run, name="worker-supervisor-watch", daemon=True)
    thread.start()
    return thread


def _worker_main(settings: Any, backlog: int, supervisor_pid: int) -> None:
    """A worker process: the same app and server as a single-process `attserve serve`."""
    from service.logs import configure_logging
    from service.inference.registry import StartupError
    from service.process.server import build_server, run_server

    configure_logging(settings.log_level)
    # Ctrl-C in a terminal reaches the whole process group: let the supervisor decide, it
    # forwards SIGTERM (the worker would otherwise stop at once, without draining).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server = build_server(settings)
    except StartupError as exc:  # the repository changed since the supervisor checked it
        log.error("cannot start", extra={"error": str(exc)})
        raise SystemExit(3) from None
    group = WorkerGroup.from_environment()
    if group is not None:
        watch_readiness(server.service, group)
    watch_supervisor(supervisor_pid)
    sock = bind(settings.host, settings.port, backlog)
    raise SystemExit(run_server(server, sockets=[sock]))


def prepare_shared_dir() -> Path:
    """The workers' shared directory: a fresh temporary one, or PROMETHEUS_MULTIPROC_DIR
    emptied (stale files would add old counts to the sums) and marked as the service's. A
    named directory that holds files but not the marker may be anything (a volume, /tmp):
    StartupError, and nothing in it is touched."""
    from service.inference.registry import StartupError

    named = os.environ.get(MULTIPROC_ENV)
    if not named:
        return Path(tempfile.mkdtemp(prefix="attserve-workers-"))
    shared = Path(named)
    shared.mkdir(parents=True, exist_ok=True)
    marker = shared / MULTIPROC_MARKER
    stale = [child for child in shared.iterdir() if child.name != MULTIPROC_MARKER]
    if stale and not marker.is_file():
        raise StartupError(f"{MULTIPROC_ENV}={shared} holds files and is not the service's (no {MULTIPROC_MARKER} "
                           "in it); name an empty or new directory: the service empties it at every start")
    for child in stale:
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    marker.write_text("attserve's metrics directory for its workers: emptied at every start\n")
    return shared


def bind(host: str, port: int, backlog: int | None) -> socket.socket:
    """A socket bound to the port with SO_REUSEPORT (every worker has its own), listening
    unless `backlog` is None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if backlog is not None:
        sock.listen(backlog)
    return sock


def run_workers(settings: Any, backlog: int, shared: Path) -> int:
    """Supervise `settings.workers` worker processes sharing `shared` (prepare_shared_dir);
    the exit code of the service."""
    from prometheus_client import multiprocess

    created = MULTIPROC_ENV not in os.environ
    os.environ[MULTIPROC_ENV] = str(shared)  # inherited by the spawned workers
    os.environ[WORKER_COUNT_ENV] = str(settings.workers)
    group = WorkerGroup(shared, settings.workers)
    # Bound (not listening, so it is never handed a connection) for as long as the service
    # runs: a port that another program holds fails here, once, and no program without
    # SO_REUSEPORT can take it between worker restarts.
    reservation = bind(settings.host, settings.port, None)
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_worker_main, args=(settings, backlog, os.getpid()),
                                  name=f"attserve-worker-{index}")
        process.start()
        log.info("worker started", extra={"worker": index, "pid": process.pid})
        return process

    def forward(sig: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            log.info("stopping workers", extra={"signal": signal.Signals(sig).name})
        stopping.set()
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    processes = [start(i) for i in range(settings.workers)]
    started_at = [time.monotonic()] * settings.workers
    quick_crashes = [0] * settings.workers
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    log.info("serving", extra={"workers": settings.workers, "host": settings.host, "port": settings.port,
                               "metrics_dir": str(shared)})
    exit_code = 0
    try:
        while True:
            for i, process in enumerate(processes):
                process.join(timeout=0.2 / max(1, len(processes)))
                if process.exitcode is None:
                    continue
                if process.pid is not None:
                    multiprocess.mark_process_dead(process.pid, str(shared))
                    group.mark(process.pid, False)
                if stopping.is_set():
                    continue
                quick = time.monotonic() - started_at[i] < CRASH_WINDOW_S
                quick_crashes[i] = quick_crashes[i] + 1 if quick else 0
                log.error("worker exited", extra={"worker": i, "pid": process.pid, "exitcode": process.exitcode,
                                                  "quick_crashes": quick_crashes[i]})
                if quick_crashes[i] >= MAX_QUICK_CRASHES or process.exitcode == 3:
                    log.error("worker cannot start; stopping the service", extra={"worker": i})
                    exit_code = 3
                    forward(signal.SIGTERM, None)
                    continue
                processes[i] = start(i)
                started_at[i] = time.monotonic()
            if stopping.is_set() and all(p.exitcode is not None for p in processes):
                break
    finally:
        reservation.close()
        if created:
            shutil.rmtree(shared, ignore_errors=True)
    # a worker that drained exits 0 (service.process.server.DrainingServer); one stopped by the
    # signal before its server ran (still loading) ends by it, which is no failure either
    clean = (0, -signal.SIGTERM, -signal.SIGINT)
    if exit_code == 0 and any(p.exitcode not in clean for p in processes):
        exit_code = 1
    log.info("workers stopped", extra={"exitcodes": [p.exitcode for p in processes]})
    return exit_code
