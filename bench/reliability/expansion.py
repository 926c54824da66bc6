"""R7 expensive bodies: concurrent maximum-size bodies of U+FDFA (NFKC x18) answered in time, memory bounded."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from bench import loadgen
from bench.harness import RssSampler, ServiceProcess
from bench.loadgen import Outcome, percentiles, post, run_async, status_counts
from bench.reliability.workload import repository_models


WORST_NFKC_CHARACTER = "\ufdfa"  # one character, 18 after NFKC


def expansion_bodies(max_body_bytes: int, max_text_chars: int, max_request_chars: int) -> dict[str, str]:
    """Maximum-size bodies of the worst-case character: one text as long as the body allows,
    and a batch of texts each just under the per-text limit after NFKC (so only the request's
    budget stops it); plus the largest plain-ASCII batch that is accepted (the costliest body
    that gets a 200: as many characters as the request budget allows)."""
    room = max_body_bytes - 64
    per_text = max(1, (max_text_chars - 1) // 18)  # 18 characters after NFKC each
    one = {"text": WORST_NFKC_CHARACTER * (room // 3)}
    item = json.dumps({"text": WORST_NFKC_CHARACTER * per_text}, ensure_ascii=False)
    count = max(1, min(64, room // (len(item.encode()) + 2)))
    batch = '{"inputs": [' + ", ".join([item] * count) + "]}"
    text = ("the market fell " * (max_text_chars // 16))[: max_text_chars // 2]
    plain_count = max(1, min(64, room // (len(text) + 16), max_request_chars // len(text)))
    plain = {"inputs": [{"text": text}] * plain_count}
    return {"one_text": json.dumps(one, ensure_ascii=False), "batch_under_text_limit": batch,
            "accepted_plain_batch": json.dumps(plain)}


def run_expansion(repository: Path, concurrent: int = 6, rounds: int = 3, model: str | None = None,
                  max_rss_growth_mb: float = 300.0, work: Path = Path("runs/reliability")) -> dict:
    """`concurrent` maximum-size worst-case bodies at once, `rounds` times per body kind:
    every one answered 422 or 200 within its deadline, RSS within +max_rss_growth_mb of idle."""
    from service.settings import Settings

    defaults = Settings()
    models = repository_models(repository, [model] if model else None)
    classify = next(m for m in models if m.task == "classification")
    bodies = expansion_bodies(defaults.max_body_bytes, defaults.max_text_chars, defaults.max_request_chars)
    deadline_s = defaults.request_timeout_ms / 1000.0
    server = ServiceProcess(repository, work / "expansion.log", models=classify.name)
    with server.start():
        time.sleep(1.0)
        idle = server.rss_bytes()

        async def go() -> tuple[dict, list[tuple[float, int]]]:
            outcomes: dict[str, list[Outcome]] = {}
            with RssSampler(server, 0.05) as sampler:
                async with loadgen.client(server.base, concurrent, timeout_s=deadline_s * 2) as client:
                    for kind, body in bodies.items():
                        for _ in range(rounds):
                            got = await asyncio.gather(*(post(client, "/classify", body.replace(
                                '"inputs"', f'"model": "{classify.name}", "inputs"', 1) if "inputs" in body else
                                body[:-1] + f', "model": "{classify.name}"}}') for _ in range(concurrent)))
                            outcomes.setdefault(kind, []).extend(got)
            return outcomes, sampler.samples

        outcomes, samples = run_async(go())
    peak = max(b for _, b in samples)
    per_kind = {kind: {"statuses": status_counts(o), "bytes": len(bodies[kind].encode()),
                       "latency_ms": percentiles(x.seconds for x in o)} for kind, o in outcomes.items()}
    every = [o for os_ in outcomes.values() for o in os_]
    growth_mb = (peak - idle) / 2**20
    return {
        "scenario": "expansion", "model": classify.name, "concurrent": concurrent, "rounds": rounds,
        "idle_rss_mb": round(idle / 2**20, 1), "peak_rss_mb": round(peak / 2**20, 1),
        "rss_growth_mb": round(growth_mb, 1), "per_kind": per_kind, "rss_samples": samples,
        "passed": (all(o.status in (200, 422) for o in every) and all(o.seconds < deadline_s for o in every)
                   and growth_mb <= max_rss_growth_mb),
    }
