"""Masked reductions and small layers shared by every model family.

Every softmax, max and mean over a padded axis goes through this module, so the rule
"padding never influences a valid position" lives in one place. Masks are boolean tensors,
True at valid positions, passed explicitly (AllenNLP style).

Fill values are large *finite* negatives (not -inf): ONNX export and fp16 stay finite, and a
fully padded row gives a finite (uniform) softmax instead of NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Large enough to vanish after exp() in fp32 next to any real score, small enough for fp16.
MASK_FILL = -1.0e4


def padding_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """True where `ids` holds a real token. Works for (B, L) and (B, K, L)."""
    return ids != pad_id


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over `dim` that gives exactly zero weight to masked-out positions.

    A row with no valid position returns all zeros (not NaN), so it contributes nothing.
    `mask` must broadcast to `scores`.
    """
    mask = mask.to(torch.bool)
    filled = scores.masked_fill(~mask, MASK_FILL)
    probs = torch.softmax(filled, dim=dim)
    # Zero the masked positions explicitly: for a fully padded row softmax is uniform over
    # fill values, which must not leak weight onto padding.
    return probs * mask.to(probs.dtype)


def masked_max(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Max over `dim` taking only valid positions; an all-padded slice yields 0."""
    mask = mask.to(torch.bool)
    filled = values.masked_fill(~mask, MASK_FILL)
    out = filled.max(dim=dim).values
    any_valid = mask.any(dim=dim)
    return out * any_valid.to(out.dtype)


def masked_max_with_index(values: torch.Tensor, mask: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Like `masked_max` but also returns the argmax index along `dim` (0 when all padded)."""
    mask = mask.to(torch.bool)
    filled = values.masked_fill(~mask, MASK_FILL)
    out, index = filled.max(dim=dim)
    any_valid = mask.any(dim=dim)
    return out * any_valid.to(out.dtype), index


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean over valid positions of `dim`; an all-padded slice yields 0 (not NaN)."""
    m = mask.to(values.dtype)
    total = (values * m).sum(dim=dim)
    count = m.sum(dim=dim).clamp(min=1.0)
    return total / count


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over valid positions of `dim`."""
    return (values * mask.to(values.dtype)).sum(dim=dim)


def exact_match_flags(ids: torch.Tensor, mask: torch.Tensor, other_ids: torch.Tensor,
                      other_mask: torch.Tensor) -> torch.Tensor:
    """1.0 where a valid token of `ids` (B, L) occurs among the valid tokens of `other_ids`
    (B, Lo), else 0.0 (padding always 0) -> (B, L). The exact-match feature of DrQA and DIIN,
    computed from the ids so the served graph needs no extra input."""
    same = ids.unsqueeze(2) == other_ids.unsqueeze(1)  # (B, L, Lo)
    valid = mask.unsqueeze(2) & other_mask.unsqueeze(1)  # (B, L, Lo)
    return (same & valid).to(torch.float32).amax(dim=-1)  # (B, L)


def zero_padding(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero the padded positions of a (B, L, D) map, so the next convolution sees zeros there
    whatever padding length the batch happens to have."""
    return hidden * mask.unsqueeze(-1).to(hidden.dtype)


class Conv1dSame(nn.Module):
    """Width-`k` 1-d convolution over (B, L, D) with 'same' output length (odd `k`).

    Input positions that are padding must already be zero (see `zero_padding`); the output
    at padded positions is garbage and must be masked by the caller.
    """

    def __init__(self, in_dim: int, out_dim: int, kernel_size: int, bias: bool = True) -> None:
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"Conv1dSame needs an odd kernel size, got {kernel_size}")
        self.conv = nn.Conv1d(in_dim, out_dim, kernel_size, padding=kernel_size // 2, bias=bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: (B, L, D_in) -> (B, L, D_out)
        return self.conv(hidden.transpose(1, 2)).transpose(1, 2)


def cosine_similarity(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine over the last axis, finite for zero vectors."""
    num = (a * b).sum(-1)
    den = torch.sqrt((a * a).sum(-1) + eps) * torch.sqrt((b * b).sum(-1) + eps)
    return num / den


def euclidean_match_score(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """ABCNN match score 1 / (1 + ||a - b||), with eps inside the sqrt so the gradient is
    finite at zero distance (public reimplementations produce NaN there)."""
    dist = torch.sqrt(((a - b) ** 2).sum(-1) + eps)
    return 1.0 / (1.0 + dist)


def classifier_head(in_dim: int, hidden_dim: int, num_labels: int, dropout: float) -> nn.Sequential:
    """MLP head used by every family: dropout -> Linear -> tanh -> dropout -> Linear."""
    if hidden_dim <= 0:
        return nn.Sequential(nn.Dropout(dropout), nn.Linear(in_dim, num_labels))
    return nn.Sequential(
        nn.Dropout(dropout),
        nn.Linear(in_dim, hidden_dim),
        nn.Tanh(),
        nn.Dropout(dropout),
        nn.Linear(hidden_dim, num_labels),
    )


def pair_features(vx: torch.Tensor, vy: torch.Tensor) -> torch.Tensor:
    """Symmetric matching features [vx, vy, vx*vy, |vx-vy|] -> (B, 4D)."""
    return torch.cat([vx, vy, vx * vy, (vx - vy).abs()], dim=-1)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
                  bias_log_probs: torch.Tensor | None = None) -> torch.Tensor:
    """The label loss every family trains with. With `bias_log_probs` (B, C), the log-probabilities
    of a bias-only model (e.g. one that sees the hypothesis alone), it is the product-of-experts
    loss (Clark et al. 2019; He et al. 2019): cross-entropy of logits + log p_bias, so an example
    the bias already gets right gives the network little gradient and what it learns is what the
    bias cannot. Only training sees the bias; inference uses the logits alone."""
    if bias_log_probs is not None:
        logits = logits + bias_log_probs.to(logits.dtype)  # (B, C)
    return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
