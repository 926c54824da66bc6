"""ACT-specific behaviour: the attentive convolution matches eqs. 1-5 written out naively,
center loss is in the objective with its weight, global attention is a distribution over
valid positions, truncation past max_length, the locality of the local outputs, and the
parameter count against the Transformer baseline (paper Table 5)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models import build_network
from models.layers import padding_mask

pytestmark = pytest.mark.timeout(120)

VOCAB = 50
SMALL = {"embedding_dim": 12, "model_dim": 12, "num_heads": 2, "num_filters": 5, "num_layers": 2,
         "max_length": 32, "fc_dim": 8, "position_dim": 6, "attention_dim": 10, "dropout": 0.0}


def small(arch: str = "act", **over):
    torch.manual_seed(0)
    return build_network(arch, vocab_size=VOCAB, num_labels=3, **{**SMALL, **over}).eval()


def ids_batch(seed: int, lengths: list[int], total: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (len(lengths), total), generator=g)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return ids


def test_attentive_convolution_matches_the_equations_written_out():
    net = small()
    layer = net.encoder.layers[0].attention
    cfg = net.config
    d_h, n, m = cfg.model_dim // cfg.num_heads, cfg.kernel_size, cfg.num_filters
    ids = ids_batch(1, [4, 7], 7)
    mask = padding_mask(ids)
    hidden = torch.randn(2, 7, cfg.model_dim)  # padded positions deliberately non-zero
    got, _ = layer(hidden, mask)

    queries = layer.query(hidden)  # (B, L, d_w)
    weight, bias = layer.filters.weight, layer.filters.bias  # (h*m, d_h, n), (h*m,)
    for b in range(2):
        valid = int(mask[b].sum())
        for j in range(valid):
            heads = []
            for h in range(cfg.num_heads):
                # n-gram window centred on j, valid tokens only (zeros beyond the text)
                window = torch.zeros(d_h, n)
                for k in range(n):
                    pos = j - n // 2 + k
                    if 0 <= pos < valid:
                        window[:, k] = queries[b, pos, h * d_h:(h + 1) * d_h]
                filters = weight[h * m:(h + 1) * m]  # (m, d_h, n)
                relevance = F.gelu((filters * window).sum((1, 2)) + bias[h * m:(h + 1) * m])  # eq. 2, (m,)
                heads.append((relevance[:, None, None] * filters).sum(0).reshape(-1))  # eq. 3: F^T M
            want = layer.output(torch.cat(heads))  # eq. 5
            torch.testing.assert_close(got[b, j], want, atol=1e-5, rtol=1e-5)


def test_loss_is_cross_entropy_plus_weighted_center_loss():
    ids = ids_batch(2, [5, 9, 3, 9], 9)
    labels = torch.tensor([0, 2, 1, 2])
    for weight in (0.5, 0.0):
        net = small(center_loss_weight=weight)
        with torch.no_grad():
            net.class_centers.normal_()  # non-trivial centers so the term is far from zero
        loss, logits = net.training_loss((ids,), labels)
        features = net.encode(ids, padding_mask(ids)).features
        centers = net.class_centers[labels]
        center = 0.5 * ((features - centers) ** 2).sum(-1).mean()
        ce = F.cross_entropy(logits, labels)
        assert center > 0.1
        torch.testing.assert_close(logits, net(ids, padding_mask(ids)))
        torch.testing.assert_close(loss, ce + weight * center)
        if weight == 0.0:
            torch.testing.assert_close(loss, ce)


def test_center_loss_pulls_features_and_centers_together():
    net = small(center_loss_weight=1.0).train()
    ids = ids_batch(3, [6, 6], 6)
    labels = torch.tensor([0, 1])
    loss, _ = net.training_loss((ids,), labels)
    loss.backward()
    # only the centers of classes in the batch move; the absent class gets no gradient
    assert net.class_centers.grad[:2].abs().sum() > 0
    assert net.class_centers.grad[2].abs().sum() == 0


def test_global_max_of_every_row_uses_its_own_mask_by_a_wide_margin():
    """g (eq. 4) and the logits of every row of a padded batch equal the row's solo run, with
    the rows rotated through every position. The top layer's filter bias sits at GELU's minimum
    (-0.75), so a short row's feature map is negative at every valid position of some channels:
    there a padded 0 (a max without the mask, or with another row's mask) wins by ~0.1, not by
    the ~1e-3 of random weights; W^O x 10 makes g, and so its share of the attention scores,
    10x larger. Without the mask a row's g differs by 0.64 and its logits by 6e-2; with row
    0's mask for every row, by 0.62 and 5e-3; the tolerance is 1e-5 (the correct code: < 2e-7)."""
    net = small()
    top = net.encoder.layers[-1]
    with torch.no_grad():
        top.attention.filters.bias.fill_(-0.75)
        top.attention.output.weight.mul_(10)
    globals_, maps = [], []
    net.encoder.register_forward_hook(lambda module, args, out: globals_.append(out[1]))
    top.register_forward_hook(lambda module, args, out: maps.append(out[1]))
    lengths = [2, 30, 5, 3, 17]
    ids = ids_batch(8, lengths, max(lengths))
    solos = []
    for row, n in enumerate(lengths):
        alone = ids[row:row + 1, :n]
        with torch.no_grad():
            logits = net(alone, padding_mask(alone))[0]
        solos.append((logits, globals_.pop()[0]))
        valid_max = maps.pop()[0].amax(dim=1)  # (h, m): max over the row's own positions
        if n <= 3:  # the test has power: some channels are negative wherever the row is valid
            assert (valid_max < -0.05).sum() >= 2, valid_max
    for shift in range(len(lengths)):
        order = [(r + shift) % len(lengths) for r in range(len(lengths))]
        batch = ids[order]
        with torch.no_grad():
            logits = net(batch, padding_mask(batch))
        g = globals_.pop()
        for at, row in enumerate(order):
            want_logits, want_g = solos[row]
            gap_g = (g[at] - want_g).abs().max().item()
            gap = (logits[at] - want_logits).abs().max().item()
            assert gap_g < 1e-5, f"g of row {row} (length {lengths[row]}) at position {at} differs by {gap_g:.2e}"
            assert gap < 1e-5, f"logits of row {row} (length {lengths[row]}) at position {at} differ by {gap:.2e}"


def test_global_attention_is_a_distribution_over_valid_positions():
    net = small()
    ids = ids_batch(4, [3, 11, 1, 0], 11)  # includes a single-token and a fully padded row
    out = net.encode(ids, padding_mask(ids))
    weights = out.attention_weights
    mask = padding_mask(ids)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights[:3].sum(-1), torch.ones(3))
    assert weights[3].sum() == 0  # fully padded: nothing to attend to, and no NaN
    assert torch.all(weights >= 0)
    assert weights[1, :11].std() > 0  # not uniform: scores depend on content
    assert torch.isfinite(net(ids, mask)).all()


