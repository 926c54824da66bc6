"""Issue 61.9 / 65: the root index lists every route, /metrics carries process metrics and no
`_created` series, Triton's model-config endpoint, /tokenize renders large answers off the
event loop, and the hints that name pip name the venv's."""

from __future__ import annotations

import asyncio

import pytest

from service.settings import Settings
from tests.bundles import metric_samples, running_app


def get_all(settings: Settings, paths: list[str]) -> list:
    async def scenario():
        async with running_app(settings) as (_, client):
            return [await client.get(path) for path in paths]
    return asyncio.run(scenario())


def test_the_root_index_lists_every_public_route(service_bundles):
    """Every operation of the OpenAPI schema, /tokenize and the /v2 protocol among them, is in
    the index with its description (the index is derived from the routes, not kept by hand)."""
    spec, index = get_all(Settings(model_repository=service_bundles), ["/openapi.json", "/"])
    listed = index.json()["endpoints"]
    operations = [f"{method.upper()} {path}" for path, ops in spec.json()["paths"].items() for method in ops]
    assert "POST /tokenize" in operations and any(" /v2/" in o for o in operations)
    missing = [o for o in operations if o not in listed]
    assert not missing, missing
    assert "GET /ui" in listed
    assert all(listed[o] for o in operations), {o: listed[o] for o in operations if not listed[o]}


def test_metrics_have_process_metrics_and_no_created_series(service_bundles):
    (text,) = [r.text for r in get_all(Settings(model_repository=service_bundles), ["/metrics"])]
    assert "_created" not in text
    assert metric_samples(text, "process_resident_memory_bytes")[()] > 1e6
    assert metric_samples(text, "process_cpu_seconds_total")[()] > 0
    assert metric_samples(text, "process_open_fds")[()] > 0


WORKER = """
import os, sys
from service.metrics import Metrics, render
metrics = Metrics()
if sys.argv[1] == "render":
    sys.stdout.write(render(metrics).decode())
print("pid", os.getpid())
"""


def test_process_metrics_with_workers_are_one_series_per_live_worker(tmp_path):
    """In multiprocess mode (ATTSERVE_WORKERS > 1) each worker's process metrics carry its pid,
    and a worker marked dead (as the supervisor does) drops out."""
    import os
    import subprocess
    import sys

    from prometheus_client import multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def worker(mode: str) -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", WORKER, mode], env=env, capture_output=True, text=True,
                             check=True, timeout=120).stdout
        return out.rsplit("pid ", 1)[1].strip(), out

    first, _ = worker("quiet")
    second, text = worker("render")
    memory = metric_samples(text, "process_resident_memory_bytes")
    assert set(memory) == {(("pid", first),), (("pid", second),)} and min(memory.values()) > 1e6
    assert metric_samples(text, "process_cpu_seconds_total")[(("pid", second),)] > 0
    multiprocess.mark_process_dead(int(first), str(tmp_path))
    _, text = worker("render")
    assert (("pid", first),) not in metric_samples(text, "process_resident_memory_bytes")
