"""Reliability runs against a real `python -m service` process.

One subcommand per scenario; each starts its own server on 127.0.0.1, writes one JSON result
(`passed` plus the figures) and exits 1 when an acceptance check fails:

    python -m bench.reliability isolation --repository DIR --requests 10000 --concurrency 64  # R1
    python -m bench.reliability overload  --repository DIR --factor 4 --duration 30          # R2
    python -m bench.reliability shutdown  --repository DIR --load 5                          # R4
    python -m bench.reliability soak      --repository DIR --minutes 10 --load 0.5           # R6
    python -m bench.reliability probes    --repository DIR                                    # R10
    python -m bench.reliability abuse     --repository DIR --seconds 60                       # R10

DIR is a model repository (default: the bundled `model_repository/`); results go to
`runs/reliability/<scenario>.json` unless `--out` says otherwise. tests/process/test_reliability.py
runs the same scenario functions at CI size.

The requests are generated from what the repository serves: every bundle's task, limits and
tokenizer vocabulary (words the models know, plus lengths past each max length so truncation
is exercised), so the scenarios run on any set of bundles.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import httpx
import numpy as np
import typer
from tqdm import tqdm

from bench.servers import free_port
from bench.workloads import ENDPOINT_OF_TASK
from core.bundle import CONFIG_FILE, TOKENIZER_FILE, read_config
from core.tasks import TASKS
from core.tokenization import PAD_TOKEN, UNK_TOKEN, TextEncoder
from service.schemas import TASK_SCHEMAS
from service.settings import DEFAULT_MODEL_REPOSITORY

REPO = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench.reliability")

# each task's single-text fields (a list field's texts are built apart)
TEXT_FIELDS = {name: tuple(f.name for f in task.fields if not f.many) for name, task in TASKS.items()}
# Scores of a batched answer may differ from the solo answer by float reassociation only.
SCORE_TOLERANCE = 1e-5
# uvicorn logs this when its graceful-shutdown timeout cancels requests still running.
UVICORN_CANCELLED = "timeout graceful shutdown exceeded"
# a drain after SIGTERM exits 0 (service.server.DrainingServer); the "stopped" log line tells it ran
GRACEFUL_EXIT_CODES = (0,)
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


# --- the service under test -----------------------------------------------------------------


class ServiceProcess:
    """`python -m service` on a free local port with `ATTSERVE_*` settings; its JSON log lines
    (stderr) go to `log_path`, which stays behind for inspection. The one way the tests, the
    bench's deploy checks and the reliability runs start the service as users do.

    `python_args` go to the interpreter (`("-X", "importtime")` traces every import into the
    log); `inherit_settings=False` drops the `ATTSERVE_*` variables of the caller's environment,
    so only `settings` configure it."""

    def __init__(self, repository: Path, log_path: Path, *, python_args: Sequence[str] = (),
                 inherit_settings: bool = True, **settings: Any) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.python_args = tuple(python_args)
        inherited = os.environ if inherit_settings else {k: v for k, v in os.environ.items()
                                                          if not k.startswith("ATTSERVE_")}
        self.env = {
            **inherited,
            "ATTSERVE_HOST": "127.0.0.1",
            "ATTSERVE_PORT": str(self.port),
            "ATTSERVE_MODEL_REPOSITORY": str(repository),
            **{f"ATTSERVE_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.proc: subprocess.Popen | None = None

    def start(self, ready: bool = True, timeout_s: float = 120.0) -> "ServiceProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as stderr:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, *self.python_args, "-m", "service"], cwd=REPO, env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=stderr)
        self.wait_for("/health/ready" if ready else "/health/live", timeout_s)
        return self

    def wait_for(self, path: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited with {self.proc.returncode}: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.base + path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{path} not 200 within {timeout_s} s; log: {self.log_path}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        """Resident set size from /proc (Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def log_records(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def terminate(self, timeout_s: float = 60.0) -> float:
        """SIGTERM, wait for exit; returns the seconds it took (the process is killed, and
        RuntimeError raised, past `timeout_s`)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"service did not exit within {timeout_s} s of SIGTERM") from None
        return time.monotonic() - start

    def __enter__(self) -> "ServiceProcess":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# --- workload -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str
    max_lengths: dict[str, int]
    max_evidence: int | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """One HTTP request and, for each of its inputs in answer order, the body that asks for
    that input alone (its solo request)."""

    path: str
    body: dict
    solo: tuple[str, ...]  # JSON bodies


def repository_models(repository: Path, names: Sequence[str] | None = None) -> list[ModelSpec]:
    """The bundles of a repository (valid config.json and tokenizer only), by name."""
    out = []
    for path in sorted(p for p in Path(repository).iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            config = read_config(path / CONFIG_FILE)
            vocab = TextEncoder.from_file(path / TOKENIZER_FILE).tokenizer.get_vocab()
        except Exception as exc:  # BundleError, OSError, and tokenizers' own plain Exception
            log.warning("bundle skipped", extra={"path": str(path), "error": str(exc)})
            continue
        if names and config.name not in names:
            continue
        words = tuple(sorted(w for w in vocab if w not in (PAD_TOKEN, UNK_TOKEN)))
        out.append(ModelSpec(config.name, config.task, dict(config.max_lengths), config.max_evidence, words))
    if not out:
        raise RuntimeError(f"no servable bundle in {repository}")
    return out


class WorkloadMaker:
    """Random but reproducible requests over the given models. Text lengths run from one word
    to past each field's max length (truncation), evidence counts from 1 to max_evidence."""

    def __init__(self, models: Sequence[ModelSpec], seed: int = 0) -> None:
        self.models = list(models)
        self.rng = random.Random(seed)

    def _text(self, model: ModelSpec, max_length: int) -> str:
        n = self.rng.randint(1, max(2, int(max_length * 1.25)))
        words = [self.rng.choice(model.words) for _ in range(n)]
        if self.rng.random() < 0.1:
            words[self.rng.randrange(n)] = "zzqx"  # out of vocabulary: [UNK]
        return " ".join(words)

    def input_of(self, model: ModelSpec) -> dict:
        """One input of the model's task, a text per field (core.tasks); a list field gets 1 to
        max_evidence texts."""
        out: dict = {}
        for field in TASKS[model.task].fields:
            limit = model.max_lengths[field.input]
            if field.many:
                out[field.name] = [self._text(model, limit) for _ in range(self.rng.randint(1, model.max_evidence))]
            else:
                out[field.name] = self._text(model, limit)
        return out

    def request(self, model: ModelSpec, inputs: int = 1) -> Request:
        """A request of `inputs` inputs; a task without a batch form (rerank's TEI contract)
        always gets one."""
        path = TASKS[model.task].endpoint
        if not TASK_SCHEMAS[model.task].has_batch_form:
            inputs = 1
        xs = [self.input_of(model) for _ in range(inputs)]
        solo = tuple(json.dumps({**x, "model": model.name}) for x in xs)
        body = {**xs[0], "model": model.name} if inputs == 1 else {"inputs": xs, "model": model.name}
        return Request(path, body, solo)

    def mixed(self, n: int, multi_every: int = 7, multi_inputs: int = 3) -> list[Request]:
        """n requests cycling over the models; every `multi_every`-th one carries several inputs."""
        return [self.request(self.models[i % len(self.models)], multi_inputs if i % multi_every == 0 else 1)
                for i in range(n)]


# --- load -----------------------------------------------------------------------------------

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


def _client(base: str, connections: int, timeout_s: float = 60.0) -> httpx.AsyncClient:
    # Idle connections are dropped well before uvicorn's 5 s keep-alive timeout: reusing one
    # as the server closes it loses the request (a client-side race, not the server's doing).
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0)
    return httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout_s)


