"""ATTSERVE_WORKERS=2 under the real `python -m service`: one port, both workers answer, and
/metrics on either is the sum over both (known traffic, exact counts); readiness needs every
worker; a killed worker is replaced without losing the counts; SIGTERM drains all and exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
from bench.harness import ServiceProcess  # noqa: E402

REQUESTS = 48


def requests_total(base: str, endpoint: str, status: str = "200") -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("attserve_requests_total{") and f'endpoint="{endpoint}"' in line and f'status="{status}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def process_memory(base: str) -> dict[int, float]:
    """process_resident_memory_bytes of each worker /metrics reports, by its pid label."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {int(pid): float(value) for pid, value in
            re.findall(r'^process_resident_memory_bytes\{pid="(\d+)"\} (\S+)$', text, re.M)}


def counted_pids(metrics_dir: Path) -> set[int]:
    # prometheus-client's multiprocess files: counter_<pid>.db appears when a worker first counts
    return {int(m.group(1)) for f in metrics_dir.iterdir() if (m := re.fullmatch(r"counter_(\d+)\.db", f.name))}


def ready_workers(metrics_dir: Path) -> set[int]:
    return {int(f.name) for f in (metrics_dir / "workers").iterdir()}


def classify(base: str, i: int) -> int:
    # a new connection per request, so the kernel spreads them over the workers
    r = httpx.post(f"{base}/classify", json={"text": f"the team won the match number {i}"},
                   headers={"connection": "close"}, timeout=30)
    return r.status_code


def workers_service(repository: Path, tmp_path: Path, **settings) -> ServiceProcess:
    """Two workers (log in a file: three processes writing into an unread pipe would block),
    their shared metrics directory at tmp_path/metrics."""
    server = ServiceProcess(repository, tmp_path / "service.log", workers=2, **settings)
    server.env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    return server


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_workers_share_the_port_the_metrics_and_the_readiness(service_bundles, tmp_path):
    metrics_dir = tmp_path / "metrics"
    server = workers_service(service_bundles, tmp_path, max_batch_delay_ms=1)
    base = server.base
    workers: set[int] = set()
    try:
        server.start()
        workers = ready_workers(metrics_dir)
        assert len(workers) == 2 and server.pid not in workers

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: classify(base, i), range(REQUESTS)))
        assert statuses == [200] * REQUESTS
        assert counted_pids(metrics_dir) == workers, "both workers should have answered some requests"
        # whichever worker answers /metrics, it reports both workers' counts
        assert {requests_total(base, "classify") for _ in range(6)} == {float(REQUESTS)}
        # and each live worker's process metrics, labelled by its pid
        memory = process_memory(base)
        assert set(memory) == workers and min(memory.values()) > 1e6, memory

        # a worker that dies is replaced; until its successor is ready the service is not
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in ready_workers(metrics_dir), 10, "the dead worker's readiness marker to go")
        r = httpx.get(f"{base}/health/ready", timeout=5)
        if r.status_code == 503:  # the survivor answered before the new worker was ready
            assert "workers ready: 1 of 2" in r.json()["error"]["message"]
        wait_for(lambda: len(ready_workers(metrics_dir)) == 2, 120, "a replacement worker")
        assert httpx.get(f"{base}/health/ready", timeout=5).status_code == 200
        assert victim not in ready_workers(metrics_dir)
        assert victim not in process_memory(base) and len(process_memory(base)) == 2
        # the dead worker's counts stay in the sum
        assert requests_total(base, "classify") == float(REQUESTS)
        assert classify(base, 0) == 200
        assert requests_total(base, "classify") == float(REQUESTS + 1)
    finally:
        if server.proc is not None:
            server.terminate(timeout_s=60)
    assert server.proc.returncode == 0, server.log_path.read_text()[-2000:]
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_workers_setting_is_validated():
    from service.settings import Settings

    assert Settings(workers=3).workers == 3
    # each worker gets its share of the cores, split again over its models
    assert Settings(workers=2, intra_op_threads=None).threads_per_model(1) == max(1, len(os.sched_getaffinity(0)) // 2)
    with pytest.raises(ValueError):
        Settings(workers=0)


def test_workers_refuse_a_bad_allow_list_once_before_spawning(service_bundles, tmp_path):
    """The supervisor runs discovery's checks itself: a typo stops start-up with exit 2 and the
    names that exist, before any worker (or port) exists."""
    server = workers_service(service_bundles, tmp_path, models="nli,no-such-model")
    done = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, env=server.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no-such-model" in done.stderr and "nli" in done.stderr
    assert "worker started" not in done.stderr


def test_workers_stop_when_their_supervisor_is_killed(service_bundles, tmp_path):
    """SIGKILL leaves no orphan: each worker notices its supervisor is gone, drains and exits,
    so nothing keeps serving on the port."""
    server = workers_service(service_bundles, tmp_path)
    try:
        server.start()
        workers = ready_workers(tmp_path / "metrics")
        assert len(workers) == 2
    finally:
        if server.proc is not None:
            server.proc.kill()  # SIGKILL: the supervisor gets no chance to stop its workers
            server.proc.wait(timeout=10)

    def all_gone() -> bool:
        for pid in workers:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            return False
        return True

    try:
        wait_for(all_gone, 30, "the orphaned workers to exit")
    finally:  # a failing run (or tests/mutation_check.py) must not leave orphans behind
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.base}/health/live", timeout=2)


def test_a_named_metrics_directory_is_emptied_only_when_it_is_the_services(tmp_path, monkeypatch):
    """PROMETHEUS_MULTIPROC_DIR pointing at a directory with other files (a volume,
    /tmp) stops start-up and keeps them; the service's own directory (its marker) is emptied."""
    from service.inference.registry import StartupError
    from service.process.workers import MULTIPROC_ENV, MULTIPROC_MARKER, prepare_shared_dir

    foreign = tmp_path / "data"
    (foreign / "keep").mkdir(parents=True)
    (foreign / "precious.txt").write_text("not the service's")
    monkeypatch.setenv(MULTIPROC_ENV, str(foreign))
    with pytest.raises(StartupError, match="holds files and is not the service's"):
        prepare_shared_dir()
    assert sorted(p.name for p in foreign.iterdir()) == ["keep", "precious.txt"]

    own = tmp_path / "metrics"  # new: created and marked; then stale files of a run are emptied
    monkeypatch.setenv(MULTIPROC_ENV, str(own))
    assert prepare_shared_dir() == own and [p.name for p in own.iterdir()] == [MULTIPROC_MARKER]
    (own / "counter_123.db").write_bytes(b"old counts")
    (own / "workers").mkdir()
    (own / "workers" / "123").touch()
    (own / "link").symlink_to(foreign)
    prepare_shared_dir()
    assert [p.name for p in own.iterdir()] == [MULTIPROC_MARKER]
    assert (foreign / "precious.txt").exists()  # a link is removed, not followed


def test_workers_refuse_a_foreign_metrics_directory_before_spawning(service_bundles, tmp_path):
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("not the service's")
    env = {**os.environ, "ATTSERVE_MODEL_REPOSITORY": str(service_bundles), "ATTSERVE_WORKERS": "2",
           "PROMETHEUS_MULTIPROC_DIR": str(foreign), "ATTSERVE_PORT": "0"}
    result = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "not the service's" in result.stderr
    assert (foreign / "precious.txt").read_text() == "not the service's"
