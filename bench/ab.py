"""A/B throughput of service configurations, repeated and interleaved: is B slower than A?

On a shared 2-core machine one run of each side says little (the same configuration ranged
~25% between runs). Here each arm is a (source tree, request body file) pair; the arms run in
turn, `--repeats` rounds of A, B, C, ... (a fresh server per run, pinned to core 0, wrk pinned
to core 1, a warm-up before each), and the report gives each arm's median items/s with its
spread and the ratio of medians to the first arm. Only 2xx answers count; a run with any error
is marked failed and left out of the median. The 1-minute load average is recorded per run.

    python -m bench.ab --model snli-attconv-light --dataset snli \\
        --arm before=/work/wt/before:single --arm after=.:single --arm explain=.:explain

An arm's tree serves its own `model_repository/`; `single`, `explain` and `batch` are the body files of
bench.workloads (one input per request, `explain` adds `"explain": true`, `batch` 32 inputs); a third part
`minus-model` serves the same app with a constant answer in place of onnxruntime
(bench/service_floor_app.py), the service's own floor; `http-floor` the bare web stack
(bench/floor_app.py); `naive-ort` the unbatched FastAPI + onnxruntime server (bench/naive_ort_app.py);
`raw-session` is no server: onnxruntime's `session.run` alone, in its own process pinned like a server,
on the `batch` bodies tokenized and padded ahead (bench.engine.raw_session), so 32-pair requests
through the service can be set against the raw session in one interleaved run (issue 57):

    python -m bench.ab --arm raw=.:batch:raw-session --arm service=.:batch --concurrency 4 --duration 8
`--arm-env LABEL=ATTSERVE_X=VALUE` (repeatable) sets a setting for one arm,
so one tree can be compared with itself under two settings:

    python -m bench.ab --arm off=.:single --arm grid=.:single --arm-env grid=ATTSERVE_BATCH_GRID=true
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from bench import loadgen, servers
from bench.peers import is_failed, summarize
from bench.workloads import BATCH_INPUTS, ENDPOINT_OF_TASK, test_examples, write_bodies
from service.settings import Settings

app = typer.Typer(add_completion=False)


APPS = {"service": servers.service_spec, "minus-model": servers.service_minus_model_spec,
        # bench/floor_app.py: uvicorn + FastAPI answering a constant, no model, no checks
        "http-floor": lambda port, repository, model, **settings: servers.floor_spec(port),
        # bench/naive_ort_app.py: FastAPI + onnxruntime, one session.run per request, no batching
        "naive-ort": lambda port, repository, model, **settings: servers.naive_ort_spec(port, repository / model),
        "raw-session": None}  # not a server: raw_session_run


def _arm(text: str) -> tuple[str, Path, str, str]:
    label, _, rest = text.partition("=")
    root, _, rest = rest.partition(":")
    bodies, _, app_name = rest.partition(":")
    app_name = app_name or "service"
    # a path ending in .jsonl: a body file of one's own (one input per request), as bench.response_cache writes
    own_file = bodies.endswith(".jsonl")
    if not label or not root or (bodies not in ("single", "explain", "batch") and not own_file) or app_name not in APPS:
        raise typer.BadParameter(f"--arm {text!r}: expected LABEL=TREE:single|explain|batch|FILE.jsonl"
                                 f"[:service|minus-model|http-floor|naive-ort|raw-session]")
    if app_name == RAW_SESSION and bodies != "batch":
        raise typer.BadParameter(f"--arm {text!r}: the raw session runs the batch bodies only")
    return label, Path(root).resolve(), bodies, app_name


# not a server: bench.engine.raw_session, pinned to the server's core
RAW_SESSION = "raw-session"
SERVER_CPU = "0"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, all its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_session_run(root: Path, bodies: Path, model: str, seconds: int, work: Path) -> dict:
    """onnxruntime's session.run alone on the batch bodies (bench.engine.raw_session), run from
    `root` in its own process pinned to the server's core, as a run record like wrk's (its
    latencies: the mean time per request, the session being called from one thread)."""
    spec_path = work / f"raw-session-{time.monotonic_ns()}.json"
    spec_path.write_text(json.dumps({
        "bundle": str(root / "model_repository" / model), "examples": str(bodies), "threads": 1, "seconds": seconds,
        "raw_session": {"max_batch_size": Settings.model_fields["max_batch_size"].default,
                        "max_batch_delay_ms": Settings.model_fields["max_batch_delay_ms"].default}}))
    out = subprocess.run(["taskset", "-c", SERVER_CPU, sys.executable, "-m", "bench.engine", str(spec_path)],
                         capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if out.returncode != 0 or line is None:
        return {"error": f"bench.engine exited {out.returncode}: {out.stderr[-1000:]}", "items_per_s": 0.0,
                "latency_ms": {"p50": 0.0, "p99": 0.0}, "errors": {"total": 1}}
    raw = json.loads(line.removeprefix("BENCH_JSON "))["raw_session"]
    ms = raw["ms_per_request"]
    return {"loop": "in-process", "concurrency": 1, "requests": raw["requests"], "items": raw["requests"] * BATCH_INPUTS,
            "duration_s": raw["seconds"], "requests_per_s": round(raw["requests"] / raw["seconds"], 2),
            "items_per_s": raw["items_per_s"], "latency_ms": {"p50": ms, "p99": ms}, "errors": {"total": 0},
            "graph_calls_per_request": raw["graph_calls_per_request"],
            "cpu_us_per_item": round(1e6 * raw["cpu_seconds"] / (raw["requests"] * BATCH_INPUTS), 2)}


def _commit(root: Path) -> str:
    """The tree's HEAD commit, "+changes" when it has uncommitted changes to tracked files."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD"], capture_output=True)
    return head.stdout.strip() + ("+changes" if dirty.returncode == 1 else "")


