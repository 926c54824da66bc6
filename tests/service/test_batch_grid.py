"""CUDA support checked on CPU: the CUDA provider options handed to onnxruntime, DEVICE=cuda refusing a silent
CPU fallback, and the batch grid (batches padded in the batch dimension to 1, 2, 4, ... max batch
size as well as in length): a row's answer does not depend on the padding rows, they never reach
an answer, and under random mixed traffic onnxruntime sees grid shapes only."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import onnxruntime as ort
import pytest

from tests.bundles import CORPUS, record_feed_shapes, running_app
from service.inference import runtime as runtime_module
from service.inference.runtime import CPU, CUDA, DeviceUnavailable, ModelRuntime, batch_grid, requested_providers
from service.settings import DEFAULT_MODEL_REPOSITORY, Settings

WORDS = sorted({w for line in CORPUS for w in line.split()})
REAL_SESSION = ort.InferenceSession


def test_batch_grid_sizes():
    assert batch_grid(32) == [1, 2, 4, 8, 16, 32]
    assert batch_grid(48) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_grid(1) == [1]


def test_cuda_options_from_settings(monkeypatch):
    assert Settings().cuda_provider_options() == {
        "device_id": "0", "use_tf32": "0", "cudnn_conv_algo_search": "DEFAULT", "arena_extend_strategy": "kNextPowerOfTwo"}
    monkeypatch.setenv("ATTSERVE_CUDA_USE_TF32", "true")
    monkeypatch.setenv("ATTSERVE_CUDA_CONV_ALGO_SEARCH", "HEURISTIC")
    monkeypatch.setenv("ATTSERVE_CUDA_DEVICE_ID", "3")
    monkeypatch.setenv("ATTSERVE_CUDA_ARENA_EXTEND_STRATEGY", "kSameAsRequested")
    monkeypatch.setenv("ATTSERVE_CUDA_MEM_LIMIT", str(2 << 30))
    assert Settings().cuda_provider_options() == {
        "device_id": "3", "use_tf32": "1", "cudnn_conv_algo_search": "HEURISTIC",
        "arena_extend_strategy": "kSameAsRequested", "gpu_mem_limit": str(2 << 30)}
    monkeypatch.setenv("ATTSERVE_CUDA_CONV_ALGO_SEARCH", "FASTEST")
    with pytest.raises(ValueError):
        Settings()


def test_batch_grid_default_follows_the_provider():
    assert Settings().batch_grid_for(CUDA) is True
    assert Settings().batch_grid_for(CPU) is False
    assert Settings(batch_grid=True).batch_grid_for(CPU) is True
    assert Settings(batch_grid=False).batch_grid_for(CUDA) is False


class _Capture:
    """Stands in for ort.InferenceSession: records what it was handed and opens the real
    session on the CPU, as onnxruntime-gpu does when the CUDA libraries are missing."""

    calls: list = []

    def __new__(cls, path, sess_options=None, providers=None):
        cls.calls.append(providers)
        return REAL_SESSION(path, sess_options=sess_options, providers=[CPU])


def test_cuda_options_reach_onnxruntime_and_a_cpu_fallback_is_refused(service_bundles, monkeypatch):
    monkeypatch.setattr(runtime_module.ort, "InferenceSession", _Capture)
    _Capture.calls = []
    options = Settings(cuda_conv_algo_search="HEURISTIC", cuda_mem_limit=1 << 30).cuda_provider_options()
    with pytest.raises(DeviceUnavailable, match="CUDAExecutionProvider requested but onnxruntime runs it on CPU"):
        ModelRuntime.load(service_bundles / "nli", [CUDA, CPU], 1, options)
    assert _Capture.calls == [[(CUDA, {"device_id": "0", "use_tf32": "0", "cudnn_conv_algo_search": "HEURISTIC",
                                       "arena_extend_strategy": "kNextPowerOfTwo", "gpu_mem_limit": str(1 << 30)}),
                               CPU]]
    # the CPU path hands no CUDA options
    _Capture.calls = []
    runtime = ModelRuntime.load(service_bundles / "nli", [CPU], 1, options)
    assert _Capture.calls == [[CPU]] and runtime.provider == CPU and runtime.provider_options == {}


def test_loading_quiets_onnxruntime_process_logger(service_bundles, monkeypatch):
    """The CUDA EP writes its "Conv ... running in Fallback mode" warnings to onnxruntime's
    process-wide logger, not the session's: 46,052 lines over tests/deploy/test_gpu.py on an H200."""
    severities: list[int] = []
    monkeypatch.setattr(runtime_module.ort, "set_default_logger_severity", severities.append)
    ModelRuntime.load(service_bundles / "nli", [CPU], 1)
    assert severities == [3]  # errors and fatal only, as the session's log_severity_level


