"""ACT: Attentive Convolutional Transformer (Li et al., AAAI 2021), and the plain
Transformer-encoder baseline it is compared with (Table 5), for single-text classification.

ACT layer (paper section 2.1-2.2), per head h with d_h = d_w / num_heads:

    Q_h = W^Q_h Q                                   (L, d_h)
    M_h = GELU(conv_n(Q_h; F_h) + b_h)               (L, m)      eq. 1-2
    O_h = F_h^T M_h                                  (L, n*d_h)  eq. 3
    O   = LayerNorm(Q + W^O Cat(O_1..O_h))           (L, d_w)    eq. 5 + residual
    g   = W^O Cat(F_1^T max(M_1), .., F_h^T max(M_h)) (d_w)       eq. 4, top layer only

Global attention (eq. 6) with learned absolute position embeddings P (d_p) and a learned
context vector c (d_a):

    alpha = softmax_valid( c^T GELU(W_o O + W_p P) + O^T g / sqrt(d_w) )
    r     = O alpha                                  (d_w)

then FC(fc_dim) + softmax, trained with cross-entropy + center_loss_weight * center loss.

Decisions the paper leaves open (there is no public code):
- Local output O_h = F_h^T M_h is computed per position: every filter's n*d_h weights act as
  its value vector, so a position's output is the n-gram window re-expressed in filter space
  (n*d_h dims). This is the paper's shape (O in R^{n d_w x l}, W^O in R^{d_w x n d_w}); a
  folded transposed convolution (col2im, summing the n slices back onto the positions they
  came from) would give d_h dims and contradict W^O's shape, so we do not fold. Padding
  neither contributes nor receives: Q_h is zeroed at padded positions before the convolution
  (so a valid position next to padding sees the same zeros as at a sequence end), M_h is
  zeroed there before F^T M and the max, and every layer's output is zeroed there.
- Convolution windows are centred ("same" padding, odd kernel) rather than eq. 2's forward
  window q_j..q_{j+n-1}, so every position keeps an output and the residual lines up.
  Receptive field of the local output after N layers: N*(n-1)+1 tokens.
- All heads are one grouped Conv1d (groups = num_heads): same parameters as h separate
  convolutions, one kernel launch. W^Q is bias-free (eq. 5); the filters have a bias (eq. 2).
- g goes through the same W^O as the local outputs (eq. 6 needs g in R^{d_w}), with no
  residual or LayerNorm (there is no per-position input to add it to).
- ACT layers have no feed-forward sublayer: the paper describes none, and Table 5's 1.49M
  parameters match the count without one (see tests/unit/test_act.py for our figures).
- Position embeddings P are used only in the global attention (eq. 6), not added to the
  encoder input: ACT's encoder sees order only through its convolutions. Inputs longer than
  `max_length` are truncated in-graph (ids sliced to max_length at the start of forward).
- Center loss (Wen et al. 2016) is 0.5 * mean_i ||r_i - c_{y_i}||^2 on r, the features fed to
  the classifier head; the centers are an nn.Parameter learned by gradient (the paper gives
  them their own learning rate, 0.1: the training recipe can put `class_centers` in its own
  optimizer group).
- Classifier: models.layers.classifier_head (dropout, FC(fc_dim), tanh, dropout, linear);
  the paper's FC uses GELU, the shared head uses tanh for every family.

Transformer baseline ("transformer"): same d_w, heads, layers, position table and classifier
head (and the same loss); learned position embeddings are added to the input embeddings;
post-LayerNorm layers (Vaswani et al.) of masked multi-head self-attention and a GELU FFN
(ffn_dim, 0 = 4*d_w); pooling is a masked *mean* over valid positions. Written here rather
than nn.TransformerEncoder, whose inference fast path (nested tensors) changes outputs at
padded positions and does not export.

Both variants are one network class with a `variant` switch (the encoder and pooler differ,
the embeddings, head and loss are shared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from core.tasks import TaskForm
from models.base import PAD_ID, NetworkConfig, TextClassifier, register
from models.layers import (
    classifier_head,
    cross_entropy,
    masked_max,
    masked_mean,
    masked_softmax,
    padding_mask,
    zero_padding,
)

VARIANTS = ("act", "transformer")


@dataclass
class ACTConfig(NetworkConfig):
    variant: str = "act"  # "act" | "transformer"
    model_dim: int = 300  # d_w; a linear projection maps embeddings to it when they differ
    num_heads: int = 6
    num_filters: int = 100  # m, per head
    kernel_size: int = 3  # n, odd
    num_layers: int = 3
    max_length: int = 512  # rows of the position table; longer inputs are truncated
    fc_dim: int = 100
    center_loss_weight: float = 0.001
    ffn_dim: int = 0  # transformer only; 0 = 4 * model_dim
    position_dim: int = 60  # d_p, ACT global attention
    attention_dim: int = 200  # d_a, ACT global attention


@dataclass
class ACTFeatures:
    """What the encoder and pooler produce for one batch (for the loss, tests and analysis)."""

    features: torch.Tensor  # (B, d_w): r, fed to the classifier head
    hidden_states: torch.Tensor  # (B, L, d_w): top-layer local outputs, zero at padding
    mask: torch.Tensor  # (B, L) after truncation
    attention_weights: torch.Tensor | None  # (B, L) ACT global attention; None for transformer


# ---------------------------------------------------------------------------------------------
# ACT encoder


class ACTAttentiveConvolution(nn.Module):
    """Multi-head attentive convolution (eqs. 1-5): local outputs and, on request, the global
    representation g."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.model_dim // config.num_heads
        self.num_filters = config.num_filters
        self.kernel_size = config.kernel_size
        self.query = nn.Linear(config.model_dim, config.model_dim, bias=False)  # W^Q, all heads
        # F_h for every head: weight (h*m, d_h, n), bias (h*m,)
        self.filters = nn.Conv1d(
            config.model_dim,
            config.num_heads * config.num_filters,
            config.kernel_size,
            padding=config.kernel_size // 2,
            groups=config.num_heads,
        )
        self.output = nn.Linear(config.num_heads * config.kernel_size * self.head_dim, config.model_dim)  # W^O

    def filter_values(self) -> torch.Tensor:
        """Each filter's weights as its value vector: (h, m, d_h*n)."""
        return self.filters.weight.reshape(self.num_heads, self.num_filters, self.head_dim * self.kernel_size)

    def feature_map(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """M for every head, (B, h, L, m), zero at padded positions."""
        batch, length, _ = hidden.shape
        queries = zero_padding(self.query(hidden), mask)  # (B, L, d_w)
        conv = self.filters(queries.transpose(1, 2))  # (B, h*m, L)
        feature_map = F.gelu(conv).transpose(1, 2)  # (B, L, h*m)
        feature_map = zero_padding(feature_map, mask)
        return feature_map.reshape(batch, length, self.num_heads, self.num_filters).transpose(1, 2)  # (B, h, L, m)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(W^O Cat(O_h) (B, L, d_w), M (B, h, L, m))."""
        batch, length, _ = hidden.shape
        feature_map = self.feature_map(hidden, mask)  # (B, h, L, m)
        local = torch.matmul(feature_map, self.filter_values())  # (B, h, L, n*d_h)
        local = local.transpose(1, 2).reshape(batch, length, -1)  # (B, L, h*n*d_h)
        return self.output(local), feature_map

    def global_representation(self, feature_map: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """g = W^O Cat(F_h^T max_valid(M_h)) (eq. 4), (B, d_w)."""
        batch = feature_map.shape[0]
        pooled = masked_max(feature_map, mask[:, None, :, None], dim=2)  # (B, h, m)
        values = torch.matmul(pooled.unsqueeze(2), self.filter_values()).squeeze(2)  # (B, h, n*d_h)
        return self.output(values.reshape(batch, -1))  # (B, d_w)


class ACTLayer(nn.Module):
    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.attention = ACTAttentiveConvolution(config)
        self.dropout = nn.Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.model_dim)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        local, feature_map = self.attention(hidden, mask)  # (B, L, d_w), (B, h, L, m)
        hidden = self.norm(hidden + self.dropout(local))
        return zero_padding(hidden, mask), feature_map


class ACTEncoder(nn.Module):
    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ACTLayer(config) for _ in range(config.num_layers))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(top-layer local outputs O (B, L, d_w), global representation g (B, d_w))."""
        for layer in self.layers:
            hidden, feature_map = layer(hidden, mask)
        top = self.layers[-1].attention
        return hidden, top.global_representation(feature_map, mask)


class ACTGlobalAttention(nn.Module):
    """Eq. 6: attention over valid positions from local outputs, positions and g."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.positions = nn.Embedding(config.max_length, config.position_dim)  # W^p
        self.local_proj = nn.Linear(config.model_dim, config.attention_dim)  # W_o (+ the bias)
        self.position_proj = nn.Linear(config.position_dim, config.attention_dim, bias=False)  # W_p
        self.context = nn.Linear(config.attention_dim, 1, bias=False)  # c
        self.scale = 1.0 / math.sqrt(config.model_dim)

    def forward(
        self, hidden: torch.Tensor, global_vector: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(r (B, d_w), attention weights (B, L))."""
        positions = self.positions(torch.arange(hidden.shape[1], device=hidden.device))  # (L, d_p)
        keys = F.gelu(self.local_proj(hidden) + self.position_proj(positions))  # (B, L, d_a)
        scores = self.context(keys).squeeze(-1)  # (B, L)
        scores = scores + torch.einsum("bld,bd->bl", hidden, global_vector) * self.scale  # (B, L)
        weights = masked_softmax(scores, mask, dim=-1)  # (B, L)
        return torch.einsum("bl,bld->bd", weights, hidden), weights


# ---------------------------------------------------------------------------------------------
# Transformer baseline encoder


class TransformerSelfAttention(nn.Module):
    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.model_dim // config.num_heads
        self.qkv = nn.Linear(config.model_dim, 3 * config.model_dim)
        self.output = nn.Linear(config.model_dim, config.model_dim)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, dim = hidden.shape
        qkv = self.qkv(hidden).reshape(batch, length, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)  # each (B, h, L, d_h)
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, h, L, L)
        weights = masked_softmax(scores, mask[:, None, None, :], dim=-1)  # keys: valid only
        context = torch.matmul(weights, value)  # (B, h, L, d_h)
        return self.output(context.transpose(1, 2).reshape(batch, length, dim))  # (B, L, d_w)


class TransformerLayer(nn.Module):
    """Post-LayerNorm encoder layer (Vaswani et al. 2017)."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        ffn_dim = config.ffn_dim or 4 * config.model_dim
        self.attention = TransformerSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.model_dim)
        self.ffn = nn.Sequential(nn.Linear(config.model_dim, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, config.model_dim))
        self.ffn_norm = nn.LayerNorm(config.model_dim)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self.attention_norm(hidden + self.dropout(self.attention(hidden, mask)))
        hidden = self.ffn_norm(hidden + self.dropout(self.ffn(hidden)))
        return zero_padding(hidden, mask)