async def closed_loop(base: str, calls: Sequence[tuple[str, dict | str]], concurrency: int,
                      desc: str | None = None) -> list[Outcome]:
    """Every call, at most `concurrency` in flight; outcomes in call order."""
    out: list[Outcome | None] = [None] * len(calls)
    bar = tqdm(total=len(calls), desc=desc, disable=desc is None or not sys.stderr.isatty(), leave=False)
    async with _client(base, concurrency) as client:
        next_call = iter(range(len(calls)))

        async def worker() -> None:
            for i in next_call:
                out[i] = await post(client, *calls[i])
                bar.update()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    bar.close()
    return out  # type: ignore[return-value]


async def throughput(base: str, calls: Sequence[tuple[str, dict | str]], concurrency: int, seconds: float) -> dict:
    """Closed loop over `calls` (cycled) for `seconds`: answered requests per second."""
    answered = errors = 0
    stop = time.monotonic() + seconds
    async with _client(base, concurrency) as client:
        async def worker(offset: int) -> None:
            nonlocal answered, errors
            i = offset
            while time.monotonic() < stop:
                o = await post(client, *calls[i % len(calls)])
                answered += o.status == 200
                errors += o.status != 200
                i += concurrency

        start = time.monotonic()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.monotonic() - start
    return {"rps": answered / elapsed, "answered": answered, "errors": errors, "seconds": round(elapsed, 3)}


async def open_loop(base: str, calls: Sequence[tuple[str, dict | str]], rate: float, seconds: float,
                    connections: int = 1024, desc: str | None = None) -> list[Outcome]:
    """Send call i (cycled) at start + i / rate whatever the server does, on up to
    `connections` keep-alive connections; outcomes in send order."""
    total = max(1, int(rate * seconds))
    out: list[Outcome | None] = [None] * total
    bar = tqdm(total=total, desc=desc, disable=desc is None or not sys.stderr.isatty(), leave=False)
    async with _client(base, connections) as client:
        async def one(i: int, due: float) -> None:
            out[i] = await post(client, *calls[i % len(calls)])
            out[i].lag = out[i].sent - due
            bar.update()

        tasks = []
        start = time.monotonic()
        for i in range(total):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(i, due)))
        await asyncio.gather(*tasks)
    bar.close()
    return out  # type: ignore[return-value]


class RssSampler:
    """Samples a process's RSS every `every_s` seconds in the background: (t, bytes) pairs."""

    def __init__(self, server: ServiceProcess, every_s: float) -> None:
        self.server, self.every_s = server, every_s
        self.samples: list[tuple[float, int]] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        start = time.monotonic()
        while True:
            self.samples.append((time.monotonic() - start, self.server.rss_bytes()))
            await asyncio.sleep(self.every_s)

    def __enter__(self) -> "RssSampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        self._task.cancel()
        self.samples.append((self.samples[-1][0] + self.every_s if self.samples else 0.0, self.server.rss_bytes()))


