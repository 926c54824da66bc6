"""Peers at their best, repeated and interleaved: the service against BentoML, LitServe, Ray
Serve and an unbatched FastAPI + onnxruntime server, all serving the same ONNX bundle.

Every arm serves `model_repository/<model>` with onnxruntime on one intra-op thread and the
project's numpy-only tokenizer, pinned to core 0 (`taskset`), wrk pinned to core 1, closed
loop at `--concurrency` single-input clients (bench.loadgen.closed_loop). Each peer runs in its
own virtualenv with pinned versions (bench.servers *_PACKAGES) and its own batching:

1. sweep: per peer, each batching setting of its `Arm.sweep` (ARMS) for one `--sweep-duration` run after a
   `--sweep-warmup`; the best by items/s (2xx answers only) is kept. A run with any error is
   `failed` and never picked.
2. rounds: `--rounds` rounds of service, bento, litserve, ray, naive-ort (in that order), a
   fresh server per run, `--warmup` then `--duration` seconds; per run items/s, wrk's latency
   percentiles (closed loop, as measured: the time each connection waited for its answer),
   errors and the 1-minute load average.
3. summary per arm: median items/s of the runs that did not fail, min, max, median p50/p99, the
   ratio of the service's median to the arm's, and its spread (service min / arm max, service
   max / arm min).

    python -m bench.peers                      # writes bench-results/peers/peers.{json,md,png}
    python -m bench.peers --rounds 5 --arm service --arm litserve

The service arm is bench.servers.service_spec with the service's default batching settings
(as bench.ab runs it). Two arms use both cores, unpinned, wrk included, and are compared with
each other (`--base service-2w`): the service with two workers (`service-2w`) and Ray Serve with
two replicas (`ray-2r`):

    python -m bench.peers --arm service-2w --arm ray-2r --base service-2w --concurrency 64

A Hugging Face classifier imported with `attserve bundle import-hf` (issue 63; bench.transformer_shapes
builds two) is served by `service`, by `hf-ort` (FastAPI + onnxruntime + tokenizers on the same
model.onnx, one run per request) and by `hf-pipeline` (a transformers pipeline on the folder it
was imported from, `--hf-source`). `NAME@MODEL` runs an arm on another bundle, so the AttConv
model is measured beside it; `--shape batch` sends 32 inputs a request (items/s counts inputs):

    python -m bench.peers --model /tmp/attserve-hf-shapes/repository/minilm-l6 --arm service \
        --arm hf-ort --arm hf-pipeline --arm service@snli-attconv-light [--shape batch --concurrency 2]

After each warm-up one more request is sent and its answer awaited, so the measured run does not
share the server with the warm-up's abandoned requests (seconds of work for a transformer).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable

import typer

from bench import loadgen, servers
from bench.workloads import BATCH_INPUTS, ENDPOINT_OF_TASK, test_examples, write_bodies
from service.settings import Settings

app = typer.Typer(add_completion=False)

ARM_ORDER = ("service", "bento", "litserve", "ray", "naive-ort")
BASE = "service"


@dataclass(frozen=True)
class Arm:
    name: str
    framework: str
    bodies: str  # body file of bench.workloads: single | peer
    spec: Callable[[int, Path, dict], servers.ServerSpec]  # (port, bundle, setting) -> spec
    sweep: tuple[dict, ...]  # batching settings tried; one entry: nothing to sweep
    ensure: Callable[[], tuple[bool, str]] | None  # make/check its virtualenv
    packages: tuple[str, ...]
    # True: the server on core 0 and wrk on core 1. False: both unpinned, for the two-process
    # arms (two workers, two replicas), which need both cores.
    pinned: bool = True
    # what `spec` is handed: the bundle, or the Hugging Face folder it was imported from
    # (`--hf-source`: the PyTorch weights a transformers pipeline loads)
    serves: str = "bundle"


def _service_spec(port: int, bundle: Path, setting: dict) -> servers.ServerSpec:
    return servers.service_spec(port, bundle.parent, bundle.name,
                                max_batch_size=setting["max_batch_size"],
                                max_batch_delay_ms=setting["max_batch_delay_ms"], intra_op_threads=1)


SERVICE_DEFAULT = {"max_batch_size": Settings.model_fields["max_batch_size"].default,
                   "max_batch_delay_ms": Settings.model_fields["max_batch_delay_ms"].default}

# Ray Serve's batching settings tried, for one replica and for two
RAY_SWEEP = tuple({"max_batch_size": b, "batch_wait_timeout_s": t} for b in (8, 32, 64) for t in (0.001, 0.005, 0.02))

ARMS = {
    "service": Arm("service", "attserve (uvicorn + FastAPI, own batcher)", "single", _service_spec,
                   (SERVICE_DEFAULT,), None, ()),
    "bento": Arm("bento", "BentoML (adaptive batching)", "peer",
                 lambda port, bundle, s: servers.peer_spec(port, bundle, 1, s["max_batch_size"], s["max_latency_ms"]),
                 tuple({"max_batch_size": b, "max_latency_ms": m} for b in (8, 32, 64) for m in (100, 10000)),
                 servers.ensure_peer_venv, servers.PEER_PACKAGES),
    "litserve": Arm("litserve", "LitServe (max_batch_size / batch_timeout)", "single",
                    lambda port, bundle, s: servers.litserve_spec(port, bundle, s["max_batch_size"], s["batch_timeout_s"]),
                    tuple({"max_batch_size": b, "batch_timeout_s": t} for b in (4, 8, 16, 32) for t in (0.0005, 0.001, 0.005)),
                    servers.ensure_litserve_venv, servers.LITSERVE_PACKAGES),
    "ray": Arm("ray", "Ray Serve (@serve.batch, 1 replica, 1 CPU, RAY_SERVE_THROUGHPUT_OPTIMIZED=1)", "single",
               lambda port, bundle, s: servers.ray_spec(port, bundle, s["max_batch_size"], s["batch_wait_timeout_s"]),
               RAY_SWEEP,
               servers.ensure_ray_venv, servers.RAY_PACKAGES),
    "service-2w": Arm("service-2w", "attserve, 2 workers (ATTSERVE_WORKERS=2, 1 thread each), unpinned", "single",
                      lambda port, bundle, s: servers.service_workers_spec(
                          port, bundle.parent, bundle.name, workers=2, max_batch_size=s["max_batch_size"],
                          max_batch_delay_ms=s["max_batch_delay_ms"]),
                      (SERVICE_DEFAULT,), None, (), pinned=False),
    "ray-2r": Arm("ray-2r", "Ray Serve (@serve.batch, 2 replicas of 1 CPU, RAY_SERVE_THROUGHPUT_OPTIMIZED=1), unpinned",
                  "single",
                  lambda port, bundle, s: servers.ray_spec(port, bundle, s["max_batch_size"], s["batch_wait_timeout_s"],
                                                           replicas=2),
                  RAY_SWEEP,
                  servers.ensure_ray_venv, servers.RAY_PACKAGES, pinned=False),
    "naive-ort": Arm("naive-ort", "FastAPI + onnxruntime, unbatched (one session.run per request)", "single",
                     lambda port, bundle, s: servers.naive_ort_spec(port, bundle), ({},), None, ()),
    # a Hugging Face classifier imported with `attserve bundle import-hf` (bench.transformer_shapes)
    "hf-ort": Arm("hf-ort", "FastAPI + onnxruntime + tokenizers on the same model.onnx, unbatched "
                  "(one session.run per request)", "single",
                  lambda port, bundle, s: servers.hf_ort_spec(port, bundle), ({},), None,
                  ("onnxruntime", "tokenizers", "fastapi")),
    "hf-pipeline": Arm("hf-pipeline", "FastAPI + transformers pipeline('text-classification'), torch 1 thread, "
                       "unbatched across requests", "single",
                       lambda port, bundle, s: servers.hf_pipeline_spec(port, bundle), ({},), None,
                       ("transformers", "torch", "fastapi"), serves="hf-source"),
}
SHAPES = {"single": 1, "batch": BATCH_INPUTS}  # request shape -> inputs per request


def parse_arm(label: str) -> tuple[str, str | None]:
    """`NAME` or `NAME@MODEL`: an arm of ARMS, on the run's `--model` or on MODEL (a bundle name
    in model_repository/ or a path), e.g. `service@snli-attconv-light` beside a transformer."""
    name, _, model = label.partition("@")
    if name not in ARMS or (not model and "@" in label):
        raise ValueError(f"unknown arm {label!r}; known: {list(ARMS)}, each optionally @MODEL")
    return name, model or None


def body_file_of(arm: Arm, shape: str) -> str | None:
    """The body file (bench.workloads) an arm is sent in a request shape; None where the arm
    cannot take it (an arm on the BentoML peer's one-input body has no 32-input form)."""
    if shape == "single":
        return arm.bodies
    return "batch" if arm.bodies == "single" else None


# --- the summary logic (tests/unit/test_bench_peers.py) -------------------------------------------


def is_failed(run: dict) -> bool:
    """A run counts only when the server started and wrk saw no error of any kind."""
    return bool(run.get("error")) or run.get("errors", {}).get("total", 1) > 0


def pick_best(runs: list[dict]) -> dict | None:
    """The run with the most items/s among those that did not fail (None if all failed)."""
    ok = [r for r in runs if not r["failed"]]
    return max(ok, key=lambda r: r["items_per_s"]) if ok else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def summarize(runs: list[dict], arms: list[str], base: str = BASE) -> dict:
    """Per arm: runs ok/failed, median/min/max items/s, median p50/p99 (ms) of the runs that did
    not fail; with the base arm present, base median / arm median and the spread of that
    ratio (base min / arm max .. base max / arm min)."""
    summary: dict[str, dict] = {}
    for name in arms:
        mine = [r for r in runs if r["arm"] == name]
        ok = [r for r in mine if not r["failed"]]
        rate = [r["items_per_s"] for r in ok]
        summary[name] = {
            "runs_ok": len(ok), "runs_failed": len(mine) - len(ok),
            "median_items_per_s": round(statistics.median(rate), 2) if rate else None,
            "min": min(rate, default=None), "max": max(rate, default=None),
            "median_p50_ms": round(statistics.median(r["latency_ms"]["p50"] for r in ok), 3) if ok else None,
            "median_p99_ms": round(statistics.median(r["latency_ms"]["p99"] for r in ok), 3) if ok else None,
        }
    b = summary.get(base)
    for name, s in summary.items():
        if b is None:
            s.update(ratio=None, ratio_low=None, ratio_high=None)
            continue
        s["ratio"] = _ratio(b["median_items_per_s"], s["median_items_per_s"])
        s["ratio_low"] = _ratio(b["min"], s["max"])
        s["ratio_high"] = _ratio(b["max"], s["min"])
    return summary


def _setting_text(setting: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "-"


def _inputs_text(report: dict) -> str:
    n = report.get("items_per_request", 1)
    return "one input a request" if n == 1 else f"{n} inputs a request (items/s counts inputs)"


def markdown(report: dict) -> str:
    lines = [
        f"# Peers at their best (`{report['command']}`)",
        "",
        f"{report['finished_at']}, {report['machine']}; model `{report['model']}`, {report['concurrency']} "
        f"closed-loop clients sending {_inputs_text(report)} (wrk, core 1), each server pinned to core 0 (arms marked unpinned: "
        f"server and wrk on both cores), onnxruntime 1 thread per process; {report['rounds']} interleaved rounds of {report['duration_s']} s after a "
        f"{report['warmup_s']} s warm-up, a fresh server per run; {report['wall_s']:.0f} s in all. "
        "Latencies are wrk's closed-loop figures as measured (each connection's wait for its answer, "
        "at the arm's own throughput), not a fixed-rate latency. Only 2xx answers count; a run with any "
        "error is failed and left out.",
        "",
        "| arm | best setting (sweep) | versions | runs ok | median items/s | min | max | median p50 ms "
        f"| median p99 ms | {report.get('base', BASE)} / arm (median) | spread (min/max .. max/min) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in report["summary"].items():
        arm = report["arms"][name]
        spread = f"{s['ratio_low']} .. {s['ratio_high']}" if s["ratio_low"] is not None else "-"
        lines.append(f"| {name} | {_setting_text(arm['setting'])} | {arm['versions']} | {s['runs_ok']}/"
                     f"{s['runs_ok'] + s['runs_failed']} | {s['median_items_per_s']} | {s['min']} | {s['max']} | "
                     f"{s['median_p50_ms']} | {s['median_p99_ms']} | {s['ratio']} | {spread} |")
    lines += ["", "## Sweeps (one run per setting)", "",
              "| arm | setting | items/s | p50 ms | p99 ms | errors | failed |", "|---|---|---:|---:|---:|---:|---|"]
    for r in report["sweep_runs"]:
        lat = r.get("latency_ms", {})
        lines.append(f"| {r['arm']} | {_setting_text(r['setting'])} | {r.get('items_per_s')} | {lat.get('p50')} | "
                     f"{lat.get('p99')} | {r.get('errors', {}).get('total', r.get('error'))} | {r['failed']} |")
    lines += ["", "## Runs", "", "| round | arm | items/s | p50 ms | p99 ms | errors | load 1m | failed |",
              "|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in report["runs"]:
        lat = r.get("latency_ms", {})
        lines.append(f"| {r['round'] + 1} | {r['arm']} | {r.get('items_per_s')} | {lat.get('p50')} | {lat.get('p99')} | "
                     f"{r.get('errors', {}).get('total', r.get('error'))} | {r['load_1m']} | {r['failed']} |")
    targets = {name: arm["target"] for name, arm in report["arms"].items() if "target" in arm}
    if targets:
        lines += ["", "Served: " + "; ".join(f"{k}: `{v}`" for k, v in targets.items())]
    if report["dropped"]:
        lines += ["", "Dropped arms: " + "; ".join(f"{k}: {v}" for k, v in report["dropped"].items())]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> Path:
    """Each arm's median items/s (bar, min-max whisker) and median p99 (ms, dots, right axis)
    of the measured rounds, in run order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, s in report["summary"].items() if s["median_items_per_s"] is not None]
    summary = [report["summary"][n] for n in names]
    median = [s["median_items_per_s"] for s in summary]
    whisker = [[m - s["min"] for m, s in zip(median, summary)], [s["max"] - m for m, s in zip(median, summary)]]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    xs = range(len(names))
    ax.bar(xs, median, yerr=whisker, capsize=4, color="tab:blue", alpha=0.8, label="median items/s (min-max)")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("items / s")
    right = ax.twinx()
    right.plot(list(xs), [s["median_p99_ms"] for s in summary], "o", color="tab:red", label="median p99 (ms)")
    right.set_yscale("log")
    right.set_ylabel("p99 latency (ms, log)")
    (bars, bar_labels), (dots, dot_labels) = ax.get_legend_handles_labels(), right.get_legend_handles_labels()
    # below the axes, so it hides no bar or dot
    ax.legend(bars + dots, bar_labels + dot_labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    ax.set_title(f"{report['model']}, {report['concurrency']} clients, {report['rounds']} rounds "
                 f"({report['finished_at'][:10]})", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


# --- running ---------------------------------------------------------------------------------


def _drain(url: str, body_file: Path) -> None:
    """Wait for the answer to one more request: the warm-up's last requests, abandoned by wrk,
    are still being computed (seconds of them for a transformer), and a server works through
    them before, or beside, a new one; the measured run then starts on an idle server."""
    body = body_file.read_text(encoding="utf-8").splitlines()[0].encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()


def _measure(arm: Arm, setting: dict, bundle: Path, path: str, body_file: Path, concurrency: int,
             warmup: int, duration: int, log_dir: Path, items_per_request: int = 1) -> dict:
    spec = arm.spec(servers.free_port(), bundle, setting)
    started = time.monotonic()
    try:
        server_cpus, wrk_cpus = ("0", "1") if arm.pinned else (None, None)
        with servers.Server(spec, server_cpus, log_dir) as server:
            start_s = time.monotonic() - started
            loadgen.closed_loop(server.url, path, body_file, concurrency, warmup, wrk_cpus, items_per_request)
            _drain(server.url + path, body_file)
            run = loadgen.closed_loop(server.url, path, body_file, concurrency, duration, wrk_cpus, items_per_request)
        run["start_s"] = round(start_s, 1)
    except (servers.ServerError, loadgen.LoadGeneratorError, subprocess.TimeoutExpired, urllib.error.URLError) as error:
        run = {"error": str(error)[-1500:]}
    run.update(arm=arm.name, setting=setting, load_1m=round(os.getloadavg()[0], 2))
    run["failed"] = is_failed(run)
    return run


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _line(prefix: str, run: dict) -> str:
    if "error" in run:
        return f"{prefix} FAILED: {run['error'][:300]}"
    return (f"{prefix} {run['items_per_s']:8.1f} items/s  p50 {run['latency_ms']['p50']:.1f} ms  "
            f"p99 {run['latency_ms']['p99']:.1f} ms  errors {run['errors']['total']}  load {run['load_1m']}")


def _versions(a: Arm) -> str:
    if a.ensure is None and a.packages:
        from importlib.metadata import version

        return ", ".join(f"{p} {version(p)}" for p in a.packages) + " (.venv)"
    return ", ".join(a.packages) if a.packages else "this tree (.venv)"


def _usable_arms(labels: list[str], shape: str) -> tuple[dict[str, dict], dict[str, str]]:
    """The arms `labels` (parse_arm) whose servers can run here and take requests of `shape`
    (each one's ARMS name, framework, versions, first setting, body file), and why each of the
    others was dropped."""
    arms: dict[str, dict] = {}
    dropped: dict[str, str] = {}
    for label in labels:
        a = ARMS[parse_arm(label)[0]]
        bodies = body_file_of(a, shape)
        if bodies is None:
            dropped[label] = f"takes one input per request; no {shape} form"
            continue
        if a.ensure is not None:
            usable, note = a.ensure()
            typer.echo(f"{label}: {note}", err=True)
            if not usable:
                dropped[label] = note
                continue
        arms[label] = {"arm": a.name, "framework": a.framework, "versions": _versions(a), "setting": a.sweep[0],
                       "bodies": bodies}
    return arms, dropped


@dataclass(frozen=True)
class Load:
    """What every run of one invocation gets: the endpoint, the body files, the clients."""

    path: str
    work: Path  # holds bodies/ and logs/
    concurrency: int
    warmup: int
    duration: int
    items_per_request: int


def _run_arm(label: str, entry: dict, setting: dict, load: Load, warmup: int, duration: int) -> dict:
    """One run of the arm `label` (an entry of `arms`) at `setting`, reported under its label."""
    run = _measure(ARMS[entry["arm"]], setting, Path(entry["target"]), load.path,
                   load.work / "bodies" / f"{entry['bodies']}.jsonl", load.concurrency, warmup, duration,
                   load.work / "logs", load.items_per_request)
    run["arm"] = label
    return run


def _sweep_settings(arms: dict[str, dict], dropped: dict[str, str], load: Load, warmup: int,
                    duration: int) -> list[dict]:
    """Each arm with more than one batching setting measured at each: its best becomes its
    setting in `arms` (an arm whose every setting failed moves to `dropped`); the runs."""
    sweep_runs: list[dict] = []
    for name in list(arms):
        a = ARMS[arms[name]["arm"]]
        if len(a.sweep) < 2:
            continue
        tried = []
        for setting in a.sweep:
            run = _run_arm(name, arms[name], setting, load, warmup, duration)
            typer.echo(_line(f"sweep {name:9s} {_setting_text(setting):40s}", run), err=True)
            tried.append(run)
        sweep_runs += tried
        best = pick_best(tried)
        if best is None:
            dropped[name] = "every sweep setting failed: " + tried[-1].get("error", "errors under load")[:300]
            del arms[name]
            continue
        arms[name]["setting"] = best["setting"]
    return sweep_runs


def resolve_bundle(model: str) -> Path:
    """A bundle name in model_repository/, or a path to a bundle folder."""
    given = Path(model).expanduser()
    return (given if given.is_absolute() or given.parent != Path(".") else servers.REPO / "model_repository" / model).resolve()


def _targets(arms: dict[str, dict], bundle: Path, hf_source: Path | None, path: str) -> None:
    """Each arm's folder (`target`): the run's bundle, its own `@MODEL`, or the Hugging Face
    folder; every bundle must answer on the run's endpoint."""
    for label, entry in arms.items():
        model = parse_arm(label)[1]
        target = resolve_bundle(model) if model else bundle
        if ARMS[entry["arm"]].serves == "hf-source":
            # bench.transformer_shapes' layout: <cache>/hf/NAME beside <cache>/repository/NAME
            target = hf_source or bundle.parent.parent / "hf" / bundle.name
            if not (target / "config.json").is_file():
                raise typer.BadParameter(f"{label}: no Hugging Face folder at {target}; pass --hf-source")
        else:
            task = json.loads((target / "config.json").read_text())["task"]
            if ENDPOINT_OF_TASK[task] != path:
                raise typer.BadParameter(f"{label}: {target.name} answers {ENDPOINT_OF_TASK[task]}, the run {path}")
        entry["target"] = str(target)


def _rounds(arms: dict[str, dict], rounds: int, load: Load) -> list[dict]:
    runs: list[dict] = []
    for round_ in range(rounds):
        for name in arms:
            run = _run_arm(name, arms[name], arms[name]["setting"], load, load.warmup, load.duration)
            run["round"] = round_
            runs.append(run)
            typer.echo(_line(f"round {round_ + 1}/{rounds} {name:9s}", run), err=True)
    return runs


def _command(rounds: int, arm: list[str] | None, base: str, extra: dict[str, object]) -> str:
    argv = " ".join(f"--arm {n}" for n in (arm or [])) + (f" --base {base}" if base != BASE else "")
    options = " ".join(f"--{k} {v}" for k, v in extra.items() if v is not None)
    return f"python -m bench.peers --rounds {rounds} {options} {argv}".replace("  ", " ").strip()


def _write(report: dict, out_dir: Path, stem: str) -> None:
    for name, s in report["summary"].items():
        typer.echo(f"{name:10s} median {s['median_items_per_s']} items/s (min {s['min']}, max {s['max']}, "
                   f"{s['runs_ok']} ok) p99 {s['median_p99_ms']} ms; service/arm {s['ratio']} "
                   f"({s['ratio_low']} .. {s['ratio_high']})", err=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown(report))
    plot(report, out_dir / f"{stem}.png")
    typer.echo(f"wrote {out_dir / stem}.json, .md and .png ({report['wall_s']:.0f} s)", err=True)


@app.command()
def main(
    arm: Annotated[list[str] | None, typer.Option(
        help=f"arms to run, in order, each NAME or NAME@MODEL (default: {', '.join(ARM_ORDER)}; "
             f"all: {', '.join(ARMS)})")] = None,
    model: Annotated[str, typer.Option(help="bundle name in model_repository/, or a bundle folder")] = "snli-attconv-light",
    hf_source: Annotated[Path | None, typer.Option(
        help="hf-pipeline: the Hugging Face folder the bundle was imported from (default: bench.transformer_shapes' "
             "<cache>/hf/NAME for <cache>/repository/NAME)")] = None,
    shape: Annotated[str, typer.Option(help=f"request shape: {' | '.join(SHAPES)} ({BATCH_INPUTS} inputs a request)")] = "single",
    dataset: Annotated[str, typer.Option(help="dataset whose test examples are sent")] = "snli",
    concurrency: Annotated[int, typer.Option()] = 32,
    rounds: Annotated[int, typer.Option(help="interleaved rounds over all arms")] = 3,
    duration: Annotated[int, typer.Option(help="seconds per measured run")] = 10,
    warmup: Annotated[int, typer.Option(help="seconds of warm-up load before each run")] = 2,
    sweep_duration: Annotated[int, typer.Option(help="seconds per sweep run")] = 8,
    sweep_warmup: Annotated[int, typer.Option()] = 2,
    sweep: Annotated[bool, typer.Option(help="sweep each peer's batching settings first")] = True,
    examples: Annotated[int, typer.Option()] = 2000,
    out_dir: Annotated[Path, typer.Option()] = servers.REPO / "bench-results" / "peers",
    stem: Annotated[str, typer.Option(help="file name of the results in --out-dir (.json, .md, .png)")] = "peers",
    base: Annotated[str, typer.Option(help="the arm the others are compared with (service/arm ratios)")] = BASE,
) -> None:
    began = time.monotonic()
    # SIGTERM unwinds like Ctrl-C, so every running server is stopped on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    names = arm or list(ARM_ORDER)
    if shape not in SHAPES:
        raise typer.BadParameter(f"unknown shape {shape!r}; known: {list(SHAPES)}")
    try:
        [parse_arm(n) for n in names]
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    bundle = resolve_bundle(model)
    task = json.loads((bundle / "config.json").read_text())["task"]
    path = ENDPOINT_OF_TASK[task]
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    write_bodies(test_examples(dataset, 5, examples), work / "bodies")
    load = Load(path, work, concurrency, warmup, duration, SHAPES[shape])

    arms, dropped = _usable_arms(names, shape)
    _targets(arms, bundle, hf_source, path)
    sweep_runs = _sweep_settings(arms, dropped, load, sweep_warmup, sweep_duration) if sweep else []
    runs = _rounds(arms, rounds, load)
    extra = {"model": model if model != "snli-attconv-light" else None, "shape": shape if shape != "single" else None,
             "concurrency": concurrency if concurrency != 32 else None, "duration": duration if duration != 10 else None,
             "warmup": warmup if warmup != 2 else None, "hf-source": hf_source}
    report = {
        "command": _command(rounds, arm, base, extra),
        "model": model, "dataset": dataset, "task": task, "endpoint": path, "concurrency": concurrency,
        "shape": shape, "items_per_request": SHAPES[shape],
        "base": base, "rounds": rounds, "duration_s": duration, "warmup_s": warmup, "sweep_duration_s": sweep_duration,
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores",
        "wrk": loadgen.wrk_version(),
        "latency_note": "wrk closed-loop latency percentiles as measured (ms)",
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - began, 1),
        "arms": arms, "dropped": dropped, "summary": summarize(runs, list(arms), base), "sweep_runs": sweep_runs,
        "runs": runs,
    }
    _write(report, out_dir, stem)


if __name__ == "__main__":
    app()
