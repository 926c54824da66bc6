"""The bench's one load generator: every load the bench and the reliability runs offer a
server comes from here.

Closed loop: `wrk -t 1 -c N` (Debian's wrk; each connection sends its next request when the
previous answer arrives, so offered load follows the server: a closed loop at concurrency N),
or in-process over httpx (`send_all`, `throughput`) where each request's answer is checked.
Open loop: one fixed-rate schedule (`fixed_rate`, wrk2's method; wrk2 is not packaged by
Debian). Request i is due at start + i / rate, and each request's latency runs from its due
time, not from when a connection was free to send it, so a server falling behind shows up as
latency instead of silently lowering the offered rate (the coordinated-omission trap a closed
loop falls in). `connections` workers, each with one request in flight: a request whose turn
comes while every worker waits on an answer is sent late, its latency still counted from its
due time. `late_sends` counts requests sent more than 1 ms after their due time, `unsent` those
still unsent when the run was cut off (1.5 x duration + 2 s): both large means the offered
rate was not reached. The schedule drives either

  * raw keep-alive HTTP/1.1 connections in a separate process, pinned with taskset, never
    inside a measured one (`open_loop`, `python -m bench.loadgen URL BODIES --rate R
    --duration S`, which prints one line `BENCH_JSON {...}` in the format of bench/wrk.lua's), or
  * httpx in the caller's process, keeping every request's `Outcome` (`send_at_rate`: the
    reliability runs, which check each answer).

`closed_loop` and `open_loop` return the same record: requests, items, duration, throughput,
latency percentiles (ms) and errors (connect/read/write/timeout, and `status`: answers other
than 2xx/3xx).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

import httpx
import numpy as np
from tqdm import tqdm

WRK_SCRIPT = Path(__file__).with_name("wrk.lua")
# Per-request socket timeout of both generators: a server that stalls longer counts an error.
REQUEST_TIMEOUT_S = 10
# a send more than this after its due time is late
LATE_S = 0.001


class LoadGeneratorError(RuntimeError):
    pass


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def wrk_version() -> str | None:
    if not wrk_available():
        return None
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    return (out.stdout or out.stderr).splitlines()[0].strip()


def pinned(argv: list[str], cpus: str | None) -> list[str]:
    """`argv` under `taskset -c cpus` (None: any CPU)."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def _parse(output: str, tool: str) -> dict:
    for line in output.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line.removeprefix("BENCH_JSON "))
    raise LoadGeneratorError(f"{tool} printed no result:\n{output[-2000:]}")


def _record(raw: dict, items_per_request: int, **extra) -> dict:
    duration_s = raw["duration_us"] / 1e6
    requests = raw["requests"]
    errors = dict(raw["errors"])
    errors["total"] = sum(errors.values())
    ok = max(0, requests - errors["status"])
    latency = {k: round(v / 1000.0, 3) for k, v in raw["latency_us"].items()}
    return {
        **extra,
        "requests": requests,
        "items": requests * items_per_request,
        "duration_s": round(duration_s, 3),
        "requests_per_s": round(requests / duration_s, 2) if duration_s else 0.0,
        "items_per_s": round(ok * items_per_request / duration_s, 2) if duration_s else 0.0,
        "latency_ms": latency,
        "errors": errors,
    }


def closed_loop(url: str, path: str, bodies: Path, concurrency: int, duration_s: int, cpus: str | None,
                items_per_request: int = 1) -> dict:
    """wrk at `concurrency` connections for `duration_s` seconds (one wrk thread)."""
    argv = ["wrk", "-t", "1", "-c", str(concurrency), "-d", f"{duration_s}s", "--timeout", f"{REQUEST_TIMEOUT_S}s",
            "-s", str(WRK_SCRIPT), url, "--", path, str(bodies)]
    out = subprocess.run(pinned(argv, cpus), capture_output=True, text=True, timeout=duration_s + 60)
    if out.returncode != 0:
        raise LoadGeneratorError(f"wrk exited {out.returncode}: {out.stderr[-2000:]}")
    raw = _parse(out.stdout, "wrk")
    return _record(raw, items_per_request, loop="closed", concurrency=concurrency)


