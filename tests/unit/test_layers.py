"""The shared masked reductions: padding never carries weight, all-padded rows stay finite."""

import torch

from models.layers import (
    euclidean_match_score,
    masked_max,
    masked_max_with_index,
    masked_mean,
    masked_softmax,
    padding_mask,
)


def test_masked_softmax_gives_padding_exactly_zero_and_matches_unpadded_softmax():
    scores = torch.tensor([[1.0, 2.0, 30.0, 40.0]])
    mask = torch.tensor([[True, True, False, False]])
    probs = masked_softmax(scores, mask)
    assert probs[0, 2:].eq(0).all()
    assert torch.allclose(probs[0, :2], torch.softmax(scores[0, :2], -1))


def test_masked_softmax_of_fully_padded_row_is_zero_not_nan():
    scores = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[False] * 5, [True] * 5])
    probs = masked_softmax(scores, mask)
    assert torch.isfinite(probs).all()
    assert probs[0].eq(0).all()
    assert torch.allclose(probs[1].sum(), torch.tensor(1.0))
    probs.sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_masked_max_ignores_larger_padded_values_and_reports_index():
    values = torch.tensor([[[-3.0], [-1.0], [100.0]]])  # (B=1, L=3, D=1)
    mask = torch.tensor([[True, True, False]]).unsqueeze(-1)
    assert masked_max(values, mask, dim=1).item() == -1.0
    out, index = masked_max_with_index(values, mask, dim=1)
    assert out.item() == -1.0 and index.item() == 1


def test_masked_max_of_negative_values_is_not_beaten_by_zero_padding():
    # the released AttConv code multiplied padded slots by 0, which lets 0 win over negatives
    values = torch.tensor([[-5.0, -2.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    assert masked_max(values, mask, dim=1).item() == -2.0
    assert masked_max(values, torch.zeros_like(mask), dim=1).item() == 0.0


def test_masked_mean_divides_by_valid_count():
    values = torch.tensor([[2.0, 4.0, 1000.0]])
    mask = torch.tensor([[True, True, False]])
    assert masked_mean(values, mask, dim=1).item() == 3.0
    assert masked_mean(values, torch.zeros_like(mask), dim=1).item() == 0.0


def test_padding_mask_marks_pad_id_zero():
    ids = torch.tensor([[5, 0, 3, 0]])
    assert padding_mask(ids).tolist() == [[True, False, True, False]]


def test_match_score_gradient_is_finite_at_zero_distance():
    a = torch.ones(3, 4, requires_grad=True)
    score = euclidean_match_score(a, a.detach().clone())
    assert torch.allclose(score, torch.full((3,), 1.0 / (1.0 + 1e-3)), atol=1e-4)
    score.sum().backward()
    assert torch.isfinite(a.grad).all()


def test_exact_match_flags_mark_tokens_found_among_the_other_texts_valid_tokens():
    from models.layers import exact_match_flags

    ids = torch.tensor([[5, 7, 9, 0], [3, 3, 0, 0]])  # (B, L), 0 = padding
    other = torch.tensor([[9, 5, 0], [4, 0, 0]])  # (B, Lo)
    flags = exact_match_flags(ids, ids != 0, other, other != 0)
    assert flags.tolist() == [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    # padding never matches padding, and a masked-out token of the other text matches nothing
    masked = exact_match_flags(ids, ids != 0, other, torch.tensor([[False, True, False], [True, False, False]]))
    assert masked.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
