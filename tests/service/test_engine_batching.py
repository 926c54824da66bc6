"""Token-budget batching: one queue in arrival order, a batch padded to its largest bucket.
A multi-input request of mixed lengths runs as one engine call when the budget allows, splits
when the token budget does not, and every answer equals its solo answer."""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest

from tests.bundles import CORPUS, metric_samples, running_app
from service.settings import Settings

WORDS = sorted({w for line in CORPUS for w in line.split()})


def _verify_inputs(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    return [{"claim": text(2, 14), "evidence": [text(1, 22) for _ in range(rng.randint(1, 5))]} for _ in range(n)]


async def _run(settings: Settings, body: dict, headers: dict | None = None) -> tuple[dict, int, float]:
    async with running_app(settings) as (app, client):
        r = await client.post("/verify", json=body)
        assert r.status_code == 200, r.text
        if headers is not None:
            headers.update(r.headers)
        text = (await client.get("/metrics")).text
        calls = sum(metric_samples(text, "attserve_batch_size_count").values())
        tokens = sum(metric_samples(text, "attserve_batch_tokens_sum").values())
        return r.json(), int(calls), tokens


def test_mixed_shape_request_runs_in_one_call_and_matches_solo(service_bundles):
    inputs = _verify_inputs(32)
    big = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=10**6, max_batch_delay_ms=0)
    headers = {}
    together, calls, _ = asyncio.run(_run(big, {"inputs": inputs}, headers))
    assert calls == 1  # per-shape queues ran this as many calls
    # 32 inputs, one batch: x-inference-time is that batch's time once, not once per input
    # (summed per input it would exceed the request's total time), and it fits in the total
    total, queue, inference = (float(headers[h]) for h in ("x-total-time", "x-queue-time", "x-inference-time"))
    assert inference > 0 and total >= queue + inference - 0.002, (total, queue, inference)
    solo = Settings(model_repository=service_bundles, max_batch_size=1, max_batch_delay_ms=0)
    for i in (0, 7, 19, 31):
        alone, _, _ = asyncio.run(_run(solo, inputs[i]))
        got, want = together["results"][i], alone
        assert got["label"] == want["label"]
        assert all(abs(got["scores"][k] - want["scores"][k]) < 1e-4 for k in want["scores"])
        assert all(abs(a - b) < 1e-4 for a, b in zip(got["evidence_scores"], want["evidence_scores"], strict=True))


def _token_histogram(settings: Settings, body: dict) -> dict[float, float]:
    """Cumulative counts of the /verify model's attserve_batch_tokens histogram: {le: count}."""
    async def scenario():
        async with running_app(settings) as (app, client):
            r = await client.post("/verify", json=body)
            assert r.status_code == 200, r.text
            return metric_samples((await client.get("/metrics")).text, "attserve_batch_tokens_bucket")
    samples = asyncio.run(scenario())
    return {float(dict(k)["le"]): v for k, v in samples.items() if dict(k)["model"] == "fever"}


def test_token_budget_splits_batches_and_bounds_padded_tokens(service_bundles):
    inputs = _verify_inputs(32)
    budget = 2048
    tight = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=budget, max_batch_delay_ms=0)
    _, calls, tokens = asyncio.run(_run(tight, {"inputs": inputs}))
    assert calls > 1  # the whole request padded to its largest item costs more than 2048 tokens
    assert tokens <= budget * calls


