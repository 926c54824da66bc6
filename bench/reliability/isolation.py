"""R1 isolation: every answer of a mixed, batched workload equals its input's solo answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench import loadgen
from bench.harness import ServiceProcess, metric_sum, scrape
from bench.loadgen import run_async, status_counts
from bench.reliability.workload import SCORE_TOLERANCE, WorkloadMaker, answers_of, difference, repository_models


def _compare_to_solo(workload: list, outcomes: list, solo: dict) -> tuple[list[dict], float, int]:
    """Each answer of the concurrent run against its input's `solo` answer: the mismatches, the
    largest score difference among those within SCORE_TOLERANCE, and the requests that failed."""
    mismatches, max_diff, failed = [], 0.0, 0
    for i, (request, outcome) in enumerate(zip(workload, outcomes, strict=True)):
        if outcome.status != 200:
            failed += 1
            continue
        got = answers_of(outcome)
        if len(got) != len(request.solo):
            mismatches.append({"request": i, "why": f"{len(got)} answers for {len(request.solo)} inputs"})
            continue
        for k, (answer, body) in enumerate(zip(got, request.solo, strict=True)):
            d = difference(answer, solo[body]) if isinstance(solo[body], (dict, list)) else None
            if d is None or d > SCORE_TOLERANCE:
                mismatches.append({"request": i, "input": k, "diff": d, "body": body[:200]})
            else:
                max_diff = max(max_diff, d)
    return mismatches, max_diff, failed


def _batches_of_one(samples: dict) -> float:
    """Batches of exactly one item (the batch-size histogram's le=1 bucket) in scraped `samples`."""
    return sum(v for (n, labels), v in samples.items()
               if n == "attserve_batch_size_bucket" and dict(labels).get("le") == "1.0")


def _per_model(samples: dict, name: str) -> dict[str, float]:
    """Metric `name` of scraped `samples`, summed per model label."""
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        if n == name:
            model = dict(labels).get("model", "")
            out[model] = out.get(model, 0.0) + v
    return out


def run_isolation(repository: Path, requests: int = 1000, concurrency: int = 64, seed: int = 0,
                  workdir: Path = Path("runs/reliability"), max_batch_size: int = 32,
                  max_batch_delay_ms: float = 50.0, progress: bool = False) -> dict:
    """R1: every input of the workload alone on a server that batches nothing (max batch size 1),
    then the whole mixed workload at `concurrency` on one that batches (a batch waits up to
    `max_batch_delay_ms` for company); every answer must equal its input's solo answer."""
    models = repository_models(repository)
    workload = WorkloadMaker(models, seed).mixed(requests)
    solo_bodies = sorted({s for r in workload for s in r.solo})
    path_of = {s: r.path for r in workload for s in r.solo}
    solo_server = ServiceProcess(repository, workdir / "isolation-solo.log", max_batch_size=1, max_batch_delay_ms=0,
                                 max_queue=1_000_000)
    with solo_server.start():
        start = time.monotonic()
        reference = run_async(loadgen.send_all(solo_server.base, [(path_of[s], s) for s in solo_bodies], 8,
                                          "solo" if progress else None))
        solo_s = time.monotonic() - start
        solo_metrics = scrape(solo_server.base)
        solo_server.terminate()
    server = ServiceProcess(repository, workdir / "isolation.log", max_batch_size=max_batch_size,
                            max_batch_delay_ms=max_batch_delay_ms, max_queue=1_000_000, max_inputs_per_request=64)
    with server.start():
        before = scrape(server.base)  # warm-up batches
        start = time.monotonic()
        outcomes = run_async(loadgen.send_all(server.base, [(r.path, r.body) for r in workload], concurrency,
                                         "concurrent" if progress else None))
        concurrent_s = time.monotonic() - start
        after = scrape(server.base)
        exit_s = server.terminate()

    solo_batches_of_one = (metric_sum(solo_metrics, "attserve_batch_size_sum")
                           == metric_sum(solo_metrics, "attserve_batch_size_count") > 0)
    solo = {s: o.body for s, o in zip(solo_bodies, reference, strict=True)}
    solo_failed = sum(o.status != 200 for o in reference)
    mismatches, max_diff, failed = _compare_to_solo(workload, outcomes, solo)
    items = metric_sum(after, "attserve_batch_size_sum") - metric_sum(before, "attserve_batch_size_sum")
    batches = metric_sum(after, "attserve_batch_size_count") - metric_sum(before, "attserve_batch_size_count")
    model_items = {m: v - _per_model(before, "attserve_batch_size_sum").get(m, 0.0)
                   for m, v in _per_model(after, "attserve_batch_size_sum").items()}
    model_batches = {m: v - _per_model(before, "attserve_batch_size_count").get(m, 0.0)
                     for m, v in _per_model(after, "attserve_batch_size_count").items()}
    result = {
        "scenario": "R1 isolation",
        "models": [m.name for m in models],
        "requests": len(workload),
        "inputs": sum(len(r.solo) for r in workload),
        "distinct_inputs": len(solo_bodies),
        "concurrency": concurrency,
        "settings": {"max_batch_size": max_batch_size, "max_batch_delay_ms": max_batch_delay_ms},
        "solo_seconds": round(solo_s, 3),
        "concurrent_seconds": round(concurrent_s, 3),
        "concurrent_rps": round(len(workload) / concurrent_s, 1),
        "solo_failed": solo_failed,
        "solo_batches_of_one": solo_batches_of_one,
        "failed": failed,
        "statuses": status_counts(outcomes),
        "mismatches": len(mismatches),
        "mismatch_examples": mismatches[:5],
        "max_abs_score_diff": max_diff,
        # a swapped answer is only visible when inputs' answers differ: count the distinct ones
        "distinct_solo_answers": len({json.dumps([round(v, 4) for v in a["scores"].values()])
                                      for a in solo.values() if isinstance(a, dict) and "scores" in a}),
        "mean_batch_size": round(items / batches, 3) if batches else 0.0,
        "mean_batch_size_per_model": {m: round(model_items[m] / n, 3) for m, n in sorted(model_batches.items()) if n},
        "share_of_inputs_batched_with_others": round(1 - (_batches_of_one(after) - _batches_of_one(before)) / items, 3) if items else 0.0,
        "exit_seconds": round(exit_s, 3),
    }
    result["passed"] = bool(not mismatches and not failed and not solo_failed and solo_batches_of_one
                            and result["share_of_inputs_batched_with_others"] > 0.0)
    return result
