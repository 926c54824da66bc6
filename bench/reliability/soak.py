"""R6 soak: minutes at a fraction of capacity; no errors, flat resident memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import loadgen
from bench.harness import RssSampler, ServiceProcess
from bench.loadgen import Outcome, percentiles, run_async, status_counts, throughput
from bench.reliability.workload import WorkloadMaker, answer_problem, answers_of, repository_models


def run_soak(repository: Path, minutes: float = 10.0, load: float = 0.5, capacity_seconds: float = 10.0,
             concurrency: int = 32, sample_every_s: float = 5.0, seed: int = 0,
             workdir: Path = Path("runs/reliability"), progress: bool = False) -> dict:
    """R6: `load` x measured capacity, open loop, for `minutes`; zero errors and RSS growth
    from minute 2 to the end under 5% (mean of the first 30 s after minute 2 against the mean
    of the last 30 s, so one sample's noise does not decide)."""
    models = repository_models(repository)
    calls = [(r.path, r.body) for r in WorkloadMaker(models, seed).mixed(2000)]
    server = ServiceProcess(repository, workdir / "soak.log")
    with server.start():
        capacity = run_async(throughput(server.base, calls, concurrency, capacity_seconds))
        rate = load * capacity["rps"]

        async def soak() -> tuple[list[Outcome], list[tuple[float, int]]]:
            with RssSampler(server, sample_every_s) as rss:
                outcomes = await loadgen.send_at_rate(server.base, calls, rate, minutes * 60, desc="soak" if progress else None)
            return outcomes, rss.samples

        outcomes, rss = run_async(soak())
        exit_s = server.terminate()

    window = 30.0
    start_t = min(120.0, minutes * 60 / 2)
    first = [b for t, b in rss if start_t <= t < start_t + window] or [rss[0][1]]
    last = [b for t, b in rss if t >= rss[-1][0] - window]
    growth = (np.mean(last) - np.mean(first)) / np.mean(first)
    errors = [o for o in outcomes if o.status != 200 or any(answer_problem(a) for a in answers_of(o))]
    result = {
        "scenario": "R6 soak",
        "minutes": minutes,
        "capacity_rps": round(capacity["rps"], 2),
        "offered_rps": round(rate, 2),
        "requests": len(outcomes),
        "statuses": status_counts(outcomes),
        "errors": len(errors),
        "latency_ms": percentiles(o.seconds for o in outcomes),
        "rss_mb": {"at_start": round(rss[0][1] / 2**20, 1), "from": round(float(np.mean(first)) / 2**20, 2),
                   "end": round(float(np.mean(last)) / 2**20, 2), "peak": round(max(b for _, b in rss) / 2**20, 1)},
        "rss_growth_from_minute_2": round(float(growth), 5),
        "rss_samples": [(round(t, 1), b) for t, b in rss],
        "exit_seconds": round(exit_s, 3),
    }
    result["passed"] = bool(not errors and growth < 0.05)
    return result
