"""R8 slow and idle clients: idle connections and slowloris; normal requests stay fast, all closed at the header timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.harness import ServiceProcess
from bench.loadgen import Outcome, percentiles, post, run_async, status_counts
from bench.reliability.workload import repository_models


def _hold_idle(port: int, count: int, hold_s: float, queue: Any) -> None:
    """Child process: open `count` connections that send nothing; report when each closed."""
    async def main() -> dict:
        opened, failed, closed = 0, 0, []

        async def one() -> None:
            nonlocal opened, failed
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                failed += 1
                return
            opened += 1
            start = time.monotonic()
            try:
                await asyncio.wait_for(reader.read(), timeout=hold_s)  # b"" or a 408 then EOF
                closed.append(time.monotonic() - start)
            except asyncio.TimeoutError:  # before OSError: TimeoutError is one
                pass
            except OSError:  # reset by the server: closed too
                closed.append(time.monotonic() - start)
            writer.close()

        await asyncio.gather(*(one() for _ in range(count)))
        return {"opened": opened, "failed": failed, "closed_after_s": closed}

    queue.put(run_async(main()))


def _slowloris(port: int, count: int, hold_s: float) -> list[float | None]:
    """`count` connections sending one header byte per second, never finishing; seconds until
    the server closed each (None: still open after hold_s)."""
    async def main() -> list[float | None]:
        async def one() -> float | None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return None
            start = time.monotonic()
            writer.write(b"POST /classify HTTP/1.1\r\nhost: x\r\n")
            try:
                while time.monotonic() - start < hold_s:
                    writer.write(b"x")
                    await writer.drain()
                    try:
                        if await asyncio.wait_for(reader.read(65536), timeout=1.0) is not None:
                            return time.monotonic() - start
                    except asyncio.TimeoutError:
                        continue
            except OSError:
                return time.monotonic() - start
            finally:
                writer.close()
            return None
        return await asyncio.gather(*(one() for _ in range(count)))
    return run_async(main())


def run_slow_clients(repository: Path, idle: int = 20_000, slowloris: int = 200, header_timeout_s: float = 10.0,
                     seconds: float = 20.0, processes: int = 4, model: str | None = None,
                     work: Path = Path("runs/reliability")) -> dict:
    """`idle` connections that send nothing (from `processes` child processes, so the clients'
    own descriptor limit is not what caps them) plus `slowloris` trickling connections, while
    one client sends normal requests: normal p99 < 100 ms, idle and slowloris connections
    closed within the header timeout (+1 s)."""
    import multiprocessing

    models = repository_models(repository, [model] if model else None)
    classify = next(m for m in models if m.task == "classification")
    server = ServiceProcess(repository, work / "slow-clients.log", models=classify.name,
                            header_timeout_s=header_timeout_s)
    hold_s = header_timeout_s + 5
    with server.start():
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        holders = [ctx.Process(target=_hold_idle, args=(server.port, idle // processes, hold_s, queue))
                   for _ in range(processes)]
        for h in holders:
            h.start()
        import threading
        loris: list = []
        loris_thread = threading.Thread(target=lambda: loris.extend(_slowloris(server.port, slowloris, hold_s)))
        loris_thread.start()

        async def normal() -> list[Outcome]:
            out = []
            stop = time.monotonic() + seconds
            async with loadgen.client(server.base, 1, timeout_s=10) as client:
                while time.monotonic() < stop:
                    out.append(await post(client, "/classify", {"text": "shares fell after the report",
                                                               "model": classify.name}))
                    await asyncio.sleep(0.01)
            return out

        outcomes = run_async(normal())
        held = [queue.get(timeout=hold_s + 60) for _ in holders]
        for h in holders:
            h.join()
        loris_thread.join()
    closed = [c for h in held for c in h["closed_after_s"]]
    opened = sum(h["opened"] for h in held)
    latency = percentiles(o.seconds for o in outcomes)
    limit = header_timeout_s + 1.0
    return {
        "scenario": "slow-clients", "idle_requested": idle, "idle_opened": opened,
        "idle_failed_to_open": sum(h["failed"] for h in held),
        "idle_closed": len(closed), "idle_closed_after_ms": percentiles(closed),
        "slowloris": slowloris, "slowloris_closed_after_ms": percentiles(x for x in loris if x is not None),
        "slowloris_still_open": sum(x is None for x in loris),
        "normal_requests": len(outcomes), "normal_statuses": status_counts(outcomes), "normal_latency_ms": latency,
        "passed": (all(o.status == 200 for o in outcomes) and (latency["p99"] or 1e9) < 100
                   and len(closed) == opened and all(c <= limit for c in closed)
                   and all(x is not None and x <= limit for x in loris)),
    }
