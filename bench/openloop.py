"""Open-loop load generator: POST request bodies at a fixed rate, whatever the server does.

    python -m bench.openloop http://127.0.0.1:8000/entailment bodies.jsonl --rate 200 --duration 10

Request i is due at start + i / rate. Each request's latency runs from its due time, not from
when a connection was free to send it, so a server falling behind shows up as latency instead
of silently lowering the offered rate (the coordinated-omission trap a closed loop falls in;
wrk2's method). `--connections` workers (uvloop), each with its own keep-alive HTTP/1.1
connection and one request in flight: a request whose turn comes while every worker waits on an
answer is sent late, its latency still counted from its due time. `late_sends` counts requests
sent more than 1 ms after their due time, `unsent` those still unsent when the run was cut off
(1.5 x duration + 2 s): both large means the offered rate was not reached.

Prints one line `BENCH_JSON {...}` in the format of bench/wrk.lua's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

LATE_S = 0.001


class Connection:
    """One keep-alive HTTP/1.1 connection that sends pre-encoded requests and reads
    Content-Length answers (what uvicorn sends for JSON). A few lines of asyncio streams:
    httpx costs ~10x more CPU per request, and the generator must not be the bottleneck."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, raw: bytes) -> tuple[int, int]:
        """Send one request; returns (status, body bytes)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, close = None, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        if length is None:
            raise ValueError("answer without Content-Length (chunked answers are not supported)")
        await self.reader.readexactly(length)
        if close:
            self.close()
        return status, length

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def encode_requests(url: str, bodies: list[bytes]) -> tuple[str, int, list[bytes]]:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port or 80
    path = parts.path or "/"
    raw = [(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body for body in bodies]
    return host, port, raw


async def _run(url: str, bodies: list[bytes], rate: float, duration_s: float, connections: int, timeout_s: float) -> dict:
    host, port, raw = encode_requests(url, bodies)
    total = max(1, int(rate * duration_s))
    latencies = np.full(total, np.nan)
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    counters = {"next": 0, "late": 0, "bytes": 0}
    start = time.perf_counter() + 0.05
    # Past this, workers stop taking new requests: a generator or server that cannot keep up
    # ends the run with requests unsent (reported) instead of running on for minutes.
    stop_at = start + duration_s * 1.5 + 2.0

    async def worker() -> None:
        # One connection, one request in flight: no unbounded queue anywhere in the generator.
        connection = Connection(host, port)
        while counters["next"] < total and time.perf_counter() < stop_at:
            i = counters["next"]
            counters["next"] += 1
            due = start + i / rate  # always before stop_at
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            elif -wait > LATE_S:
                counters["late"] += 1
            try:
                status, size = await asyncio.wait_for(connection.request(raw[i % len(raw)]), timeout_s)
            except TimeoutError:
                errors["timeout"] += 1
                connection.close()
                continue
            except OSError:
                errors["connect" if connection.writer is None else "read"] += 1
                connection.close()
                continue
            except (asyncio.IncompleteReadError, ValueError):
                errors["read"] += 1
                connection.close()
                continue
            counters["bytes"] += size
            if status >= 400:
                errors["status"] += 1
            latencies[i] = time.perf_counter() - due
        connection.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.perf_counter() - start

    sent = min(counters["next"], total)
    done = latencies[~np.isnan(latencies)] * 1e6  # us
    pct = (lambda q: float(np.percentile(done, q))) if done.size else (lambda q: 0.0)
    return {
        "requests": int(done.size + sum(errors.values()) - errors["status"]),
        "duration_us": int(elapsed * 1e6),
        "bytes": counters["bytes"],
        "errors": errors,
        "latency_us": {"p50": pct(50), "p90": pct(90), "p95": pct(95), "p99": pct(99),
                       "max": float(done.max()) if done.size else 0.0,
                       "mean": float(done.mean()) if done.size else 0.0},
        "scheduled": total,
        "unsent": total - sent,
        "late_sends": counters["late"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("bodies", type=Path, help="file with one JSON request body per line")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds of sending")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    bodies = [line.encode() for line in args.bodies.read_text(encoding="utf-8").splitlines() if line]
    run = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:  # plain asyncio works, only slower
        pass
    result = run(_run(args.url, bodies, args.rate, args.duration, args.connections, args.timeout))
    print("BENCH_JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
