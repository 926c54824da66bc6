"""In-process measurements, run as their own pinned process (`python -m bench.engine SPEC`,
SPEC a JSON file; prints `BENCH_JSON {...}`), so the parent's imports and threads do not
share the measured core.

- engine ceiling: the service's own runtime (service.inference.runtime.ModelRuntime: same session
  options, length buckets and padding) fed full batches of one bucket shape, encoded by the
  service's own request encoder: what the batcher could reach with no HTTP and no waiting.
- engine requests: the service's engine (service.inference.engine.Engine: checks, tokenizing in the
  inference thread, batching in arrival order, planned graph calls, rendered answers) fed the
  HTTP bench's own request bodies by N concurrent in-process callers: the service's code with
  no HTTP in front, so service / engine-requests is what HTTP, JSON and validation cost.
- raw session: onnxruntime's `session.run` alone on the 32-input request bodies of
  batch.jsonl, each request one batch, tokenized and padded ahead into the graph calls the
  service's runtime plans for it: the figure issue 57 compares 32-pair requests with.
- onnxruntime vs PyTorch eager on identical padded batches (training.batching.encode_examples).
- ACT vs the Transformer baseline at the paper's settings: parameters and time per batch.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

# ACT paper section 3.3 settings (Yelp F.: 5 classes); word embeddings 300-d.
PAPER_SETTINGS = {"num_labels": 5, "embedding_dim": 300}
PAPER_VOCAB = 30_000  # the speed test's vocabulary; parameter figures exclude word embeddings
ACT_BATCH = 100


def timed(fn: Callable[[], object], seconds: float, min_repeats: int = 3) -> list[float]:
    """Wall seconds of repeated calls of `fn`, for at least `seconds` and `min_repeats` calls."""
    durations: list[float] = []
    end = time.perf_counter() + seconds
    while len(durations) < min_repeats or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        durations.append(time.perf_counter() - t0)
    return durations


def summary_ms(durations: list[float]) -> dict:
    return {"median_ms": round(1000 * statistics.median(durations), 3),
            "mean_ms": round(1000 * statistics.fmean(durations), 3), "repeats": len(durations)}


def load_runtime(bundle: Path, threads: int, device: str = "cpu"):
    """The service's runtime of `bundle`: on the CPU, or (device "cuda") on CUDA with the
    service's default CUDA provider options (service.settings)."""
    from service.inference import runtime
    from service.settings import Settings

    return runtime.load_runtime(bundle, Settings(device=device), threads)


def service_items(runtime, examples: list) -> list:
    """Examples -> the batcher's items, through the service's own request encoder."""
    from service.inference.tasks import encode

    return [e.item for e in encode(runtime, examples)]


def engine_ceiling(runtime, examples: list, batch_sizes: list[int], seconds: float) -> dict:
    """Items per second of `runtime.infer` on full batches of one bucket shape each."""
    items = service_items(runtime, examples)
    by_shape: dict[tuple, list] = {}
    for item in items:
        by_shape.setdefault(item.shape, []).append(item)
    runtime.warmup(max(batch_sizes), 1 << 30)
    out = {}
    for size in batch_sizes:
        batches = [group[i : i + size] for group in by_shape.values() for i in range(0, len(group), size)]
        done = 0
        t0 = time.perf_counter()
        while True:  # whole passes over the examples, so the mix of shapes is the test set's
            for batch in batches:
                runtime.run_call(batch)
            done += len(items)
            if time.perf_counter() - t0 >= seconds:
                break
        elapsed = time.perf_counter() - t0
        out[str(size)] = {"batch_size": size, "items_per_s": round(done / elapsed, 2),
                          "ms_per_batch": round(1000 * elapsed / (done / len(items) * len(batches)), 3),
                          "items": done, "seconds": round(elapsed, 3)}
    return out


def queue_room(concurrency: int) -> int:
    """A queue that holds every item of `concurrency` callers of 32-input requests (the default
    4,096 holds 128): the bench measures throughput, not shedding."""
    from bench.workloads import BATCH_INPUTS

    return max(4096, concurrency * BATCH_INPUTS)


