"""`attserve bench --device cuda`: the service on a GPU against its own engine and the
CPU provider of the same host, written to bench-results/gpu/ (results.json, results.md).

    attserve bench --device cuda [--model snli-attconv-light:snli] [--gpu-workers 8] [--duration 10]

It covers, for the first --model (default snli-attconv-light on SNLI test pairs):
  * engine ceiling: the service's runtime on CUDA with the batch grid on, fed full batches of
    one bucket shape at each grid size (bench.engine.engine_ceiling): grid shapes only;
  * engine requests: the service's Engine in process on the bench's own request bodies,
    single-item and 32-input, at c=64 and c=256 (bench.engine.engine_requests);
  * the service over HTTP (wrk, bench.loadgen), single-item and 32-input requests at c=64 and
    c=256, with 1 and N workers, on CUDA and, as the baseline, on the CPU provider of the same
    host with the same workers.

Where onnxruntime offers no CUDAExecutionProvider it stops before loading anything, naming it
(`require_cuda`). Nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

CONCURRENCIES = (64, 256)
FORMS = (("single", "single.jsonl", 1), ("batch32", "batch.jsonl", 32))


class CudaMissing(RuntimeError):
    """This onnxruntime or machine has no CUDAExecutionProvider."""


def require_cuda() -> None:
    import onnxruntime as ort

    from service.inference.runtime import CUDA

    available = ort.get_available_providers()
    if CUDA not in available:
        raise CudaMissing(f"attserve bench --device cuda: onnxruntime {ort.__version__} offers no {CUDA} "
                          f"(available: {', '.join(available)}); install onnxruntime-gpu on a machine with an NVIDIA "
                          f"GPU (../shared/tools/gpu/pack.sh builds the payload), or bench the CPU without --device")


def plan(workers: int, device: str = "cuda", concurrencies: tuple[int, ...] = CONCURRENCIES) -> list[dict]:
    """The HTTP arms: (device, workers, form, concurrency) in the order they run."""
    return [{"device": d, "workers": n, "form": form, "concurrency": c}
            for d in (device, "cpu") for n in sorted({1, workers}) for form, _, _ in FORMS for c in concurrencies]


def _service_spec(repository: Path, model: str, device: str, workers: int, max_batch_size: int, concurrency: int):
    from bench import servers
    from bench.engine import queue_room

    port = servers.free_port()
    if workers == 1:
        spec = servers.service_spec(port, repository, model, max_batch_size=max_batch_size, max_batch_delay_ms=0.0,
                                    intra_op_threads=1)
    else:
        spec = servers.service_workers_spec(port, repository, model, workers=workers, max_batch_size=max_batch_size,
                                            max_batch_delay_ms=0.0)
    spec.env["ATTSERVE_DEVICE"] = device
    spec.env["ATTSERVE_MAX_QUEUE"] = str(queue_room(concurrency))
    return spec


def run(out: Path, repository: Path, model: str, dataset: str, workers: int, duration: int, examples: int,
        max_batch_size: int = 256, device: str = "cuda", concurrencies: tuple[int, ...] = CONCURRENCIES) -> dict:
    """Every figure of the module docstring; writes out/results.json and out/results.md.
    `device` "cpu" runs the same code path with the CPU provider in the GPU's place, and smaller
    `concurrencies`, as a smoke run on a machine without a GPU."""
    if device == "cuda":
        require_cuda()
    from bench import loadgen, servers
    from bench.engine import engine_ceiling, engine_requests, load_runtime
    from bench.peers import is_failed
    from bench.workloads import ENDPOINT_OF_TASK, test_examples, write_bodies
    from service.inference.runtime import batch_grid

    started = time.time()
    work = out / "work"
    bundle = repository / model
    runtime = load_runtime(bundle, 1, device=device)
    task = runtime.config.task
    chosen = test_examples(dataset, runtime.config.max_evidence, examples)
    write_bodies(chosen, work / "bodies")
    runtime.use_batch_grid(max_batch_size)
    results: dict = {"model": model, "dataset": dataset, "workers": workers, "duration_s": duration,
                     "provider": runtime.provider, "provider_options": runtime.provider_options,
                     "batch_grid": runtime.batch_sizes}
    results["engine_ceiling"] = engine_ceiling(runtime, chosen, batch_grid(max_batch_size), duration)
    results["warmup"] = runtime.warmup_report
    save(out, results)
    results["engine_requests"] = engine_requests(runtime, work / "bodies", list(concurrencies), duration,
                                                 max_batch_size, 0.0)
    save(out, results)
    http = []
    for arm in plan(workers, device, concurrencies):
        _, body_file, per_request = next(f for f in FORMS if f[0] == arm["form"])
        spec = _service_spec(repository, model, arm["device"], arm["workers"], max_batch_size, arm["concurrency"])
        with servers.Server(spec, None, work / "logs") as server:
            loadgen.closed_loop(server.url, ENDPOINT_OF_TASK[task], work / "bodies" / body_file, arm["concurrency"], 2,
                                None, per_request)
            measured = loadgen.closed_loop(server.url, ENDPOINT_OF_TASK[task], work / "bodies" / body_file,
                                           arm["concurrency"], duration, None, per_request)
        http.append({**arm, **measured, "failed": is_failed(measured)})
        save(out, {**results, "service": http, "wall_s": round(time.time() - started, 1)})
    results["service"] = http
    results["wall_s"] = round(time.time() - started, 1)
    save(out, results)
    return results


def save(out: Path, results: dict) -> None:
    """Write what is measured so far: a run cut short (a lent machine's time limit) keeps its arms."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(markdown(results), encoding="utf-8")


def markdown(r: dict) -> str:
    lines = [f"# GPU bench: {r['model']} on {r['dataset']} ({r['provider']}, {r['provider_options']})", "",
             "| engine ceiling, batch | items/s | ms per batch |", "|---:|---:|---:|"]
    lines += [f"| {v['batch_size']} | {v['items_per_s']:,.0f} | {v['ms_per_batch']} |" for v in r["engine_ceiling"].values()]
    lines += ["", "| engine requests | c | items/s | p99 ms |", "|---|---:|---:|---:|"]
    lines += [f"| {form} | {x['concurrency']} | {x['items_per_s']:,.0f} | {x['p99_ms']} |"
              for form, runs in r.get("engine_requests", {}).items() for x in runs]
    lines += ["", "| service | workers | requests | c | items/s | p99 ms |", "|---|---:|---|---:|---:|---:|"]
    lines += [f"| {x['device']} | {x['workers']} | {x['form']} | {x['concurrency']} | {x.get('items_per_s', 0):,.0f} | "
              f"{x.get('latency_ms', {}).get('p99', '')} |" for x in r.get("service", [])]
    return "\n".join(lines) + "\n"
