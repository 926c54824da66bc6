"""One benchmark run: every benchmark measurement in one go, written as JSON, Markdown and PNG.

Method (the comparison a 2-core machine allows): the measured process (a server, or the
in-process engine) is pinned to one core and its load generator to the other, onnxruntime and
PyTorch at 1 intra-op thread; the unpinned figures (both cores, threads = cores) are reported
beside them. Every figure is from this one run, so ratios compare like with like on a noisy
shared machine. The plan:

  per workload (bundle + its dataset's test examples):
    engine ceiling (pinned, and unpinned)   in-process runtime, batch 1 / 8 / 32 / 64
    engine requests (pinned)                in-process Engine.submit on the HTTP bench's bodies
    onnxruntime vs PyTorch eager             batch 1 and 32 (workloads with a checkpoint)
    service, single-item requests            closed loop at each concurrency (pinned, unpinned)
    service, 32-item requests                closed loop at each concurrency (pinned)
  primary workload only (the first):
    service, open loop                       50 % and 90 % of the pinned saturation rate
    HTTP floor, naive server, peer           single-item requests, closed loop (pinned)
    ACT vs Transformer                       paper settings, batch of 100
    knobs (full mode)                        batch size, delay, threads, workers, loop/http, JSON
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from bench import loadgen, profile, servers
from bench.servers import Server, UvicornOptions
from bench.workloads import BATCH_INPUTS, Workload
from service.settings import Settings

log = logging.getLogger("bench.suite")

RESULTS_FILE, TABLE_FILE = "results.json", "results.md"
THROUGHPUT_PLOT, LATENCY_PLOT, KNOBS_PLOT = "throughput.png", "p99.png", "knobs.png"
SCHEMA_VERSION = 1
# The concurrency the service/naive and service/peer ratios are taken at.
RATIO_CONCURRENCY = 32
DEFAULT_MODELS = (("snli-attconv-light", "snli"), ("fever-attconv", "fever"),
                  ("bbc-act", "bbc"))


@dataclass
class BenchOptions:
    mode: str = "short"
    out: Path = Path("bench-results/short")
    work: Path | None = None  # body files, server logs, the short mode's model; a temp dir if None
    repository: Path = Path("model_repository")
    checkpoints: Path | None = Path("checkpoints")
    models: tuple[tuple[str, str], ...] = DEFAULT_MODELS  # (bundle name, dataset)
    concurrencies: tuple[int, ...] = (1, 4, 16, 32, 64)
    duration_s: int = 10
    warmup_s: int = 2
    examples: int = 2000
    engine_seconds: float = 3.0
    batch_sizes: tuple[int, ...] = (1, 8, 32, 64)
    compare_batch_sizes: tuple[int, ...] = (1, 32)
    act_length: int = 256
    open_loop_fractions: tuple[float, ...] = (0.5, 0.9)
    open_loop_connections: int = 64
    max_batch_size: int = Settings.model_fields["max_batch_size"].default  # the service's default
    max_batch_delay_ms: float = Settings.model_fields["max_batch_delay_ms"].default  # the service's default
    peer: bool = True
    knobs: bool = True
    profile: bool = True
    unpinned: bool = True

    @classmethod
    def for_mode(cls, mode: str, **overrides) -> "BenchOptions":
        if mode == "short":
            # < 2 minutes on the tiny model: two concurrencies, 2 s runs, no peer, knobs or profile.
            base = dict(out=Path("bench-results/short"), concurrencies=(1, RATIO_CONCURRENCY), duration_s=2,
                        warmup_s=0, examples=256, engine_seconds=0.3, act_length=32, peer=False, knobs=False,
                        profile=False)
        elif mode == "full":
            base = dict(out=Path("bench-results"))
        else:
            raise ValueError(f"mode must be short or full, got {mode!r}")
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(mode=mode, **base)


@dataclass
class Cores:
    """Which CPUs the measured process and the load generator get (taskset lists)."""

    server: str
    loadgen: str
    all: list[int] = field(default_factory=list)

    @classmethod
    def detect(cls) -> "Cores":
        cpus = sorted(os.sched_getaffinity(0))
        # With one CPU both share it; the JSON says so under settings.cores.
        return cls(str(cpus[0]), str(cpus[1] if len(cpus) > 1 else cpus[0]), cpus)


# --- machine and versions -------------------------------------------------------------------

def machine() -> dict:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
    except (OSError, StopIteration):
        mem_kb = 0
    return {
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "cpus_available": sorted(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kb / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


VERSIONED = ("attserve", "onnxruntime", "torch", "numpy", "tokenizers", "fastapi", "starlette", "uvicorn", "uvloop",
             "httptools", "pydantic", "orjson", "httpx", "prometheus-client")


def versions() -> dict:
    out: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["wrk"] = loadgen.wrk_version()
    return out


# --- the run --------------------------------------------------------------------------------

class Suite:
    def __init__(self, options: BenchOptions, progress: Callable[[str], None] | None = None) -> None:
        self.o = options
        self.cores = Cores.detect()
        self.progress = progress or (lambda _: None)
        self.work = Path(options.work or tempfile.mkdtemp(prefix="attserve-bench-"))
        self.logs = self.work / "logs"
        self.results: dict = {}

    # --- building blocks ------------------------------------------------------------------

    def off(self, flag: str) -> str:
        """Why an optional section did not run."""
        if self.o.mode == "short":
            return f"not part of the short mode (add --{flag})"
        return f"turned off (--no-{flag})"

    def engine(self, spec: dict, cpus: str | None) -> dict:
        """Run bench.engine in its own process on `cpus`."""
        path = self.work / f"engine-{len(list(self.work.glob('engine-*.json')))}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        argv = loadgen.pinned([sys.executable, "-m", "bench.engine", str(path)], cpus)
        out = subprocess.run(argv, capture_output=True, text=True, cwd=servers.REPO,
                             env={**os.environ, "PYTHONPATH": str(servers.REPO)})
        if out.returncode != 0:
            raise RuntimeError(f"bench.engine failed ({out.returncode}):\n{out.stderr[-3000:]}")
        line = next(x for x in out.stdout.splitlines() if x.startswith("BENCH_JSON "))
        return json.loads(line.removeprefix("BENCH_JSON "))

    def sweep(self, server: Server, path: str, bodies: Path, items_per_request: int, loadgen_cpus: str | None,
              label: str, with_metrics: bool = False) -> list[dict]:
        """Closed-loop runs at every concurrency against a running server."""
        runs = []
        for concurrency in self.o.concurrencies:
            self.progress(f"{label}: c={concurrency}")
            if self.o.warmup_s:
                loadgen.closed_loop(server.url, path, bodies, concurrency, self.o.warmup_s, loadgen_cpus,
                                    items_per_request)
            before = servers.metric_totals(server.get("/metrics")) if with_metrics else None
            run = loadgen.closed_loop(server.url, path, bodies, concurrency, self.o.duration_s, loadgen_cpus,
                                      items_per_request)
            if with_metrics:
                run["server_split"] = servers.metrics_split(before, servers.metric_totals(server.get("/metrics")))
            log.info("run", extra={"label": label, **{k: run[k] for k in ("concurrency", "requests_per_s", "items_per_s")},
                                   "p99_ms": run["latency_ms"]["p99"], "errors": run["errors"]["total"]})
            runs.append(run)
        return runs

    def service(self, workload: Workload, *, threads: int, cpus: str | None, max_batch_size: int | None = None,
                max_batch_delay_ms: float | None = None, stack: UvicornOptions | None = None) -> Server:
        spec = servers.service_spec(
            servers.free_port(), workload.repository, workload.name,
            max_batch_size=max_batch_size or self.o.max_batch_size,
            max_batch_delay_ms=self.o.max_batch_delay_ms if max_batch_delay_ms is None else max_batch_delay_ms,
            intra_op_threads=threads, stack=stack)
        return Server(spec, cpus, self.logs)

    # --- sections -------------------------------------------------------------------------

    def engine_section(self, workload: Workload, primary: bool) -> dict:
        o, c = self.o, self.cores
        self.progress(f"{workload.name}: engine ceiling (pinned)")
        spec = {"bundle": str(workload.bundle), "examples": str(workload.bodies), "batch_sizes": list(o.batch_sizes),
                "seconds": o.engine_seconds, "threads": 1, "torch": True,
                "checkpoint": str(workload.checkpoint) if workload.checkpoint else None,
                "compare_batch_sizes": list(o.compare_batch_sizes),
                "requests": {"concurrencies": list(o.concurrencies), "max_batch_size": o.max_batch_size,
                             "max_batch_delay_ms": o.max_batch_delay_ms}}
        if primary:
            spec["act_length"] = o.act_length
        pinned = self.engine(spec, c.server)
        out = {"pinned": pinned["ceiling"], "ort_vs_torch": pinned.get("ort_vs_torch"), "requests": pinned["requests"]}
        if primary:
            self.results["act_vs_transformer"] = pinned["act_vs_transformer"]
        if o.unpinned:
            self.progress(f"{workload.name}: engine ceiling (unpinned)")
            spec = {**spec, "threads": len(c.all), "checkpoint": None, "act_length": None, "torch": False,
                    "requests": None}
            out["unpinned"] = self.engine(spec, None)["ceiling"]
        return out

    def service_section(self, workload: Workload, primary: bool) -> dict:
        o, c = self.o, self.cores
        bodies = workload.bodies
        out: dict = {}
        with self.service(workload, threads=1, cpus=c.server) as server:
            out["single"] = {"pinned": self.sweep(server, workload.endpoint, bodies / "single.jsonl", 1, c.loadgen,
                                                  f"{workload.name}: service single", with_metrics=True)}
            out["batch32"] = {"pinned": self.sweep(server, workload.endpoint, bodies / "batch.jsonl", BATCH_INPUTS,
                                                   c.loadgen, f"{workload.name}: service 32-item", with_metrics=True)}
            if primary:
                saturation = max(r["requests_per_s"] for r in out["single"]["pinned"])
                out["saturation_requests_per_s"] = saturation
                out["open_loop"] = []
                for fraction in o.open_loop_fractions:
                    self.progress(f"{workload.name}: service open loop at {fraction:.0%}")
                    before = servers.metric_totals(server.get("/metrics"))
                    run = loadgen.open_loop(server.url, workload.endpoint, bodies / "single.jsonl",
                                            fraction * saturation, max(2, o.duration_s), c.loadgen,
                                            o.open_loop_connections)
                    run["fraction_of_saturation"] = fraction
                    run["server_split"] = servers.metrics_split(before, servers.metric_totals(server.get("/metrics")))
                    out["open_loop"].append(run)
        if o.unpinned:
            with self.service(workload, threads=len(c.all), cpus=None) as server:
                out["single"]["unpinned"] = self.sweep(server, workload.endpoint, bodies / "single.jsonl", 1, None,
                                                       f"{workload.name}: service single (unpinned)", with_metrics=True)
        return out

    def profile_section(self, workload: Workload) -> dict:
        """py-spy on the pinned service during one more single-item run at the top concurrency."""
        if not self.o.profile:
            return {"status": "skipped", "reason": self.off("profile")}
        if not profile.available():
            return {"status": "skipped", "reason": "py-spy is not installed (pip install py-spy)"}
        c, concurrency = self.cores, max(self.o.concurrencies)
        self.progress(f"{workload.name}: profiling the service (py-spy) at c={concurrency}")
        raw_path = self.work / "profile-service.txt"
        with self.service(workload, threads=1, cpus=c.server) as server:
            loadgen.closed_loop(server.url, workload.endpoint, workload.bodies / "single.jsonl", concurrency,
                                max(1, self.o.warmup_s), c.loadgen)
            # py-spy shares the generator's core; its samples come from the server's memory.
            spy = profile.start(server.process.pid, self.o.duration_s, raw_path, c.loadgen)
            run = loadgen.closed_loop(server.url, workload.endpoint, workload.bodies / "single.jsonl", concurrency,
                                      self.o.duration_s, c.loadgen)
            _, err = spy.communicate(timeout=self.o.duration_s + 60)
        if spy.returncode != 0 or not raw_path.exists():
            return {"status": "failed", "reason": f"py-spy exited {spy.returncode}: {err.decode()[-1000:]}"}
        summary = profile.summarize(raw_path.read_text(encoding="utf-8"))
        return {"status": "ok", "workload": workload.name, "concurrency": concurrency, "raw": str(raw_path),
                "run": run, **summary}

    def floor_section(self, workload: Workload) -> dict:
        spec = servers.floor_spec(servers.free_port())
        with Server(spec, self.cores.server, self.logs) as server:
            return {"pinned": self.sweep(server, workload.endpoint, workload.bodies / "single.jsonl", 1,
                                         self.cores.loadgen, "HTTP floor")}

    def naive_section(self, workload: Workload) -> dict:
        if workload.checkpoint is None:
            return {"status": "skipped", "reason": f"no checkpoint for {workload.name}"}
        spec = servers.naive_spec(servers.free_port(), workload.checkpoint, torch_threads=1)
        with Server(spec, self.cores.server, self.logs) as server:
            return {"status": "ok", "pinned": self.sweep(server, workload.endpoint, workload.bodies / "single.jsonl",
                                                         1, self.cores.loadgen, "naive server")}

    def peer_section(self, workload: Workload) -> dict:
        base = {"framework": "BentoML (adaptive batching)", "venv": str(servers.PEER_VENV),
                "max_batch_size": self.o.max_batch_size}
        if not self.o.peer:
            return {**base, "status": "skipped", "reason": self.off("peer")}
        self.progress("peer: BentoML virtualenv")
        usable, note = servers.ensure_peer_venv()
        if not usable:
            return {**base, "status": "failed", "reason": note}
        spec = servers.peer_spec(servers.free_port(), workload.bundle, threads=1, max_batch_size=self.o.max_batch_size)
        try:
            with Server(spec, self.cores.server, self.logs) as server:
                runs = self.sweep(server, workload.endpoint, workload.bodies / "peer.jsonl", 1, self.cores.loadgen,
                                  "peer (BentoML)")
        except (servers.ServerError, loadgen.LoadGeneratorError) as exc:
            return {**base, "status": "failed", "reason": str(exc)[-1500:], "install": note}
        return {**base, "status": "ok", "install": note, "pinned": runs}

    def knobs_section(self, workload: Workload) -> dict:
        """One knob at a time from the defaults; single-item requests, closed loop."""
        if not self.o.knobs:
            return {"status": "skipped", "reason": self.off("knobs")}
        c, o = self.cores, self.o
        single = workload.bodies / "single.jsonl"
        high, low = max(o.concurrencies), min(x for x in o.concurrencies if x > 1)
        runs: list[dict] = []

        def measure(knob: str, value, server: Server, concurrency: int, loadgen_cpus: str | None, path: str) -> None:
            self.progress(f"knobs: {knob}={value} c={concurrency}")
            before = servers.metric_totals(server.get("/metrics")) if server.spec.kind == "service" else None
            loadgen.closed_loop(server.url, path, single, concurrency, max(1, o.warmup_s), loadgen_cpus)
            run = loadgen.closed_loop(server.url, path, single, concurrency, o.duration_s, loadgen_cpus)
            if before is not None:
                run["server_split"] = servers.metrics_split(before, servers.metric_totals(server.get("/metrics")))
            runs.append({"knob": knob, "value": value, **run})

        failed: list[dict] = []

        @contextlib.contextmanager
        def attempt(knob: str, value) -> Iterator[None]:
            """One knob setting that cannot start or be loaded is recorded, not fatal: the
            sections measured before it must still reach results.json."""
            try:
                yield
            except (servers.ServerError, loadgen.LoadGeneratorError) as exc:
                log.warning("knob setting failed", extra={"knob": knob, "value": value, "error": str(exc)[-300:]})
                failed.append({"knob": knob, "value": value, "reason": str(exc)[-1000:]})

        for size in (1, 8, 32, 64):
            with attempt("max_batch_size", size), self.service(workload, threads=1, cpus=c.server, max_batch_size=size) as server:
                measure("max_batch_size", size, server, high, c.loadgen, workload.endpoint)
        for delay in (0.0, 2.0, 5.0, 10.0):
            with attempt("max_batch_delay_ms", delay), \
                    self.service(workload, threads=1, cpus=c.server, max_batch_delay_ms=delay) as server:
                for concurrency in sorted({low, high}):
                    measure("max_batch_delay_ms", delay, server, concurrency, c.loadgen, workload.endpoint)
        # Threads and workers only mean something with both cores: unpinned, generator included.
        for threads in sorted({1, len(c.all)}):
            with attempt("intra_op_threads (unpinned)", threads), self.service(workload, threads=threads, cpus=None) as server:
                measure("intra_op_threads (unpinned)", threads, server, high, None, workload.endpoint)
        for workers in sorted({1, len(c.all)}):
            knob = "uvicorn_workers (unpinned, 1 thread each)"
            with attempt(knob, workers), \
                    self.service(workload, threads=1, cpus=None, stack=UvicornOptions(workers=workers)) as server:
                measure(knob, workers, server, high, None, workload.endpoint)
        for loop, http in (("uvloop", "httptools"), ("asyncio", "h11")):
            with attempt("loop/http", f"{loop}+{http}"), \
                    self.service(workload, threads=1, cpus=c.server, stack=UvicornOptions(loop=loop, http=http)) as server:
                measure("loop/http", f"{loop}+{http}", server, high, c.loadgen, workload.endpoint)
        for library in ("stdlib", "orjson"):
            spec = servers.floor_spec(servers.free_port(), json_library=library)
            with attempt("json library (HTTP floor)", library), Server(spec, c.server, self.logs) as server:
                measure("json library (HTTP floor)", library, server, high, c.loadgen, workload.endpoint)
        return {"status": "ok", "workload": workload.name, "runs": runs, "failed": failed}

    # --- the whole run --------------------------------------------------------------------

    def run(self, workloads: list[Workload], workload_info: dict, skipped: dict) -> dict:
        o = self.o
        started = dt.datetime.now(dt.timezone.utc)
        r = self.results
        r.update({
            "schema_version": SCHEMA_VERSION,
            "mode": o.mode,
            "command": " ".join(sys.argv),
            "started_at": started.isoformat(timespec="seconds"),
            "machine": machine(),
            "versions": versions(),
            "settings": {
                "concurrencies": list(o.concurrencies), "duration_s": o.duration_s, "warmup_s": o.warmup_s,
                "examples_per_workload": o.examples, "engine_seconds": o.engine_seconds,
                "batch_sizes": list(o.batch_sizes), "compare_batch_sizes": list(o.compare_batch_sizes),
                "batch_request_inputs": BATCH_INPUTS, "open_loop_fractions": list(o.open_loop_fractions),
                "open_loop_connections": o.open_loop_connections, "ratio_concurrency": RATIO_CONCURRENCY,
                "service": {"max_batch_size": o.max_batch_size, "max_batch_delay_ms": o.max_batch_delay_ms,
                            "max_queue": 4096, "pinned_intra_op_threads": 1,
                            "unpinned_intra_op_threads": len(self.cores.all)},
                "cores": dataclasses.asdict(self.cores),
                "load_generators": {"closed_loop": "wrk -t 1 (bench/wrk.lua)",
                                    "open_loop": "bench/loadgen.py (asyncio streams on uvloop, fixed-rate schedule)"},
                "work_dir": str(self.work),
            },
            "workloads": workload_info,
            "skipped_workloads": skipped,
        })
        primary = workloads[0]
        r["primary_workload"] = primary.name
        r["engine_ceiling"], r["engine_requests"], r["ort_vs_torch"], r["service"] = {}, {}, {}, {}
        for index, workload in enumerate(workloads):
            engine = self.engine_section(workload, primary=index == 0)
            r["ort_vs_torch"][workload.name] = engine.pop("ort_vs_torch")
            r["engine_requests"][workload.name] = engine.pop("requests")
            r["engine_ceiling"][workload.name] = engine
            r["service"][workload.name] = self.service_section(workload, primary=index == 0)
        r["http_floor"] = self.floor_section(primary)
        r["naive"] = self.naive_section(primary)
        r["peer"] = self.peer_section(primary)
        r["knobs"] = self.knobs_section(primary)
        r["profile"] = self.profile_section(primary)
        r["ratios"] = ratios(r)
        r["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        r["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        r["wall_s"] = round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1)
        return r


# --- ratios ---------------------------------------------------------------------------------

def _at(runs: list[dict] | None, concurrency: int) -> dict | None:
    return next((r for r in runs or [] if r["concurrency"] == concurrency), None)


def _best(runs: list[dict] | None, key: str) -> float | None:
    return max((r[key] for r in runs or []), default=None)


def _ratio(num: float | None, den: float | None, target: str | None, note: str) -> dict:
    value = round(num / den, 3) if num is not None and den else None
    met = None
    if value is not None and target is not None:
        op, bound = target.split()
        met = {">=": value >= float(bound), ">": value > float(bound), "<=": value <= float(bound)}[op]
    return {"value": value, "target": target, "met": met, "definition": note}


def ratios(r: dict) -> dict:
    """The issue's acceptance ratios, each with its target and how it was computed."""
    name = r["primary_workload"]
    service, ceiling = r["service"][name], r["engine_ceiling"][name]["pinned"]
    size = str(r["settings"]["service"]["max_batch_size"])
    single = service["single"]["pinned"]
    batch = service["batch32"]["pinned"]
    c = RATIO_CONCURRENCY
    peer_runs = r["peer"].get("pinned")
    naive_runs = r["naive"].get("pinned")
    requests = (r.get("engine_requests") or {}).get(name) or {}
    c1 = _at(single, 1)
    open50 = next((x for x in service.get("open_loop", []) if x["fraction_of_saturation"] == 0.5), None)
    compare = r["ort_vs_torch"].get(name) or {}
    act = r["act_vs_transformer"]
    return {
        "service_single_vs_engine": _ratio(_best(single, "items_per_s"), ceiling.get(size, {}).get("items_per_s"),
                                           ">= 0.5", f"best single-item items/s over concurrencies / engine items/s at batch {size}"),
        "service_batch32_vs_engine": _ratio(_best(batch, "items_per_s"), ceiling.get(str(BATCH_INPUTS), {}).get("items_per_s"),
                                            ">= 0.9", f"best 32-item-request items/s / engine items/s at batch {BATCH_INPUTS}"),
        # The same requests through service.inference.engine.Engine in process (bench.engine): what HTTP,
        # JSON and validation cost, with tokenizing, mixed shapes and rendering on both sides.
        "service_single_vs_engine_requests": _ratio(
            _best(single, "items_per_s"), _best(requests.get("single"), "items_per_s"), ">= 0.3",
            "best single-item items/s over concurrencies / best in-process Engine.submit items/s on the same requests"),
        "service_batch32_vs_engine_requests": _ratio(
            _best(batch, "items_per_s"), _best(requests.get("batch32"), "items_per_s"), ">= 0.75",
            "best 32-item-request items/s / best in-process Engine.submit items/s on the same requests"),
        "service_vs_http_floor": _ratio(_best(single, "requests_per_s"), _best(r["http_floor"]["pinned"], "requests_per_s"),
                                        ">= 0.8", "best single-item requests/s, service / constant-answer floor"),
        "service_vs_naive": _ratio((_at(single, c) or {}).get("requests_per_s"),
                                   (_at(naive_runs, c) or {}).get("requests_per_s"), ">= 2",
                                   f"single-item requests/s at c={c}"),
        "service_vs_peer": _ratio((_at(single, c) or {}).get("requests_per_s"),
                                  (_at(peer_runs, c) or {}).get("requests_per_s"), "> 1",
                                  f"single-item requests/s at c={c}"),
        "p99_open50_vs_p50_c1": _ratio((open50 or {}).get("latency_ms", {}).get("p99"),
                                       (c1 or {}).get("latency_ms", {}).get("p50"), "<= 3",
                                       "p99 at 50% of saturation (open loop) / p50 at c=1 (closed loop)"),
        **{f"ort_vs_torch_batch{size}": _ratio(
            compare.get(str(size), {}).get("torch_eager", {}).get("median_ms"),
            compare.get(str(size), {}).get("onnxruntime", {}).get("median_ms"), None,
            f"PyTorch eager ms / onnxruntime ms per batch of {size} (speed-up of the ONNX graph)")
           for size in r["settings"]["compare_batch_sizes"]},
        "act_vs_transformer_params": _ratio(act["act"]["parameters_without_word_embeddings"],
                                            act["transformer"]["parameters_without_word_embeddings"], None,
                                            "parameters without word embeddings, ACT / Transformer (paper: 0.44)"),
        "act_vs_transformer_speed": _ratio(act["transformer"]["median_ms"], act["act"]["median_ms"], None,
                                           "Transformer ms / ACT ms per batch of 100, eager (paper: 2.7x faster)"),
    }