def _arm_envs(arm_env: list[str], labels: set[str]) -> dict[str, dict[str, str]]:
    """--arm-env's LABEL=NAME=VALUE assignments: each arm's extra environment."""
    extra: dict[str, dict[str, str]] = {}
    for text in arm_env:
        label, _, assignment = text.partition("=")
        name, sep, value = assignment.partition("=")
        if label not in labels or not sep or not name:
            raise typer.BadParameter(f"--arm-env {text!r}: expected LABEL=NAME=VALUE with LABEL one of the arms")
        extra.setdefault(label, {})[name] = value
    return extra


def _served_run(root: Path, bodies: str, app_name: str, model: str, env: dict[str, str], work: Path, path: str,
                concurrency: int, warmup: int, duration: int) -> tuple[dict, float]:
    """One closed-loop run against app `app_name` of the tree `root` (after `warmup` s of load):
    wrk's figures and the server's CPU seconds during the measured run."""
    spec = APPS[app_name](servers.free_port(), root / "model_repository", model,
                          max_batch_size=Settings.model_fields["max_batch_size"].default,
                          max_batch_delay_ms=Settings.model_fields["max_batch_delay_ms"].default,
                          intra_op_threads=1)
    spec.code_root = root
    if not (root / "service" / "http" / "app.py").is_file():  # a tree from before service/ had layers
        spec.argv = [a.replace("service.http.app:", "service.app:") for a in spec.argv]
    spec.env.update(env)
    body_file = Path(bodies) if bodies.endswith(".jsonl") else work / "bodies" / f"{bodies}.jsonl"
    with servers.Server(spec, SERVER_CPU, work / "logs") as server:
        per_request = BATCH_INPUTS if bodies == "batch" else 1
        loadgen.closed_loop(server.url, path, body_file, concurrency, warmup, "1", per_request)
        cpu0 = cpu_seconds(server.process.pid)
        run = loadgen.closed_loop(server.url, path, body_file, concurrency, duration, "1", per_request)
        return run, cpu_seconds(server.process.pid) - cpu0


