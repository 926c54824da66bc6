"""Load generators, each a separate process pinned with taskset, never inside a measured one.

Closed loop: `wrk -t 1 -c N` (Debian's wrk; each connection sends its next request when the
previous answer arrives, so offered load follows the server: a closed loop at concurrency N).
Open loop: `python -m bench.openloop` at a fixed request rate (wrk2 is not packaged by Debian),
latency counted from each request's scheduled send time.

Both return the same record: requests, items, duration, throughput, latency percentiles (ms)
and errors (connect/read/write/timeout, and `status`: answers other than 2xx/3xx).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

WRK_SCRIPT = Path(__file__).with_name("wrk.lua")
# Per-request socket timeout of both generators: a server that stalls longer counts an error.
REQUEST_TIMEOUT_S = 10


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
    """`rate` requests per second on a fixed schedule for `duration_s` (bench/openloop.py)."""
    argv = [sys.executable, "-m", "bench.openloop", url + path, str(bodies), "--rate", str(rate),
            "--duration", str(duration_s), "--connections", str(connections), "--timeout", str(REQUEST_TIMEOUT_S)]
    out = subprocess.run(pinned(argv, cpus), capture_output=True, text=True, timeout=duration_s + 60,
                         cwd=Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        raise LoadGeneratorError(f"open-loop generator exited {out.returncode}: {out.stderr[-2000:]}")
    raw = _parse(out.stdout, "bench.openloop")
    record = _record(raw, items_per_request, loop="open", concurrency=connections, target_rate=round(rate, 2))
    record.update(scheduled=raw["scheduled"], unsent=raw["unsent"], late_sends=raw["late_sends"])
    return record
