"""Where one single-item request's Python goes, per layer: the real app (service.http.app) served by
uvicorn in this process, pinned to one core, with cProfile on the event-loop thread while wrk
(pinned to another core) sends single-item /entailment bodies at c=32.

Self time (tottime) is summed by the file each function lives in, so the layers add up to the
profiled thread's time; onnxruntime runs in the engine's inference thread, which cProfile does
not see (the loop thread's wait for it is not counted either). cProfile slows every Python call,
so the profiled req/s is far below the real one: read the shares, not the absolute times, and
`bench.ab` for the throughput (the floors beside it in the README come from there).

    .venv/bin/python -m bench.request_path --seconds 5 --out bench-results/request-path

`--stages` instead measures a 32-input request from bytes in to bytes out, per stage and per
input (issue 57), in CPU time, which other work on a shared core disturbs far less than wall
time: the same app under wrk at c=4 with the 32-pair bodies gives the CPU time a request costs
the server process (unprofiled), then each stage of the path is timed alone, in order, on the
same bodies (`StageTimer`, the process's CPU time while the server idles); what the stages do not
account for is the HTTP stack, the event loop and the metrics around them.

    .venv/bin/python -m bench.request_path --stages --dataset snli --out bench-results/request-path
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer

from bench import servers
from bench.loadgen import WRK_SCRIPT, pinned
from bench.workloads import BATCH_INPUTS, test_examples, write_bodies

# layer -> substrings of a function's file path; the first match wins (order matters)
LAYERS = (
    ("HTTP parse + connection (uvicorn, httptools)", ("uvicorn/", "httptools")),
    ("our middleware (service/http/http.py)", ("service/http/http.py",)),
    ("Starlette middleware stack", ("starlette/middleware",)),
    ("routing (starlette/routing.py)", ("starlette/routing.py",)),
    ("FastAPI route + dependency resolution", ("fastapi/routing.py", "fastapi/dependencies", "fastapi/")),
    ("body read (starlette/requests.py)", ("starlette/requests.py",)),
    ("response rendering (starlette/responses.py)", ("starlette/responses.py",)),
    ("other Starlette", ("starlette/",)),
    ("validation + serialization (pydantic)", ("pydantic",)),
    ("json encode/decode (stdlib)", ("json/",)),
    ("our entry point + hot path (service/http/entry.py)", ("service/http/entry.py",)),
    ("our routes (service/http/routes.py, tasks, schemas, errors)", ("service/http/routes.py", "service/inference/tasks.py",
                                                                 "service/http/schemas.py", "service/http/errors.py",
                                                                 "service/http/oip.py", "service/http/auth.py")),
    ("tokenizing (core/tokenization.py, tokenizers)", ("core/tokenization.py", "tokenizers")),
    ("engine submit + futures (service/inference/engine.py, batcher.py)", ("service/inference/engine.py", "service/inference/batcher.py")),
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
    line = next((row for row in out.splitlines() if row.startswith("BENCH_JSON")), None)
    return json.loads(line.split(" ", 1)[1]) if line else {"raw": out[-500:]}


# --- a 32-input request, stage by stage (--stages) --------------------------------------------

# Rounds of (one wrk run of the service, one pass of every stage), interleaved so that other work
# on the shared core disturbs both alike; the least CPU time of each is kept, the least disturbed.
STAGE_ROUNDS = 5
PARSE = "parse + validate (pydantic, from the body's bytes)"
SERIALISE = "serialise (ignored fields, JSON)"
SUBMIT = "engine.submit, end to end"


def _per_argument(fn, arguments: list) -> float:
    """CPU seconds of the process (the tokenizers library's own threads included) per argument
    of `fn` called on each of `arguments` in turn; the server in the same process is idle."""
    t0 = time.process_time()
    for a in arguments:
        fn(a)
    return (time.process_time() - t0) / len(arguments)


class StageTimer:
    """Each stage of the 32-input path timed alone on the same request bodies, with the
    service's own functions (the hot path's validator, the engine's checks and answers, the
    task encoder, the runtime's plan, feeds and session, the answer's JSON writer). "engine
    bookkeeping" is `Engine.submit` from `concurrency` callers on uvloop (the server's load; its
    CPU time per request) minus the stages it runs. It also drives the tree before issue 57
    (per-input outputs, `infer_batch`, and `Engine.render` of one Done per input), so one
    harness measures both."""

    def __init__(self, bundle: Path, raw_bodies: list[bytes], concurrency: int) -> None:
        from pydantic import TypeAdapter

        from service.inference.batcher import Done
        from service.inference.engine import Engine, warm_up
        from service.metrics import Metrics
        from service.http.routes import ANSWER_JSON, TASK_BODIES
        from service.inference.runtime import CPU, ModelRuntime
        from service.settings import Settings
        from service.inference.tasks import encode

        self.settings = Settings(model_repository=[bundle.parent], intra_op_threads=1, max_queue=4096)
        self.runtime = runtime = ModelRuntime.load(bundle, [CPU], 1)
        warm_up(runtime, self.settings)
        self.engine = engine = Engine(runtime, self.settings, Metrics())
        self.concurrency = concurrency
        self.raw = raw_bodies
        self.adapter = TypeAdapter(TASK_BODIES[engine.task.endpoint][1])
        self.bodies = [self.adapter.validate_json(raw) for raw in raw_bodies]
        self.inputs = [body.inputs for body in self.bodies]
        self.encode = lambda x: encode(runtime, x)
        self.items = [[e.item for e in self.encode(x)] for x in self.inputs]
        self.feeds = [[runtime.feeds([batch[k] for k in call]) for call in self.plan(batch)] for batch in self.items]
        if hasattr(runtime, "run_batch"):
            self.run_batch = runtime.run_batch
            outputs = [runtime.run_batch(batch)[0] for batch in self.items]
            self.done = [Done([(0, o, 0, len(batch))], [False] * len(batch), [0.0] * len(batch), [None] * len(batch),
                              0.0, 0.0) for o, batch in zip(outputs, self.items)]
        else:  # before issue 57: an output and a Done per input
            from types import SimpleNamespace

            self.run_batch = runtime.infer_batch
            self.done = [[SimpleNamespace(output=o, truncated=False, unknown_share=0.0, tokens=None, batch_id=1,
                                          queue_s=0.0, inference_s=0.0) for o in runtime.infer_batch(batch)[0]]
                         for batch in self.items]
        self.results = [engine.render(d).results for d in self.done]
        self.dump = ANSWER_JSON.dump_json

    def plan(self, batch: list) -> list[list[int]]:
        from service.inference.runtime import plan_calls

        r = self.runtime
        return plan_calls([item.shape for item in batch], r.shape_tokens, r.call_overhead_tokens,
                          None if r.batch_sizes is None else r.rows)

    def once(self) -> dict[str, float]:
        """One pass of every stage over the bodies: seconds per request."""
        r, e = self.runtime, self.engine
        t: dict[str, float] = {}
        t[PARSE] = _per_argument(self.adapter.validate_json, self.raw)
        t["checks (sizes, queue room, text limits)"] = _per_argument(lambda x: e.check(x, batch=True), self.inputs)
        t["tokenize (encode per field, items)"] = _per_argument(self.encode, self.inputs)
        t["plan + pad into feeds"] = _per_argument(lambda b: [r.feeds([b[k] for k in c]) for c in self.plan(b)],
                                                   self.items)
        t["session.run"] = _per_argument(lambda fs: [r.run(f) for f in fs], self.feeds)
        # run_batch: plan, feeds, run, then the outputs
        t["outputs per item (softmax, argmax, rows)"] = _per_argument(self.run_batch, self.items)
        t["answers (engine.render)"] = _per_argument(e.render, self.done)
        t[SERIALISE] = _per_argument(lambda br: (br[0].ignored_fields(), self.dump({"results": br[1]})),
                                     list(zip(self.bodies, self.results)))
        t[SUBMIT] = self.submit()
        return t

    def submit(self) -> float:
        """CPU seconds of the process per request of `Engine.submit` on the bodies from
        `concurrency` callers (the engine's inference thread included)."""
        import asyncio

        from service.inference.engine import Engine
        from service.metrics import Metrics

        async def run() -> float:
            engine = Engine(self.runtime, self.settings, Metrics())
            engine.start()
            loop = asyncio.get_running_loop()

            async def caller(share: list) -> None:
                for x in share:
                    await engine.submit(x, deadline=loop.time() + 30.0, batch=True)

            t0 = time.process_time()
            await asyncio.gather(*(caller(self.inputs[c::self.concurrency]) for c in range(self.concurrency)))
            elapsed = (time.process_time() - t0) / len(self.inputs)
            await engine.drain(5.0)
            return elapsed

        try:
            import uvloop

            return uvloop.run(run())
        except ImportError:
            return asyncio.run(run())

    @staticmethod
    def split(best: dict[str, float], request_s: float) -> dict[str, float]:
        """The fastest of each stage -> the rows of the table: the outputs stage is run_batch
        minus the plan, feeds and run timed alone, the bookkeeping `Engine.submit` minus the
        stages inside it, the rest the service's time per request minus all that."""
        t = dict(best)
        whole = t["outputs per item (softmax, argmax, rows)"]
        t["outputs per item (softmax, argmax, rows)"] = max(0.0, whole - t["plan + pad into feeds"] - t["session.run"])
        inside = whole + t["checks (sizes, queue room, text limits)"] + t["tokenize (encode per field, items)"] \
            + t["answers (engine.render)"]
        submit = t.pop(SUBMIT)
        t["engine bookkeeping (queue, futures, thread hand-offs)"] = max(0.0, submit - inside)
        t["HTTP in and out, event loop, metrics (the rest)"] = request_s - submit - t[PARSE] - t[SERIALISE]
        return t


def _server_in_process(model: str, server_cpu: str, out: Path, dataset: str, examples: int,
                       body_file: str) -> tuple[Path, str, Any, Any]:
    """This process, pinned to `server_cpu`, made the server of `model` alone (CPU, one
    onnxruntime thread): the request bodies written from `dataset`, its URL, the app and the
    uvicorn server (not started)."""
    import uvicorn

    os.environ.update({"ATTSERVE_MODEL_REPOSITORY": str(servers.REPO / "model_repository"), "ATTSERVE_MODELS": model,
                       "ATTSERVE_DEVICE": "cpu", "ATTSERVE_INTRA_OP_THREADS": "1", "ATTSERVE_MAX_QUEUE": "4096",
                       "ATTSERVE_LOG_LEVEL": "WARNING"})
    os.sched_setaffinity(0, {int(c) for c in server_cpu.split(",")})
    from service.http.app import create_app

    out.mkdir(parents=True, exist_ok=True)
    body_dir = Path(tempfile.mkdtemp(prefix="request-path-"))
    write_bodies(test_examples(dataset, None, examples), body_dir)
    port = servers.free_port()
    app = create_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    return body_dir / body_file, f"http://127.0.0.1:{port}", app, server


async def _serving(server, app) -> asyncio.Task:
    """Start `server` (uvicorn, in this loop) and return its task once its models are loaded."""
    task = asyncio.create_task(server.serve())
    while not (server.started and getattr(app.state, "service", None) and app.state.service.loaded):
        await asyncio.sleep(0.1)
    return task


def stages_main(seconds: int, warmup: int, concurrency: int, model: str, dataset: str, server_cpu: str,
                client_cpu: str, out: Path) -> None:
    bodies, url, app, server = _server_in_process(model, server_cpu, out, dataset, 2000, "batch.jsonl")
    raw_bodies = [line.encode() for line in bodies.read_text(encoding="utf-8").splitlines() if line]
    timer = StageTimer(servers.REPO / "model_repository" / model, raw_bodies, concurrency)
    runs: list[dict] = []
    passes: list[dict[str, float]] = []

    async def drive() -> None:
        task = await _serving(server, app)
        run = lambda s: asyncio.to_thread(_wrk, url, bodies, s, concurrency, client_cpu)  # noqa: E731
        await run(warmup)
        for _ in range(STAGE_ROUNDS):
            cpu0 = time.process_time()  # this process is the server; wrk runs in its own
            runs.append(await run(seconds))
            runs[-1]["server_cpu_s"] = time.process_time() - cpu0
            passes.append(await asyncio.to_thread(timer.once))  # the server idle meanwhile
        server.should_exit = True
        await task

    try:
        import uvloop
        uvloop.run(drive())
    except ImportError:
        asyncio.run(drive())
    per_run = [r["duration_us"] / 1e6 / max(1, r["requests"]) for r in runs]
    cpu_per_run = [r["server_cpu_s"] / max(1, r["requests"]) for r in runs]
    request_s = min(cpu_per_run)
    best = {name: min(p[name] for p in passes) for name in passes[0]}
    times = StageTimer.split(best, request_s)
    rows = [{"stage": name, "us_per_request": 1e6 * t, "us_per_item": 1e6 * t / BATCH_INPUTS,
             "share": t / request_s} for name, t in times.items()]
    report = {"model": model, "dataset": dataset, "concurrency": concurrency, "seconds": seconds,
              "rounds": STAGE_ROUNDS, "server_cpu": server_cpu, "client_cpu": client_cpu,
              "loadavg_at_end": os.getloadavg(),
              "service": {"cpu_us_per_request": 1e6 * request_s,
                          "cpu_us_per_request_per_run": [round(1e6 * x, 1) for x in cpu_per_run],
                          "items_per_s_per_run": [round(BATCH_INPUTS / x, 1) for x in per_run],
                          "errors_per_run": [r.get("errors") for r in runs]},
              "stages": rows, "passes_us_per_request": [{k: round(1e6 * v, 1) for k, v in p.items()} for p in passes]}
    (out / "stages.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"32-input requests at c={concurrency}: {1e6 * request_s:,.0f} µs of CPU a request in the server "
             f"(the least of {STAGE_ROUNDS} runs: {', '.join(f'{1e6 * x:,.0f}' for x in cpu_per_run)}; "
             f"{', '.join(f'{BATCH_INPUTS / x:,.0f}' for x in per_run)} items/s); each stage the least CPU time "
             f"of {STAGE_ROUNDS} passes; load average {os.getloadavg()[0]:.1f} at the end\n",
             "| stage | CPU µs/request | CPU µs/item | share |", "|---|---:|---:|---:|"]
    lines += [f"| {r['stage']} | {r['us_per_request']:,.0f} | {r['us_per_item']:.1f} | {100 * r['share']:.1f} % |"
              for r in rows]
    (out / "stages.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(seconds: int = 5, warmup: int = 2, concurrency: int = 32, model: str = "snli-attconv-light",
         server_cpu: str = "0", client_cpu: str = "1", out: Path = Path("bench-results/request-path"),
         stages: bool = typer.Option(False, help="profile 32-input requests stage by stage (c=4 unless --concurrency)"),
         dataset: str = typer.Option("snli", help="--stages: the dataset whose test pairs are sent (or a .jsonl file)")) -> None:
    if stages:
        stages_main(seconds, warmup, 4 if concurrency == 32 else concurrency, model, dataset, server_cpu, client_cpu, out)
        return
    bodies, url, app, server = _server_in_process(model, server_cpu, out, "snli", 500, "single.jsonl")
    profile = cProfile.Profile()
    result: dict = {}

    async def drive() -> None:
        task = await _serving(server, app)
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
