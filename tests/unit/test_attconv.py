"""AttConv-specific behaviour: hand-computed light and advanced attentive convolution, the
gated convolution's gate, context-wise / context-conc attribution, evidence-order and
direction properties, and intra-context = extra-context with ty = tx."""

from __future__ import annotations

import math

import pytest
import torch

from models import build_network, make_config
from models.attconv import AttConv, AttConvGatedConv, context_wise_max

pytestmark = pytest.mark.timeout(120)

SMALL = {"vocab_size": 40, "num_labels": 3, "embedding_dim": 6, "hidden_dim": 5, "head_hidden": 7}


def net(arch: str, task: str, **over) -> AttConv:
    torch.manual_seed(0)
    return build_network(arch, task=task, **{**SMALL, **over}).eval()


def with_mask(*ids: torch.Tensor) -> list[torch.Tensor]:
    args = []
    for t in ids:
        args.extend((t, t != 0))
    return args


def reference_attconv(beneficiary, source, focus, conv_weight, conv_bias, context_weight, scale):
    """Eqs 4-6 with explicit loops for one unpadded example (no batch axis):
    beneficiary (Lx, D), source (Lx, Dc), focus (Ly, Dc) -> new hidden states (Lx, H)."""
    length, width = beneficiary.shape[0], conv_weight.shape[-1]
    rows = []
    for i in range(length):
        scores = torch.stack([source[i] @ focus[j] * scale for j in range(focus.shape[0])])
        weights = torch.exp(scores - scores.max())
        weights = weights / weights.sum()
        context = sum(w * f for w, f in zip(weights, focus))
        local = conv_bias.clone()
        for offset in range(width):
            pos = i + offset - width // 2
            if 0 <= pos < length:  # 'same' padding: zeros outside the text
                local = local + conv_weight[:, :, offset] @ beneficiary[pos]
        rows.append(torch.tanh(local + context_weight[:, :, 0] @ context))
    return torch.stack(rows)


def test_light_dot_matches_hand_computed_attentive_convolution():
    model = net("attconv-light", "entailment", match="dot", direction="single")
    premise = torch.tensor([[3, 9, 4, 0, 0]])  # padded: the extra zeros must not matter
    hypothesis = torch.tensor([[7, 2, 11, 5]])
    emb = model.embeddings.weight.detach()
    hx, hy = emb[hypothesis[0]], emb[premise[0, :3]]
    layer = model.attconv
    new = reference_attconv(hx, hx, hy, layer.local_conv.conv.weight.detach(), layer.local_conv.conv.bias.detach(),
                            layer.context_conv.conv.weight.detach(), scale=1 / math.sqrt(SMALL["embedding_dim"]))
    want = model.classifier(new.max(dim=0).values.unsqueeze(0))
    with torch.no_grad():
        got = model(*with_mask(premise, hypothesis))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def hand_conv(hidden, conv):
    """'Same' 1-d convolution of an unpadded (L, D) map with explicit loops -> (L, out)."""
    weight, bias = conv.weight.detach(), conv.bias.detach()
    width, length = weight.shape[-1], hidden.shape[0]
    rows = []
    for i in range(length):
        total = bias.clone()
        for offset in range(width):
            pos = i + offset - width // 2
            if 0 <= pos < length:
                total = total + weight[:, :, offset] @ hidden[pos]
        rows.append(total)
    return torch.stack(rows)


def test_advanced_source_focus_beneficiary_match_hand_computation():
    """Saturated gates pin each f_gconv to one branch of eq 9: source gates open (source =
    [H^x, H^x]), focus and beneficiary gates closed (pure tanh branch, eqs 7, 11, 13). The
    advanced layer must then equal eqs 4-6 computed by hand on those three maps."""
    model = net("attconv-advanced", "entailment", match="dot", direction="single")
    layer = model.attconv
    # granularities 1 and kernel_size for source/focus (eqs 10-11), 1 for the beneficiary (eq 13)
    widths = {name: m.candidate.conv.kernel_size[0] for name, m in layer.named_modules()
              if isinstance(m, AttConvGatedConv)}
    assert widths == {"source.unigram": 1, "source.phrase": 3, "focus_encoder.unigram": 1,
                      "focus_encoder.phrase": 3, "beneficiary": 1}
    with torch.no_grad():
        for gconv in (layer.source.unigram, layer.source.phrase):
            gconv.gate.conv.bias.fill_(40.0)
        for gconv in (layer.focus_encoder.unigram, layer.focus_encoder.phrase, layer.beneficiary):
            gconv.gate.conv.bias.fill_(-40.0)
    premise = torch.tensor([[3, 9, 4, 8, 0]])
    hypothesis = torch.tensor([[7, 2, 11]])
    emb = model.embeddings.weight.detach()
    hx, hy = emb[hypothesis[0]], emb[premise[0, :4]]
    focus = torch.cat([torch.tanh(hand_conv(hy, layer.focus_encoder.unigram.candidate.conv)),
                       torch.tanh(hand_conv(hy, layer.focus_encoder.phrase.candidate.conv))], -1)
    beneficiary = torch.tanh(hand_conv(hx, layer.beneficiary.candidate.conv))
    new = reference_attconv(beneficiary, torch.cat([hx, hx], -1), focus,
                            layer.local_conv.conv.weight.detach(), layer.local_conv.conv.bias.detach(),
                            layer.context_conv.conv.weight.detach(), scale=1 / math.sqrt(2 * SMALL["embedding_dim"]))
    want = model.classifier(new.max(dim=0).values.unsqueeze(0))
    with torch.no_grad():
        got = model(*with_mask(premise, hypothesis))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias, branch", [(40.0, "input"), (-40.0, "tanh")])