def scrape(base: str) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: {(name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric_sum(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 90, 99, 100)) -> dict[str, float | None]:
    arr = np.asarray(list(values), dtype=float)
    return {f"p{q:g}": (round(float(np.percentile(arr, q)) * 1000, 3) if arr.size else None) for q in qs}


def status_counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in outcomes:
        key = str(o.status) if o.status else (o.error or "error").split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


# --- answer checks --------------------------------------------------------------------------

def answer_problem(answer: Any) -> str | None:
    """Why an inference answer is not a complete prediction, or for a ranking task (rerank,
    TEI's answer) not a complete ranking of the texts, best first (None when it is)."""
    if isinstance(answer, list):
        if not all(isinstance(r, dict) and isinstance(r.get("score"), (int, float)) for r in answer):
            return "a ranking entry without a score"
        if sorted(r.get("index") for r in answer) != list(range(len(answer))):
            return "the ranking does not list every text once"
        scores = [r["score"] for r in answer]
        return None if scores == sorted(scores, reverse=True) else "the ranking is not best first"
    if not isinstance(answer, dict):
        return "not a JSON object"
    scores = answer.get("scores")
    if not isinstance(scores, dict) or not scores or answer.get("label") not in scores:
        return "no scores or label"
    if not math.isclose(sum(scores.values()), 1.0, abs_tol=1e-5):
        return "scores do not sum to 1"
    if not isinstance(answer.get("model"), str) or not isinstance(answer.get("truncated"), bool):
        return "no model or truncated flag"
    return None


def answers_of(outcome: Outcome) -> list:
    """The answers of a request's inputs, in order (a ranking answers its one input)."""
    body = outcome.body
    return body["results"] if isinstance(body, dict) and "results" in body else [body]


def difference(got: dict | list, solo: dict | list) -> float | None:
    """Largest score difference between an answer and the solo answer of its input (None
    when they disagree on anything but float noise: model, labels, truncation, evidence count;
    for a ranking, the texts it ranks)."""
    if isinstance(solo, list):
        if not isinstance(got, list):
            return None
        mine, alone = {r["index"]: r["score"] for r in got}, {r["index"]: r["score"] for r in solo}
        return max(abs(mine[i] - alone[i]) for i in alone) if mine.keys() == alone.keys() and alone else None
    if (got.get("model"), got.get("truncated"), list(got.get("scores", {}))) != \
            (solo.get("model"), solo.get("truncated"), list(solo.get("scores", {}))):
        return None
    diffs = [abs(got["scores"][k] - solo["scores"][k]) for k in solo["scores"]]
    if "evidence_scores" in solo:
        if len(got.get("evidence_scores", [])) != len(solo["evidence_scores"]):
            return None
        diffs += [abs(a - b) for a, b in zip(got["evidence_scores"], solo["evidence_scores"], strict=True)]
    if got.get("label") != solo.get("label") and max(diffs) > SCORE_TOLERANCE:
        return None
    return max(diffs)


# --- R1 isolation ---------------------------------------------------------------------------

def run_isolation(repository: Path, requests: int = 1000, concurrency: int = 64, seed: int = 0,
                  workdir: Path = Path("runs/reliability"), max_batch_size: int = 32,
                  max_batch_delay_ms: float = 50.0, progress: bool = False) -> dict:
    """R1: every input of the workload alone on a server that batches nothing (max batch size 1),
    then the whole mixed workload at `concurrency` on one that batches (a batch waits up to
    `max_batch_delay_ms` for company); every answer must equal its input's solo answer."""
    models = repository_models(repository)
    workload = WorkloadMaker(models, seed).mixed(requests)
    solo_bodies = sorted({s for r in workload for s in r.solo})
    path_of = {s: r.path for r in workload for s in r.solo}
    solo_server = ServiceProcess(repository, workdir / "isolation-solo.log", max_batch_size=1, max_batch_delay_ms=0,
                                 max_queue=1_000_000)
    with solo_server.start():
        start = time.monotonic()
        reference = run_async(closed_loop(solo_server.base, [(path_of[s], s) for s in solo_bodies], 8,
                                          "solo" if progress else None))
        solo_s = time.monotonic() - start
        solo_metrics = scrape(solo_server.base)
        solo_server.terminate()
    server = ServiceProcess(repository, workdir / "isolation.log", max_batch_size=max_batch_size,
                            max_batch_delay_ms=max_batch_delay_ms, max_queue=1_000_000, max_inputs_per_request=64)
    with server.start():
        before = scrape(server.base)  # warm-up batches
        start = time.monotonic()
        outcomes = run_async(closed_loop(server.base, [(r.path, r.body) for r in workload], concurrency,
                                         "concurrent" if progress else None))
        concurrent_s = time.monotonic() - start
        after = scrape(server.base)
        exit_s = server.terminate()

    solo_batches_of_one = (metric_sum(solo_metrics, "attserve_batch_size_sum")
                           == metric_sum(solo_metrics, "attserve_batch_size_count") > 0)
    solo = {s: o.body for s, o in zip(solo_bodies, reference, strict=True)}
    solo_failed = sum(o.status != 200 for o in reference)
    mismatches, max_diff, failed = [], 0.0, 0
    for i, (request, outcome) in enumerate(zip(workload, outcomes, strict=True)):
        if outcome.status != 200:
            failed += 1
            continue
        got = answers_of(outcome)
        if len(got) != len(request.solo):
            mismatches.append({"request": i, "why": f"{len(got)} answers for {len(request.solo)} inputs"})
            continue
        for k, (answer, body) in enumerate(zip(got, request.solo, strict=True)):
            d = difference(answer, solo[body]) if isinstance(solo[body], (dict, list)) else None
            if d is None or d > SCORE_TOLERANCE:
                mismatches.append({"request": i, "input": k, "diff": d, "body": body[:200]})
            else:
                max_diff = max(max_diff, d)
    def alone(samples: dict) -> float:  # batches of exactly one item (histogram bucket le=1)
        return sum(v for (n, labels), v in samples.items()
                   if n == "attserve_batch_size_bucket" and dict(labels).get("le") == "1.0")

    items = metric_sum(after, "attserve_batch_size_sum") - metric_sum(before, "attserve_batch_size_sum")
    batches = metric_sum(after, "attserve_batch_size_count") - metric_sum(before, "attserve_batch_size_count")

    def per_model(samples: dict, name: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, labels), v in samples.items():
            if n == name:
                model = dict(labels).get("model", "")
                out[model] = out.get(model, 0.0) + v
        return out

    model_items = {m: v - per_model(before, "attserve_batch_size_sum").get(m, 0.0)
                   for m, v in per_model(after, "attserve_batch_size_sum").items()}
    model_batches = {m: v - per_model(before, "attserve_batch_size_count").get(m, 0.0)
                     for m, v in per_model(after, "attserve_batch_size_count").items()}
    result = {
        "scenario": "R1 isolation",
        "models": [m.name for m in models],
        "requests": len(workload),
        "inputs": sum(len(r.solo) for r in workload),
        "distinct_inputs": len(solo_bodies),
        "concurrency": concurrency,
        "settings": {"max_batch_size": max_batch_size, "max_batch_delay_ms": max_batch_delay_ms},
        "solo_seconds": round(solo_s, 3),
        "concurrent_seconds": round(concurrent_s, 3),
        "concurrent_rps": round(len(workload) / concurrent_s, 1),
        "solo_failed": solo_failed,
        "solo_batches_of_one": solo_batches_of_one,
        "failed": failed,
        "statuses": status_counts(outcomes),
        "mismatches": len(mismatches),
        "mismatch_examples": mismatches[:5],
        "max_abs_score_diff": max_diff,
        # a swapped answer is only visible when inputs' answers differ: count the distinct ones
        "distinct_solo_answers": len({json.dumps([round(v, 4) for v in a["scores"].values()])
                                      for a in solo.values() if isinstance(a, dict) and "scores" in a}),
        "mean_batch_size": round(items / batches, 3) if batches else 0.0,
        "mean_batch_size_per_model": {m: round(model_items[m] / n, 3) for m, n in sorted(model_batches.items()) if n},
        "share_of_inputs_batched_with_others": round(1 - (alone(after) - alone(before)) / items, 3) if items else 0.0,
        "exit_seconds": round(exit_s, 3),
    }
    result["passed"] = bool(not mismatches and not failed and not solo_failed and solo_batches_of_one
                            and result["share_of_inputs_batched_with_others"] > 0.0)
    return result


# --- R2 overload ----------------------------------------------------------------------------

def run_overload(repository: Path, factor: float = 4.0, seconds: float = 20.0, capacity_seconds: float = 5.0,
                 model: str | None = None, inputs_per_request: int = 64, max_queue: int = 128,
                 request_timeout_ms: float = 1000.0, seed: int = 0, workdir: Path = Path("runs/reliability"),
                 progress: bool = False) -> dict:
    """R2: measure capacity (closed loop that never overfills the queue), then offer `factor`
    times that rate open-loop with a queue of `max_queue` items: the excess must get 429 with
    Retry-After fast, accepted requests an answer by their deadline or 504, never another 5xx;
    memory stays flat and the service answers normally right after.

    Requests carry `inputs_per_request` inputs each, so the server's work per request (tokenize
    and run them all) dwarfs the client's (send one pre-encoded body) and one Python client can
    offer several times what the server can do; `send_lag_ms` says whether it did."""
    models = repository_models(repository, [model] if model else None)
    target = models[0]
    maker = WorkloadMaker([target], seed)
    calls = [(r.path, json.dumps(r.body)) for r in (maker.request(target, inputs_per_request) for _ in range(100))]
    timeout_s = request_timeout_ms / 1000.0
    server = ServiceProcess(repository, workdir / "overload.log", models=target.name, max_queue=max_queue,
                            request_timeout_ms=request_timeout_ms, max_inputs_per_request=max(64, inputs_per_request))
    with server.start():
        # concurrency whose items always fit the queue: capacity without a single 429
        fit = max(1, max_queue // inputs_per_request)
        capacity = run_async(throughput(server.base, calls, fit, capacity_seconds))
        rate = factor * capacity["rps"]
        rss_before = server.rss_bytes()

        async def overload() -> tuple[list[Outcome], list[tuple[float, int]]]:
            with RssSampler(server, 0.5) as rss:
                outcomes = await open_loop(server.base, calls, rate, seconds, desc="overload" if progress else None)
            return outcomes, rss.samples

        outcomes, rss = run_async(overload())
        after_start = time.monotonic()
        ready_after = httpx.get(server.base + "/health/ready", timeout=10).status_code
        recovery = run_async(closed_loop(server.base, calls[:20], fit))
        recovery_s = time.monotonic() - after_start
        depth = metric_sum(scrape(server.base), "attserve_queue_depth")
        rss_after = server.rss_bytes()
        exit_s = server.terminate()

    by = lambda code: [o for o in outcomes if o.status == code]  # noqa: E731
    ok, full, late = by(200), by(429), by(504)
    other_5xx = [o for o in outcomes if o.status >= 500 and o.status != 504]
    transport = [o for o in outcomes if o.status == 0]
    incomplete = [o for o in ok if any(answer_problem(a) for a in answers_of(o))]
    bad_retry = [o for o in full if not (o.retry_after or "").isdigit() or int(o.retry_after) < 1]
    # The deadline runs from the request's arrival at the app: judge by the server's own
    # x-total-time (the client's clock adds its own lag and socket queueing), with slack for
    # writing the answer after the last batch.
    slack_s = 0.1
    over_deadline = [o for o in ok if o.server_s is not None and o.server_s > timeout_s + slack_s]
    result = {
        "scenario": "R2 overload",
        "model": target.name,
        "inputs_per_request": inputs_per_request,
        "settings": {"max_queue_items": max_queue, "request_timeout_ms": request_timeout_ms},
        "capacity_rps": round(capacity["rps"], 2),
        "factor": factor,
        "offered_rps": round(rate, 2),
        "seconds": seconds,
        "requests": len(outcomes),
        "statuses": status_counts(outcomes),
        "goodput_rps": round(len(ok) / seconds, 2),
        "send_lag_ms": percentiles(o.lag for o in outcomes),
        "time_to_429_ms": percentiles(o.seconds for o in full),
        "server_time_to_429_ms": percentiles(o.server_s for o in full if o.server_s is not None),
        "latency_200_ms": percentiles(o.seconds for o in ok),
        "server_time_200_ms": percentiles(o.server_s for o in ok if o.server_s is not None),
        "latency_504_ms": percentiles(o.seconds for o in late),
        "other_5xx": len(other_5xx),
        "transport_errors": len(transport),
        "transport_error_examples": sorted({o.error for o in transport})[:3],
        "incomplete_answers": len(incomplete),
        "429_without_retry_after": len(bad_retry),
        "answered_after_deadline": len(over_deadline),
        "rss_mb": {"before": round(rss_before / 2**20, 1), "peak": round(max(b for _, b in rss) / 2**20, 1),
                   "after": round(rss_after / 2**20, 1)},
        "ready_after": ready_after,
        "recovery_statuses": status_counts(recovery),
        "recovery_seconds": round(recovery_s, 3),
        "queue_depth_after": depth,
        "exit_seconds": round(exit_s, 3),
    }
    shed_p99 = result["server_time_to_429_ms"]["p99"]
    result["passed"] = bool(
        full and not other_5xx and not transport and not incomplete and not bad_retry and not over_deadline
        and shed_p99 is not None and shed_p99 < request_timeout_ms  # shedding faster than serving
        and ready_after == 200 and all(o.status == 200 for o in recovery) and depth == 0
    )
    return result


# --- R4 graceful shutdown -------------------------------------------------------------------

def _kind(o: Outcome) -> str:
    """ok | refused (503 while draining) | no_connection | dropped_unanswered | bad."""
    if o.status == 200:
        return "bad" if any(answer_problem(a) for a in answers_of(o)) else "ok"
    if o.status == 503 and isinstance(o.body, dict) and o.body.get("error") == {
            "code": "shutting_down", "message": "the server is shutting down"}:
        return "refused"  # turned away at the door (not "shut down before this input ran": bad)
    if o.error and o.error.startswith("ConnectError"):
        return "no_connection"
    if o.error and ("without sending a response" in o.error or o.error.startswith("ReadError")):
        # The connection closed (FIN) or reset (RST: unread data) with no answer begun: an idle
        # keep-alive connection uvicorn closed as the request went out, or a connection still in
        # the listen backlog when the socket closed. Neither request reached the app: uvicorn
        # lets every connection with a request in progress finish (or logs that it cancelled
        # it), and a reset after an answer began shows as a logged response not received.
        return "dropped_unanswered"
    return "bad"


def run_shutdown(repository: Path, load_seconds: float = 2.0, concurrency: int = 16, shutdown_timeout_s: float = 10.0,
                 max_batch_delay_ms: float = 50.0, seed: int = 0, workdir: Path = Path("runs/reliability")) -> dict:
    """R4: closed-loop load on keep-alive connections plus a stream of fresh connections; SIGTERM
    after `load_seconds` while the load goes on until the process exits. Every request the
    server took must get a complete answer (200), later ones a 503 `shutting_down` or no
    connection at all; the process exits gracefully within its shutdown timeout."""
    models = repository_models(repository)
    calls = [(r.path, r.body) for r in WorkloadMaker(models, seed).mixed(500)]
    server = ServiceProcess(repository, workdir / "shutdown.log", shutdown_timeout_s=shutdown_timeout_s,
                            max_batch_delay_ms=max_batch_delay_ms, access_log=True)
    server.start()
    records: list[tuple[str, Outcome]] = []  # (source, outcome)
    timeline: dict[str, float] = {}

    async def scenario() -> None:
        exited = asyncio.Event()

        async def worker(client: httpx.AsyncClient, k: int) -> None:
            i = k
            while not exited.is_set():
                o = await post(client, *calls[i % len(calls)])
                records.append(("keep-alive", o))
                i += concurrency
                if o.status != 200:
                    await asyncio.sleep(0.01)

        async def fresh_connections() -> None:
            i = 0
            while not exited.is_set():
                async with _client(server.base, 1) as client:  # one new TCP connection per request
                    records.append(("fresh", await post(client, *calls[i % len(calls)])))
                i += 1
                await asyncio.sleep(0.02)

        async def sigterm_then_wait() -> None:
            await asyncio.sleep(load_seconds)
            timeline["sigterm"] = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            timeline["returncode"] = await asyncio.to_thread(server.proc.wait, shutdown_timeout_s + 30)
            timeline["exited"] = time.monotonic()
            await asyncio.sleep(0.2)  # a few more attempts against the closed port
            exited.set()

        async with _client(server.base, concurrency) as client:
            await asyncio.gather(sigterm_then_wait(), fresh_connections(),
                                 *(worker(client, k) for k in range(concurrency)))

    try:
        run_async(scenario())
    finally:
        server.__exit__()
    sigterm = timeline["sigterm"]
    before = [o for _, o in records if o.sent < sigterm]
    after = [o for _, o in records if o.sent >= sigterm]
    kinds = {"before": {}, "after": {}}
    for name, group in (("before", before), ("after", after)):
        for o in group:
            kinds[name][_kind(o)] = kinds[name].get(_kind(o), 0) + 1
    # The access log has one line per response the server started; the client must have
    # received every one of them, complete.
    logs = server.log_records()
    sent_by_server: dict[str, int] = {}
    for r in logs:
        m = ACCESS_LINE.search(r.get("message", "")) if r.get("logger") == "uvicorn.access" else None
        if m and m["path"] in ENDPOINT_OF_TASK.values():
            sent_by_server[m["status"]] = sent_by_server.get(m["status"], 0) + 1
    received = {}
    for _, o in records:
        if o.status:
            received[str(o.status)] = received.get(str(o.status), 0) + 1
    messages = [r.get("message", "") for r in logs]
    fresh_after_200 = sum(1 for src, o in records if src == "fresh" and o.sent >= sigterm + 0.05 and o.status == 200)
    dropped = kinds["before"].get("dropped_unanswered", 0) + kinds["after"].get("dropped_unanswered", 0)
    in_flight = [o for o in before if o.sent + o.seconds > sigterm]
    exit_s = timeline["exited"] - sigterm
    result = {
        "scenario": "R4 graceful shutdown",
        "concurrency": concurrency,
        "settings": {"shutdown_timeout_s": shutdown_timeout_s, "max_batch_delay_ms": max_batch_delay_ms},
        "requests": len(records),
        "outcomes_sent_before_sigterm": kinds["before"],
        "outcomes_sent_after_sigterm": kinds["after"],
        "responses_logged_by_server": dict(sorted(sent_by_server.items())),
        "responses_received": dict(sorted(received.items())),
        "bad_examples": [{"status": o.status, "body": str(o.body)[:200], "error": o.error,
                          "sent_after_sigterm_s": round(o.sent - sigterm, 3), "seconds": round(o.seconds, 3)}
                         for _, o in records if _kind(o) == "bad"][:5],
        "in_flight_at_sigterm": len(in_flight),
        "in_flight_at_sigterm_answered_200": sum(_kind(o) == "ok" for o in in_flight),
        "fresh_connections_answered_200_after_sigterm": fresh_after_200,
        "dropped_unanswered": dropped,
        "exit_code": timeline["returncode"],
        "exit_seconds": round(exit_s, 3),
        "drain_finished": "stopped" in messages,
        "drain_timed_out": "drain timed out" in messages,
        "requests_cancelled_by_uvicorn": any(UVICORN_CANCELLED in m for m in messages),
    }
    result["passed"] = bool(
        kinds["before"].get("ok", 0) > 0
        and "bad" not in kinds["before"] and "bad" not in kinds["after"]
        and sent_by_server == received
        and fresh_after_200 == 0
        and dropped <= concurrency + 1  # each connection loses at most the one request it was sending
        and timeline["returncode"] in GRACEFUL_EXIT_CODES and exit_s <= shutdown_timeout_s
        and result["drain_finished"] and not result["drain_timed_out"]
        and not result["requests_cancelled_by_uvicorn"]
    )
    return result


# --- R6 soak --------------------------------------------------------------------------------

def run_soak(repository: Path, minutes: float = 10.0, load: float = 0.5, capacity_seconds: float = 10.0,
             concurrency: int = 32, sample_every_s: float = 5.0, seed: int = 0,
             workdir: Path = Path("runs/reliability"), progress: bool = False) -> dict:
    """R6: `load` x measured capacity, open loop, for `minutes`; zero errors and RSS growth
    from minute 2 to the end under 5% (mean of the first 30 s after minute 2 against the mean
    of the last 30 s, so one sample's noise does not decide)."""
    models = repository_models(repository)
    calls = [(r.path, r.body) for r in WorkloadMaker(models, seed).mixed(2000)]
    server = ServiceProcess(repository, workdir / "soak.log")
    with server.start():
        capacity = run_async(throughput(server.base, calls, concurrency, capacity_seconds))
        rate = load * capacity["rps"]

        async def soak() -> tuple[list[Outcome], list[tuple[float, int]]]:
            with RssSampler(server, sample_every_s) as rss:
                outcomes = await open_loop(server.base, calls, rate, minutes * 60, desc="soak" if progress else None)
            return outcomes, rss.samples

        outcomes, rss = run_async(soak())
        exit_s = server.terminate()

    window = 30.0
    start_t = min(120.0, minutes * 60 / 2)
    first = [b for t, b in rss if start_t <= t < start_t + window] or [rss[0][1]]
    last = [b for t, b in rss if t >= rss[-1][0] - window]
    growth = (np.mean(last) - np.mean(first)) / np.mean(first)
    errors = [o for o in outcomes if o.status != 200 or any(answer_problem(a) for a in answers_of(o))]
    result = {
        "scenario": "R6 soak",
        "minutes": minutes,
        "capacity_rps": round(capacity["rps"], 2),
        "offered_rps": round(rate, 2),
        "requests": len(outcomes),
        "statuses": status_counts(outcomes),
        "errors": len(errors),
        "latency_ms": percentiles(o.seconds for o in outcomes),
        "rss_mb": {"at_start": round(rss[0][1] / 2**20, 1), "from": round(float(np.mean(first)) / 2**20, 2),
                   "end": round(float(np.mean(last)) / 2**20, 2), "peak": round(max(b for _, b in rss) / 2**20, 1)},
        "rss_growth_from_minute_2": round(float(growth), 5),
        "rss_samples": [(round(t, 1), b) for t, b in rss],
        "exit_seconds": round(exit_s, 3),
    }
    result["passed"] = bool(not errors and growth < 0.05)
    return result


# --- R7 expensive bodies -----------------------------------------------------------------------

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
                async with _client(server.base, concurrent, timeout_s=deadline_s * 2) as client:
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


# --- R8 slow and idle clients ------------------------------------------------------------------

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
            async with _client(server.base, 1, timeout_s=10) as client:
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
        stats = scrape(server.base)
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


# --- R10 abuse ---------------------------------------------------------------------------------
# The findings of the second security review, each as a probe against a real server, and a
# mixed abuse run. The requests are built here once; tests/process/test_hardening.py sends the same ones.

PROBE_KEY = "reliability-probe-key-0123456789"  # the probes' server asks for API keys
MB = 2**20


def http_request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                 host: str = "127.0.0.1") -> bytes:
    """One raw HTTP/1.1 request (Content-Length from the body unless a header says otherwise)."""
    head = {"host": host, **({"content-length": str(len(body))} if body else {}), **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode() + body


def explain_flood_body(model: str | None = None) -> bytes:
    """The review's explanation request: 256 KB, 64 texts of 4,096 "!" with "explain": true
    (an 18 MB answer when every token was described)."""
    body = {"inputs": [{"text": "!" * 4096}] * 64, "explain": True}
    return json.dumps({**body, "model": model} if model else body).encode()


def v2_verify_body(claims: list, claim_shape: list, evidence_shape: list, evidence: list) -> dict:
    return {"inputs": [{"name": "claim", "shape": claim_shape, "datatype": "BYTES", "data": claims},
                       {"name": "evidence", "shape": evidence_shape, "datatype": "BYTES", "data": evidence}]}


def v2_bad_bodies() -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """/v2 bodies a verification model must refuse with a short 400 (404 for the version):
    name -> (path suffix after the model name, body, extra headers)."""
    claim = {"name": "claim", "shape": [1], "datatype": "BYTES", "data": ["a dog runs"]}
    evidence = {"name": "evidence", "shape": [1, 1], "datatype": "BYTES", "data": ["a dog runs fast"]}
    pair = json.dumps({"inputs": [claim, evidence]}).encode()
    alone = json.dumps({"inputs": [claim]}).encode()
    big = "9" * 5000
    external = {**evidence, "data": None, "parameters": {"binary_data_size": 7}}
    return {
        "nested": ("", b"[" * 100_000 + b"]" * 100_000, {}),
        "nested_data": ("", alone.replace(b'["a dog runs"]', b"[" * 50_000 + b"]" * 50_000), {}),
        "big_int_shape": ("", pair.replace(b"[1, 1]", f"[{big}, 1]".encode()), {}),
        "big_int_data": ("", alone.replace(b'["a dog runs"]', f"[{big}]".encode()), {}),
        "big_int_binary_size": ("", json.dumps({"inputs": [claim, external]}).encode().replace(
            b'"binary_data_size": 7', f'"binary_data_size": 1{"0" * 4000}'.encode()), {}),
        "long_shape": ("", json.dumps({"inputs": [claim, {**evidence, "shape": [10] * 5000}]}).encode(), {}),
        "negative_shape": ("", json.dumps({"inputs": [claim, {**evidence, "shape": [-1, 1]}]}).encode(), {}),
        "long_name": ("", json.dumps({"inputs": [claim, {**evidence, "name": "\x1b" + "e" * 500_000}]}).encode(), {}),
        "many_names": ("", json.dumps({"inputs": [{**claim, "name": "n" * 1000}] * 200}).encode(), {}),
        "long_key": ("", json.dumps({"inputs": [claim, {**evidence, "k" * 500_000: 1}]}).encode(), {}),
        "long_datatype": ("", json.dumps({"inputs": [claim, {**evidence, "datatype": "B" * 500_000}]}).encode(), {}),
        "long_output": ("", json.dumps({"inputs": [claim, evidence], "outputs": [{"name": "o" * 500_000}]}).encode(), {}),
        "header_length": ("", pair, {"inference-header-content-length": "9" * 5000}),
        "not_utf8": ("", b'{"inputs": [\xff\xfe]}', {}),
        "long_version": ("/versions/" + "v" * 6000, pair, {}),
    }


def huge_shape_body() -> bytes:
    """The review's HIGH finding: 160 bytes declaring 20 million evidence rows of nothing."""
    return json.dumps(v2_verify_body(["x"], [1], [20_000_000, 0], [])).encode()


def open_sockets(pid: int) -> int:
    """Sockets a process holds (its connections and listeners), from /proc (Linux)."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return count


async def exchange(port: int, request: bytes, *, trickle: bytes = b"", every_s: float = 1.0,
                   hold_s: float = 5.0) -> dict:
    """Send `request` (then `trickle` every `every_s`) and read until the server closes or
    `hold_s` passes: the status of the first answer, when it came and when the connection
    closed (None: still open), how many answers."""
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
    except OSError as exc:
        return {"status": 0, "error": type(exc).__name__, "seconds": 0.0, "closed_after_s": 0.0, "answers": 0}
    status, first, data, closed = 0, None, b"", None
    try:
        writer.write(request)
        next_trickle = time.monotonic() + every_s
        while time.monotonic() - start < hold_s:
            if trickle and time.monotonic() >= next_trickle:
                writer.write(trickle)
                next_trickle += every_s
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), timeout=0.05)
            except asyncio.TimeoutError:
                continue
            if not chunk:
                closed = time.monotonic() - start
                break
            if first is None:
                first = time.monotonic() - start
                status = int(chunk.split(b" ", 2)[1]) if chunk.startswith(b"HTTP/1.") else 0
            data += chunk
    except OSError:
        closed = time.monotonic() - start
    finally:
        writer.close()
    return {"status": status, "seconds": first, "closed_after_s": closed, "answers": data.count(b"HTTP/1.1 "),
            "bytes": len(data), "body": data.partition(b"\r\n\r\n")[2][:600].decode("utf-8", "replace")}


def unread_connection(port: int, request: bytes) -> socket.socket:
    """A connection that sends `request` and never reads (a receive buffer of a few KB)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    try:
        sock.sendall(request)
    except BlockingIOError:  # the server is reading slowly: send the rest blocking
        sock.setblocking(True)
        sock.sendall(request)
    return sock


def _models_of(repository: Path) -> tuple[ModelSpec, ModelSpec]:
    models = repository_models(repository)
    verification = next(m for m in models if m.task == "verification")
    classification = next(m for m in models if m.task == "classification")
    return verification, classification


def run_probes(repository: Path, work: Path = Path("runs/reliability"), unread_clients: int = 40,
               **settings: Any) -> dict:
    """The review's findings, one probe each, against one server with API keys and a Host
    allow-list: every answer a 4xx within 1 s (the unread explanations: connections the
    server drops at its write timeout), server RSS +50 MB at most per probe, no ERROR logged."""
    verification, classification = _models_of(repository)
    # closed after each answer, except where the server must close by itself (7)
    auth = {"authorization": f"Bearer {PROBE_KEY}", "content-type": "application/json", "connection": "close"}
    server = ServiceProcess(repository, work / "probes.log", api_keys=PROBE_KEY, allowed_hosts="127.0.0.1,localhost",
                            **settings)
    v2 = f"/v2/models/{verification.name}"
    probes: dict[str, Any] = {
        "1 /v2 shape [20000000, 0]": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", huge_shape_body(), auth)),
        "3 /v2 nesting 100,000 deep": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["nested"][1], auth)),
        "3 /v2 integer of 5,000 digits": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["big_int_shape"][1], auth)),
        "3 /v2 shape [10]*5000": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["long_shape"][1], auth)),
        "4 /v2 input name of 500 KB": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["long_name"][1], auth)),
        "6 no API key": lambda: exchange(server.port, http_request(
            "POST", "/classify", b'{"text": "a fine day"}', {"content-type": "application/json", "connection": "close"})),
        "6 foreign Host (DNS rebinding)": lambda: exchange(server.port, http_request(
            "POST", "/classify", b'{"text": "a fine day"}', auth, host="attacker.example")),
        "6 /v2 as text/plain": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", json.dumps(v2_verify_body(["a"], [1], [1, 1], ["b"])).encode(),
            {**auth, "content-type": "text/plain"})),
        "7 413 then one byte every 2 s": lambda: exchange(server.port, http_request(
            "POST", "/classify", headers={**auth, "connection": "keep-alive", "content-length": "2000000"}),
            trickle=b"x", every_s=2.0,
            hold_s=30.0),
    }
    results: dict[str, dict] = {}
    with server.start():
        time.sleep(1.0)
        baseline = server.rss_bytes()

        async def measure(probe: Any) -> tuple[dict, int]:
            with RssSampler(server, 0.02) as sampler:
                outcome = await probe()
            return outcome, max(b for _, b in sampler.samples)

        for name, probe in probes.items():
            before = server.rss_bytes()
            outcome, peak = run_async(measure(probe))
            results[name] = {"status": outcome["status"], "seconds": outcome["seconds"],
                             "closed_after_s": outcome["closed_after_s"], "rss_growth_mb": round((peak - before) / MB, 1),
                             "error": outcome["body"][:160]}
        # 2: clients that send the explanation request and never read: dropped at the write timeout
        sockets_before, before = open_sockets(server.pid), server.rss_bytes()
        request = http_request("POST", "/classify", explain_flood_body(classification.name), auth)
        started = time.monotonic()
        clients = [unread_connection(server.port, request) for _ in range(unread_clients)]
        peak, dropped_after = before, None
        while time.monotonic() - started < 60:
            peak = max(peak, server.rss_bytes())
            if open_sockets(server.pid) <= sockets_before:
                dropped_after = time.monotonic() - started
                break
            time.sleep(0.2)
        time.sleep(1.0)
        results[f"2 {unread_clients} clients never read their explanation"] = {
            "status": None, "answer_bytes": len(httpx.post(server.base + "/classify", content=explain_flood_body(
                classification.name), headers=auth, timeout=60).content),
            "all_dropped_after_s": None if dropped_after is None else round(dropped_after, 1),
            "rss_growth_mb": round((peak - before) / MB, 1), "rss_after_mb": round((server.rss_bytes() - before) / MB, 1)}
        for sock in clients:
            sock.close()
        errors = [r for r in server.log_records() if r.get("level") == "ERROR"]
        rss_end = server.rss_bytes()
    # 5: external data in a bundle (a start-up check, not a request)
    results["5 weights in an external data file"] = external_data_probe(repository, work)
    timed = {k: v for k, v in results.items() if k[0] in "13467"}
    passed = (all(400 <= v["status"] < 500 and v["seconds"] is not None and v["seconds"] < 1.0
                  and v["rss_growth_mb"] < 50 for v in timed.values())
              and all(v["closed_after_s"] is not None and v["closed_after_s"] < 1.0 for k, v in timed.items() if k[0] == "7")
              and results[f"2 {unread_clients} clients never read their explanation"]["all_dropped_after_s"] is not None
              and results["5 weights in an external data file"]["refused"] is not False and not errors)
    return {"scenario": "probes", "baseline_rss_mb": round(baseline / MB, 1), "end_rss_mb": round(rss_end / MB, 1),
            "probes": results, "error_log_records": len(errors), "passed": passed}


