"""The servers under test, each a subprocess started under `taskset` and stopped by its own
process group: the service, the HTTP floor, the naive PyTorch server (all on uvicorn, started
the same way so their stacks match) and the BentoML peer (its own virtualenv).

`metrics_split` reads the service's /metrics before and after a run; the deltas give the
server's own queue-wait vs inference split for exactly the requests of that run.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.loadgen import pinned

log = logging.getLogger("bench.servers")

REPO = Path(__file__).resolve().parents[1]
PEER_VENV = REPO / ".venv-peer"
# Pinned (bench.peers compares against these exact versions; bentoml 1.4.40 needs a certifi
# newer than the package index here offers). onnxruntime, tokenizers and numpy match .venv.
PEER_RUNTIME = ("onnxruntime==1.32.0", "tokenizers==0.23.3", "numpy==2.4.6")
PEER_PACKAGES = ("bentoml==1.4.39", *PEER_RUNTIME)
LITSERVE_VENV = REPO / ".venv-peer-litserve"
LITSERVE_PACKAGES = ("litserve==0.2.19", *PEER_RUNTIME)
RAY_VENV = REPO / ".venv-peer-ray"
RAY_PACKAGES = ("ray[serve]==2.60.0", *PEER_RUNTIME)
READY_TIMEOUT_S = 180


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class UvicornOptions:
    """The stack knobs uvicorn takes on its command line (the service's `serve` uses uvicorn's
    defaults: loop and http `auto` = uvloop + httptools when installed, one worker)."""

    workers: int = 1
    loop: str = "auto"
    http: str = "auto"

    def argv(self) -> list[str]:
        return ["--workers", str(self.workers), "--loop", self.loop, "--http", self.http]


@dataclass
class ServerSpec:
    kind: str  # service | floor | naive | peer | litserve | ray | naive-ort | hf-ort | hf-pipeline
    port: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/health/ready"
    code_root: Path = REPO  # the source tree the server runs from (bench.ab compares two trees)
    # Processes that outlive the server's SIGTERM (LitServe's workers) or leave its process group
    # (Ray's actors): stop() then also SIGKILLs whatever is left of the server's session.
    kill_session: bool = False


def uvicorn_spec(kind: str, factory: str, port: int, env: dict[str, str], stack: UvicornOptions) -> ServerSpec:
    argv = [sys.executable, "-m", "uvicorn", factory, "--factory", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log", *stack.argv()]
    return ServerSpec(kind, port, argv, env)


def service_spec(port: int, repository: Path, model: str, *, max_batch_size: int, max_batch_delay_ms: float,
                 intra_op_threads: int, stack: UvicornOptions | None = None) -> ServerSpec:
    env = {
        "ATTSERVE_MODEL_REPOSITORY": str(repository),
        "ATTSERVE_MODELS": model,
        "ATTSERVE_MAX_BATCH_SIZE": str(max_batch_size),
        "ATTSERVE_MAX_BATCH_DELAY_MS": str(max_batch_delay_ms),
        "ATTSERVE_INTRA_OP_THREADS": str(intra_op_threads),
        "ATTSERVE_DEVICE": "cpu",
        # 64 connections x 32 inputs must fit the queue, or the service answers 429.
        "ATTSERVE_MAX_QUEUE": "4096",
        "ATTSERVE_LOG_LEVEL": "WARNING",
    }
    return uvicorn_spec("service", "service.http.app:create_app", port, env, stack or UvicornOptions())


def service_workers_spec(port: int, repository: Path, model: str, *, workers: int, max_batch_size: int,
                         max_batch_delay_ms: float) -> ServerSpec:
    """The service as `attserve serve --workers N` runs it (service.process.workers: a supervisor and N
    worker processes, each with its own SO_REUSEPORT socket and 1 intra-op thread)."""
    spec = service_spec(port, repository, model, max_batch_size=max_batch_size,
                        max_batch_delay_ms=max_batch_delay_ms, intra_op_threads=1)
    env = {**spec.env, "ATTSERVE_WORKERS": str(workers), "ATTSERVE_HOST": "127.0.0.1", "ATTSERVE_PORT": str(port)}
    return ServerSpec("service", port, [sys.executable, "-m", "service"], env)


def service_minus_model_spec(port: int, repository: Path, model: str, **settings) -> ServerSpec:
    """The service with a constant answer instead of onnxruntime (bench/service_floor_app.py)."""
    spec = service_spec(port, repository, model, **settings)
    return uvicorn_spec("service-minus-model", "bench.service_floor_app:create_app", port, spec.env,
                        UvicornOptions())


def floor_spec(port: int, json_library: str = "stdlib", stack: UvicornOptions | None = None) -> ServerSpec:
    return uvicorn_spec("floor", "bench.floor_app:create_app", port, {"BENCH_FLOOR_JSON": json_library},
                        stack or UvicornOptions())


def naive_spec(port: int, checkpoint: Path, torch_threads: int) -> ServerSpec:
    env = {"BENCH_NAIVE_CHECKPOINT": str(checkpoint), "BENCH_TORCH_THREADS": str(torch_threads)}
    return uvicorn_spec("naive", "bench.naive_app:create_app", port, env, UvicornOptions())


def peer_spec(port: int, bundle: Path, threads: int, max_batch_size: int,
              max_latency_ms: int | None = None) -> ServerSpec:
    argv = [str(PEER_VENV / "bin" / "bentoml"), "serve", "bench.peer_bento:Peer", "--host", "127.0.0.1",
            "--port", str(port), "--working-dir", str(REPO)]
    env = {"BENCH_PEER_BUNDLE": str(bundle), "BENCH_PEER_THREADS": str(threads),
           "BENCH_PEER_MAX_BATCH": str(max_batch_size), "BENTOML_DO_NOT_TRACK": "true"}
    if max_latency_ms is not None:
        env["BENCH_PEER_MAX_LATENCY_MS"] = str(max_latency_ms)
    return ServerSpec("peer", port, argv, env, ready_path="/readyz")


def litserve_spec(port: int, bundle: Path, max_batch_size: int, batch_timeout_s: float,
                  path: str = "/entailment") -> ServerSpec:
    """The LitServe peer (bench/peer_litserve.py) in `.venv-peer-litserve`."""
    argv = [str(LITSERVE_VENV / "bin" / "python"), "-m", "bench.peer_litserve", "--host", "127.0.0.1",
            "--port", str(port), "--path", path]
    env = {"BENCH_PEER_BUNDLE": str(bundle), "BENCH_PEER_THREADS": "1",
           "BENCH_PEER_MAX_BATCH": str(max_batch_size), "BENCH_PEER_BATCH_TIMEOUT_S": str(batch_timeout_s),
           "LITSERVE_DISABLE_TELEMETRY": "1"}
    # LitServe's inference workers outlive a SIGTERM to the server by ~40 s, spinning on their
    # queue: end the whole session, or they eat the next runs' core.
    return ServerSpec("litserve", port, argv, env, ready_path="/health", kill_session=True)


def ray_spec(port: int, bundle: Path, max_batch_size: int, batch_wait_s: float, replicas: int = 1) -> ServerSpec:
    """The Ray Serve peer (bench/peer_ray.py) in `.venv-peer-ray`: `replicas` replicas of 1 CPU each."""
    argv = [str(RAY_VENV / "bin" / "python"), "-m", "bench.peer_ray", "--host", "127.0.0.1", "--port", str(port)]
    env = {"BENCH_PEER_BUNDLE": str(bundle), "BENCH_PEER_THREADS": "1",
           "BENCH_PEER_MAX_BATCH": str(max_batch_size), "BENCH_PEER_BATCH_WAIT_S": str(batch_wait_s),
           "BENCH_PEER_REPLICAS": str(replicas),
           "RAY_USAGE_STATS_ENABLED": "0",
           # Ray's documented high-throughput mode (docs.ray.io "Enable High Throughput on Ray
           # Serve"); its HAProxy half needs an haproxy binary this machine lacks.
           "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}
    return ServerSpec("ray", port, argv, env, ready_path="/health/ready", kill_session=True)


def naive_ort_spec(port: int, bundle: Path) -> ServerSpec:
    """FastAPI + onnxruntime, one session.run per request (bench/naive_ort_app.py), main venv."""
    env = {"BENCH_PEER_BUNDLE": str(bundle), "BENCH_PEER_THREADS": "1"}
    return uvicorn_spec("naive-ort", "bench.naive_ort_app:create_app", port, env, UvicornOptions())


def hf_ort_spec(port: int, bundle: Path) -> ServerSpec:
    """FastAPI + onnxruntime on a Hugging Face classifier's model.onnx and tokenizer.json
    (bench/hf_ort_app.py), main venv."""
    env = {"BENCH_HF_BUNDLE": str(bundle), "BENCH_PEER_THREADS": "1"}
    return uvicorn_spec("hf-ort", "bench.hf_ort_app:create_app", port, env, UvicornOptions())


def hf_pipeline_spec(port: int, source: Path) -> ServerSpec:
    """A transformers text-classification pipeline on the saved folder `source`
    (bench/hf_pipeline_app.py), torch on one thread, main venv."""
    env = {"BENCH_HF_SOURCE": str(source), "BENCH_TORCH_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return uvicorn_spec("hf-pipeline", "bench.hf_pipeline_app:create_app", port, env, UvicornOptions())


def ensure_venv(venv: Path, packages: tuple[str, ...], module: str) -> tuple[bool, str]:
    """Create `venv` with the pinned `packages` if `module` does not import there. Returns
    (usable, what happened: the module's version and the venv)."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import {module}, onnxruntime, tokenizers; print({module}.__version__)"]
    if python.exists():
        out = subprocess.run(check, capture_output=True, text=True)
        if out.returncode == 0:
            return True, f"{module} {out.stdout.strip()} in {venv}"
    log.info("creating a peer virtualenv", extra={"path": str(venv), "packages": list(packages)})
    steps = [[sys.executable, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", *packages]]
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True)
        if out.returncode != 0:
            return False, f"{' '.join(step[:4])} failed: {out.stderr.strip()[-500:]}"
    out = subprocess.run(check, capture_output=True, text=True)
    if out.returncode != 0:
        return False, f"{module} does not import in {venv}: {out.stderr.strip()[-500:]}"
    return True, f"{module} {out.stdout.strip()} installed into {venv}"


def ensure_litserve_venv() -> tuple[bool, str]:
    return ensure_venv(LITSERVE_VENV, LITSERVE_PACKAGES, "litserve")


def ensure_ray_venv() -> tuple[bool, str]:
    return ensure_venv(RAY_VENV, RAY_PACKAGES, "ray")


def kill_session(sid: int) -> int:
    """SIGKILL every process left in session `sid` (a server started with its own session);
    returns how many. Only that session: the processes this bench started."""
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getsid(pid) == sid:
                os.kill(pid, signal.SIGKILL)
                killed += 1
        except (ProcessLookupError, PermissionError):
            continue
    return killed


def ensure_peer_venv() -> tuple[bool, str]:
    """Create `.venv-peer` with BentoML if missing. Returns (usable, what happened)."""
    return ensure_venv(PEER_VENV, PEER_PACKAGES, "bentoml")


class Server:
    """A running server: `with Server(spec, cpus, log_dir) as server: server.url`."""

    def __init__(self, spec: ServerSpec, cpus: str | None, log_dir: Path) -> None:
        self.spec, self.cpus = spec, cpus
        self.url = f"http://127.0.0.1:{spec.port}"
        self.log_path = log_dir / f"{spec.kind}-{spec.port}.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "Server":
        # The code root first (an A/B arm imports its own tree); an inherited path stays after it
        # (packages installed beside the interpreter's, as onnxruntime-gpu is on a lent GPU machine).
        inherited = os.environ.get("PYTHONPATH")
        path = os.pathsep.join([str(self.spec.code_root), *([inherited] if inherited else [])])
        env = {**os.environ, "PYTHONPATH": path, **self.spec.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as sink:
            # Own session = own process group: stop() ends exactly this server and its workers.
            self.process = subprocess.Popen(pinned(self.spec.argv, self.cpus), env=env, cwd=self.spec.code_root, stdout=sink,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"{self.spec.kind} exited {self.process.returncode} at start-up; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + self.spec.ready_path, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise ServerError(f"{self.spec.kind} not ready after {READY_TIMEOUT_S} s; log {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            if self.process is not None and self.spec.kill_session:
                kill_session(self.process.pid)
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        if self.spec.kill_session:
            kill_session(self.process.pid)

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return response.read().decode()


# --- /metrics deltas ------------------------------------------------------------------------

SPLIT_METRICS = ("attserve_queue_wait_seconds", "attserve_inference_duration_seconds", "attserve_batch_size")


def metric_totals(text: str) -> dict[str, float]:
    """`<histogram>_sum` and `_count` of the split metrics, summed over their labels."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in SPLIT_METRICS:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def metrics_split(before: dict[str, float], after: dict[str, float]) -> dict:
    """Mean queue wait per item, mean inference time per batch and mean batch size over the
    run between two scrapes, and the share of the server's per-item time each took."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    items = d.get("attserve_queue_wait_seconds_count", 0.0)
    batches = d.get("attserve_inference_duration_seconds_count", 0.0)
    queue_ms = 1000 * d.get("attserve_queue_wait_seconds_sum", 0.0) / items if items else 0.0
    inference_ms = 1000 * d.get("attserve_inference_duration_seconds_sum", 0.0) / batches if batches else 0.0
    batch_size = d.get("attserve_batch_size_sum", 0.0) / batches if batches else 0.0
    return {
        "items": int(items),
        "batches": int(batches),
        "mean_batch_size": round(batch_size, 2),
        "queue_wait_ms_mean": round(queue_ms, 3),
        "inference_ms_mean_per_batch": round(inference_ms, 3),
        # an item waits in the queue, then spends its batch's whole inference time
        "queue_share": round(queue_ms / (queue_ms + inference_ms), 3) if queue_ms + inference_ms else 0.0,
    }