def engine_requests(runtime, bodies: Path, concurrencies: list[int], seconds: float,
                    max_batch_size: int, max_batch_delay_ms: float) -> dict:
    """Items per second of `Engine.submit` on `runtime` at each concurrency, for single-item and
    32-item requests (the bodies of single.jsonl and batch.jsonl, parsed beforehand), on the
    event loop the service runs (uvloop), with the service's settings as the bench starts it
    (warmed up again under them: the ceiling's warm-up used its own batch sizes)."""
    import asyncio
    from types import SimpleNamespace

    from service.inference.engine import Engine, warm_up
    from service.metrics import Metrics
    from service.settings import Settings

    settings = Settings(model_repository=[runtime.bundle.path.parent], max_batch_size=max_batch_size,
                        max_batch_delay_ms=max_batch_delay_ms, max_queue=queue_room(max(concurrencies)),
                        intra_op_threads=runtime.threads)
    warm_up(runtime, settings)

    def requests(name: str) -> list[list]:
        rows = [json.loads(line) for line in (bodies / name).read_text(encoding="utf-8").splitlines() if line]
        return [[SimpleNamespace(**x) for x in row.get("inputs", [row])] for row in rows]

    async def measure(engine: Engine, metrics: Metrics, form: str, inputs: list[list], concurrency: int,
                      duration: float) -> dict:
        loop = asyncio.get_running_loop()
        queue = itertools.cycle(inputs)
        batch = form != "single"
        labels = {"model": engine.name}
        batches0 = metrics.registry.get_sample_value("attserve_batch_size_count", labels) or 0.0
        items0 = metrics.registry.get_sample_value("attserve_batch_size_sum", labels) or 0.0
        done = 0
        latencies: list[float] = []
        end = loop.time() + duration

        async def caller() -> None:
            nonlocal done
            while loop.time() < end:
                request = next(queue)
                t0 = time.perf_counter()  # uvloop's loop.time() counts whole milliseconds
                await engine.submit(request, deadline=loop.time() + 30.0, batch=batch)
                latencies.append(time.perf_counter() - t0)
                done += len(request)

        t0 = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        batches = (metrics.registry.get_sample_value("attserve_batch_size_count", labels) or 0.0) - batches0
        items = (metrics.registry.get_sample_value("attserve_batch_size_sum", labels) or 0.0) - items0
        latencies.sort()

        def percentile_ms(q: float) -> float | None:  # None: no request finished within the duration
            return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

        return {"concurrency": concurrency, "items_per_s": round(done / elapsed, 2),
                "requests_per_s": round(len(latencies) / elapsed, 2),
                "p50_ms": percentile_ms(0.5), "p99_ms": percentile_ms(0.99),
                "mean_batch_size": round(items / batches, 2) if batches else None, "seconds": round(elapsed, 3)}

    async def run_all() -> dict:
        metrics = Metrics()
        engine = Engine(runtime, settings, metrics)
        engine.start()
        out: dict[str, list] = {}
        for form, name in (("single", "single.jsonl"), ("batch32", "batch.jsonl")):
            inputs = requests(name)
            await measure(engine, metrics, form, inputs, max(concurrencies), seconds / 2)  # warm: shapes, allocator
            out[form] = [await measure(engine, metrics, form, inputs, c, seconds) for c in concurrencies]
        await engine.drain(5.0)
        return out

    try:
        import uvloop

        return uvloop.run(run_all())
    except ImportError:  # plain asyncio works, only slower
        return asyncio.run(run_all())


def raw_session(runtime, bodies: Path, seconds: float, max_batch_size: int, max_batch_delay_ms: float) -> dict:
    """Items per second of `session.run` alone on the 32-input requests of batch.jsonl (each
    request one batch, as the batcher forms them when requests arrive whole: at most
    max_batch_size items), tokenized by the service's encoder and padded into the graph calls
    `runtime.run_batch` plans for it, all ahead of the timing, after the service's own
    warm-up (which measures the call overhead the plan uses). Nothing but onnxruntime is timed:
    the service on the same bodies is compared with this (issue 57)."""
    from types import SimpleNamespace

    from service.inference.engine import warm_up
    from service.inference.runtime import plan_calls
    from service.settings import Settings

    settings = Settings(model_repository=[runtime.bundle.path.parent], max_batch_size=max_batch_size,
                        max_batch_delay_ms=max_batch_delay_ms, intra_op_threads=runtime.threads)
    warm_up(runtime, settings)
    rows = [json.loads(line) for line in (bodies / "batch.jsonl").read_text(encoding="utf-8").splitlines() if line]
    calls: list[dict] = []
    items_total = 0
    for row in rows:
        items = service_items(runtime, [SimpleNamespace(**x) for x in row["inputs"]])
        items_total += len(items)
        plan = plan_calls([item.shape for item in items], runtime.shape_tokens, runtime.call_overhead_tokens,
                          None if runtime.batch_sizes is None else runtime.rows)
        calls += [runtime.feeds([items[k] for k in call]) for call in plan]
    names, run = list(runtime.output_names), runtime.session.run
    for feeds in calls:  # once, untimed
        run(names, feeds)
    passes = 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    while True:  # whole passes over the requests
        for feeds in calls:
            run(names, feeds)
        passes += 1
        if time.perf_counter() - t0 >= seconds:
            break
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"items_per_s": round(passes * items_total / elapsed, 2), "requests": passes * len(rows),
            "cpu_seconds": round(cpu, 4),
            "graph_calls_per_request": round(len(calls) / len(rows), 3),
            "ms_per_request": round(1000 * elapsed / (passes * len(rows)), 4), "seconds": round(elapsed, 3)}