@app.command()
def main(
    arm: Annotated[list[str], typer.Option(help="LABEL=SOURCE_TREE:single|explain|batch[:service|minus-model|http-floor|naive-ort], in order; "
                                          "the first is the base")],
    model: Annotated[str, typer.Option(help="bundle name in each tree's model_repository/")] = "snli-attconv-light",
    dataset: Annotated[str, typer.Option(help="dataset whose test examples are sent")] = "snli",
    task: Annotated[str, typer.Option()] = "entailment",
    concurrency: Annotated[int, typer.Option()] = 32,
    duration: Annotated[int, typer.Option(help="seconds per run")] = 10,
    warmup: Annotated[int, typer.Option(help="seconds of warm-up load before each run")] = 2,
    repeats: Annotated[int, typer.Option(help="rounds over all arms")] = 5,
    examples: Annotated[int, typer.Option()] = 2000,
    out: Annotated[Path | None, typer.Option(help="write the runs and the summary here (JSON)")] = None,
    arm_env: Annotated[list[str] | None, typer.Option(help="LABEL=NAME=VALUE: an environment variable (a setting) "
                                                           "for one arm's server, repeatable")] = None,
) -> None:
    arms = [_arm(a) for a in arm]
    extra = _arm_envs(arm_env or [], {a[0] for a in arms})
    work = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    write_bodies(test_examples(dataset, 5, examples), work / "bodies")
    path = ENDPOINT_OF_TASK[task]
    runs: list[dict] = []
    for round_ in range(repeats):
        for label, root, bodies, app_name in arms:
            if app_name == RAW_SESSION:
                run = raw_session_run(root, work / "bodies", model, duration, work)
                run.update(arm=label, round=round_, load_1m=round(os.getloadavg()[0], 2))
                run["failed"] = is_failed(run)
                runs.append(run)
                typer.echo(f"round {round_ + 1}/{repeats} {label:10s} {run['items_per_s']:8.1f} items/s  "
                           f"{run['latency_ms']['p50']:.2f} ms a request  cpu {run['cpu_us_per_item']} us/item  "
                           f"load {run['load_1m']}", err=True)
                continue
            run, cpu = _served_run(root, bodies, app_name, model, extra.get(label, {}), work, path, concurrency,
                                   warmup, duration)
            run.update(arm=label, round=round_, load_1m=round(os.getloadavg()[0], 2))
            # the server's own CPU time per item answered: on a core shared with other work, a
            # steadier figure than items/s (which counts the time the others took too)
            ok_items = run["items_per_s"] * run["duration_s"]
            run["cpu_us_per_item"] = round(1e6 * cpu / ok_items, 2) if ok_items else None
            run["failed"] = is_failed(run)
            runs.append(run)
            typer.echo(f"round {round_ + 1}/{repeats} {label:10s} {run['items_per_s']:8.1f} items/s  "
                       f"p50 {run['latency_ms']['p50']:.1f} ms  p99 {run['latency_ms']['p99']:.1f} ms  "
                       f"errors {run['errors']['total']}  cpu {run['cpu_us_per_item']} us/item  load {run['load_1m']}",
                       err=True)
    # the same per-arm figures as bench.peers (medians of the runs that did not fail, spread)
    summary = summarize(runs, [label for label, *_ in arms], base=arms[0][0])
    base = summary[arms[0][0]]["median_items_per_s"]
    cpu_base = None
    for label, root, bodies, app_name in arms:
        median = summary[label]["median_items_per_s"]
        cpu = [r["cpu_us_per_item"] for r in runs if r["arm"] == label and not r["failed"] and r.get("cpu_us_per_item")]
        summary[label]["median_cpu_us_per_item"] = round(statistics.median(cpu), 2) if cpu else None
        cpu_base = summary[label]["median_cpu_us_per_item"] if label == arms[0][0] else cpu_base
        summary[label]["cpu_ratio_to_first"] = (round(cpu_base / summary[label]["median_cpu_us_per_item"], 4)
                                                if cpu_base and summary[label]["median_cpu_us_per_item"] else None)
        summary[label].update(tree=str(root), commit=_commit(root), bodies=bodies, app=app_name, env=extra.get(label, {}),
                              ratio_to_first=round(median / base, 4) if median and base else None)
    report = {"command": "python -m bench.ab " + " ".join([*(f"--arm {a}" for a in arm),
                                                           *(f"--arm-env {e}" for e in arm_env or [])]),
              "model": model, "concurrency": concurrency, "duration_s": duration, "repeats": repeats,
              "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "summary": summary, "runs": runs}
    for label, s in summary.items():
        typer.echo(f"{label:10s} median {s['median_items_per_s']} items/s (min {s['min']}, max {s['max']}, "
                   f"{s['runs_ok']} runs ok), ratio to {arms[0][0]} {s['ratio_to_first']}, median p99 {s['median_p99_ms']} ms; "
                   f"median CPU {s['median_cpu_us_per_item']} us/item, {arms[0][0]}'s / this {s['cpu_ratio_to_first']}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    app()