def open_loop(url: str, path: str, bodies: Path, rate: float, duration_s: float, cpus: str | None,
              connections: int = 64, items_per_request: int = 1) -> dict:
    """`rate` requests per second on a fixed schedule for `duration_s`, from a separate process
    (`python -m bench.loadgen`)."""
    argv = [sys.executable, "-m", "bench.loadgen", url + path, str(bodies), "--rate", str(rate),
            "--duration", str(duration_s), "--connections", str(connections), "--timeout", str(REQUEST_TIMEOUT_S)]
    out = subprocess.run(pinned(argv, cpus), capture_output=True, text=True, timeout=duration_s + 60,
                         cwd=Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        raise LoadGeneratorError(f"open-loop generator exited {out.returncode}: {out.stderr[-2000:]}")
    raw = _parse(out.stdout, "bench.loadgen")
    record = _record(raw, items_per_request, loop="open", concurrency=connections, target_rate=round(rate, 2))
    record.update(scheduled=raw["scheduled"], unsent=raw["unsent"], late_sends=raw["late_sends"])
    return record


# --- the open-loop schedule ------------------------------------------------------------------

Sender = tuple[Callable[[int, float], Awaitable[None]], Callable[[], None]]


async def fixed_rate(total: int, rate: float, connections: int, new_sender: Callable[[], Sender],
                     cutoff_s: float | None = None) -> dict:
    """Request i of `total` due at start + i / rate, sent by one of `connections` workers, each
    with one request in flight (no unbounded queue anywhere in the generator). `new_sender()`
    gives a worker its (send(i, due), close()) pair. Past `cutoff_s` from the start, workers
    stop taking new requests: a generator or server that cannot keep up ends the run with
    requests unsent (reported) instead of running on for minutes. Returns the elapsed seconds,
    how many were sent and how many of those late."""
    counters = {"next": 0, "late": 0}
    start = time.perf_counter() + 0.05
    stop_at = start + cutoff_s if cutoff_s is not None else math.inf

    async def worker() -> None:
        send, close = new_sender()
        try:
            while counters["next"] < total and time.perf_counter() < stop_at:
                i = counters["next"]
                counters["next"] += 1
                due = start + i / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                elif -wait > LATE_S:
                    counters["late"] += 1
                await send(i, due)
        finally:
            close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return {"elapsed_s": time.perf_counter() - start, "sent": min(counters["next"], total), "late": counters["late"]}


class Connection:
    """One keep-alive HTTP/1.1 connection that sends pre-encoded requests and reads
    Content-Length answers (what uvicorn sends for JSON). A few lines of asyncio streams:
    httpx costs several times more CPU per request, and a measuring generator must not be the
    bottleneck."""

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
    """The open loop over raw connections: the record `python -m bench.loadgen` prints."""
    host, port, raw = encode_requests(url, bodies)
    total = max(1, int(rate * duration_s))
    latencies = np.full(total, np.nan)
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    received = {"bytes": 0}

    def new_sender() -> Sender:
        connection = Connection(host, port)

        async def send(i: int, due: float) -> None:
            try:
                status, size = await asyncio.wait_for(connection.request(raw[i % len(raw)]), timeout_s)
            except TimeoutError:
                errors["timeout"] += 1
                connection.close()
                return
            except OSError:
                errors["connect" if connection.writer is None else "read"] += 1
                connection.close()
                return
            except (asyncio.IncompleteReadError, ValueError):
                errors["read"] += 1
                connection.close()
                return
            received["bytes"] += size
            if status >= 400:
                errors["status"] += 1
            latencies[i] = time.perf_counter() - due

        return send, connection.close

    run = await fixed_rate(total, rate, connections, new_sender, cutoff_s=duration_s * 1.5 + 2.0)
    done = latencies[~np.isnan(latencies)] * 1e6  # us
    pct = (lambda q: float(np.percentile(done, q))) if done.size else (lambda q: 0.0)
    return {
        "requests": int(done.size + sum(errors.values()) - errors["status"]),
        "duration_us": int(run["elapsed_s"] * 1e6),
        "bytes": received["bytes"],
        "errors": errors,
        "latency_us": {"p50": pct(50), "p90": pct(90), "p95": pct(95), "p99": pct(99),
                       "max": float(done.max()) if done.size else 0.0,
                       "mean": float(done.mean()) if done.size else 0.0},
        "scheduled": total,
        "unsent": total - run["sent"],
        "late_sends": run["late"],
    }


# --- in-process: every request's outcome (the reliability runs) -----------------------------

@dataclass
class Outcome:
    """What one request got: HTTP status (0: no HTTP answer), body, when it was sent (monotonic
    clock) and how long it took, Retry-After, and the transport error class if any."""

    status: int
    body: Any = None
    sent: float = 0.0
    seconds: float = 0.0
    retry_after: str | None = None
    error: str | None = None
    lag: float = 0.0  # open loop: how late the generator sent it
    server_s: float | None = None  # the server's own x-total-time: arrival to response start


def run_async(coro: Any) -> Any:
    """asyncio.run on uvloop (the server's loop, and a client fast enough to overload it)."""
    try:
        import uvloop
    except ModuleNotFoundError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(coro)
    return uvloop.run(coro)


async def post(client: httpx.AsyncClient, path: str, body: dict | str) -> Outcome:
    content = body if isinstance(body, str) else json.dumps(body)
    sent = time.monotonic()
    try:
        r = await client.post(path, content=content, headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        return Outcome(0, None, sent, time.monotonic() - sent, None, f"{type(exc).__name__}: {exc}")
    except AttributeError as exc:
        # anyio reads the peer address of a socket the server already closed (a connection taken
        # from the backlog as the listener shut) and fails on the missing socket instead of raising
        # a connect error; the request never reached the server (same race as httpcore #239)
        if "getpeername" not in str(exc):
            raise
        return Outcome(0, None, sent, time.monotonic() - sent, None, f"ConnectError: socket closed during connect ({exc})")
    try:
        parsed = r.json()
    except ValueError:
        parsed = r.text
    total = r.headers.get("x-total-time")
    return Outcome(r.status_code, parsed, sent, time.monotonic() - sent, r.headers.get("retry-after"),
                   server_s=float(total) / 1000.0 if total else None)


def client(base: str, connections: int, timeout_s: float = 60.0) -> httpx.AsyncClient:
    # Idle connections are dropped well before uvicorn's 5 s keep-alive timeout: reusing one
    # as the server closes it loses the request (a client-side race, not the server's doing).
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0)
    return httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout_s)


