"""R2 overload: a multiple of capacity, open loop, with a small queue: 429 + Retry-After, no other 5xx."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import NamedTuple

import httpx

from bench import loadgen
from bench.harness import RssSampler, ServiceProcess, metric_sum, scrape
from bench.loadgen import Outcome, percentiles, run_async, status_counts, throughput
from bench.reliability.workload import WorkloadMaker, answer_problem, answers_of, repository_models


class SortedOutcomes(NamedTuple):
    """An overload run's outcomes by what the server did with them."""
    ok: list[Outcome]
    full: list[Outcome]  # 429
    late: list[Outcome]  # 504
    other_5xx: list[Outcome]
    transport: list[Outcome]  # no HTTP answer at all
    incomplete: list[Outcome]  # 200 with an answer missing a part
    bad_retry: list[Outcome]  # 429 without a Retry-After of 1 s or more
    over_deadline: list[Outcome]  # 200 after the request timeout


def _sorted_outcomes(outcomes: list[Outcome], timeout_s: float) -> SortedOutcomes:
    ok, full, late = ([o for o in outcomes if o.status == code] for code in (200, 429, 504))
    # The deadline runs from the request's arrival at the app: judge by the server's own
    # x-total-time (the client's clock adds its own lag and socket queueing), with slack for
    # writing the answer after the last batch.
    slack_s = 0.1
    return SortedOutcomes(
        ok, full, late,
        other_5xx=[o for o in outcomes if o.status >= 500 and o.status != 504],
        transport=[o for o in outcomes if o.status == 0],
        incomplete=[o for o in ok if any(answer_problem(a) for a in answers_of(o))],
        bad_retry=[o for o in full if not (o.retry_after or "").isdigit() or int(o.retry_after) < 1],
        over_deadline=[o for o in ok if o.server_s is not None and o.server_s > timeout_s + slack_s],
    )


def run_overload(repository: Path, factor: float = 4.0, seconds: float = 20.0, capacity_seconds: float = 5.0,
                 model: str | None = None, inputs_per_request: int = 64, max_queue: int = 128,
                 request_timeout_ms: float = 1000.0, seed: int = 0, workdir: Path = Path("runs/reliability"),
                 progress: bool = False) -> dict:
    """R2: measure capacity (closed loop that never overfills the queue), then offer `factor`
    times that rate open-loop with a queue of `max_queue` items: the excess must get 429 with
    Retry-After fast, accepted requests an answer by their deadline or 504, never another 5xx;
    memory stays flat and the service answers normally right after.

    Requests carry `inputs_per_request` inputs each, so the server's work per request (tokenize
    and run them all) dwarfs the client's (send one pre-encoded body) and one Python client can
    offer several times what the server can do; `send_lag_ms` says whether it did."""
    models = repository_models(repository, [model] if model else None)
    target = models[0]
    maker = WorkloadMaker([target], seed)
    calls = [(r.path, json.dumps(r.body)) for r in (maker.request(target, inputs_per_request) for _ in range(100))]
    timeout_s = request_timeout_ms / 1000.0
    server = ServiceProcess(repository, workdir / "overload.log", models=target.name, max_queue=max_queue,
                            request_timeout_ms=request_timeout_ms, max_inputs_per_request=max(64, inputs_per_request))
    with server.start():
        # concurrency whose items always fit the queue: capacity without a single 429
        fit = max(1, max_queue // inputs_per_request)
        capacity = run_async(throughput(server.base, calls, fit, capacity_seconds))
        rate = factor * capacity["rps"]
        rss_before = server.rss_bytes()

        async def overload() -> tuple[list[Outcome], list[tuple[float, int]]]:
            with RssSampler(server, 0.5) as rss:
                outcomes = await loadgen.send_at_rate(server.base, calls, rate, seconds, desc="overload" if progress else None)
            return outcomes, rss.samples

        outcomes, rss = run_async(overload())
        after_start = time.monotonic()
        ready_after = httpx.get(server.base + "/health/ready", timeout=10).status_code
        recovery = run_async(loadgen.send_all(server.base, calls[:20], fit))
        recovery_s = time.monotonic() - after_start
        depth = metric_sum(scrape(server.base), "attserve_queue_depth")
        rss_after = server.rss_bytes()
        exit_s = server.terminate()

    ok, full, late, other_5xx, transport, incomplete, bad_retry, over_deadline = _sorted_outcomes(outcomes, timeout_s)
    result = {
        "scenario": "R2 overload",
        "model": target.name,
        "inputs_per_request": inputs_per_request,
        "settings": {"max_queue_items": max_queue, "request_timeout_ms": request_timeout_ms},
        "capacity_rps": round(capacity["rps"], 2),
        "factor": factor,
        "offered_rps": round(rate, 2),
        "seconds": seconds,
        "requests": len(outcomes),
        "statuses": status_counts(outcomes),
        "goodput_rps": round(len(ok) / seconds, 2),
        "send_lag_ms": percentiles(o.lag for o in outcomes),
        "time_to_429_ms": percentiles(o.seconds for o in full),
        "server_time_to_429_ms": percentiles(o.server_s for o in full if o.server_s is not None),
        "latency_200_ms": percentiles(o.seconds for o in ok),
        "server_time_200_ms": percentiles(o.server_s for o in ok if o.server_s is not None),
        "latency_504_ms": percentiles(o.seconds for o in late),
        "other_5xx": len(other_5xx),
        "transport_errors": len(transport),
        "transport_error_examples": sorted({o.error for o in transport})[:3],
        "incomplete_answers": len(incomplete),
        "429_without_retry_after": len(bad_retry),
        "answered_after_deadline": len(over_deadline),
        "rss_mb": {"before": round(rss_before / 2**20, 1), "peak": round(max(b for _, b in rss) / 2**20, 1),
                   "after": round(rss_after / 2**20, 1)},
        "ready_after": ready_after,
        "recovery_statuses": status_counts(recovery),
        "recovery_seconds": round(recovery_s, 3),
        "queue_depth_after": depth,
        "exit_seconds": round(exit_s, 3),
    }
    shed_p99 = result["server_time_to_429_ms"]["p99"]
    result["passed"] = bool(
        full and not other_5xx and not transport and not incomplete and not bad_retry and not over_deadline
        and shed_p99 is not None and shed_p99 < request_timeout_ms  # shedding faster than serving
        and ready_after == 200 and all(o.status == 200 for o in recovery) and depth == 0
    )
    return result