@pytest.mark.parametrize("arch", ["act", "transformer"])
def test_inputs_past_max_length_are_truncated(arch):
    net = small(arch, max_length=8)
    long = ids_batch(5, [20, 13], 20)
    truncated = long[:, :8]
    got = net(long, padding_mask(long))
    torch.testing.assert_close(got, net(truncated, padding_mask(truncated)), atol=1e-6, rtol=0)
    # the tokens past the limit really are ignored: changing them changes nothing
    changed = long.clone()
    changed[:, 8:13] = (changed[:, 8:13] % (VOCAB - 1)) + 1
    torch.testing.assert_close(got, net(changed, padding_mask(changed)), atol=1e-6, rtol=0)


def test_truncation_exports_to_onnx():
    ort = pytest.importorskip("onnxruntime")
    from export.onnx_graph import export_onnx

    net = small(max_length=8)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(net, Path(tmp) / "act.onnx")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for lengths, total in (([5, 3], 6), ([30, 12, 8], 30)):
            ids = ids_batch(6, lengths, total)
            (got,) = session.run(["logits"], {"input_ids": ids.numpy()})
            with torch.no_grad():
                want = net(ids, padding_mask(ids))
            torch.testing.assert_close(torch.from_numpy(got), want, atol=1e-4, rtol=0)


def _changed_at(ids: torch.Tensor, position: int) -> torch.Tensor:
    out = ids.clone()
    out[0, position] = out[0, position] % (VOCAB - 1) + 1  # a different real token
    return out


@pytest.mark.parametrize("num_layers", [1, 2])
def test_local_output_depends_only_on_its_receptive_field(num_layers):
    """Top-layer local output at position j of an N-layer ACT with kernel n sees tokens
    within N*(n//2) of j and nothing else; the Transformer baseline sees everything."""
    radius = num_layers * (3 // 2)
    ids = ids_batch(7, [16], 16)
    j = 7

    def hidden(arch, x):
        net = small(arch, num_layers=num_layers, kernel_size=3)
        with torch.no_grad():
            return net.encode(x, padding_mask(x)).hidden_states[0, j]

    base = hidden("act", ids)
    for pos in range(16):
        moved = not torch.allclose(base, hidden("act", _changed_at(ids, pos)), atol=1e-6)
        assert moved == (abs(pos - j) <= radius), f"position {pos}, radius {radius}"
    far = j + radius + 3
    assert not torch.allclose(hidden("transformer", ids), hidden("transformer", _changed_at(ids, far)), atol=1e-6)


def test_fewer_parameters_than_the_transformer_at_paper_settings(capsys):
    # Paper section 3.3: d_w 300, 3 layers, 6 heads, m 100, n 3, FC 100, d_a 200, d_p 60;
    # Yelp F. has 5 classes. Word embeddings (vocabulary-dependent) are excluded.
    settings = dict(vocab_size=2, num_labels=5, embedding_dim=300)
    act = build_network("act", **settings)
    transformer = build_network("transformer", **settings)

    def without_word_embeddings(net):
        return sum(p.numel() for p in net.parameters()) - net.embeddings.weight.numel()

    act_total, tf_total = without_word_embeddings(act), without_word_embeddings(transformer)
    act_enc, tf_enc = act.encoder_parameter_count(), transformer.encoder_parameter_count()
    # per ACT layer: W^Q 300*300 + filters 6*(100*50*3+100) + W^O (900*300+300) + LayerNorm 600
    assert act_enc == 3 * (300 * 300 + 6 * (100 * 150 + 100) + 900 * 300 + 300 + 600)
    assert act_enc < tf_enc and act_total < tf_total
    # Table 5: 1.49M vs 3.38M (ratio 0.44)
    assert abs(act_total - 1.49e6) / 1.49e6 < 0.02
    assert abs(tf_total - 3.38e6) / 3.38e6 < 0.03
    with capsys.disabled():
        print(f"\n[params] encoder layers: ACT {act_enc:,} vs Transformer {tf_enc:,} (ratio {act_enc / tf_enc:.3f});"
              f" without word embeddings: ACT {act_total:,} vs Transformer {tf_total:,}"
              f" (ratio {act_total / tf_total:.3f}; paper 1.49M/3.38M = 0.44)")
