"""ABCNN specifics the shared acceptance tests (test_networks.py) do not reach: wide
convolution and w-ap shapes, the attention matrix on padding, each sentence's own ABCNN-2
weights, ABCNN-1's shared W over dynamic lengths, a finite match-score gradient at zero
distance, per-block output features, and truncation past max_length."""

from __future__ import annotations

import pytest
import torch

from models import build_network, make_config
from models.abcnn import ABCNN, ABCNNBlock, ABCNNConfig, attention_matrix, unit_weights, window_pool

pytestmark = pytest.mark.timeout(120)

VOCAB = 40
SMALL = {"vocab_size": VOCAB, "num_labels": 3, "embedding_dim": 6, "num_filters": 5, "max_length": 12}


def lengths_mask(lengths: list[int], total: int) -> torch.Tensor:
    return torch.arange(total).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # (B, total)


def block_for(variant: str, in_dim: int = 6, **over) -> ABCNNBlock:
    torch.manual_seed(0)
    return ABCNNBlock(in_dim, ABCNNConfig(**{**SMALL, "variant": variant, "embedding_dim": in_dim, **over}))


def reference_match(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(1.0 / (1.0 + torch.sqrt(((x - y) ** 2).sum().detach())))


@pytest.mark.parametrize("width", [3, 4])
def test_wide_convolution_length_mask_and_window_pool(width):
    block = block_for("bcnn", kernel_size=width)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 6, generator=g)
    mask = lengths_mask([5, 3, 0], 5)
    out, out_mask = block.wide_conv(x, mask)

    assert out.shape == (3, 5 + width - 1, 5)
    # valid columns: len + w - 1, none for an empty sentence
    assert out_mask.sum(-1).tolist() == [5 + width - 1, 3 + width - 1, 0]
    assert torch.all(out[~out_mask] == 0)
    # wide: column 0 sees only token 0, through the filter's last tap (zeros padded on the left)
    weight, bias = block.conv.weight, block.conv.bias  # (F, D, w), (F,)
    first = torch.tanh(weight[:, :, -1] @ x[0, 0] + bias)
    last = torch.tanh(weight[:, :, 0] @ x[0, 4] + bias)  # column L+w-2 sees only the last token
    torch.testing.assert_close(out[0, 0], first)
    torch.testing.assert_close(out[0, 5 + width - 2], last)
    # example 1's columns must ignore its (non-zero) padded input
    torch.testing.assert_close(out[1, :3 + width - 1], block.wide_conv(x[1:2, :3], mask[1:2, :3])[0][0])

    pooled = window_pool(out, width)
    assert pooled.shape == (3, 5, 5)
    for j in range(5):
        torch.testing.assert_close(pooled[0, j], out[0, j:j + width].mean(0))


