"""Token-budget batching: one queue in arrival order, a batch padded to its largest bucket.
A multi-input request of mixed lengths runs as one engine call when the budget allows, splits
when the token budget does not, and every answer equals its solo answer."""

from __future__ import annotations

import asyncio
import random

from bundles import CORPUS, metric_samples, running_app
from service.settings import Settings

WORDS = sorted({w for line in CORPUS for w in line.split()})


def _verify_inputs(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    return [{"claim": text(2, 14), "evidence": [text(1, 22) for _ in range(rng.randint(1, 5))]} for _ in range(n)]


async def _run(settings: Settings, body: dict) -> tuple[dict, int, float]:
    async with running_app(settings) as (app, client):
        r = await client.post("/verify", json=body)
        assert r.status_code == 200, r.text
        text = (await client.get("/metrics")).text
        calls = sum(metric_samples(text, "attserve_batch_size_count").values())
        tokens = sum(metric_samples(text, "attserve_batch_tokens_sum").values())
        return r.json(), int(calls), tokens


def test_mixed_shape_request_runs_in_one_call_and_matches_solo(service_bundles):
    inputs = _verify_inputs(32)
    big = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=10**6, max_batch_delay_ms=0)
    together, calls, _ = asyncio.run(_run(big, {"inputs": inputs}))
    assert calls == 1  # per-shape queues ran this as many calls
    solo = Settings(model_repository=service_bundles, max_batch_size=1, max_batch_delay_ms=0)
    for i in (0, 7, 19, 31):
        alone, _, _ = asyncio.run(_run(solo, inputs[i]))
        got, want = together["results"][i], alone
        assert got["label"] == want["label"]
        assert all(abs(got["scores"][k] - want["scores"][k]) < 1e-4 for k in want["scores"])
        assert all(abs(a - b) < 1e-4 for a, b in zip(got["evidence_scores"], want["evidence_scores"], strict=True))


def test_token_budget_splits_batches_and_bounds_padded_tokens(service_bundles):
    inputs = _verify_inputs(32)
    budget = 2048
    tight = Settings(model_repository=service_bundles, max_batch_size=32, max_batch_tokens=budget, max_batch_delay_ms=0)
    _, calls, tokens = asyncio.run(_run(tight, {"inputs": inputs}))
    assert calls > 1
    assert tokens <= budget * calls


def test_tokenizing_runs_in_the_inference_thread_batched_across_requests(service_bundles, monkeypatch):
    """The event loop never tokenizes: every encode call runs on the model's inference thread,
    and concurrent requests are tokenized together (fewer encode calls than requests)."""
    import threading

    from service.tokenization import TextEncoder

    calls: list[tuple[str, int]] = []
    original = TextEncoder.encode

    def recording(self, texts, max_length):
        calls.append((threading.current_thread().name, len(texts)))
        return original(self, texts, max_length)

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
