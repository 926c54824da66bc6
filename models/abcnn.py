"""BCNN and ABCNN-1/2/3: attention-based convolutional networks for sentence pairs
(Yin, Schütze, Xiang and Zhou, TACL 2016, sections 3-4).

One class, four registered architectures (`ABCNNConfig.variant`):

    bcnn     two weight-sharing wide-convolution + average-pooling towers, no attention (sec. 3)
    abcnn-1  attention feature maps as a second input channel of each convolution (sec. 4.1)
    abcnn-2  attention-weighted w-ap pooling of each convolution output (sec. 4.2)
    abcnn-3  both, in every block (sec. 4.3)

s0 is the premise and s1 the hypothesis. Each keeps its own length (L0, L1) instead of both
being padded to max(s0, s1) as in the paper; with explicit masks the result is the same.

Decisions the paper leaves open (binding notes: /work/shared/design/models.md, "ABCNN"):

- ABCNN-1 and dynamic shapes. The paper's W in R^{d x s} depends on the sentence length. Here
  each block has ONE W of shape (d, max_length), shared by both sentences (footnote 2), sliced
  to the batch's length at run time: F0a = W[:, :L1] A^T, F1a = W[:, :L0] A. Padded entries of
  A are exactly 0, so padded columns of W contribute nothing and an example's output does not
  depend on how far its batch is padded. Both ids tensors are truncated to `max_length`
  in-graph at the start of `forward` (a plain slice, exportable), so a longer input can never
  index past W; the service also truncates to the bundle's max lengths. Truncation applies
  to every variant, so `max_length` means "longest input the network reads" everywhere.
- ABCNN-2 weights. a0 = row sums of A (units of s0), a1 = column sums (units of s1), over
  valid positions only, each normalised to sum to 1 over its sentence's valid positions (as
  the released code did); w-ap is then the weighted *sum* over each window of w columns.
- all-ap. The column mean over the valid columns of a block's convolution output (the input
  layer: of the embeddings). In a block with ABCNN-2 attention it is the attention-weighted
  mean over those columns (the weights already sum to 1); otherwise a one-block ABCNN-2 would
  compute exactly BCNN, the attention reaching only a w-ap that nothing reads.
- Wide convolution: pad w-1 zeros on each side, output length L + w - 1, tanh. An output
  column is valid iff its window covers a valid token: positions < len + w - 1, and none for
  an empty sentence (so a fully padded example contributes zeros, not tanh(bias)).
- Output layer: per layer (input layer and every block) the cosine and the match score of
  the two all-ap vectors (the paper's two TE features), plus the all-ap vectors themselves
  when `use_pooled_vectors`; then logistic regression (`head_hidden=0`) or an MLP. The
  paper's 24 hand-made linguistic features are not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from core.tasks import TaskForm, entailment
from models.base import PAD_ID, NetworkConfig, TextClassifier, register
from models.layers import (
    classifier_head,
    cosine_similarity,
    euclidean_match_score,
    masked_mean,
    masked_sum,
    zero_padding,
)

VARIANTS = ("bcnn", "abcnn-1", "abcnn-2", "abcnn-3")
# Floor of an ABCNN-2 normaliser: only reached by an empty sentence, whose weights are all 0.
WEIGHT_SUM_FLOOR = 1e-6


@dataclass
class ABCNNConfig(NetworkConfig):
    task: str = entailment.TASK.name  # a config without a task does the pair task entailment
    variant: str = "bcnn"  # "bcnn" | "abcnn-1" | "abcnn-2" | "abcnn-3"
    num_filters: int = 50  # d_1: convolution output width of every block
    kernel_size: int = 3  # w: filter width
    num_blocks: int = 1  # convolution-pooling blocks
    max_length: int = 64  # longest input read (ids are truncated); ABCNN-1's W is (d, max_length)
    head_hidden: int = 0  # 0 = logistic regression as in the paper, else an MLP
    match_eps: float = 1e-6  # inside the sqrt of the match score, so its gradient is finite
    use_pooled_vectors: bool = True  # also feed the all-ap vectors to the output layer

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown ABCNN variant {self.variant!r}; expected one of {list(VARIANTS)}")
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        if self.kernel_size < 1 or self.max_length < 1 or self.num_filters < 1:
            raise ValueError("kernel_size, max_length and num_filters must be >= 1")

    @property
    def attends_input(self) -> bool:
        return self.variant in ("abcnn-1", "abcnn-3")

    @property
    def attends_pooling(self) -> bool:
        return self.variant in ("abcnn-2", "abcnn-3")


def attention_matrix(x0: torch.Tensor, mask0: torch.Tensor, x1: torch.Tensor, mask1: torch.Tensor,
                     eps: float) -> torch.Tensor:
    """A[i, j] = match score of column i of s0 and column j of s1 (eq. 2), exactly 0 where
    either is padding."""
    scores = euclidean_match_score(x0.unsqueeze(2), x1.unsqueeze(1), eps=eps)  # (B, L0, L1)
    valid_pairs = mask0.unsqueeze(2) & mask1.unsqueeze(1)  # (B, L0, L1)
    return scores.masked_fill(~valid_pairs, 0.0)  # (B, L0, L1)


def unit_weights(attention: torch.Tensor, mask0: torch.Tensor, mask1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ABCNN-2 attention weight of every unit: row sums of A for s0, column sums for s1, each
    normalised to sum to 1 over its sentence's valid positions (0 on padding)."""
    row_sums = masked_sum(attention, mask1.unsqueeze(1), dim=2) * mask0  # (B, L0)
    col_sums = masked_sum(attention, mask0.unsqueeze(2), dim=1) * mask1  # (B, L1)
    weights0 = row_sums / masked_sum(row_sums, mask0, dim=1).clamp(min=WEIGHT_SUM_FLOOR).unsqueeze(1)  # (B, L0)
    weights1 = col_sums / masked_sum(col_sums, mask1, dim=1).clamp(min=WEIGHT_SUM_FLOOR).unsqueeze(1)  # (B, L1)
    return weights0, weights1