def external_data_probe(repository: Path, work: Path) -> dict:
    """A bundle of `repository` re-saved with its weights in weights.bin (vouched for by
    config.json), then weights.bin zeroed: refused at load? (needs the `onnx` package)."""
    import hashlib
    import shutil

    try:
        import onnx
    except ModuleNotFoundError:
        return {"refused": None, "why": "the onnx package is not installed"}
    from core.bundle import BundleError, load_bundle

    source = next(p for p in sorted(Path(repository).iterdir()) if (p / CONFIG_FILE).is_file())
    bundle = work / "external-data-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(source, bundle)
    onnx.save_model(onnx.load(bundle / "model.onnx"), bundle / "model.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=1024)
    config = json.loads((bundle / CONFIG_FILE).read_text())
    config["model_sha256"] = hashlib.sha256((bundle / "model.onnx").read_bytes()).hexdigest()
    (bundle / CONFIG_FILE).write_text(json.dumps(config))
    weights = bundle / "weights.bin"
    weights.write_bytes(bytes(weights.stat().st_size))
    try:
        load_bundle(bundle)
    except BundleError as exc:
        return {"refused": True, "error": str(exc).replace(str(bundle), "<bundle>")[:200]}
    return {"refused": False}


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
    bad = [http_request("POST", f"/v2/models/{verification.name}{suffix}/infer", body,
                        {"content-type": "application/json", "connection": "close", **headers})
           for suffix, body, headers in v2_bad_bodies().values()]
    bad.append(http_request("POST", f"/v2/models/{verification.name}/infer", huge_shape_body(),
                            {"content-type": "application/json", "connection": "close"}))
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
                if kind % 3 == 0:  # headers, one byte a second
                    outcome = await exchange(server.port, b"POST /classify HTTP/1.1\r\nhost: x\r\n", trickle=b"x",
                                             every_s=1.0, hold_s=15.0)
                elif kind % 3 == 1:  # a body over the limit, a byte every 2 s
                    outcome = await exchange(server.port, http_request("POST", "/classify", headers={
                        "content-length": "2000000"}), trickle=b"x", every_s=2.0, hold_s=15.0)
                else:  # a body within the limit that never completes
                    outcome = await exchange(server.port, http_request("POST", "/classify", headers={
                        "content-type": "application/json", "content-length": "1000"}) + b'{"text": "',
                                             trickle=b"a", every_s=1.0, hold_s=15.0)
                count(f"slow_{('headers', 'body_413', 'body')[kind % 3]}", outcome["status"])

        normal: list[Outcome] = []

        async def normal_loop() -> None:
            body = {"premise": "a man is playing a guitar", "hypothesis": "a man plays music", "model": entailment.name}
            async with _client(server.base, 1, timeout_s=30) as client:
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


# --- CLI ------------------------------------------------------------------------------------

cli = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Reliability runs against a real attserve process.")
RepositoryOption = typer.Option(DEFAULT_MODEL_REPOSITORY, "--repository", help="Model repository to serve.")


def _finish(result: dict, out: Path | None, name: str) -> None:
    out = out or Path("runs/reliability") / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("rss_samples", "mismatch_examples")}
    log.info("result", extra={"out": str(out), **summary})
    raise typer.Exit(0 if result["passed"] else 1)


