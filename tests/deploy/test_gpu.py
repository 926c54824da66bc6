"""The service on a GPU (onnxruntime-gpu + a CUDA device): skipped where either is missing,
which includes CI. Run on a GPU machine with `pytest tests/deploy/test_gpu.py`.

On the bundled models: every session really runs on CUDAExecutionProvider (reported by
/v1/models and the attserve_model_info metric: onnxruntime #23372 is a silent CPU fallback),
the IO-binding path gives the CPU answers (scores within 1e-4: cuDNN may pick other
convolution algorithms), and answers do not depend on what else is in the GPU batch (TF32 off,
the default ATTSERVE_CUDA_USE_TF32=false). The CUDA options in force are the settings'
onnxruntime sees the batch grid's shapes only, and ATTSERVE_WORKERS=2 serves from CUDA.
"""

from __future__ import annotations

import asyncio

import numpy as np
import onnxruntime as ort
import pytest

from tests.bundles import metric_samples, record_feed_shapes, running_app
from service.inference.runtime import CUDA, batch_grid
from service.settings import DEFAULT_MODEL_REPOSITORY, Settings

MODELS = ["snli-attconv-light", "fever-attconv", "bbc-act"]

pytestmark = pytest.mark.skipif(
    CUDA not in ort.get_available_providers() or not all((DEFAULT_MODEL_REPOSITORY / m).is_dir() for m in MODELS),
    reason="needs onnxruntime-gpu with a CUDA device, and the bundled models",
)

WORDS = ("a man woman dog child is are playing running sleeping outside inside the park street "
         "with red blue ball guitar music food eating two people near water").split()


def requests(seed: int = 0) -> list[tuple[str, dict]]:
    """Mixed endpoints and lengths, so GPU batches pad items to longer neighbours."""
    rng = np.random.default_rng(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(lo, hi))))

    out = []
    for i in range(60):
        kind = i % 3
        if kind == 0:
            out.append(("/entailment", {"premise": text(3, 40), "hypothesis": text(2, 12), "model": MODELS[0]}))
        elif kind == 1:
            evidence = [text(3, 30) for _ in range(int(rng.integers(1, 6)))]
            out.append(("/verify", {"claim": text(2, 12), "evidence": evidence, "model": MODELS[1]}))
        else:
            out.append(("/classify", {"text": text(5, 300), "model": MODELS[2]}))
    return out


def mean_batch(metrics: str) -> float:
    count = sum(metric_samples(metrics, "attserve_batch_size_count").values())
    return sum(metric_samples(metrics, "attserve_batch_size_sum").values()) / max(count, 1.0)


def vector(answer: dict) -> np.ndarray:
    return np.asarray(list(answer["scores"].values()) + answer.get("evidence_scores", []))


async def answers(settings: Settings, concurrent: bool) -> tuple[list[dict], str, dict]:
    async with running_app(settings) as (app, client):
        if concurrent:
            responses = await asyncio.gather(*(client.post(path, json=body) for path, body in requests()))
        else:
            responses = [await client.post(path, json=body) for path, body in requests()]
        assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
        models = (await client.get("/v1/models")).json()
        metrics = (await client.get("/metrics")).text
        return [r.json() for r in responses], metrics, models


def test_bundled_models_run_on_cuda_and_match_cpu():
    base = dict(models=MODELS, max_batch_size=32, max_batch_delay_ms=20)
    cpu_solo, _, _ = asyncio.run(answers(Settings(device="cpu", **{**base, "max_batch_size": 1}), concurrent=False))
    gpu_batched, metrics, models = asyncio.run(answers(Settings(device="cuda", **base), concurrent=True))

    providers = {m["name"]: m["provider"] for m in models["models"]}
    assert providers == {m: CUDA for m in MODELS}
    info = metric_samples(metrics, "attserve_model_info")
    assert {dict(labels)["provider"] for labels in info} == {CUDA}
    assert mean_batch(metrics) > 1.0, "no batch of more than one item formed"

    worst = max(float(np.abs(vector(g) - vector(c)).max()) for g, c in zip(gpu_batched, cpu_solo))
    assert worst <= 1e-4, f"GPU batched vs CPU solo: max score diff {worst:.2e}"
    assert [g["label"] for g in gpu_batched] == [c["label"] for c in cpu_solo]


def test_gpu_answers_do_not_depend_on_the_batch():
    base = dict(models=MODELS, device="cuda", max_batch_delay_ms=20)
    solo, _, _ = asyncio.run(answers(Settings(max_batch_size=1, **base), concurrent=False))
    batched, metrics, _ = asyncio.run(answers(Settings(max_batch_size=32, **base), concurrent=True))
    assert mean_batch(metrics) > 1.0, "no batch of more than one item formed"
    worst = max(float(np.abs(vector(b) - vector(s)).max()) for b, s in zip(batched, solo))
    assert worst <= 1e-5, f"GPU solo vs batched: max score diff {worst:.2e}"


def test_cuda_options_in_force_and_the_grid():
    settings = Settings(models=MODELS, device="cuda", max_batch_size=32, max_batch_delay_ms=20)

    async def scenario():
        async with running_app(settings) as (app, client):
            seen: dict[str, set] = {name: set() for name in MODELS}
            allowed = {}
            for name in MODELS:
                rt = app.state.service.models[name].runtime
                allowed[name] = rt.grid_feed_shapes(settings.max_batch_size, settings.max_batch_tokens)
                record_feed_shapes(rt, seen[name])
            responses = await asyncio.gather(*(client.post(path, json=body) for path, body in requests(1)))
            assert all(r.status_code == 200 for r in responses)
            return seen, allowed, (await client.get("/v1/models")).json()

    seen, allowed, models = asyncio.run(scenario())
    for m in models["models"]:
        assert m["provider"] == CUDA
        assert m["provider_options"]["use_tf32"] == "0"
        assert m["provider_options"]["cudnn_conv_algo_search"] == "DEFAULT"
        assert m["provider_options"]["device_id"] == "0"
        assert m["batch_grid"] == batch_grid(32) and m["warmup"]["shapes"] > 0
    for name, shapes in seen.items():
        assert shapes <= allowed[name], f"{name}: shapes outside the grid: {sorted(shapes - allowed[name])}"


def test_workers_on_cuda(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from service.settings import DEFAULT_MODEL_REPOSITORY

    from bench.harness import ServiceProcess

    server = ServiceProcess(DEFAULT_MODEL_REPOSITORY, tmp_path / "service.log", workers=2, device="cuda",
                            models=MODELS[0])
    server.env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    try:
        server.start(timeout_s=300)
        body = {"premise": "a man is playing a guitar", "hypothesis": "a person plays music"}

        def post(_: int) -> dict:
            r = httpx.post(f"{server.base}/entailment", json=body, headers={"connection": "close"}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, range(64)))
        assert len({a["label"] for a in answers}) == 1
        scores = np.array([list(a["scores"].values()) for a in answers])
        assert float(np.abs(scores - scores[0]).max()) <= 1e-5  # every worker, every batch: one answer
        for _ in range(4):  # whichever worker answers
            m = httpx.get(f"{server.base}/v1/models", timeout=10).json()["models"][0]
            assert m["provider"] == CUDA and m["provider_options"]["use_tf32"] == "0"
    finally:
        if server.proc is not None:
            server.terminate(timeout_s=60)