def test_attention_matrix_matches_score_on_valid_pairs_and_is_exactly_zero_on_padding():
    g = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(2, 6, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    mask0, mask1 = lengths_mask([6, 2], 6), lengths_mask([3, 5], 5)
    attention = attention_matrix(x0, mask0, x1, mask1, eps=1e-6)
    assert attention.shape == (2, 6, 5)
    for b in range(2):
        for i in range(6):
            for j in range(5):
                if mask0[b, i] and mask1[b, j]:
                    assert attention[b, i, j].item() == pytest.approx(reference_match(x0[b, i], x1[b, j]), abs=1e-5)
                else:
                    assert attention[b, i, j].item() == 0.0  # exactly, not just small


@pytest.mark.parametrize("variant", ["abcnn-2", "abcnn-3"])
def test_pooling_weights_each_sentence_with_its_own_attention(variant):
    """Reference computed by hand from the block's own convolution outputs: s0's weights are
    A's row sums, s1's its column sums. Swapping them must not pass."""
    block = block_for(variant)
    g = torch.Generator().manual_seed(2)
    length, width = 6, block.kernel_size
    x0, x1 = torch.randn(2, length, 6, generator=g), torch.randn(2, length, 6, generator=g)
    mask0, mask1 = lengths_mask([6, 4], length), lengths_mask([6, 6], length)
    out = block(x0, mask0, x1, mask1, pool=True)

    conv_in0, conv_in1 = x0 * mask0.unsqueeze(-1), x1 * mask1.unsqueeze(-1)
    if block.attention_map is not None:
        conv_in0, conv_in1 = block.attention_inputs(conv_in0, mask0, conv_in1, mask1)
    conv0, cmask0 = block.wide_conv(conv_in0, mask0)
    conv1, cmask1 = block.wide_conv(conv_in1, mask1)

    def weights(b: int, swap: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n0, n1 = int(cmask0[b].sum()), int(cmask1[b].sum())
        a = torch.tensor([[reference_match(conv0[b, i], conv1[b, j]) for j in range(n1)] for i in range(n0)])
        rows, cols = a.sum(1), a.sum(0)  # s0's units, s1's units
        if swap:
            rows, cols = cols, rows
        return rows / rows.sum(), cols / cols.sum()

    def pooled(conv: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
        return torch.stack([(w[j:j + width, None] * conv[j:j + width]).sum(0) for j in range(n)])

    # example 0: both sentences full length, so a swap would still be shape-compatible
    w0, w1 = weights(0, swap=False)
    assert not torch.allclose(w0, w1, atol=1e-3), "row and column sums coincide: test cannot tell a swap"
    torch.testing.assert_close(out.vector0[0], (w0[:, None] * conv0[0, :len(w0)]).sum(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.vector1[0], (w1[:, None] * conv1[0, :len(w1)]).sum(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pooled0[0], pooled(conv0[0], w0, length), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pooled1[0], pooled(conv1[0], w1, length), atol=1e-5, rtol=0)
    s0, s1 = weights(0, swap=True)
    assert not torch.allclose(out.pooled0[0], pooled(conv0[0], s0, length), atol=1e-4)
    assert not torch.allclose(out.pooled1[0], pooled(conv1[0], s1, length), atol=1e-4)

    # example 1: s0 is padded; its weights live on its own valid columns only
    w0, w1 = weights(1, swap=False)
    torch.testing.assert_close(out.pooled0[1, :4], pooled(conv0[1], w0, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pooled1[1], pooled(conv1[1], w1, length), atol=1e-5, rtol=0)
    assert torch.all(out.pooled0[1, 4:] == 0)

    attention = attention_matrix(conv0, cmask0, conv1, cmask1, eps=1e-6)
    a0, a1 = unit_weights(attention, cmask0, cmask1)
    torch.testing.assert_close(a0.sum(-1), torch.ones(2))
    torch.testing.assert_close(a1.sum(-1), torch.ones(2))
    assert torch.all(a0[~cmask0] == 0) and torch.all(a1[~cmask1] == 0)


def test_abcnn1_shared_attention_map_is_sliced_to_the_batch_length():
    block = block_for("abcnn-1", in_dim=4)
    assert [n for n, _ in block.named_parameters()].count("attention_map") == 1  # one W for both sentences
    assert block.attention_map.shape == (4, 12)  # (d, max_length)
    g = torch.Generator().manual_seed(3)
    x0, x1 = torch.randn(1, 5, 4, generator=g), torch.randn(1, 3, 4, generator=g)
    mask0, mask1 = lengths_mask([5], 5), lengths_mask([2], 3)
    stacked0, stacked1 = block.attention_inputs(x0, mask0, x1 * mask1.unsqueeze(-1), mask1)
    assert stacked0.shape == (1, 5, 8) and stacked1.shape == (1, 3, 8)
    torch.testing.assert_close(stacked0[..., :4], x0)

    w = block.attention_map.detach()
    a = torch.tensor([[reference_match(x0[0, i], x1[0, j]) for j in range(2)] for i in range(5)])  # (5, 2)
    torch.testing.assert_close(stacked0[0, :, 4:], (w[:, :2] @ a.T).T, atol=1e-5, rtol=0)  # F0a = W A^T
    torch.testing.assert_close(stacked1[0, :2, 4:], (w[:, :5] @ a).T, atol=1e-5, rtol=0)  # F1a = W A
    assert torch.all(stacked1[0, 2:] == 0)  # padded unit of s1

    # Columns of W at s1's padded position (2) and past the batch length never reach F0a.
    with torch.no_grad():
        block.attention_map[:, 2:] += 3.0
    again0, _ = block.attention_inputs(x0, mask0, x1 * mask1.unsqueeze(-1), mask1)
    torch.testing.assert_close(again0, stacked0)


def test_match_score_gradient_is_finite_at_zero_distance():
    """Identical sentences: zero-distance columns in every A and identical all-ap vectors."""
    ids = torch.tensor([[5, 9, 9, 3, 0]])
    for eps, finite in ((1e-6, True), (0.0, False)):
        torch.manual_seed(0)
        net = build_network("abcnn-3", **SMALL, num_blocks=2, match_eps=eps, dropout=0.0)
        loss, logits = net.training_loss((ids, ids.clone()), torch.tensor([1]))
        loss.backward()
        grads_finite = all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
        # eps=0 shows the input really hits zero distance (sqrt'(0) makes NaN there)
        assert grads_finite is finite, f"eps={eps}"
        if finite:
            assert torch.isfinite(logits).all()
            assert net.embeddings.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("variant", ["bcnn", "abcnn-1", "abcnn-2", "abcnn-3"])
def test_two_blocks_give_per_block_features_and_block_two_reaches_the_logits(variant):
    torch.manual_seed(0)
    net = build_network(variant, **SMALL, num_blocks=2, use_pooled_vectors=False, head_hidden=0).eval()
    g = torch.Generator().manual_seed(4)
    premise, hypothesis = torch.randint(1, VOCAB, (2, 7), generator=g), torch.randint(1, VOCAB, (2, 5), generator=g)
    masks = (premise != 0, hypothesis != 0)
    layers = net.layer_vectors(premise, masks[0], hypothesis, masks[1])
    assert [tuple(v.shape) for pair in layers for v in pair] == [(2, 6), (2, 6), (2, 5), (2, 5), (2, 5), (2, 5)]
    features = net.similarity_features(layers)
    assert features.shape == (2, 3 * 2)  # (blocks + 1) layers x (cosine, match score)
    assert net.head[-1].in_features == 6
    assert torch.all(features[:, 1::2] > 0) and torch.all(features[:, 1::2] <= 1)  # match scores
    assert torch.all(features[:, 0::2].abs() <= 1 + 1e-6)  # cosines
    with_vectors = build_network(variant, **SMALL, num_blocks=2, head_hidden=0)
    assert with_vectors.head[-1].in_features == 6 + 2 * (6 + 2 * 5)

    with torch.no_grad():
        before = net.logits_from_ids(premise, hypothesis)
        net.blocks[1].conv.weight.mul_(-2.0)
        after = net.logits_from_ids(premise, hypothesis)
    assert not torch.allclose(before, after, atol=1e-4), "block 2's output does not reach the logits"


def test_abcnn2_attention_shapes_the_output_even_with_one_block():
    """abcnn-2 and bcnn have the same parameters; attention pooling must still change logits."""
    torch.manual_seed(0)
    bcnn = build_network("bcnn", **SMALL).eval()
    abcnn2 = build_network("abcnn-2", **SMALL).eval()
    abcnn2.load_state_dict(bcnn.state_dict())  # strict: same parameter set
    ids = (torch.tensor([[4, 8, 15, 16, 23]]), torch.tensor([[4, 8, 2, 0, 0]]))
    with torch.no_grad():
        assert not torch.allclose(bcnn.logits_from_ids(*ids), abcnn2.logits_from_ids(*ids), atol=1e-5)


def test_only_the_attention_variants_create_attention_parameters():
    names = {arch: {n for n, _ in build_network(arch, **SMALL, num_blocks=2).named_parameters()}
             for arch in ("bcnn", "abcnn-1", "abcnn-2", "abcnn-3")}
    assert names["bcnn"] == names["abcnn-2"]
    assert names["abcnn-1"] == names["abcnn-3"]
    assert names["abcnn-1"] - names["bcnn"] == {"blocks.0.attention_map", "blocks.1.attention_map"}
    assert make_config("abcnn-3").variant == "abcnn-3"
    with pytest.raises(ValueError):
        ABCNNConfig(variant="abcnn-4")
    with pytest.raises(ValueError):
        ABCNN(ABCNNConfig(task="classification"))


@pytest.mark.parametrize("variant", ["bcnn", "abcnn-1", "abcnn-3"])
def test_inputs_past_max_length_are_truncated(variant):
    torch.manual_seed(0)
    net = build_network(variant, **SMALL, num_blocks=2).eval()  # max_length 12
    g = torch.Generator().manual_seed(5)
    premise, hypothesis = torch.randint(1, VOCAB, (2, 30), generator=g), torch.randint(1, VOCAB, (2, 9), generator=g)
    premise[1, 20:] = 0
    with torch.no_grad():
        long = net.logits_from_ids(premise, hypothesis)
        cut = net.logits_from_ids(premise[:, :12], hypothesis)
        changed_tail = premise.clone()
        changed_tail[:, 12:] = torch.randint(1, VOCAB, (2, 18), generator=g)
        other_tail = net.logits_from_ids(changed_tail, hypothesis)
        different_head = premise.clone()
        different_head[:, 3] = (different_head[:, 3] % (VOCAB - 1)) + 1
        head_changed = net.logits_from_ids(different_head, hypothesis)
    assert torch.isfinite(long).all()
    torch.testing.assert_close(long, cut, atol=1e-6, rtol=0)
    torch.testing.assert_close(long, other_tail, atol=1e-6, rtol=0)
    assert not torch.allclose(long, head_changed, atol=1e-5)  # tokens inside the limit still count


@pytest.mark.slow
def test_onnx_graph_truncates_past_max_length(tmp_path):
    """The exported graph slices to max_length too (about a minute of export on a busy CPU)."""
    ort = pytest.importorskip("onnxruntime")
    from export.onnx_graph import export_onnx

    torch.manual_seed(0)
    net = build_network("abcnn-3", **{**SMALL, "max_length": 8}, num_blocks=2).eval()
    session = ort.InferenceSession(str(export_onnx(net, tmp_path / "m.onnx")), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(6)
    premise, hypothesis = torch.randint(1, VOCAB, (3, 20), generator=g), torch.randint(1, VOCAB, (3, 5), generator=g)
    premise[0, 6:] = 0
    got = session.run(["logits"], {"premise_ids": premise.numpy(), "hypothesis_ids": hypothesis.numpy()})[0]
    with torch.no_grad():
        want = net.logits_from_ids(premise[:, :8], hypothesis).numpy()
    assert abs(got - want).max() < 1e-4