@pytest.mark.skipif(CUDA in ort.get_available_providers(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_fails_naming_the_provider():
    with pytest.raises(DeviceUnavailable, match="offers no CUDAExecutionProvider"):
        requested_providers("cuda")


def test_models_list_the_options_grid_and_warmup(service_bundles):
    async def models(**settings):
        async with running_app(Settings(model_repository=service_bundles, models=["nli", "fever"], **settings)) as (_, c):
            return {m["name"]: m for m in (await c.get("/v1/models")).json()["models"]}

    cpu = asyncio.run(models())
    assert cpu["nli"]["provider"] == CPU and cpu["nli"]["provider_options"] == {}
    assert cpu["nli"]["batch_grid"] is None and cpu["nli"]["warmup"]["shapes"] > 0
    grid = asyncio.run(models(batch_grid=True, max_batch_size=16))
    for name in ("nli", "fever"):
        assert grid[name]["batch_grid"] == [1, 2, 4, 8, 16]
        report = grid[name]["warmup"]
        assert report["batch_grid"] == [1, 2, 4, 8, 16] and report["seconds"] > 0
    # nli: premise buckets 8, 16, 24 x hypothesis 8, 16, x 5 batch sizes (16384 tokens hold 16 of any)
    assert grid["nli"]["warmup"]["shapes"] == 3 * 2 * 5
    # fever: claim 8, 16 x evidence count 1, 2, 4, 5 x evidence length 8, 16, 20, x 5 batch sizes
    assert grid["fever"]["warmup"]["shapes"] == 2 * 4 * 3 * 5


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _item(runtime: ModelRuntime, rng: random.Random):
    from service.inference.tasks import encode
    from types import SimpleNamespace

    from core.tasks import TASKS

    # a text per field; a list field (evidence, texts) 1-5 of them
    x = SimpleNamespace(**{f.name: [_text(rng, 1, 25) for _ in range(rng.randint(1, 5))] if f.many else _text(rng, 1, 30)
                           for f in TASKS[runtime.config.task].fields})
    return encode(runtime, [x])[0].item


def _close(a, b) -> None:
    """Equal structure; numbers within one unit of the 4th decimal explanations are rounded to."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _close(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, float):
        assert abs(a - b) <= 1.01e-4
    else:
        assert a == b


@pytest.mark.parametrize("name", ["nli", "fever", "sentiment"])
def test_padding_rows_do_not_change_a_row(service_bundles, name):
    runtime = ModelRuntime.load(service_bundles / name, [CPU], 1)
    rng = random.Random(7)
    items = [_item(runtime, rng) for _ in range(5)]
    # no grid: one row, no padding row; with explanations (row-major B x K outputs for /verify)
    alone = [runtime.run_call([item], [0]).item(0) for item in items]
    runtime.use_batch_grid(32)
    seen = []
    run = runtime.run
    runtime.run = lambda feeds, explain=False: (seen.append({k: v.shape for k, v in feeds.items()}), run(feeds, explain))[1]
    for k in range(5):  # item k alone in a grid batch of 8 whose other rows are other items and padding
        batch = [items[k]] + [it for j, it in enumerate(items) if j != k]
        together = runtime.run_call(batch, list(range(5))).items()
        assert len(together) == 5 and all(out.explanation for out in together)
        got, want = together[0], alone[k]
        if want.logits is not None:  # a reranker has per-text scores only
            assert np.abs(got.logits - want.logits).max() <= 1e-6
        assert np.abs(np.asarray(got.probs) - np.asarray(want.probs)).max() <= 1e-6
        assert got.label_index == want.label_index
        _close(got.explanation, want.explanation)
        if want.per_text is not None:
            assert len(got.per_text) == len(want.per_text)
            assert np.abs(np.asarray(got.per_text) - np.asarray(want.per_text)).max() <= 1e-6
    assert all(shape[0] == 8 for feeds in seen for shape in feeds.values())  # 5 rows padded to 8


def _body(name: str, rng: random.Random) -> tuple[str, dict]:
    n = rng.choice([1, 1, 1, 2, 3, 5, 7, 12, 20])
    if name == "nli":
        inputs = [{"premise": _text(rng, 1, 30), "hypothesis": _text(rng, 1, 20)} for _ in range(n)]
        path = "/entailment"
    elif name == "fever":
        inputs = [{"claim": _text(rng, 1, 18), "evidence": [_text(rng, 1, 25) for _ in range(rng.randint(1, 5))]}
                  for _ in range(n)]
        path = "/verify"
    else:
        inputs = [{"text": _text(rng, 1, 40)} for _ in range(n)]
        path = "/classify"
    return path, ({**inputs[0], "model": name} if n == 1 else {"inputs": inputs, "model": name})


def _traffic_shapes(service_bundles, grid: bool) -> tuple[dict, dict, int]:
    """Random mixed traffic (three tasks, 1-20 inputs a request, random lengths) through the
    service; per model, the distinct input shapes fed to onnxruntime, and the grid's shapes."""
    names = ["nli", "fever", "sentiment"]
    settings = Settings(model_repository=service_bundles, models=names, batch_grid=grid, max_batch_size=16,
                        max_batch_tokens=2048)

    async def scenario():
        async with running_app(settings) as (app, client):
            seen: dict[str, set] = {name: set() for name in names}
            allowed = {}
            for name in names:
                rt = app.state.service.models[name].runtime
                rt.use_batch_grid(16)  # the grid of these settings (off or on, the shapes it allows)
                allowed[name] = rt.grid_feed_shapes(16, 2048)
                rt.use_batch_grid(16 if grid else None)
                record_feed_shapes(rt, seen[name])
            rng = random.Random(11)
            answered = 0
            for _ in range(6):  # waves of concurrent requests, so batches of every size form
                bodies = [_body(rng.choice(names), rng) for _ in range(24)]
                responses = await asyncio.gather(*(client.post(p, json=b) for p, b in bodies))
                assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
                answered += len(responses)
            return seen, allowed, answered

    return asyncio.run(scenario())


def test_random_mixed_traffic_feeds_grid_shapes_only(service_bundles):
    seen, allowed, answered = _traffic_shapes(service_bundles, grid=True)
    assert answered == 144 and {name for name, shapes in seen.items() if shapes} == {"nli", "fever", "sentiment"}
    for name, shapes in seen.items():
        outside = shapes - allowed[name]
        assert not outside, f"{name}: shapes outside the grid: {sorted(outside)}"
        assert {s[0][0] for s in shapes} <= {1, 2, 4, 8, 16}
    # without the grid the same traffic gives batch sizes off the grid: the check above bites
    seen_off, allowed_off, _ = _traffic_shapes(service_bundles, grid=False)
    assert any(shapes - allowed_off[name] for name, shapes in seen_off.items())



SHIPPED = sorted(p.name for p in DEFAULT_MODEL_REPOSITORY.glob("*") if (p / "config.json").is_file()
                 and not p.name.startswith("."))


@pytest.mark.parametrize("name", SHIPPED)
def test_padding_rows_do_not_change_a_row_of_a_shipped_model(name):
    """The same on every bundled model (architectures the test bundles do not cover: ABCNN-3,
    ACT, the advanced AttConv, FEVER verification)."""
    runtime = ModelRuntime.load(DEFAULT_MODEL_REPOSITORY / name, [CPU], 1)
    rng = random.Random(3)
    items = [_item(runtime, rng) for _ in range(3)]
    alone = [runtime.run_call([item]).item(0) for item in items]
    runtime.use_batch_grid(32)
    for k in range(3):
        together = runtime.run_call([items[k]] + [it for j, it in enumerate(items) if j != k]).items()  # 3 rows -> 4
        got, want = together[0], alone[k]
        if want.logits is not None:  # a reranker has per-text scores only
            assert np.abs(got.logits - want.logits).max() <= 1e-6
        if want.per_text is not None:
            assert np.abs(np.asarray(got.per_text) - np.asarray(want.per_text)).max() <= 1e-6
