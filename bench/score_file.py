"""`attserve score` against the in-process engine it drives (issue 55's acceptance: >= 0.9x).

    python -m bench.score_file INPUT.jsonl --model nli-attconv-advanced --columns premise=sentence1,hypothesis=sentence2

- engine: service.inference.engine.Engine on the service's runtime (scoring.files.load_engine_parts:
  the same settings and warm-up), fed the file's rows, parsed ahead and untimed, as requests of
  --batch-size inputs all queued at once (scoring.files.score_inputs): what the engine does
  with no file, no checks per row and no writing.
- score: scoring.files.score_file on the same file into a fresh output (reading, checking
  each row, the engine, writing, fsync and the progress file per chunk; progress bar off).

The two alternate for --repeats rounds (the machine is shared: each arm sees the same noise) and
the medians are compared. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def engine_items_per_s(bundle: Path, inputs: list[SimpleNamespace], batch_size: int, threads: int) -> float:
    from service.inference.engine import Engine
    from service.metrics import Metrics
    from scoring.files import load_engine_parts, score_inputs

    runtime, settings = load_engine_parts(bundle, threads, batch_size)

    async def run() -> float:
        engine = Engine(runtime, settings, Metrics())
        engine.start()
        t0 = time.perf_counter()
        answers = await score_inputs(engine, inputs, batch_size)
        elapsed = time.perf_counter() - t0
        assert not any(isinstance(a, str) for a in answers)
        await engine.drain(5.0)
        return len(inputs) / elapsed

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input", type=Path)
    parser.add_argument("--model", default="nli-attconv-advanced")
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--columns", default="premise=sentence1,hypothesis=sentence2")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from scoring.files import score_file

    bundle = args.repository / args.model
    columns = dict(part.split("=", 1) for part in args.columns.split(",") if part)
    rows = [json.loads(line) for line in args.input.read_text(encoding="utf-8").splitlines() if line.strip()]
    from core.bundle import load_bundle
    from core.tasks import TASKS

    fields = TASKS[load_bundle(bundle).config.task].field_names
    inputs = [SimpleNamespace(**{f: row[columns.get(f, f)] for f in fields}) for row in rows]
    engine_rates, score_rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            engine_rates.append(engine_items_per_s(bundle, inputs, args.batch_size, args.threads))
            output = Path(tmp) / f"out-{r}{args.input.suffix}"
            t0 = time.perf_counter()
            summary = score_file(args.input, output, bundle, columns=columns, batch_size=args.batch_size,
                                 threads=args.threads, prefix="pred_", progress_bar=False)
            elapsed = time.perf_counter() - t0  # the whole command's work: loading and warm-up included
            score_rates.append(summary.rows_read / elapsed)
            print(json.dumps({"round": r, "engine_items_per_s": round(engine_rates[-1], 1),
                              "score_rows_per_s": round(score_rates[-1], 1),
                              "score_rows_per_s_after_warmup": round(summary.rows_read / summary.seconds, 1)}),
                  flush=True)
    engine, scored = statistics.median(engine_rates), statistics.median(score_rates)
    print(json.dumps({"rows": len(inputs), "model": args.model, "batch_size": args.batch_size,
                      "threads": args.threads, "engine_items_per_s": round(engine, 1),
                      "score_rows_per_s": round(scored, 1), "ratio": round(scored / engine, 3)}))


if __name__ == "__main__":
    main()
