"""The GPU training paths (training.acceleration, training.time_budget), exercised on CPU: which
precision and optimizer a device gets, batches padded by DataLoader workers, a bf16-autocast
checkpoint that still exports with parity and stays batch-invariant, and a hard time budget.
The speed itself is measured by bench/train_speed.py, not here."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

import training.time_budget
from core.tokenization import TextEncoder
from tests.unit.test_networks import outputs
from tests.unit.test_trainer import make_recipe, make_splits
from training.acceleration import autocast_dtype, batch_stream, fused_optimizer, loader_workers
from training.batching import encode_examples
from training.checkpoint import load_checkpoint
from training.examples import texts_of
from training.recipes import TrainSection
from training.time_budget import TimeBudget
from training.tokenizer import build_tokenizer
from training.trainer import EncodedExamples, TrainOptions, bucketed_batches, make_optimizer, train

pytestmark = pytest.mark.timeout(300)
SMALL_ATTCONV = {"embedding_dim": 16, "hidden_dim": 16, "head_hidden": 16, "dropout": 0.2}


def test_autocast_is_bf16_on_cuda_and_off_on_cpu_unless_asked():
    assert autocast_dtype("cpu") is None  # CPU training stays fp32 and bit-identical
    assert autocast_dtype("cuda", bf16_supported=True) is torch.bfloat16
    assert autocast_dtype("cuda", bf16_supported=False) is None  # an old GPU: fp32, not fp16
    assert autocast_dtype("cuda", "fp32", bf16_supported=True) is None
    assert autocast_dtype("cpu", "bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="does not support bf16"):
        autocast_dtype("cuda", "bf16", bf16_supported=False)
    with pytest.raises(ValueError, match="precision must be"):
        autocast_dtype("cuda", "fp16")


def test_the_fused_optimizer_is_chosen_for_adam_on_cuda_only():
    assert fused_optimizer("adam", "cuda") and fused_optimizer("adamw", "cuda")
    assert not fused_optimizer("adam", "cpu")
    assert not fused_optimizer("sgd", "cuda") and not fused_optimizer("adagrad", "cuda")
    params = [torch.nn.Parameter(torch.zeros(3))]
    cfg = TrainSection(optimizer="adam")
    assert not make_optimizer(params, cfg, "cpu").defaults.get("fused")


def test_loader_workers_only_on_cuda_and_leave_a_core():
    assert loader_workers("cpu", 16) == 0
    assert loader_workers("cuda", 16) == 4
    assert loader_workers("cuda", 2) == 1
    assert loader_workers("cuda", 1) == 0


def _encoded(task: str) -> EncodedExamples:
    splits = make_splits(task)
    encoder = TextEncoder(build_tokenizer(t for e in splits.train for t in texts_of(e)))
    limits = {"entailment": {"premise_ids": 16, "hypothesis_ids": 16},
              "verification": {"claim_ids": 16, "evidence_ids": 16}}[task]
    data = EncodedExamples.encode(encoder, splits.train, splits.labels, limits, 4 if task == "verification" else None, task)
    if task == "verification":
        assert data.evidence_targets is not None
    return data


@pytest.mark.parametrize("task", ["entailment", "verification"])
def test_worker_batches_equal_the_loop_batches_and_leave_torch_rng_alone(task):
    data = _encoded(task)
    batches = bucketed_batches(data.costs, 16, 4, np.random.default_rng(0))
    device = torch.device("cpu")
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    in_loop = list(batch_stream(data, batches, device, workers=0))
    by_workers = list(batch_stream(data, batches, device, workers=2))
    # dropout draws from torch's global generator: the loader must not advance it
    assert torch.equal(before, torch.random.get_rng_state())
    assert len(in_loop) == len(by_workers) == len(batches)
    for (ids_a, labels_a, targets_a), (ids_b, labels_b, targets_b) in zip(in_loop, by_workers):
        assert all(torch.equal(a, b) for a, b in zip(ids_a, ids_b))
        assert torch.equal(labels_a, labels_b)
        assert targets_a.keys() == targets_b.keys() and all(torch.equal(targets_a[k], targets_b[k]) for k in targets_a)


def test_a_bf16_autocast_checkpoint_is_fp32_exports_with_parity_and_stays_batch_invariant(tmp_path):
    """The CUDA path (autocast, worker-padded batches) run on CPU: the forward really ran in bf16
    (the weights differ from an fp32 run of the same seed), the master weights and checkpoint are
    fp32, export's parity check passes and the network's rows do not depend on their batch."""
    from export.bundle import write_bundle

    task = "verification"
    recipe = make_recipe(task, "attconv-light", SMALL_ATTCONV, epochs=2, lr=0.01)
    splits = make_splits(task)
    mixed = train(recipe, tmp_path / "bf16", TrainOptions(progress=False, threads=1, splits=splits, precision="bf16", loader_worker_count=2))
    plain = train(recipe, tmp_path / "fp32", TrainOptions(progress=False, threads=1, splits=splits))
    mixed_state, plain_state = mixed.network.state_dict(), plain.network.state_dict()
    assert all(t.dtype == torch.float32 for t in mixed_state.values() if t.is_floating_point())
    assert any(not torch.equal(mixed_state[k], plain_state[k]) for k in plain_state)
    summary = json.loads((tmp_path / "bf16" / "metrics.json").read_text())
    assert summary["autocast"] == "torch.bfloat16" and summary["loader_workers"] == 2

    bundle = write_bundle(tmp_path / "bf16", tmp_path / "bundle")  # raises on a parity failure
    assert (bundle / "model.onnx").is_file()

    # each dev example alone and in one padded batch with the others (evidence lists and lengths differ)
    network, meta = load_checkpoint(tmp_path / "bf16")
    encoder = TextEncoder.from_file(tmp_path / "bf16" / "tokenizer.json")
    network.eval()
    rows = splits.dev[:8]
    together = outputs(network, [torch.from_numpy(a) for a in encode_examples(encoder, rows, meta.max_lengths, meta.max_evidence, task=meta.task)])
    for i, row in enumerate(rows):
        alone = outputs(network, [torch.from_numpy(a) for a in encode_examples(encoder, [row], meta.max_lengths, meta.max_evidence, task=meta.task)])
        assert torch.allclose(alone[0][0], together[0][i], atol=1e-5, rtol=0)


def test_time_budget_reserves_an_evaluation_and_the_closing_work():
    now = [100.0]
    budget = TimeBudget(minutes=1.0, started=100.0, clock=lambda: now[0])
    assert budget.deadline == 160.0
    # before any evaluation: estimated from the training speed (forward taken to be 2x faster)
    reserve = budget.reserve(dev_examples=100, final_examples=300, train_seconds_per_example=0.01)
    assert reserve == pytest.approx(training.time_budget.SAFETY * 400 * 0.005 + training.time_budget.SAVE_SECONDS)
    budget.record_evaluation(100, 4.0)  # measured: 0.04 s per example, slower than the guess
    reserve = budget.reserve(100, 300, 0.01)
    assert reserve == pytest.approx(training.time_budget.SAFETY * 16.0 + training.time_budget.SAVE_SECONDS)
    now[0] = 160.0 - reserve - 1.0
    assert budget.step_fits(0.5, reserve)
    assert not budget.step_fits(1.0, reserve)
    with pytest.raises(ValueError):
        TimeBudget(minutes=0, started=0.0)


def test_a_time_budget_ends_training_in_time_and_keeps_the_best_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(training.time_budget, "SAVE_SECONDS", 0.5)
    task = "entailment"
    recipe = make_recipe(task, "attconv-light", SMALL_ATTCONV, epochs=10_000, eval_every=5, lr=0.01)
    budget_s = 6.0
    tick = time.perf_counter()
    result = train(recipe, tmp_path / "run", TrainOptions(progress=False, threads=1, splits=make_splits(task),
                   time_budget_minutes=budget_s / 60))
    took = time.perf_counter() - tick
    assert result.stopped_early and result.epochs_run > 1
    assert took < budget_s + 2.0, f"{took:.1f} s for a {budget_s} s budget"
    steps = max(h["step"] for h in result.history)
    assert result.history[-1]["step"] == steps  # the weights since the last evaluation were scored
    best = max(result.history, key=lambda h: h["selection_score"])
    assert result.best_step == best["step"]
    assert result.dev["accuracy"] == pytest.approx(best["dev_accuracy"])  # the kept weights are the best
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["out_of_time"] and summary["time_budget_minutes"] == pytest.approx(budget_s / 60)


def test_the_budget_does_not_time_the_cold_first_pass_over_the_dev_probe(tmp_path, monkeypatch):
    """The first forward pass pays one-off costs (on a GPU: the CUDA context, kernel loading) that
    no later evaluation pays. Timing it took an evaluation for far more than it costs and ended the
    first GPU run's FEVER training after 233 of 2,533 steps; the trainer times a second pass."""
    import training.trainer

    monkeypatch.setattr(training.time_budget, "SAVE_SECONDS", 0.5)
    real_predict = training.trainer.predict_logits
    calls = []

    def cold_first_call(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)  # a cold start: 2 s for a pass that takes milliseconds afterwards
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(training.trainer, "predict_logits", cold_first_call)
    task = "entailment"
    recipe = make_recipe(task, "attconv-light", SMALL_ATTCONV, epochs=10_000, eval_every=5, lr=0.01)
    result = train(recipe, tmp_path / "run", TrainOptions(progress=False, threads=1, splits=make_splits(task),
                   time_budget_minutes=8.0 / 60))
    steps = max(h["step"] for h in result.history)
    # timed cold, the probe's 2 s extrapolated over dev, test and the closing work exceed the 8 s
    # budget at once, and training ends before its first evaluation (5 steps)
    assert steps >= 20, f"only {steps} steps in an 8 s budget"