def test_gated_conv_gate_weights_the_input(bias, branch):
    torch.manual_seed(1)
    gconv = AttConvGatedConv(4, 3)
    with torch.no_grad():
        gconv.gate.conv.bias.fill_(bias)
    mask = torch.tensor([[True, True, True, True, False]])
    hidden = torch.randn(1, 5, 4) * mask.unsqueeze(-1)
    with torch.no_grad():
        out = gconv(hidden, mask)[0]
    if branch == "input":
        want = hidden[0]
    else:  # o_i = tanh(W_h [u_{i-1}, u_i, u_{i+1}] + b_h), by hand
        want = torch.zeros(5, 4)  # padded position is zeroed
        want[:4] = torch.tanh(hand_conv(hidden[0, :4], gconv.candidate.conv))
    torch.testing.assert_close(out, want, atol=1e-6, rtol=0)
    # the two branches really differ, so the check above distinguishes them
    assert not torch.allclose(hidden[0, :4], torch.tanh(gconv.candidate(hidden))[0, :4], atol=1e-2)


def test_context_wise_max_attribution():
    vectors = torch.tensor([[[0.1, 0.9, 0.2, 0.0],
                             [0.5, 0.3, 0.1, 0.2],
                             [9.0, 9.0, 9.0, 9.0]],    # padded slot: biggest values, must not win
                            [[0.1, 0.2, 0.3, 0.4],
                             [0.9, 0.8, 0.7, 0.6],     # dominates every dimension
                             [0.0, 0.0, 0.0, 0.0]]])
    slot_mask = torch.tensor([[True, True, False], [True, True, True]])
    vector, scores = context_wise_max(vectors, slot_mask)
    torch.testing.assert_close(vector, torch.tensor([[0.5, 0.9, 0.2, 0.2], [0.9, 0.8, 0.7, 0.6]]))
    torch.testing.assert_close(scores, torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]))
    # no valid slot at all: zero vector and zero attribution (not slot 0's default argmax)
    vector, scores = context_wise_max(vectors[:1], torch.zeros(1, 3, dtype=torch.bool))
    assert torch.all(vector == 0) and torch.all(scores == 0)


def verification_example():
    claim = torch.tensor([[5, 12, 7, 3, 0]])
    evidence = torch.tensor([[[4, 8, 15, 16],
                              [23, 32, 0, 0],   # ragged
                              [0, 0, 0, 0],     # padded slot between valid ones
                              [9, 5, 30, 2]]])
    return claim, evidence