async def send_all(base: str, calls: Sequence[tuple[str, dict | str]], concurrency: int,
                   desc: str | None = None) -> list[Outcome]:
    """Every call, at most `concurrency` in flight; outcomes in call order."""
    out: list[Outcome | None] = [None] * len(calls)
    bar = tqdm(total=len(calls), desc=desc, disable=desc is None or not sys.stderr.isatty(), leave=False)
    async with client(base, concurrency) as http:
        next_call = iter(range(len(calls)))

        async def worker() -> None:
            for i in next_call:
                out[i] = await post(http, *calls[i])
                bar.update()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    bar.close()
    return out  # type: ignore[return-value]


async def throughput(base: str, calls: Sequence[tuple[str, dict | str]], concurrency: int, seconds: float) -> dict:
    """Closed loop over `calls` (cycled) for `seconds`: answered requests per second."""
    answered = errors = 0
    stop = time.monotonic() + seconds
    async with client(base, concurrency) as http:
        async def worker(offset: int) -> None:
            nonlocal answered, errors
            i = offset
            while time.monotonic() < stop:
                o = await post(http, *calls[i % len(calls)])
                answered += o.status == 200
                errors += o.status != 200
                i += concurrency

        start = time.monotonic()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.monotonic() - start
    return {"rps": answered / elapsed, "answered": answered, "errors": errors, "seconds": round(elapsed, 3)}


async def send_at_rate(base: str, calls: Sequence[tuple[str, dict | str]], rate: float, seconds: float,
                       connections: int = 1024, desc: str | None = None) -> list[Outcome]:
    """The open loop in process: call i (cycled) due at start + i / rate whatever the server
    does (`fixed_rate`, no cut-off), on up to `connections` keep-alive connections; outcomes in
    send order, each with how late it was sent (`lag`)."""
    total = max(1, int(rate * seconds))
    out: list[Outcome | None] = [None] * total
    bar = tqdm(total=total, desc=desc, disable=desc is None or not sys.stderr.isatty(), leave=False)
    async with client(base, connections) as http:
        def new_sender() -> Sender:
            async def send(i: int, due: float) -> None:
                lag = time.perf_counter() - due
                out[i] = await post(http, *calls[i % len(calls)])
                out[i].lag = lag
                bar.update()

            return send, lambda: None

        await fixed_rate(total, rate, connections, new_sender)
    bar.close()
    return out  # type: ignore[return-value]


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 90, 99, 100)) -> dict[str, float | None]:
    arr = np.asarray(list(values), dtype=float)
    return {f"p{q:g}": (round(float(np.percentile(arr, q)) * 1000, 3) if arr.size else None) for q in qs}


def status_counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in outcomes:
        key = str(o.status) if o.status else (o.error or "error").split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description="Open-loop load generator: POST request bodies at a fixed rate, "
                                                 "whatever the server does.")
    parser.add_argument("url")
    parser.add_argument("bodies", type=Path, help="file with one JSON request body per line")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds of sending")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    bodies = [line.encode() for line in args.bodies.read_text(encoding="utf-8").splitlines() if line]
    result = run_async(_run(args.url, bodies, args.rate, args.duration, args.connections, args.timeout))
    print("BENCH_JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