@cli.command()
def isolation(repository: Path = RepositoryOption, requests: int = 10_000, concurrency: int = 64, seed: int = 0,
              max_batch_delay_ms: float = 50.0, out: Path | None = None) -> None:
    """R1: mixed requests at concurrency; every answer equals its solo answer."""
    _finish(run_isolation(repository, requests, concurrency, seed, max_batch_delay_ms=max_batch_delay_ms,
                          progress=True), out, "isolation")


@cli.command()
def overload(repository: Path = RepositoryOption, factor: float = 4.0, duration: float = 30.0,
             inputs_per_request: int = 64, max_queue: int = 128, request_timeout_ms: float = 1000.0,
             model: str | None = None, out: Path | None = None) -> None:
    """R2: ~factor x capacity with a small queue; 429 + Retry-After, no other 5xx."""
    _finish(run_overload(repository, factor, duration, model=model, inputs_per_request=inputs_per_request,
                         max_queue=max_queue, request_timeout_ms=request_timeout_ms, progress=True), out, "overload")


@cli.command()
def shutdown(repository: Path = RepositoryOption, load: float = 5.0, concurrency: int = 16,
             shutdown_timeout_s: float = 10.0, out: Path | None = None) -> None:
    """R4: SIGTERM under sustained load; every accepted request answered, exit in time."""
    _finish(run_shutdown(repository, load, concurrency, shutdown_timeout_s), out, "shutdown")