@pytest.mark.parametrize("arch", ["attconv-light", "attconv-advanced"])
@pytest.mark.parametrize("multi_context", ["wise", "conc"])
def test_permuting_evidence_permutes_scores_and_keeps_logits(arch, multi_context):
    model = net(arch, "verification", multi_context=multi_context)
    claim, evidence = verification_example()
    perm = torch.tensor([3, 0, 2, 1])
    with torch.no_grad():
        logits, scores = model(*with_mask(claim, evidence))
        logits_p, scores_p = model(*with_mask(claim, evidence[:, perm]))
    torch.testing.assert_close(logits_p, logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(scores_p, scores[:, perm], atol=1e-6, rtol=0)
    assert scores[0, 2] == 0
    # attribution is informative: not uniform over the three valid evidences
    assert (scores[0, [0, 1, 3]] - 1 / 3).abs().max() > 1e-3


def test_conc_scores_are_hand_computed_attention_mass():
    model = net("attconv-light", "verification", multi_context="conc", match="dot", direction="single")
    claim, evidence = verification_example()
    emb = model.embeddings.weight.detach()
    hx = emb[claim[0, :4]]
    valid = [(k, evidence[0, k][evidence[0, k] != 0]) for k in range(4)]
    valid = [(k, ids) for k, ids in valid if len(ids)]
    hy = torch.cat([emb[ids] for _, ids in valid])  # concatenated valid evidence tokens
    attention = torch.softmax(hx @ hy.T / math.sqrt(SMALL["embedding_dim"]), dim=-1)  # (Lc, N)
    mass, start = torch.zeros(4), 0
    for k, ids in valid:
        mass[k] = attention[:, start:start + len(ids)].sum(-1).mean()
        start += len(ids)
    with torch.no_grad():
        _, scores = model(*with_mask(claim, evidence))
    torch.testing.assert_close(scores[0], mass / mass.sum(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("direction, order_matters", [("single", False), ("both", True)])
def test_single_direction_sees_the_premise_only_through_attention(direction, order_matters):
    """Light, single direction: the premise enters only as the attentive context, a weighted
    average over its tokens, so shuffling it cannot change the logits. With "both", the
    premise's own attentive convolution sees word order."""
    model = net("attconv-light", "entailment", direction=direction)
    premise = torch.tensor([[3, 9, 4, 8, 21, 0]])
    shuffled = torch.tensor([[21, 4, 8, 3, 9, 0]])
    hypothesis = torch.tensor([[7, 2, 11, 5]])
    with torch.no_grad():
        a = model(*with_mask(premise, hypothesis))
        b = model(*with_mask(shuffled, hypothesis))
    assert torch.allclose(a, b, atol=1e-5) != order_matters
    # the hypothesis's word order matters in both directions
    with torch.no_grad():
        c = model(*with_mask(premise, hypothesis.flip(-1)))
    assert not torch.allclose(a, c, atol=1e-5)


@pytest.mark.parametrize("arch", ["attconv-light", "attconv-advanced"])
def test_intra_context_is_extra_context_with_the_text_as_its_own_context(arch):
    classifier = net(arch, "classification")
    pair = net(arch, "entailment", direction="single")
    pair.load_state_dict(classifier.state_dict())  # identical parameter layout
    text = torch.tensor([[3, 9, 4, 8, 0], [6, 1, 0, 0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(classifier(*with_mask(text)), pair(*with_mask(text, text)), atol=1e-6, rtol=0)


def test_registry_presets_and_config_validation():
    assert make_config("attconv-light").variant == "light"
    assert make_config("attconv-advanced", task="verification").variant == "advanced"
    light = net("attconv-light", "classification")
    advanced = net("attconv-advanced", "classification")
    assert not any("gate" in n for n, _ in light.named_parameters())
    assert any("focus_encoder" in n for n, _ in advanced.named_parameters())
    for bad in ({"variant": "heavy"}, {"match": "cosine"}, {"direction": "left"},
                {"multi_context": "sum"}, {"kernel_size": 2}):
        with pytest.raises(ValueError):
            make_config("attconv-light", **bad)


def test_the_exact_match_channel_needs_two_texts_and_starts_at_zero():
    with pytest.raises(ValueError, match="exact_match needs two texts"):
        build_network("attconv-advanced", task="classification", exact_match=True)
    network = build_network("attconv-advanced", task="verification", num_labels=3, exact_match=True)
    assert torch.count_nonzero(network.attconv.exact_match.conv.weight) == 0


def test_the_exact_match_channel_tells_apart_two_words_whose_vectors_are_equal():
    """The failure it is for: a claim whose name is swapped for one with a near-identical vector
    ("France" for "Germany") looks the same to attention; only the channel sees that the swapped
    word is absent from the evidence."""
    torch.manual_seed(0)
    answers = {}
    for channel in (False, True):
        network = build_network("attconv-advanced", task="verification", num_labels=3, vocab_size=20,
                                embedding_dim=8, hidden_dim=8, head_hidden=8, exact_match=channel).eval()
        with torch.no_grad():
            network.embeddings.weight[12] = network.embeddings.weight[11]  # word 12 looks like word 11
            if channel:
                torch.nn.init.normal_(network.attconv.exact_match.conv.weight)
        evidence = torch.tensor([[[4, 5, 6, 11, 7]]])  # (B=1, K=1, Le): states word 11
        stated, swapped = torch.tensor([[4, 6, 11]]), torch.tensor([[4, 6, 12]])  # (B, Lc)
        answers[channel] = [network.logits_from_ids(claim, evidence) for claim in (stated, swapped)]
    assert torch.allclose(*answers[False], atol=1e-6)  # without the channel: the same answer
    assert not torch.allclose(*answers[True], atol=1e-3)