def test_tokenizing_runs_in_the_inference_thread_batched_across_requests(service_bundles, monkeypatch):
    """The event loop never tokenizes: every encode call runs on the model's inference thread,
    and concurrent requests are tokenized together (fewer encode calls than requests)."""
    import threading

    from core.tokenization import TextEncoder

    calls: list[tuple[str, int]] = []
    original = TextEncoder.encode

    def recording(self, texts, max_length, describe=None):
        calls.append((threading.current_thread().name, len(texts)))
        return original(self, texts, max_length, describe)

    monkeypatch.setattr(TextEncoder, "encode", recording)
    settings = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_delay_ms=0)
    requests = 24

    async def scenario():
        async with running_app(settings) as (app, client):
            calls.clear()  # warm-up does not tokenize, but be exact about what is counted
            bodies = [{"premise": f"a man plays guitar number {i}", "hypothesis": "a person makes music"}
                      for i in range(requests)]
            answers = await asyncio.gather(*(client.post("/entailment", json=b) for b in bodies))
            assert all(r.status_code == 200 for r in answers)

    asyncio.run(scenario())
    threads = {name for name, _ in calls}
    assert threads and all(name.startswith("ort-") for name in threads), threads
    texts = sum(n for _, n in calls)
    assert texts >= 2 * requests
    # two fields per entailment input: one encode per field per step; concurrent requests share steps
    assert len(calls) < 2 * requests, f"{len(calls)} encode calls for {requests} requests"


