"""Where one single-item request's Python goes, per layer: the real app (service.app) served by
uvicorn in this process, pinned to one core, with cProfile on the event-loop thread while wrk
(pinned to another core) sends single-item /entailment bodies at c=32.

Self time (tottime) is summed by the file each function lives in, so the layers add up to the
profiled thread's time; onnxruntime runs in the engine's inference thread, which cProfile does
not see (the loop thread's wait for it is not counted either). cProfile slows every Python call,
so the profiled req/s is far below the real one: read the shares, not the absolute times, and
`bench.ab` for the throughput (the floors beside it in the README come from there).

    .venv/bin/python -m bench.request_path --seconds 5 --out bench/results/request-path
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import typer

from bench import servers
from bench.loadgen import WRK_SCRIPT, pinned
from bench.workloads import test_examples, write_bodies

# layer -> substrings of a function's file path; the first match wins (order matters)
LAYERS = (
    ("HTTP parse + connection (uvicorn, httptools)", ("uvicorn/", "httptools")),
    ("our middleware (service/http.py)", ("service/http.py",)),
    ("Starlette middleware stack", ("starlette/middleware",)),
    ("routing (starlette/routing.py)", ("starlette/routing.py",)),
    ("FastAPI route + dependency resolution", ("fastapi/routing.py", "fastapi/dependencies", "fastapi/")),
    ("body read (starlette/requests.py)", ("starlette/requests.py",)),
    ("response rendering (starlette/responses.py)", ("starlette/responses.py",)),
    ("other Starlette", ("starlette/",)),
    ("validation + serialization (pydantic)", ("pydantic",)),
    ("json encode/decode (stdlib)", ("json/",)),
    ("our entry point + hot path (service/entry.py)", ("service/entry.py",)),
    ("our routes (service/routes.py, tasks, schemas, errors)", ("service/routes.py", "service/tasks.py",
                                                                 "service/schemas.py", "service/errors.py",
                                                                 "service/oip.py", "service/auth.py")),
    ("tokenizing (core/tokenization.py, tokenizers)", ("core/tokenization.py", "tokenizers")),
    ("engine submit + futures (service/engine.py, batcher.py)", ("service/engine.py", "service/batcher.py")),
    ("metrics (service/metrics.py, prometheus_client)", ("service/metrics.py", "prometheus_client")),
    ("event loop (asyncio, uvloop)", ("asyncio/", "uvloop", "<built-in method select", "selectors")),
)


# the loop thread handing a batch to the inference thread: on one core the GIL switch lets that
# thread run (onnxruntime and all) inside this call, so it holds model time too
HANDOFF = "hand-off to the inference thread (SimpleQueue.put; holds model time: one core, the GIL)"
# builtins whose self time is the loop waiting, not work
IDLE = ("method 'poll' of 'select.epoll'", "method 'select' of", "run_until_complete", "run_forever",
        "method 'acquire' of '_thread.lock'", "method 'control' of 'select.kqueue'")


def layer_of(file: str, function: str) -> str:
    key = f"{file} {function}"
    for name, needles in LAYERS:
        if any(n in key for n in needles):
            return name
    return "other (builtins, logging, ...)"


def _wrk(url: str, bodies: Path, seconds: int, concurrency: int, cpus: str | None) -> dict:
    argv = pinned(["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(WRK_SCRIPT), url, "--",
                   "/entailment", str(bodies)], cpus)
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    line = next((l for l in out.splitlines() if l.startswith("BENCH_JSON")), None)
    return json.loads(line.split(" ", 1)[1]) if line else {"raw": out[-500:]}


def main(seconds: int = 5, warmup: int = 2, concurrency: int = 32, model: str = "snli-attconv-light",
         server_cpu: str = "0", client_cpu: str = "1", out: Path = Path("bench/results/request-path")) -> None:
    import uvicorn

    os.environ.update({"ATTSERVE_MODEL_REPOSITORY": str(servers.REPO / "model_repository"), "ATTSERVE_MODELS": model,
                       "ATTSERVE_DEVICE": "cpu", "ATTSERVE_INTRA_OP_THREADS": "1", "ATTSERVE_MAX_QUEUE": "4096",
                       "ATTSERVE_LOG_LEVEL": "WARNING"})
    os.sched_setaffinity(0, {int(c) for c in server_cpu.split(",")})
    from service.app import create_app

    out.mkdir(parents=True, exist_ok=True)
    body_dir = Path(tempfile.mkdtemp(prefix="request-path-"))
    write_bodies(test_examples("snli", None, 500), body_dir)
    bodies = body_dir / "single.jsonl"
    port = servers.free_port()
    url = f"http://127.0.0.1:{port}"
    app = create_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    profile = cProfile.Profile()
    result: dict = {}

    async def drive() -> None:
        task = asyncio.create_task(server.serve())
        while not (server.started and getattr(app.state, "service", None) and app.state.service.loaded):
            await asyncio.sleep(0.1)
        run = lambda s: asyncio.to_thread(_wrk, url, bodies, s, concurrency, client_cpu)  # noqa: E731
        await run(warmup)
        result["unprofiled"] = await run(seconds)
        profile.enable()
        result["profiled"] = await run(seconds)
        profile.disable()
        server.should_exit = True
        await task

    try:  # the loop uvicorn's "auto" picks when uvloop is installed
        import uvloop
        uvloop.run(drive())
    except ImportError:
        asyncio.run(drive())
    stats = pstats.Stats(profile)
    layers: dict[str, float] = defaultdict(float)
    functions = []
    for (file, line, function), (_, calls, tottime, _, callers) in stats.stats.items():
        if "of '_queue.SimpleQueue'" in function or "of '_thread.lock'" in function:
            layers[HANDOFF] += tottime
        elif any(w in function for w in IDLE):
            layers["waiting for the network or the model (epoll, idle)"] += tottime
        elif file == "~" and callers:  # a builtin: its time goes to its callers' layers, pro rata
            weight = sum(c[2] for c in callers.values()) or 1.0
            for (cfile, _, cfunction), c in callers.items():
                share = c[2] / weight if weight else 1 / len(callers)
                layers[layer_of(cfile, cfunction)] += tottime * share
        else:
            layers[layer_of(file, function)] += tottime
        functions.append((tottime, calls, f"{Path(file).name}:{line} {function}"))
    total = sum(t for name, t in layers.items() if not name.startswith("waiting"))
    requests = result["profiled"].get("requests") or 1
    rows = [{"layer": name, "share": t / total, "us_per_request_profiled": 1e6 * t / requests}
            for name, t in sorted(layers.items(), key=lambda kv: -kv[1]) if not name.startswith("waiting")]
    idle = layers.get("waiting for the network or the model (epoll, idle)", 0.0)
    top = [{"function": f, "calls_per_request": c / requests, "us_per_request_profiled": 1e6 * t / requests}
           for t, c, f in sorted(functions, reverse=True)[:25]]
    report = {"model": model, "concurrency": concurrency, "seconds": seconds, "server_cpu": server_cpu,
              "client_cpu": client_cpu, "loadavg_at_end": os.getloadavg(), "runs": result,
              "layers": rows, "idle_share_of_thread": idle / (idle + total), "top_functions": top}
    (out / "profile.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["| layer (self time on the event-loop thread) | share | µs/request (under cProfile) |", "|---|---:|---:|"]
    lines.insert(0, f"Shares of the event-loop thread's profiled time; the epoll wait cProfile saw ({100 * idle / (idle + total):.0f} %) "
                    "is left out (under uvloop the wait is inside its C loop and cProfile does not see it).\n")
    lines += [f"| {r['layer']} | {100 * r['share']:.1f} % | {r['us_per_request_profiled']:.0f} |" for r in rows]
    (out / "profile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: {"requests": v.get("requests"), "req_per_s": v.get("requests", 0) / max(v.get("duration_us", 1), 1) * 1e6,
                          "p99_ms": v.get("latency_us", {}).get("p99", 0) / 1e3, "errors": v.get("errors")}
                      for k, v in result.items()}))


if __name__ == "__main__":
    typer.run(main)
