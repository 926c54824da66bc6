"""Reloads under load (issue 52's acceptance): `python -m service` with N workers in explicit
model control, a /verify model served as versions 1 and 2 (copies of one bundle, Triton's
numbered folders), C clients posting claims without pause; first a steady-state window, then R
reloads that alternate the default version (version 2 leaves the folder and `load` unloads it,
it comes back and `load` loads and warms it up again), then the same window again.

Reported: answers by status (every one must be a 200), answers by the version that produced
them (`X-Attserve-Model-Version`, each a version that was serving), latency percentiles in the
steady state and during the reloads, each reload's time, and the workers' resident memory
(summed) at the start, after the reloads and after the last window.

    python -m bench.model_reload --reloads 20 --concurrency 32 --workers 2
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from bench.harness import ServiceProcess
from bench.loadgen import percentiles, run_async
from service.settings import DEFAULT_MODEL_REPOSITORY

app = typer.Typer(add_completion=False)

CLAIMS = [
    {"claim": "Nikolaj Coster-Waldau is a Danish actor.",
     "evidence": ["Nikolaj Coster-Waldau (born 27 July 1970) is a Danish actor and producer."]},
    {"claim": "The Amazon flows through Brazil.",
     "evidence": ["The Amazon River flows through Brazil, Peru and Colombia.", "Paris is the capital of France."]},
    {"claim": "The Moon orbits Mars.", "evidence": ["The Moon orbits the Earth once every 27.3 days."]},
]


def worker_rss_bytes(supervisor_pid: int) -> int:
    """Resident memory of the supervisor's children (the workers), summed (Linux /proc)."""
    total = 0
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split()
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


async def load_window(base: str, concurrency: int, stop: asyncio.Event, record: list) -> None:
    """C clients posting claims until `stop`; each answer as (phase, status, version, seconds)."""
    phase = {"now": "steady"}
    record.append(phase)  # the caller switches phases through this dict

    async def client_loop(i: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
            n = i
            while not stop.is_set():
                body = CLAIMS[n % len(CLAIMS)]
                n += 1
                started = time.monotonic()
                try:
                    r = await client.post("/verify", json=body)
                    record.append((phase["now"], r.status_code, r.headers.get("x-attserve-model-version"),
                                   time.monotonic() - started))
                except httpx.HTTPError as exc:
                    record.append((phase["now"], type(exc).__name__, None, time.monotonic() - started))

    await asyncio.gather(*(client_loop(i) for i in range(concurrency)))


async def scenario(base: str, repo: Path, model: str, pid: int, reloads: int, concurrency: int,
                   window_s: float) -> dict:
    stop = asyncio.Event()
    record: list = []
    load = asyncio.create_task(load_window(base, concurrency, stop, record))
    await asyncio.sleep(0.5)
    phase = record[0]
    rss = {"start": worker_rss_bytes(pid)}
    phase["now"] = "steady"
    await asyncio.sleep(window_s)
    phase["now"] = "reloads"
    version2, parked = repo / model / "2", repo / model / ".2-parked"
    reload_s = []
    async with httpx.AsyncClient(base_url=base, timeout=300) as control:
        for i in range(reloads):
            if i % 2 == 0:
                os.rename(version2, parked)
            else:
                os.rename(parked, version2)
            started = time.monotonic()
            r = await control.post(f"/v2/repository/models/{model}/load")
            reload_s.append(time.monotonic() - started)
            if r.status_code != 200:
                raise RuntimeError(f"reload {i}: {r.status_code} {r.text}")
    rss["after_reloads"] = worker_rss_bytes(pid)
    phase["now"] = "after"
    await asyncio.sleep(window_s)
    stop.set()
    await load
    rss["end"] = worker_rss_bytes(pid)
    answers = record[1:]
    by_phase = {p: [a for a in answers if a[0] == p] for p in ("steady", "reloads", "after")}
    return {
        "answers": len(answers),
        "status": {str(s): sum(1 for a in answers if a[1] == s) for s in {a[1] for a in answers}},
        "versions": {str(v): sum(1 for a in answers if a[2] == v) for v in {a[2] for a in answers}},
        "latency_ms": {p: {"answers": len(rows), **percentiles(a[3] for a in rows)} for p, rows in by_phase.items()},
        "reload_ms": {"count": len(reload_s), **percentiles(reload_s)},
        "rss_mb": {k: round(v / 2**20, 1) for k, v in rss.items()},
    }


@app.command()
def main(reloads: Annotated[int, typer.Option(help="reloads, alternating the default version")] = 20,
         concurrency: Annotated[int, typer.Option(help="clients posting without pause")] = 32,
         workers: Annotated[int, typer.Option(help="server worker processes")] = 2,
         window: Annotated[float, typer.Option(help="seconds of steady state before and after")] = 10.0,
         model: Annotated[str, typer.Option(help="a /verify bundle of the shipped repository")] = "fever-attconv",
         out: Annotated[Path | None, typer.Option(help="write the result as JSON here")] = None) -> None:
    with tempfile.TemporaryDirectory(prefix="attserve-reload-") as tmp:
        repo = Path(tmp) / "repository"
        for version in ("1", "2"):
            shutil.copytree(DEFAULT_MODEL_REPOSITORY / model, repo / model / version)
        server = ServiceProcess(repo, Path(tmp) / "service.log", workers=workers, model_control_mode="explicit",
                                inherit_settings=False)
        with server.start(timeout_s=300):
            result = run_async(scenario(server.base, repo, model, server.pid, reloads, concurrency, window))
    result = {"reloads": reloads, "concurrency": concurrency, "workers": workers, "model": model, **result}
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n")


if __name__ == "__main__":
    app()
