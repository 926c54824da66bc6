"""R10 abuse: a mixed abuse run; peak memory under a limit, back near idle after."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import httpx

from bench import loadgen
from bench.harness import RssSampler, ServiceProcess
from bench.loadgen import Outcome, percentiles, post, run_async, status_counts
from bench.reliability.probes import MB, _models_of, exchange, explain_flood_body, http_request, huge_shape_body, unread_connection, v2_bad_bodies
from bench.reliability.workload import repository_models


def run_abuse(repository: Path, seconds: float = 60.0, settle_s: float = 10.0, unread: int = 20,
              slow: int = 20, mem_limit_mb: float = 2048.0, work: Path = Path("runs/reliability"),
              **settings: Any) -> dict:
    """`seconds` of mixed abuse (explanations never read, bad /v2 bodies, junk bytes, slow
    senders of headers and bodies) while one client sends normal single /entailment requests:
    the server's RSS peak against compose's `mem_limit`, and its RSS `settle_s` after the
    clients are gone against its idle baseline (within 20%). `settings`: the server's, over
    its defaults."""
    verification, classification = _models_of(repository)
    entailment = next(m for m in repository_models(repository) if m.task == "entailment")
    server = ServiceProcess(repository, work / "abuse.log", **settings)
    explain = http_request("POST", "/classify", explain_flood_body(classification.name),
                           {"content-type": "application/json"})
    bad = _bad_v2_requests(verification.name)
    rng = random.Random(0)

    async def go() -> dict:
        stop = time.monotonic() + seconds
        counts: dict[str, dict[str, int]] = {}

        def count(kind: str, status: int | str) -> None:
            counts.setdefault(kind, {}).setdefault(str(status), 0)
            counts[kind][str(status)] += 1

        async def unread_loop() -> None:
            # a new connection every 3 s, each kept open and never read until the end
            loop, held = asyncio.get_running_loop(), []
            while time.monotonic() < stop:
                held.append(await loop.run_in_executor(None, unread_connection, server.port, explain))
                count("explain_unread", "sent")
                await asyncio.sleep(3.0)
            for sock in held:
                sock.close()

        async def bad_loop(offset: int) -> None:
            i = offset
            while time.monotonic() < stop:
                outcome = await exchange(server.port, bad[i % len(bad)], hold_s=2.0)
                count("v2_bad", outcome["status"])
                i += 1

        async def junk_loop() -> None:
            while time.monotonic() < stop:
                outcome = await exchange(server.port, rng.randbytes(rng.randint(1, 4096)), hold_s=2.0)
                count("junk", outcome["status"])

        async def slow_loop(kind: int) -> None:
            while time.monotonic() < stop:
                outcome = await _slow_exchange(server.port, kind % 3)
                count(f"slow_{('headers', 'body_413', 'body')[kind % 3]}", outcome["status"])

        normal: list[Outcome] = []

        async def normal_loop() -> None:
            body = {"premise": "a man is playing a guitar", "hypothesis": "a man plays music", "model": entailment.name}
            async with loadgen.client(server.base, 1, timeout_s=30) as client:
                while time.monotonic() < stop:
                    normal.append(await post(client, "/entailment", body))
                    await asyncio.sleep(0.05)

        with RssSampler(server, 0.2) as sampler:
            await asyncio.gather(*(unread_loop() for _ in range(unread)), *(bad_loop(k) for k in range(4)),
                                 *(junk_loop() for _ in range(4)), *(slow_loop(k) for k in range(slow)),
                                 normal_loop())
            ended = time.monotonic()
            await asyncio.sleep(settle_s)
        after = server.rss_bytes()
        return {"counts": counts, "normal": normal, "samples": sampler.samples, "after": after,
                "settled_s": round(time.monotonic() - ended, 1)}

    with server.start():
        time.sleep(1.0)
        httpx.post(server.base + "/entailment", json={"premise": "a man", "hypothesis": "a man", "model": entailment.name})
        baseline = server.rss_bytes()
        outcome = run_async(go())
        records = [r for r in server.log_records() if r.get("level") == "ERROR"]
    return _abuse_report(outcome, records, baseline, seconds, unread, slow, mem_limit_mb)


def _bad_v2_requests(model: str) -> list[bytes]:
    """The raw /v2 infer requests the abuse run sends `model`: each bad body of v2_bad_bodies,
    and one with a huge declared shape."""
    bad = [http_request("POST", f"/v2/models/{model}{suffix}/infer", body,
                        {"content-type": "application/json", "connection": "close", **headers})
           for suffix, body, headers in v2_bad_bodies().values()]
    bad.append(http_request("POST", f"/v2/models/{model}/infer", huge_shape_body(),
                            {"content-type": "application/json", "connection": "close"}))
    return bad


async def _slow_exchange(port: int, kind: int) -> dict:
    """One slow sender's exchange; `kind` 0: headers one byte a second, 1: a body over the limit
    a byte every 2 s, 2: a body within the limit that never completes."""
    if kind == 0:
        return await exchange(port, b"POST /classify HTTP/1.1\r\nhost: x\r\n", trickle=b"x",
                              every_s=1.0, hold_s=15.0)
    if kind == 1:
        return await exchange(port, http_request("POST", "/classify", headers={
            "content-length": "2000000"}), trickle=b"x", every_s=2.0, hold_s=15.0)
    return await exchange(port, http_request("POST", "/classify", headers={
        "content-type": "application/json", "content-length": "1000"}) + b'{"text": "',
                          trickle=b"a", every_s=1.0, hold_s=15.0)


def _abuse_report(outcome: dict, records: list[dict], baseline: int, seconds: float, unread: int, slow: int,
                  mem_limit_mb: float) -> dict:
    """run_abuse's result from the clients' `outcome`, the server's ERROR log `records` and its idle RSS."""
    # 504s of the flood's own explanation requests, which wait out the deadline in a full
    # queue, are logged at ERROR as every 5xx is; anything else is a failure
    deadline = [r for r in records if r.get("code") == "deadline_exceeded"]
    errors = [r for r in records if r.get("code") != "deadline_exceeded"]
    peak = max(b for _, b in outcome["samples"])
    after = outcome["after"]
    normal = outcome["normal"]
    five_hundreds = {k: {s: n for s, n in v.items() if s.startswith("5")} for k, v in outcome["counts"].items()}
    return {
        "scenario": "abuse", "seconds": seconds, "clients": {"explain_unread": unread, "v2_bad": 4, "junk": 4,
                                                               "slow": slow, "normal": 1},
        "baseline_rss_mb": round(baseline / MB, 1), "peak_rss_mb": round(peak / MB, 1),
        "mem_limit_mb": mem_limit_mb, "rss_after_mb": round(after / MB, 1), "settled_s": outcome["settled_s"],
        "after_vs_baseline": round(after / baseline, 3), "statuses": outcome["counts"],
        "normal_statuses": status_counts(normal), "normal_latency_ms": percentiles(o.seconds for o in normal),
        "error_log_records": len(errors), "deadline_exceeded_log_records": len(deadline),
        "rss_samples": outcome["samples"],
        "passed": (peak / MB < mem_limit_mb and after <= 1.2 * baseline and not errors
                   and not any(five_hundreds.values()) and all(o.status == 200 for o in normal)),
    }