class TransformerEncoder(nn.Module):
    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.positions = nn.Embedding(config.max_length, config.model_dim)  # added to the input
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_layers))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = self.positions(torch.arange(hidden.shape[1], device=hidden.device))  # (L, d_w)
        hidden = zero_padding(hidden + positions, mask)
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return hidden  # (B, L, d_w)


# ---------------------------------------------------------------------------------------------
# The network


@register(
    "act",
    forms=(TaskForm.TEXT,),
    description="ACT (Li et al. 2021): multi-head attentive convolution, global attention, center loss",
    variant="act",
)
@register(
    "transformer",
    forms=(TaskForm.TEXT,),
    description="Transformer-encoder baseline at ACT's sizes (masked self-attention + FFN, mean pooling)",
    variant="transformer",
)
class ACTForClassification(TextClassifier):
    config_class = ACTConfig

    def __init__(self, config: ACTConfig) -> None:
        super().__init__(config)
        if self.task.form is not TaskForm.TEXT or not self.task.labelled:
            raise ValueError(f"ACT reads one text (a labelled TEXT task), not {config.task!r}")
        if config.variant not in VARIANTS:
            raise ValueError(f"unknown ACT variant {config.variant!r}; expected one of {VARIANTS}")
        if config.model_dim % config.num_heads:
            raise ValueError(f"model_dim {config.model_dim} is not divisible by num_heads {config.num_heads}")
        if config.kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd (centred windows), got {config.kernel_size}")
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=0)
        self.embedding_proj = (
            nn.Identity() if config.embedding_dim == config.model_dim else nn.Linear(config.embedding_dim, config.model_dim)
        )
        self.embedding_dropout = nn.Dropout(config.dropout)
        if config.variant == "act":
            self.encoder = ACTEncoder(config)
            self.pooler = ACTGlobalAttention(config)
        else:
            self.encoder = TransformerEncoder(config)
            self.pooler = None
        self.classifier = classifier_head(config.model_dim, config.fc_dim, config.num_labels, config.dropout)
        self.class_centers = nn.Parameter(torch.zeros(config.num_labels, config.model_dim))  # center loss

    def encode(self, input_ids: torch.Tensor, input_mask: torch.Tensor) -> ACTFeatures:
        max_length = self.config.max_length
        input_ids, mask = input_ids[:, :max_length], input_mask[:, :max_length]  # (B, L'), L' <= max_length
        hidden = self.embedding_dropout(self.embedding_proj(self.embeddings(input_ids)))  # (B, L', d_w)
        hidden = zero_padding(hidden, mask)
        if self.pooler is None:
            hidden = self.encoder(hidden, mask)  # (B, L', d_w)
            return ACTFeatures(masked_mean(hidden, mask.unsqueeze(-1), dim=1), hidden, mask, None)
        hidden, global_vector = self.encoder(hidden, mask)  # (B, L', d_w), (B, d_w)
        features, weights = self.pooler(hidden, global_vector, mask)  # (B, d_w), (B, L')
        return ACTFeatures(features, hidden, mask, weights)

    def forward(self, input_ids: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encode(input_ids, input_mask).features)  # (B, C)

    def label_parameters(self) -> list[str]:
        return super().label_parameters() + ["class_centers"]

    def center_loss(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """0.5 * mean over the batch of ||r_i - c_{y_i}||^2 (Wen et al. 2016)."""
        return 0.5 * (features - self.class_centers[labels]).pow(2).sum(-1).mean()

    def training_loss(self, ids: tuple[torch.Tensor, ...], labels: torch.Tensor,
                      evidence_targets: torch.Tensor | None = None,
                      bias_log_probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        (input_ids,) = ids
        encoded = self.encode(input_ids, padding_mask(input_ids, PAD_ID))
        logits = self.classifier(encoded.features)
        loss = cross_entropy(logits, labels, float(self.config.label_smoothing), bias_log_probs)
        loss = loss + self.config.center_loss_weight * self.center_loss(encoded.features, labels)
        return loss, logits

    def encoder_parameter_count(self) -> int:
        """Parameters of the encoder layers only (no word or position embeddings, pooler,
        head or centers): the vocabulary- and length-independent core that the two variants
        differ in."""
        layers = self.encoder.layers
        return sum(p.numel() for p in layers.parameters())