def test_every_batch_stays_within_a_small_token_budget(service_bundles):
    """Observed in the batch-tokens histogram (buckets are powers of two, so a budget of 1024 is
    a bucket edge): every batch is within the budget, none is a needless fragment. Catches a
    batcher that ignores max_batch_tokens (one batch of ~2-4k tokens), that counts the budget
    per item instead of per batch (same), or that checks it one item late (a batch over 1024);
    the lower bound catches one that splits far below the budget (e.g. one item per batch)."""
    inputs = _verify_inputs(32)
    budget = 1024
    tight = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=budget, max_batch_delay_ms=0)
    histogram = _token_histogram(tight, {"inputs": inputs})
    batches = histogram[float("inf")]
    assert batches >= 3, histogram  # 4 batches here, each over 512 tokens: more than 2 x 1024 in all
    assert histogram[float(budget)] == batches, f"a batch exceeded max_batch_tokens={budget}: {histogram}"
    # greedy filling: every batch but possibly the last is more than half the budget
    assert histogram[float(budget // 2)] <= 1, f"batches far below the budget: {histogram}"
    unlimited = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=10**6, max_batch_delay_ms=0)
    alone = _token_histogram(unlimited, {"inputs": inputs})
    assert alone[float("inf")] == 1 and alone[float(budget)] == 0, alone  # without the budget: one batch over 1024


# --- graph calls per batch (service.inference.runtime.plan_calls) ------------------------------------

def _plan_cost(calls, shapes, tokens, overhead):
    from service.inference.runtime import padded_shape

    total = 0.0
    for call in calls:
        shape = shapes[call[0]]
        for k in call[1:]:
            shape = padded_shape(shape, shapes[k])
        total += overhead + len(call) * tokens(shape)
    return total


def test_plan_calls_runs_short_items_apart_from_long_ones_when_that_costs_less():
    from service.inference.runtime import plan_calls

    tokens = sum  # a pair item costs premise + hypothesis padded tokens
    shapes = [(8, 8)] * 30 + [(176, 32)] * 2
    # one call pads 30 short items to 208 tokens each: 32 x 208 + overhead; apart: 30 x 16 + 2 x 208 + 2 overheads
    assert plan_calls(shapes, tokens, 100.0) == [list(range(30)), [30, 31]]
    assert plan_calls(shapes, tokens, 10_000.0) == [list(range(32))]
    assert plan_calls(shapes, tokens, float("inf")) == [list(range(32))]
    mixed = [(16, 8), (8, 8), (16, 8), (32, 16), (8, 8)]
    assert plan_calls(mixed, tokens, 0.0) == [[1, 4], [0, 2], [3]]  # one call per shape, cheapest first
    assert plan_calls([(8, 8)] * 3, tokens, 0.0) == [[0, 1, 2]]


def test_plan_calls_finds_the_cheapest_split_of_the_shapes_in_cost_order():
    """Against every split of the cost-sorted distinct shapes into contiguous runs (brute force)."""
    import itertools

    from service.inference.runtime import plan_calls

    rng = random.Random(5)
    tokens = lambda shape: shape[0] * shape[1] + shape[2]  # noqa: E731  (evidence slots x length + claim)
    for _ in range(200):
        shapes = [(rng.choice((1, 2, 4, 5)), rng.choice((8, 16, 32, 48)), rng.choice((8, 16, 32)))
                  for _ in range(rng.randint(1, 12))]
        overhead = rng.choice((0.0, 10.0, 60.0, 200.0, 1000.0))
        calls = plan_calls(shapes, tokens, overhead)
        assert sorted(k for call in calls for k in call) == list(range(len(shapes)))
        distinct = sorted(set(shapes), key=lambda shape: (tokens(shape), shape))  # plan_calls' order
        best = math.inf
        for cuts in itertools.product((False, True), repeat=len(distinct) - 1):
            runs, run = [], [distinct[0]]
            for shape, cut in zip(distinct[1:], cuts):
                if cut:
                    runs.append(run)
                    run = []
                run.append(shape)
            runs.append(run)
            candidate = [[k for k, s in enumerate(shapes) if s in r] for r in runs]
            best = min(best, _plan_cost(candidate, shapes, tokens, overhead))
        assert _plan_cost(calls, shapes, tokens, overhead) == pytest.approx(best)


def test_a_batch_split_into_calls_answers_and_explains_each_item_as_alone(service_bundles):
    """Split into one call per shape, every item's output (scores, evidence scores, and the
    explanation of exactly the rows that asked) equals its solo run."""
    import numpy as np

    from service.inference.runtime import CPU, ModelRuntime
    from service.inference.tasks import encode

    class Claim:
        def __init__(self, claim, evidence):
            self.claim, self.evidence = claim, evidence

    runtime = ModelRuntime.load(service_bundles / "fever", [CPU], 1)
    runtime.warmup(32, 1 << 20, call_overhead_tokens=0.0)
    assert runtime.call_overhead_tokens == 0.0
    inputs = [Claim(x["claim"], x["evidence"]) for x in _verify_inputs(20, seed=11)]
    explain = [i % 3 == 0 for i in range(len(inputs))]
    encoded = encode(runtime, inputs, explain)
    items = [e.item for e in encoded]
    rows = [i for i, flag in enumerate(explain) if flag]
    output, calls = runtime.run_batch(items, rows)
    outputs = output.items()
    assert len(calls) == len({item.shape for item in items}) > 1
    for i, (item, output) in enumerate(zip(items, outputs, strict=True)):
        alone = runtime.run_call([item], [0] if explain[i] else []).item(0)
        assert np.allclose(output.logits, alone.logits, atol=1e-5)
        assert np.allclose(output.per_text, alone.per_text, atol=1e-5)
        if explain[i]:
            assert output.explanation and output.explanation.keys() == alone.explanation.keys()
            assert json.dumps(output.explanation) == json.dumps(alone.explanation) or _close(output.explanation, alone.explanation)
        else:
            assert output.explanation is None


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return abs(a - b) < 1e-4
    return a == b


def test_the_service_measures_the_call_overhead_at_warm_up_and_counts_graph_calls(service_bundles):
    inputs = _verify_inputs(32, seed=4)

    async def scenario(settings: Settings) -> tuple[float, int, int, dict]:
        async with running_app(settings) as (app, client):
            overhead = app.state.service.models["fever"].runtime.call_overhead_tokens
            r = await client.post("/verify", json={"inputs": inputs})
            assert r.status_code == 200, r.text
            text = (await client.get("/metrics")).text
            batches = int(sum(metric_samples(text, "attserve_batch_size_count").values()))
            calls = int(sum(metric_samples(text, "attserve_graph_calls_total").values()))
            return overhead, batches, calls, r.json()

    base = dict(model_repository=service_bundles, models=["fever"], max_batch_size=32, max_batch_tokens=10**6)
    measured, _, _, _ = asyncio.run(scenario(Settings(**base)))
    assert 0 < measured < math.inf
    _, batches, calls, apart = asyncio.run(scenario(Settings(**base, call_overhead_tokens=0)))
    assert batches == 1 and calls > 1
    _, batches, calls, together = asyncio.run(scenario(Settings(**base, call_overhead_tokens=1e12)))
    assert batches == 1 and calls == 1
    assert _close(apart, together)
