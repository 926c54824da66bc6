"""How a batch of mixed shapes should run: one graph call padded to its longest item, one call
per bucket shape, or the calls `service.runtime.plan_calls` picks with the call overhead the
runtime measured at warm-up. In process, on the service's own runtime and encoder, pinned to
the cores it is started on (`taskset -c 0 python -m bench.plan_calls ...`).

Batches are the test set's examples in arrival order, `--batch-size` at a time (what the
batcher forms from a 32-item request or from 32 queued single ones). Each setting runs
`--rounds` interleaved rounds of `--seconds`; the report gives items/s (min-max over rounds),
graph calls per batch and padded tokens against the items' own bucket shapes.

    python -m bench.plan_calls --model snli-attconv-light:snli --model fever-attconv:fever
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import track
from rich.table import Table

from bench.engine import load_runtime, service_items
from bench.workloads import test_examples
from service.runtime import plan_calls

app = typer.Typer(add_completion=False)
REPO = Path(__file__).resolve().parents[1]
# fixed call overheads (padded tokens) besides the measured one; 0 = one call per shape
SWEEP = (0.0, 32.0, 64.0, 128.0, 256.0, 512.0, math.inf)


def measure(model: str, dataset: str, batch_size: int, seconds: float, rounds: int, examples: int) -> dict:
    runtime = load_runtime(REPO / "model_repository" / model, threads=1)
    started = time.perf_counter()
    runtime.warmup(batch_size, 1 << 30)
    warmup_s = time.perf_counter() - started
    measured = runtime.call_overhead_tokens
    items = service_items(runtime, test_examples(dataset, runtime.config.max_evidence, examples))
    batches = [items[i : i + batch_size] for i in range(0, len(items) - batch_size + 1, batch_size)]
    own_tokens = sum(runtime.shape_tokens(item.shape) for batch in batches for item in batch)
    settings = {"measured": measured, **{("one call" if math.isinf(v) else f"{v:g}"): v for v in SWEEP}}
    rates: dict[str, list[float]] = {label: [] for label in settings}
    plans: dict[str, dict] = {}
    for label, overhead in settings.items():
        calls = [plan_calls([item.shape for item in batch], runtime.shape_tokens, overhead) for batch in batches]
        padded = sum(runtime.padded_tokens(batch, batch_calls) for batch, batch_calls in zip(batches, calls))
        plans[label] = {"calls_per_batch": round(sum(map(len, calls)) / len(batches), 2),
                        "padding": round(padded / own_tokens, 3)}
    for _ in track(range(rounds), description=f"{model}: {rounds} rounds x {len(settings)} settings"):
        for label, overhead in settings.items():
            runtime.call_overhead_tokens = overhead
            done, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for batch in batches:
                    runtime.infer_batch(batch)
                done += len(batches) * batch_size
            rates[label].append(done / (time.perf_counter() - t0))
    result = {label: {**plans[label], "overhead_tokens": None if math.isinf(settings[label]) else round(settings[label], 1),
                      "items_per_s_min": round(min(r)), "items_per_s_max": round(max(r))}
              for label, r in rates.items()}
    one = min(rates["one call"])
    return {"model": model, "dataset": dataset, "batch_size": batch_size, "batches": len(batches),
            "warmup_s": round(warmup_s, 2), "measured_overhead_tokens": round(measured, 1),
            "planned_vs_one_call": round(min(rates["measured"]) / one, 3), "settings": result}


@app.command()
def main(
    model: Annotated[list[str], typer.Option(help="BUNDLE:DATASET, repeatable")],
    batch_size: Annotated[int, typer.Option()] = 32,
    seconds: Annotated[float, typer.Option(help="seconds per setting per round")] = 2.0,
    rounds: Annotated[int, typer.Option()] = 2,
    examples: Annotated[int, typer.Option(help="test examples sent (arrival order)")] = 2048,
    out: Annotated[Path, typer.Option(help="JSON report")] = REPO / "bench/results/plan-calls/plan-calls.json",
) -> None:
    console = Console()
    reports = []
    for spec in model:
        name, _, dataset = spec.partition(":")
        report = measure(name, dataset or "snli", batch_size, seconds, rounds, examples)
        reports.append(report)
        table = Table(title=f"{name}: {batch_size}-item batches in arrival order (measured overhead "
                            f"{report['measured_overhead_tokens']} tokens)")
        for column in ("setting", "calls/batch", "padding", "items/s"):
            table.add_column(column)
        for label, row in report["settings"].items():
            table.add_row(label, str(row["calls_per_batch"]), f"{row['padding']:.2f}x",
                          f"{row['items_per_s_min']:,}-{row['items_per_s_max']:,}")
        console.print(table)
        console.print(f"planned (measured overhead) vs one call: {report['planned_vs_one_call']}x")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu_pinning": "as started", "reports": reports}, indent=2) + "\n", encoding="utf-8")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    app()