def ort_vs_torch(runtime, checkpoint: Path, examples: list, batch_sizes: list[int], seconds: float) -> dict:
    """Time per batch of the ONNX graph (onnxruntime) and of the checkpoint's PyTorch network
    (eager, inference mode) on the same padded id arrays."""
    import numpy as np
    import torch

    from training.batching import encode_examples
    from training.checkpoint import load_checkpoint

    network, _ = load_checkpoint(checkpoint)
    config = runtime.config
    out = {}
    for size in batch_sizes:
        arrays = [encode_examples(runtime.encoder, examples[i : i + size], config.max_lengths, config.max_evidence,
                                  task=config.task)
                  for i in range(0, len(examples) - size + 1, size)][:50]
        feeds = [dict(zip(config.inputs, a)) for a in arrays]
        tensors = [tuple(torch.from_numpy(x) for x in a) for a in arrays]
        with torch.inference_mode():  # same answers first: the comparison is of equal work
            gap = max(float(np.abs(runtime.run(f)[0] - network.logits_from_ids(*t).numpy()).max())
                      for f, t in zip(feeds[:3], tensors[:3]))
        ort_calls = itertools.cycle(feeds)
        torch_calls = itertools.cycle(tensors)

        def run_ort(calls=ort_calls) -> None:
            runtime.run(next(calls))

        def run_torch(calls=torch_calls) -> None:
            with torch.inference_mode():
                network.logits_from_ids(*next(calls))

        run_ort()  # first calls allocate
        run_torch()
        ort_t, torch_t = summary_ms(timed(run_ort, seconds)), summary_ms(timed(run_torch, seconds))
        out[str(size)] = {"batch_size": size, "onnxruntime": ort_t, "torch_eager": torch_t,
                          "speedup": round(torch_t["median_ms"] / ort_t["median_ms"], 3),
                          "max_abs_logit_diff": round(gap, 6)}
    return out


def act_vs_transformer(length: int, seconds: float) -> dict:
    """Parameters (without word embeddings, as the paper's 1.49M / 3.38M) and eager time per
    batch of 100 texts of `length` tokens, ACT vs the Transformer baseline at paper settings."""
    import torch

    from models import build_network

    torch.manual_seed(0)
    ids = torch.randint(1, PAPER_VOCAB, (ACT_BATCH, length))
    out = {}
    for name in ("act", "transformer"):
        network = build_network(name, vocab_size=PAPER_VOCAB, **PAPER_SETTINGS).eval()
        params = sum(p.numel() for p in network.parameters()) - network.embeddings.weight.numel()

        def forward(network=network) -> None:
            with torch.inference_mode():
                network.logits_from_ids(ids)

        forward()
        out[name] = {"parameters_without_word_embeddings": params,
                     "encoder_parameters": network.encoder_parameter_count(), **summary_ms(timed(forward, seconds))}
    out["settings"] = {**PAPER_SETTINGS, "model_dim": 300, "num_layers": 3, "num_heads": 6, "num_filters": 100,
                       "kernel_size": 3, "batch": ACT_BATCH, "length": length}
    out["params_ratio"] = round(out["act"]["parameters_without_word_embeddings"]
                                / out["transformer"]["parameters_without_word_embeddings"], 3)
    out["speedup"] = round(out["transformer"]["median_ms"] / out["act"]["median_ms"], 3)
    out["paper"] = {"params_ratio": 0.44, "speedup": 2.7}
    return out


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    threads = spec["threads"]
    if spec.get("torch"):
        import torch

        torch.set_num_threads(threads)
    result: dict = {"threads": threads}
    if "bundle" in spec:
        from bench.workloads import read_examples

        examples = read_examples(Path(spec["examples"]))
        runtime = load_runtime(Path(spec["bundle"]), threads, spec.get("device", "cpu"))
        if spec.get("raw_session"):  # alone: bench.ab's raw-session arm
            r = spec["raw_session"]
            print("BENCH_JSON " + json.dumps({"raw_session": raw_session(
                runtime, Path(spec["examples"]), spec["seconds"], r["max_batch_size"], r["max_batch_delay_ms"])}),
                flush=True)
            return
        result["ceiling"] = engine_ceiling(runtime, examples, spec["batch_sizes"], spec["seconds"])
        if spec.get("requests"):
            r = spec["requests"]
            result["requests"] = engine_requests(runtime, Path(spec["examples"]), r["concurrencies"], spec["seconds"],
                                                 r["max_batch_size"], r["max_batch_delay_ms"])
        if spec.get("checkpoint"):
            result["ort_vs_torch"] = ort_vs_torch(runtime, Path(spec["checkpoint"]), examples,
                                                  spec["compare_batch_sizes"], spec["seconds"])
    if spec.get("act_length"):
        result["act_vs_transformer"] = act_vs_transformer(spec["act_length"], spec["seconds"])
    print("BENCH_JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
