"""Acceptance tests for every network: batch invariance under padding (length and evidence
axes), finite outputs on fully padded input, overfitting a tiny batch with gradients reaching
every parameter, and ONNX export parity at unseen batch sizes and lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model_cases import CASES, build, case_id
from models.base import TASKS

VOCAB = 60
pytestmark = pytest.mark.timeout(300)


def rand_ids(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape, generator=g)


def pad_to(ids: torch.Tensor, length: int) -> torch.Tensor:
    """Right-pad the last axis with the pad id 0."""
    return torch.nn.functional.pad(ids, (0, length - ids.shape[-1]))


def pad_slots(ids: torch.Tensor, count: int) -> torch.Tensor:
    """Add fully padded evidence slots: (B, K, L) -> (B, count, L)."""
    return torch.nn.functional.pad(ids, (0, 0, 0, count - ids.shape[1]))


def example(task: str, g: torch.Generator, short: bool) -> tuple[torch.Tensor, ...]:
    """One example (batch of 1); `short` ones are shorter on every axis than the others."""
    n = (5, 4, 3) if short else (17, 13, 11)
    if task == "classification":
        return (rand_ids(g, 1, n[0]),)
    if task == "entailment":
        return (rand_ids(g, 1, n[0]), rand_ids(g, 1, n[1]))
    k = 2 if short else 4
    evidence = rand_ids(g, 1, k, n[2])
    if short:  # ragged evidence inside the example itself
        evidence[0, 1, 2:] = 0
    return (rand_ids(g, 1, n[0]), evidence)


def batch_with_neighbour(mine, other):
    """Stack `mine` with a longer `other`, padding every axis to the longer one."""
    out = []
    for a, b in zip(mine, other):
        if a.dim() == 3:
            k = max(a.shape[1], b.shape[1])
            a, b = pad_slots(a, k), pad_slots(b, k)
        length = max(a.shape[-1], b.shape[-1])
        out.append(torch.cat([pad_to(a, length), pad_to(b, length)], dim=0))
    return tuple(out)


def outputs(net, ids):
    with torch.no_grad():
        out = net._forward_ids(*ids)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_logits_do_not_depend_on_batch_or_padding(case):
    torch.manual_seed(0)
    net = build(case).eval()
    task = case[1]
    g = torch.Generator().manual_seed(1)
    mine, other = example(task, g, short=True), example(task, g, short=False)

    solo = outputs(net, mine)
    batched = outputs(net, batch_with_neighbour(mine, other))
    assert torch.allclose(solo[0], batched[0][:1], atol=1e-5, rtol=0), (solo[0], batched[0][:1])
    # The neighbour must not be a copy of the example: logits really differ.
    assert not torch.allclose(batched[0][0], batched[0][1], atol=1e-4)

    # Extra right padding on every axis of the example alone changes nothing.
    padded = tuple(pad_to(t, t.shape[-1] + 6) for t in mine)
    assert torch.allclose(solo[0], outputs(net, padded)[0], atol=1e-5, rtol=0)

    if task == "verification":
        k = mine[1].shape[1]
        scores_solo = solo[1]
        scores_batched = batched[1][:1]
        assert torch.allclose(scores_solo, scores_batched[:, :k], atol=1e-5, rtol=0)
        assert torch.all(scores_batched[:, k:] == 0), "padded evidence slots got attribution"
        more_slots = (mine[0], pad_slots(mine[1], k + 3))
        out = outputs(net, more_slots)
        assert torch.allclose(solo[0], out[0], atol=1e-5, rtol=0)
        assert torch.allclose(scores_solo, out[1][:, :k], atol=1e-5, rtol=0)
        assert torch.all(out[1][:, k:] == 0)
        # attribution is a distribution over the valid evidences
        assert torch.allclose(scores_solo.sum(-1), torch.ones(1), atol=1e-5)
        assert torch.all(scores_solo >= 0)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fully_padded_input_is_finite_forward_and_backward(case):
    torch.manual_seed(0)
    net = build(case).train()
    task = TASKS[case[1]]
    shapes = {2: (2, 6), 3: (2, 3, 6)}
    ids = tuple(torch.zeros(shapes[r], dtype=torch.long) for r in task.input_ranks)
    # one fully padded example beside a real one, and a batch of only padding
    mixed = tuple(t.clone() for t in ids)
    for t in mixed:
        t[0, ...] = 1 + (torch.arange(t[0].numel()) % (VOCAB - 1)).view(t[0].shape)
    for batch in (ids, mixed):
        net.zero_grad()
        loss, logits = net.training_loss(batch, torch.tensor([0, 1]))
        assert torch.isfinite(logits).all()
        loss.backward()
        assert torch.isfinite(loss)
        for name, p in net.named_parameters():
            if p.grad is not None:
                assert torch.isfinite(p.grad).all(), f"non-finite grad in {name}"
    net.eval()
    out = outputs(net, ids)
    assert all(torch.isfinite(o).all() for o in out)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_overfits_a_tiny_batch_and_every_parameter_learns(case):
    torch.manual_seed(0)
    net = build(case, dropout=0.0).train()
    g = torch.Generator().manual_seed(2)
    batch = [example(case[1], g, short=bool(i % 2)) for i in range(8)]
    ids = batch_with_neighbour(*batch[:2])
    for ex in batch[2:]:
        ids = batch_with_neighbour(ids, ex)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)

    loss, _ = net.training_loss(ids, labels)
    loss.backward()
    dead = [n for n, p in net.named_parameters() if p.requires_grad and (p.grad is None or p.grad.abs().sum() == 0)]
    assert not dead, f"parameters that receive no gradient: {dead}"
    first = loss.item()
    for _ in range(200):
        opt.zero_grad()
        loss, _ = net.training_loss(ids, labels)
        loss.backward()
        opt.step()
        if loss.item() < 0.05:
            break
    assert loss.item() < 0.05, f"loss went {first:.3f} -> {loss.item():.3f}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_onnx_export_matches_pytorch_at_unseen_shapes(case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from export.onnx_graph import export_onnx

    torch.manual_seed(0)
    net = build(case).eval()
    path = export_onnx(net, tmp_path / "model.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    spec = net.task
    g = torch.Generator().manual_seed(3)
    for batch, length, count in ((1, 9, 1), (5, 23, 3), (17, 4, 6)):
        ids = []
        for rank in spec.input_ranks:
            t = rand_ids(g, batch, count, length) if rank == 3 else rand_ids(g, batch, length + len(ids))
            t[0, ..., length // 2:] = 0  # ragged: first example is shorter
            ids.append(t)
        feed = {name: t.numpy() for name, t in zip(spec.inputs, ids)}
        got = session.run(list(spec.outputs), feed)
        want = outputs(net, tuple(ids))
        for name, a, b in zip(spec.outputs, got, want):
            assert a.shape == tuple(b.shape), name
            np.testing.assert_allclose(a, b.numpy(), atol=1e-4, rtol=0, err_msg=name)


def stack_padded(examples):
    """Stack examples of different lengths (and evidence counts) into one padded batch."""
    out = []
    for parts in zip(*examples):
        if parts[0].dim() == 3:
            k = max(p.shape[1] for p in parts)
            parts = [pad_slots(p, k) for p in parts]
        length = max(p.shape[-1] for p in parts)
        out.append(torch.cat([pad_to(p, length) for p in parts], dim=0))
    return tuple(out)


def varied_example(task: str, g: torch.Generator, length: int, count: int):
    if task == "classification":
        return (rand_ids(g, 1, length),)
    if task == "entailment":
        return (rand_ids(g, 1, length), rand_ids(g, 1, max(2, length - 3)))
    evidence = rand_ids(g, 1, count, max(2, length - 2))
    return (rand_ids(g, 1, length), evidence)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_row_equals_its_solo_run_at_every_position(case):
    """Each row of a batch of neighbours of different lengths equals its own solo run, with the
    item moved through every position: a mask taken from another row (e.g. row 0's) or a leak
    through padding shows up in some row."""
    torch.manual_seed(0)
    net = build(case).eval()
    task = case[1]
    g = torch.Generator().manual_seed(5)
    examples = [varied_example(task, g, length, count)
                for length, count in ((4, 1), (19, 4), (9, 2), (13, 3))]
    solos = [outputs(net, ex) for ex in examples]
    for shift in range(len(examples)):
        order = examples[shift:] + examples[:shift]
        want = solos[shift:] + solos[:shift]
        got = outputs(net, stack_padded(order))
        for row, solo in enumerate(want):
            gap = (got[0][row] - solo[0][0]).abs().max().item()
            assert gap < 1e-5, f"row {row} (order shift {shift}) differs from its solo run by {gap:.2e}"
            if task == "verification":
                k = solo[1].shape[1]
                gap = (got[1][row, :k] - solo[1][0]).abs().max().item()
                assert gap < 1e-5, f"evidence scores of row {row} differ by {gap:.2e}"
                assert torch.all(got[1][row, k:] == 0)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_onnx_graph_rows_equal_their_solo_runs(case, tmp_path):
    """The same invariance on the exported graph itself (solo vs batch in onnxruntime), not
    only against PyTorch at 1e-4."""
    ort = pytest.importorskip("onnxruntime")
    from export.onnx_graph import export_onnx

    torch.manual_seed(0)
    net = build(case).eval()
    session = ort.InferenceSession(str(export_onnx(net, tmp_path / "model.onnx")),
                                   providers=["CPUExecutionProvider"])
    spec = net.task
    g = torch.Generator().manual_seed(6)
    examples = [varied_example(case[1], g, length, count)
                for length, count in ((4, 1), (19, 4), (9, 2))]

    def run(ids):
        return session.run(list(spec.outputs), {n: t.numpy() for n, t in zip(spec.inputs, ids)})

    solos = [run(ex) for ex in examples]
    got = run(stack_padded(examples))
    for row, solo in enumerate(solos):
        gap = float(np.abs(got[0][row] - solo[0][0]).max())
        assert gap < 1e-5, f"ONNX row {row} differs from its solo run by {gap:.2e}"
        if case[1] == "verification":
            k = solo[1].shape[1]
            gap = float(np.abs(got[1][row, :k] - solo[1][0]).max())
            assert gap < 1e-5, f"ONNX evidence scores of row {row} differ by {gap:.2e}"