@cli.command()
def soak(repository: Path = RepositoryOption, minutes: float = 10.0, load: float = 0.5, out: Path | None = None) -> None:
    """R6: minutes at a fraction of capacity; zero errors, RSS growth from minute 2 < 5%."""
    _finish(run_soak(repository, minutes, load, progress=True), out, "soak")


@cli.command()
def expansion(repository: Path = RepositoryOption, concurrent: int = 6, rounds: int = 3, out: Path | None = None) -> None:
    """R7: concurrent maximum-size bodies of U+FDFA (NFKC x18): 422/200 in time, RSS +300 MB at most."""
    _finish(run_expansion(repository, concurrent, rounds), out, "expansion")


@cli.command()
def probes(repository: Path = RepositoryOption, unread_clients: int = 40, out: Path | None = None) -> None:
    """R10: one probe per finding of the second review; 4xx within 1 s, RSS +50 MB at most each."""
    _finish(run_probes(repository, unread_clients=unread_clients), out, "probes")


@cli.command()
def abuse(repository: Path = RepositoryOption, seconds: float = 60.0, settle: float = 10.0, unread: int = 20,
          slow: int = 20, mem_limit_mb: float = 2048.0, out: Path | None = None) -> None:
    """R10: mixed abuse; peak RSS under mem_limit, within 20% of idle `settle` s after."""
    _finish(run_abuse(repository, seconds, settle, unread, slow, mem_limit_mb), out, "abuse")


@cli.command("slow-clients")
def slow_clients(repository: Path = RepositoryOption, idle: int = 20_000, slowloris: int = 200,
                 header_timeout: float = 10.0, duration: float = 20.0, out: Path | None = None) -> None:
    """R8: idle connections + slowloris; normal requests p99 < 100 ms, all closed at the header timeout."""
    _finish(run_slow_clients(repository, idle, slowloris, header_timeout, duration), out, "slow-clients")


if __name__ == "__main__":
    from service.logs import configure_logging

    configure_logging("INFO", "text")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    cli()