def wide_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Mask of a wide convolution's output: column t is valid iff its window (input columns
    t-w+1 .. t) holds a valid token."""
    padded = F.pad(mask.to(torch.float32).unsqueeze(1), (width - 1, width - 1))  # (B, 1, L + 2w - 2)
    return F.max_pool1d(padded, width, stride=1).squeeze(1) > 0  # (B, L + w - 1)


def window_pool(columns: torch.Tensor, width: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """w-ap: column j of the output pools columns j .. j+w-1 of a wide convolution's output,
    back to the convolution's input length. Plain: their mean. With ABCNN-2 `weights`: the sum
    of the weighted columns (section 4.2)."""
    if weights is not None:
        columns = columns * weights.unsqueeze(-1)  # (B, L + w - 1, F)
    pooled = F.avg_pool1d(columns.transpose(1, 2), width, stride=1).transpose(1, 2)  # (B, L, F)
    return pooled * width if weights is not None else pooled


class BlockOutput(NamedTuple):
    vector0: torch.Tensor  # (B, F): all-ap of s0, to the output layer
    vector1: torch.Tensor  # (B, F)
    pooled0: torch.Tensor | None  # (B, L0, F): w-ap of s0, the next block's input (None if last)
    pooled1: torch.Tensor | None  # (B, L1, F)


class ABCNNBlock(nn.Module):
    """One convolution-pooling block, applied to both sentences with the same weights."""

    def __init__(self, in_dim: int, config: ABCNNConfig) -> None:
        super().__init__()
        self.kernel_size = config.kernel_size
        self.match_eps = config.match_eps
        self.attends_pooling = config.attends_pooling
        if config.attends_input:
            # One W for both sentences (footnote 2), sliced to the batch length at run time.
            self.attention_map = nn.Parameter(torch.empty(in_dim, config.max_length))
            nn.init.xavier_uniform_(self.attention_map)
        else:
            self.attention_map = None
        channels = 2 if config.attends_input else 1
        # A 2-channel (d x w) filter over [representation; attention map] is a 1-d convolution
        # over the 2d stacked features.
        self.conv = nn.Conv1d(channels * in_dim, config.num_filters, config.kernel_size,
                              padding=config.kernel_size - 1)

    def wide_conv(self, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, D) -> tanh wide convolution (B, L + w - 1, F), zero on invalid columns, and its mask."""
        hidden = zero_padding(hidden, mask)  # (B, L, D)
        out = torch.tanh(self.conv(hidden.transpose(1, 2))).transpose(1, 2)  # (B, L + w - 1, F)
        out_mask = wide_mask(mask, self.kernel_size)  # (B, L + w - 1)
        return zero_padding(out, out_mask), out_mask

    def attention_inputs(self, x0: torch.Tensor, mask0: torch.Tensor, x1: torch.Tensor,
                         mask1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ABCNN-1: stack each representation map with its attention feature map (eqs. 3-4)."""
        attention = attention_matrix(x0, mask0, x1, mask1, self.match_eps)  # (B, L0, L1)
        len0, len1 = x0.shape[1], x1.shape[1]
        # F0a = W A^T and F1a = W A, written column-per-row: (W A^T)^T = A W^T.
        features0 = attention @ self.attention_map[:, :len1].t()  # (B, L0, D)
        features1 = attention.transpose(1, 2) @ self.attention_map[:, :len0].t()  # (B, L1, D)
        stacked0 = torch.cat([x0, zero_padding(features0, mask0)], dim=-1)  # (B, L0, 2D)
        stacked1 = torch.cat([x1, zero_padding(features1, mask1)], dim=-1)  # (B, L1, 2D)
        return stacked0, stacked1

    def forward(self, x0: torch.Tensor, mask0: torch.Tensor, x1: torch.Tensor, mask1: torch.Tensor,
                pool: bool = True) -> BlockOutput:
        x0, x1 = zero_padding(x0, mask0), zero_padding(x1, mask1)  # (B, L0, D), (B, L1, D)
        if self.attention_map is not None:
            x0, x1 = self.attention_inputs(x0, mask0, x1, mask1)  # (B, L0, 2D), (B, L1, 2D)
        conv0, conv_mask0 = self.wide_conv(x0, mask0)  # (B, L0 + w - 1, F)
        conv1, conv_mask1 = self.wide_conv(x1, mask1)  # (B, L1 + w - 1, F)

        if self.attends_pooling:
            attention = attention_matrix(conv0, conv_mask0, conv1, conv_mask1, self.match_eps)  # (B, L0+w-1, L1+w-1)
            weights0, weights1 = unit_weights(attention, conv_mask0, conv_mask1)  # (B, L0+w-1), (B, L1+w-1)
            # Weights sum to 1 over valid columns: the weighted sum is a weighted all-ap.
            vector0 = masked_sum(conv0 * weights0.unsqueeze(-1), conv_mask0.unsqueeze(-1), dim=1)  # (B, F)
            vector1 = masked_sum(conv1 * weights1.unsqueeze(-1), conv_mask1.unsqueeze(-1), dim=1)  # (B, F)
        else:
            weights0 = weights1 = None
            vector0 = masked_mean(conv0, conv_mask0.unsqueeze(-1), dim=1)  # (B, F)
            vector1 = masked_mean(conv1, conv_mask1.unsqueeze(-1), dim=1)  # (B, F)

        if not pool:  # last block: only its all-ap vectors are read
            return BlockOutput(vector0, vector1, None, None)
        pooled0 = zero_padding(window_pool(conv0, self.kernel_size, weights0), mask0)  # (B, L0, F)
        pooled1 = zero_padding(window_pool(conv1, self.kernel_size, weights1), mask1)  # (B, L1, F)
        return BlockOutput(vector0, vector1, pooled0, pooled1)


@register("bcnn", forms=(TaskForm.PAIR,), variant="bcnn",
          description="BCNN (Yin et al. 2016): Siamese wide CNN with average pooling, no attention")
@register("abcnn-1", forms=(TaskForm.PAIR,), variant="abcnn-1",
          description="ABCNN-1 (Yin et al. 2016): attention feature maps as a second convolution input channel")
@register("abcnn-2", forms=(TaskForm.PAIR,), variant="abcnn-2",
          description="ABCNN-2 (Yin et al. 2016): attention-weighted pooling of the convolution output")
@register("abcnn-3", forms=(TaskForm.PAIR,), variant="abcnn-3",
          description="ABCNN-3 (Yin et al. 2016): attention on both convolution input and pooling")
class ABCNN(TextClassifier):
    config_class = ABCNNConfig

    def __init__(self, config: ABCNNConfig) -> None:
        super().__init__(config)
        if self.task.form is not TaskForm.PAIR or not self.task.labelled:
            raise ValueError(f"ABCNN models sentence pairs (a labelled pair task), not {config.task!r}")
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=PAD_ID)
        in_dims = [config.embedding_dim] + [config.num_filters] * (config.num_blocks - 1)
        self.blocks = nn.ModuleList(ABCNNBlock(d, config) for d in in_dims)
        num_layers = config.num_blocks + 1  # the input layer and every block
        head_in = 2 * num_layers  # cosine and match score per layer
        if config.use_pooled_vectors:
            head_in += 2 * (config.embedding_dim + config.num_blocks * config.num_filters)
        self.head = classifier_head(head_in, config.head_hidden, config.num_labels, config.dropout)

    def layer_vectors(self, premise_ids: torch.Tensor, premise_mask: torch.Tensor, hypothesis_ids: torch.Tensor,
                      hypothesis_mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """all-ap vectors (s0, s1) of the input layer and of every block, in order."""
        max_length = self.config.max_length
        ids0, mask0 = premise_ids[:, :max_length], premise_mask[:, :max_length]  # (B, L0)
        ids1, mask1 = hypothesis_ids[:, :max_length], hypothesis_mask[:, :max_length]  # (B, L1)
        x0 = zero_padding(self.embeddings(ids0), mask0)  # (B, L0, E)
        x1 = zero_padding(self.embeddings(ids1), mask1)  # (B, L1, E)
        layers = [(masked_mean(x0, mask0.unsqueeze(-1), dim=1), masked_mean(x1, mask1.unsqueeze(-1), dim=1))]
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            out = block(x0, mask0, x1, mask1, pool=index < last)
            layers.append((out.vector0, out.vector1))  # (B, F) each
            x0, x1 = out.pooled0, out.pooled1  # (B, L0, F), (B, L1, F): block index+1's input
        return layers

    def similarity_features(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Cosine and match score of each layer's two all-ap vectors -> (B, 2 * layers)."""
        scores = []
        for v0, v1 in layers:
            scores.append(cosine_similarity(v0, v1))  # (B,)
            scores.append(euclidean_match_score(v0, v1, eps=self.config.match_eps))  # (B,)
        return torch.stack(scores, dim=-1)  # (B, 2 * layers)

    def forward(self, premise_ids: torch.Tensor, premise_mask: torch.Tensor, hypothesis_ids: torch.Tensor,
                hypothesis_mask: torch.Tensor) -> torch.Tensor:
        layers = self.layer_vectors(premise_ids, premise_mask, hypothesis_ids, hypothesis_mask)
        features = [self.similarity_features(layers)]  # (B, 2 * layers)
        if self.config.use_pooled_vectors:
            features.extend(v for pair in layers for v in pair)  # (B, E) or (B, F) each
        return self.head(torch.cat(features, dim=-1))  # (B, C)
