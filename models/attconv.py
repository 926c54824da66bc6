"""AttConv: attentive convolution (Yin & Schütze, TACL 2018, sections 3 and 4.4).

A text tx is convolved together with an attentive context computed over a context text ty:

    light     e_ij = match(h^x_i, h^y_j)                       (eqs 1-3: dot, bilinear, additive)
              c^x_i = sum_j softmax_j(e_i) h^y_j                (eq 4, padded j excluded)
              h_new_i = tanh(W1 [h_{i-1}, h_i, h_{i+1}] + W2 c_i + b)   (eq 6)
    advanced  f_gconv(i) = g * u + (1 - g) * tanh(W_h i + b_h),  g = sigmoid(W_g i + b_g)  (eqs 7-9)
              source = f_mgran(H^x), focus = f_mgran(H^y)       (eqs 10-12, [width 1, width k])
              beneficiary = f_gconv(H^x) over width 1           (eq 13)
              c^x_i = sum_j softmax_j(match(source_i, focus_j)) focus_j
              h_new_i = tanh(W1 [bene_{i-1}, bene_i, bene_{i+1}] + W2 c_i + b)

Output: max-pool of h_new over the valid positions of tx, then `classifier_head`.

Task forms (core.tasks.TaskForm; the network never reads a task's name): one text (TEXT, e.g.
classification) is intra-context (ty = tx); a pair (PAIR, e.g. entailment) is extra-context (tx =
the second text, ty = the first: hypothesis and premise, as in the paper); a text and a list of
texts (CONTEXTS, e.g. verification) is multi-context (tx = claim, ty = evidence sentences),
context-wise or context-conc (section 4.4).

Decisions the paper leaves open (see /work/shared/design/models.md):
- The hidden states fed to the attentive convolution are the word embeddings (the paper's
  stack is embedding -> attentive convolution -> max-pool -> classifier), so d = embedding_dim
  and `hidden_dim` is the width of the attentive convolution's output.
- Dot match is scaled by 1/sqrt(d) (Transformer style). Unscaled, intra-context attention
  collapses onto the position itself (|h_i|^2 dominates) and 300-d scores saturate the
  softmax; the bilinear and additive matches learn their own scale and are not scaled.
- f_gconv keeps its input width (the gate mixes u_i with o_i, so both are d wide); source
  and focus are therefore 2d wide, the beneficiary d wide. Source and focus share their
  architecture but not their weights (query/key roles differ; with shared weights
  intra-context attention would again favour the position itself).
- `kernel_size` is both the attentive convolution's filter width and the phrase granularity of
  f_mgran (the paper uses 3 for both).
- direction="both" (pairs): one shared AttConv layer runs each text against the other and the
  classifier sees pair_features(v_x, v_y) = [v_x, v_y, v_x*v_y, |v_x-v_y|]; "single" is the
  paper's setup, only tx attends ty and the classifier sees v_x. For verification, "both" adds
  each evidence sentence attending the claim, max-pooled over all valid evidence tokens.
- Context-wise attribution: evidence k's score is the fraction of claim-vector dimensions whose
  element-wise max over evidences came from k. Context-conc attribution: the claim's attention
  mass on evidence k's tokens, averaged over valid claim positions, renormalised over valid
  evidences. Both are exactly 0 on padded evidence slots.
- Each evidence sentence is encoded on its own ((B*K, Le)) and only flattened to (B, K*Le) for
  attention, so the padding gap between evidences never reaches a convolution.
- No BatchNorm and no normalisation across the batch (the released code had both).
- exact_match (ours, off by default; DrQA/DIIN's exact-match feature): the paper's attention
  matches words by their vectors, so a name swapped for a similar one ("France" for "Germany")
  still finds a close match. The channel adds, per token, whether its id occurs in the other
  text (for context-wise verification: in that evidence sentence) and the share of its text's
  tokens that do, computed from the ids inside the graph. Rare words share the tokenizer's hash
  buckets, so two of them can match falsely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from core.tasks import TASKS, TaskForm
from models.base import PAD_ID, NetworkConfig, TextClassifier, register
from models.layers import (
    Conv1dSame,
    classifier_head,
    cross_entropy,
    exact_match_flags,
    masked_max,
    masked_max_with_index,
    masked_mean,
    masked_softmax,
    masked_sum,
    padding_mask,
    pair_features,
    zero_padding,
)

VARIANTS = ("light", "advanced")
MATCHES = ("dot", "bilinear", "additive")
DIRECTIONS = ("both", "single")
MULTI_CONTEXTS = ("wise", "conc")


@dataclass
class AttConvConfig(NetworkConfig):
    variant: str = "light"  # "light" (eqs 1-6) | "advanced" (eqs 7-13)
    match: str = "dot"  # "dot" | "bilinear" | "additive" (eqs 1-3)
    hidden_dim: int = 300  # output width of the attentive convolution
    kernel_size: int = 3  # attentive conv filter width and f_mgran phrase granularity
    direction: str = "both"  # pairs: "both" (symmetric features) | "single" (tx attends ty)
    multi_context: str = "wise"  # verification: "wise" (max over evidences) | "conc"
    head_hidden: int = 300  # classifier MLP hidden width (0 = logistic regression)
    # verification: weight of the auxiliary loss that makes evidence_scores point at the deciding
    # evidence (-log of its soft share of the context-wise max; conc: of its attention mass)
    evidence_loss_weight: float = 0.0
    evidence_loss_temperature: float = 0.1  # softness of the per-dimension "which slot wins"
    # Two word channels (Kim 2014's static + non-static): `embeddings` (pretrained, frozen by the
    # trainer) concatenated with `tuned_embeddings`, a trainable table for ids below this (the
    # words training sees, and the OOV buckets); above it the tuned channel repeats the static
    # vector, so a word training never saw looks like a seen word that kept its pretrained
    # vector. 0 = one table.
    tuned_vocab_size: int = 0
    # pairs and verification: a width-k conv over two features per token (does this token id
    # occur in the other text? what share of this text's tokens do?) added into eq 6's
    # pre-activation. Its weights start at zero, so a checkpoint trained without it starts this
    # network computing exactly what it computed.
    exact_match: bool = False
    TASK_FIELDS = ("multi_context", "evidence_loss_weight", "evidence_loss_temperature")
    ADDED_FIELDS = ("exact_match",)

    @property
    def word_dim(self) -> int:
        """Width of a word's vector as the attentive convolution sees it."""
        return self.embedding_dim * (2 if self.tuned_vocab_size else 1)

    def __post_init__(self) -> None:
        for name, allowed in (("variant", VARIANTS), ("match", MATCHES), ("direction", DIRECTIONS),
                              ("multi_context", MULTI_CONTEXTS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"AttConvConfig.{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.kernel_size < 1 or self.kernel_size % 2 != 1:
            raise ValueError(f"AttConvConfig.kernel_size must be odd and positive, got {self.kernel_size}")
        if self.exact_match and self.task in TASKS and TASKS[self.task].form is TaskForm.TEXT:
            raise ValueError("AttConvConfig.exact_match needs two texts (a pair, or a text and a list of texts); "
                             "intra-context every token matches itself")


class AttConvMatch(nn.Module):
    """Matching scores e_ij between source positions and focus positions (eqs 1-3)."""

    def __init__(self, dim: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.scale = 1.0 / math.sqrt(dim)
        if kind == "bilinear":
            self.bilinear = nn.Linear(dim, dim, bias=False)  # W_e
        elif kind == "additive":
            self.source_proj = nn.Linear(dim, dim, bias=False)  # W_e
            self.focus_proj = nn.Linear(dim, dim, bias=False)  # U_e
            self.score = nn.Linear(dim, 1, bias=False)  # v_e

    def forward(self, source: torch.Tensor, focus: torch.Tensor) -> torch.Tensor:
        # source: (B, Lx, D), focus: (B, Ly, D) -> scores (B, Lx, Ly)
        if self.kind == "dot":
            return torch.matmul(source, focus.transpose(1, 2)) * self.scale
        if self.kind == "bilinear":
            return torch.matmul(source, self.bilinear(focus).transpose(1, 2))
        # additive: v^T tanh(W x_i + U y_j), broadcast over (i, j)
        hidden = torch.tanh(self.source_proj(source).unsqueeze(2) + self.focus_proj(focus).unsqueeze(1))  # (B, Lx, Ly, D)
        return self.score(hidden).squeeze(-1)  # (B, Lx, Ly)


class AttConvGatedConv(nn.Module):
    """f_gconv (eqs 7-9) over windows of `width` positions centred on u_i; keeps width d."""

    def __init__(self, dim: int, width: int) -> None:
        super().__init__()
        self.candidate = Conv1dSame(dim, dim, width)  # W_h, b_h
        self.gate = Conv1dSame(dim, dim, width)  # W_g, b_g

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # hidden: (B, L, D) with padding already zero, mask: (B, L)
        output = torch.tanh(self.candidate(hidden))  # (B, L, D) o_i
        gate = torch.sigmoid(self.gate(hidden))  # (B, L, D) g_i
        # the gate weights the unigram input u_i, as in the paper (a highway connection)
        mixed = gate * hidden + (1.0 - gate) * output  # (B, L, D)
        return zero_padding(mixed, mask)


class AttConvMultiGranular(nn.Module):
    """f_mgran (eqs 10-12): [f_gconv over width 1, f_gconv over width k] -> 2d wide."""

    def __init__(self, dim: int, width: int) -> None:
        super().__init__()
        self.unigram = AttConvGatedConv(dim, 1)
        self.phrase = AttConvGatedConv(dim, width)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # hidden: (B, L, D) -> (B, L, 2D)
        return torch.cat([self.unigram(hidden, mask), self.phrase(hidden, mask)], dim=-1)


class AttConvLayer(nn.Module):
    """One attentive convolutional layer, light or advanced.

    Split into `query` (source and beneficiary of tx), `focus` (of ty) and `forward` (attend and
    convolve) so callers can encode each text once and reuse it across evidence slots.
    """

    def __init__(self, config: AttConvConfig) -> None:
        super().__init__()
        dim = config.word_dim
        self.advanced = config.variant == "advanced"
        if self.advanced:
            self.source = AttConvMultiGranular(dim, config.kernel_size)
            self.focus_encoder = AttConvMultiGranular(dim, config.kernel_size)
            self.beneficiary = AttConvGatedConv(dim, 1)
            context_dim = 2 * dim
        else:
            context_dim = dim
        self.match = AttConvMatch(context_dim, config.match)
        self.local_conv = Conv1dSame(dim, config.hidden_dim, config.kernel_size)  # W1, b
        self.context_conv = Conv1dSame(context_dim, config.hidden_dim, 1, bias=False)  # W2
        if config.exact_match:
            # input channels: [flag, coverage] (AttConv.match_features)
            self.exact_match = Conv1dSame(2, config.hidden_dim, config.kernel_size, bias=False)  # zeroed by AttConv

    def query(self, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(source (B, L, Dc), beneficiary (B, L, D)) of tx; light uses H^x for both."""
        if self.advanced:
            return self.source(hidden, mask), self.beneficiary(hidden, mask)
        return hidden, hidden

    def focus(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Focus of ty (B, L, Dc): matched against the source and averaged into the context."""
        if self.advanced:
            return self.focus_encoder(hidden, mask)
        return hidden

    def forward(
        self,
        source: torch.Tensor,
        beneficiary: torch.Tensor,
        mask: torch.Tensor,
        focus: torch.Tensor,
        focus_mask: torch.Tensor,
        match_features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(new hidden states of tx (B, Lx, H), attention (B, Lx, Ly)). `match_features`
        (B, Lx, 2): AttConv.match_features of tx against ty, read when config.exact_match."""
        scores = self.match(source, focus)  # (B, Lx, Ly)
        attention = masked_softmax(scores, focus_mask.unsqueeze(1), dim=-1)  # (B, Lx, Ly)
        context = torch.matmul(attention, focus)  # (B, Lx, Dc)  eq 4
        # eq 6: width-k conv over tx plus width-1 conv over its attentive context, one tanh
        pre_activation = self.local_conv(beneficiary) + self.context_conv(context)  # (B, Lx, H)
        if match_features is not None:
            pre_activation = pre_activation + self.exact_match(match_features)  # (B, Lx, H)
        new = torch.tanh(pre_activation)  # (B, Lx, H)
        return zero_padding(new, mask), attention


def repeat_per_slot(tensor: torch.Tensor, count: int) -> torch.Tensor:
    """Repeat a per-example tensor (B, ...) once per evidence slot -> (B*K, ...), slot-major
    within each example, matching evidence_ids.reshape(B*K, Le)."""
    return tensor.unsqueeze(1).expand(-1, count, *([-1] * (tensor.dim() - 1))).flatten(0, 1)


def context_wise_max(claim_vectors: torch.Tensor, slot_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise max over valid evidence slots and each slot's share of the won dimensions.

    claim_vectors (B, K, H), slot_mask (B, K) -> (claim vector (B, H), evidence_scores (B, K)).
    Padded slots never win and score exactly 0.
    """
    vector, winner = masked_max_with_index(claim_vectors, slot_mask.unsqueeze(-1), dim=1)  # (B, H), (B, H)
    slots = torch.arange(claim_vectors.shape[1], device=claim_vectors.device)  # (K,)
    won = (winner.unsqueeze(1) == slots.view(1, -1, 1)).to(claim_vectors.dtype)  # (B, K, H)
    # a fully padded example's argmax defaults to slot 0: the slot mask removes it
    scores = won.mean(dim=-1) * slot_mask.to(claim_vectors.dtype)  # (B, K)
    return vector, scores


class AttConvPreTrainedModel(TextClassifier):
    """Weight initialisation shared by the AttConv network (HF-style `_init_weights`)."""

    config_class = AttConvConfig

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # unit expected norm per word, like normalised pretrained vectors
            nn.init.normal_(module.weight, std=module.embedding_dim ** -0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()


@register("attconv-light", forms=(TaskForm.TEXT, TaskForm.PAIR, TaskForm.CONTEXTS),
          description="Light attentive convolution (Yin & Schütze 2018, eqs 1-6)", variant="light")
@register("attconv-advanced", forms=(TaskForm.TEXT, TaskForm.PAIR, TaskForm.CONTEXTS),
          description="Advanced attentive convolution: gated multi-granular source/focus, beneficiary "
                      "(Yin & Schütze 2018, eqs 7-13)", variant="advanced")
class AttConv(AttConvPreTrainedModel):
    """Embedding -> attentive convolution -> masked max-pool -> classifier.

    forward, by the task's form (masks are boolean, True = token):
        TEXT      (input_ids, input_mask)                              -> logits
        PAIR      (premise_ids, premise_mask, hypothesis_ids, hypothesis_mask) -> logits
        CONTEXTS  (claim_ids, claim_mask, evidence_ids, evidence_mask) -> (logits, evidence_scores),
                  or logits alone for a task without a per-text output
    A task of another form, or an unlabelled one, is refused when the network is built.
    """

    def __init__(self, config: AttConvConfig) -> None:
        super().__init__(config)
        task = self.task
        if not task.labelled or task.form not in (TaskForm.TEXT, TaskForm.PAIR, TaskForm.CONTEXTS):
            raise ValueError(f"AttConv does labelled tasks of one text, a pair or a text and a list of texts, not "
                             f"{'unlabelled ' if not task.labelled else ''}{task.form.value} task {task.name!r}")
        self.form = task.form
        # a CONTEXTS task's graph returns the per-text scores after the logits, if it has them
        self.per_text = task.per_text is not None
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=0)
        if config.tuned_vocab_size:
            self.tuned_embeddings = nn.Embedding(config.tuned_vocab_size, config.embedding_dim, padding_idx=0)
        self.dropout = nn.Dropout(config.dropout)
        self.attconv = AttConvLayer(config)
        symmetric = self.form is not TaskForm.TEXT and config.direction == "both"
        feature_dim = config.hidden_dim * (4 if symmetric else 1)
        self.classifier = classifier_head(feature_dim, config.head_hidden, config.num_labels, config.dropout)
        self.apply(self._init_weights)
        if config.exact_match:
            nn.init.zeros_(self.attconv.exact_match.conv.weight)

    def forward(self, *inputs: torch.Tensor):
        if self.form is TaskForm.TEXT:
            return self.classify(*inputs)
        if self.form is TaskForm.PAIR:
            return self.entail(*inputs)
        if self.form is TaskForm.CONTEXTS:
            return self.verify(*inputs) if self.per_text else self.verify(*inputs)[0]
        raise ValueError(f"AttConv has no forward for {self.form.value} tasks")

    # ------------------------------------------------------------------------------------------

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # ids: (B, L) -> (B, L, D) (D = word_dim), zero at padding so no convolution sees padding length
        vectors = self.embeddings(ids)  # (B, L, E)
        limit = self.config.tuned_vocab_size
        if limit:
            tuned = self.tuned_embeddings(ids.clamp(max=limit - 1))  # (B, L, E)
            tuned = torch.where((ids < limit).unsqueeze(-1), tuned, vectors)
            vectors = torch.cat([vectors, tuned], dim=-1)  # (B, L, 2E)
        return zero_padding(self.dropout(vectors), mask)

    def match_features(self, ids: torch.Tensor, mask: torch.Tensor, other_ids: torch.Tensor,
                       other_mask: torch.Tensor) -> torch.Tensor | None:
        """Per token of ids (B, L): [does it occur in other_ids (B, Lo), the share of ids' tokens
        that do] -> (B, L, 2), zero at padding; None without the channel. The share lets a unit
        fire at an unmatched word only where the rest of the text is matched (a swapped name in
        the gold sentence), not wherever a distractor sentence leaves the claim unmatched."""
        if not self.config.exact_match:
            return None
        flags = exact_match_flags(ids, mask, other_ids, other_mask)  # (B, L)
        coverage = masked_mean(flags, mask, dim=1)  # (B,)
        shares = zero_padding(coverage.unsqueeze(1).expand_as(flags).unsqueeze(-1), mask)  # (B, L, 1)
        return torch.cat([flags.unsqueeze(-1), shares], dim=-1)  # (B, L, 2)

    def encode(self, hidden: torch.Tensor, mask: torch.Tensor, focus: torch.Tensor,
               focus_mask: torch.Tensor, match_features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tx (embedded) attends a prepared focus -> (max-pooled vector (B, H), attention)."""
        source, beneficiary = self.attconv.query(hidden, mask)
        new, attention = self.attconv(source, beneficiary, mask, focus, focus_mask, match_features)  # (B, Lx, H)
        return masked_max(new, mask.unsqueeze(-1), dim=1), attention  # (B, H)

    def pair_vector(self, ids_x: torch.Tensor, hidden_x: torch.Tensor, mask_x: torch.Tensor, ids_y: torch.Tensor,
                    hidden_y: torch.Tensor, mask_y: torch.Tensor) -> torch.Tensor:
        """Classifier features for tx with context ty: v_x, or pair features of both directions."""
        vx, _ = self.encode(hidden_x, mask_x, self.attconv.focus(hidden_y, mask_y), mask_y,
                            self.match_features(ids_x, mask_x, ids_y, mask_y))  # (B, H)
        if self.config.direction == "single":
            return vx
        vy, _ = self.encode(hidden_y, mask_y, self.attconv.focus(hidden_x, mask_x), mask_x,
                            self.match_features(ids_y, mask_y, ids_x, mask_x))  # (B, H)
        return pair_features(vx, vy)  # (B, 4H)

    def classify(self, input_ids: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids, input_mask)  # (B, L, D)
        # intra-context: ty = tx
        vector, _ = self.encode(hidden, input_mask, self.attconv.focus(hidden, input_mask), input_mask)
        return self.classifier(vector)  # (B, C)

    def entail(self, premise_ids: torch.Tensor, premise_mask: torch.Tensor, hypothesis_ids: torch.Tensor,
               hypothesis_mask: torch.Tensor) -> torch.Tensor:
        premise = self.embed(premise_ids, premise_mask)  # (B, Lp, D)
        hypothesis = self.embed(hypothesis_ids, hypothesis_mask)  # (B, Lh, D)
        # the paper models the hypothesis (tx) with the premise as its context (ty)
        return self.classifier(self.pair_vector(hypothesis_ids, hypothesis, hypothesis_mask,
                                                premise_ids, premise, premise_mask))

    def evidence_score_step(self) -> float:
        # context-wise: a score is the share of the hidden_dim claim dimensions a slot wins
        wise = self.form is TaskForm.CONTEXTS and self.per_text and self.config.multi_context == "wise"
        return 1.0 / self.config.hidden_dim if wise else 0.0

    def verify(self, claim_ids: torch.Tensor, claim_mask: torch.Tensor, evidence_ids: torch.Tensor,
               evidence_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, evidence_scores, _ = self.verify_with_evidence_shares(claim_ids, claim_mask, evidence_ids, evidence_mask)
        return logits, evidence_scores

    def training_loss(self, ids: tuple[torch.Tensor, ...], labels: torch.Tensor,
                      evidence_targets: torch.Tensor | None = None,
                      bias_log_probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        weight = self.config.evidence_loss_weight
        if self.form is not TaskForm.CONTEXTS or not weight or evidence_targets is None:
            return super().training_loss(ids, labels, bias_log_probs=bias_log_probs)
        claim_ids, evidence_ids = ids
        logits, _, shares = self.verify_with_evidence_shares(
            claim_ids, padding_mask(claim_ids, PAD_ID), evidence_ids, padding_mask(evidence_ids, PAD_ID))
        loss = cross_entropy(logits, labels, float(self.config.label_smoothing), bias_log_probs)
        known = evidence_targets >= 0  # (B,)
        if bool(known.any()):
            gold_share = shares[known].gather(1, evidence_targets[known].unsqueeze(1)).squeeze(1)  # (N,)
            loss = loss + weight * -torch.log(gold_share.clamp(min=1e-6)).mean()
        return loss, logits

    def verify_with_evidence_shares(self, claim_ids: torch.Tensor, claim_mask: torch.Tensor, evidence_ids: torch.Tensor,
                                    evidence_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits (B, C), evidence_scores (B, K), differentiable evidence shares (B, K)): the
        shares are what the auxiliary evidence loss trains; evidence_scores is what is served."""
        batch, count, length = evidence_ids.shape
        slot_mask = evidence_mask.any(dim=-1)  # (B, K): a slot is valid iff it has a token
        claim = self.embed(claim_ids, claim_mask)  # (B, Lc, D)
        # every evidence sentence is embedded and convolved on its own row
        flat_mask = evidence_mask.reshape(batch * count, length)  # (B*K, Le)
        flat_ids = evidence_ids.reshape(batch * count, length)  # (B*K, Le)
        evidence = self.embed(flat_ids, flat_mask)  # (B*K, Le, D)
        evidence_focus = self.attconv.focus(evidence, flat_mask)  # (B*K, Le, Dc)
        source, beneficiary = self.attconv.query(claim, claim_mask)  # (B, Lc, Dc), (B, Lc, D)

        if self.config.multi_context == "wise":
            # claim against each evidence: the claim's encodings repeated K times
            slot_claim_mask = repeat_per_slot(claim_mask, count)  # (B*K, Lc)
            # a claim token is matched when it occurs in that slot's sentence
            matches = self.match_features(repeat_per_slot(claim_ids, count), slot_claim_mask, flat_ids, flat_mask)
            new, _ = self.attconv(repeat_per_slot(source, count), repeat_per_slot(beneficiary, count),
                                  slot_claim_mask, evidence_focus, flat_mask, matches)  # (B*K, Lc, H)
            claim_vectors = masked_max(new, slot_claim_mask.unsqueeze(-1), dim=1)  # (B*K, H)
            per_slot = claim_vectors.view(batch, count, -1)  # (B, K, H)
            claim_vector, evidence_scores = context_wise_max(per_slot, slot_mask)
            # soft version of "which slot wins each dimension", averaged over dimensions
            soft_wins = masked_softmax(per_slot / self.config.evidence_loss_temperature,
                                       slot_mask.unsqueeze(-1), dim=1)  # (B, K, H)
            shares = soft_wins.mean(dim=-1)  # (B, K)
        else:
            # claim against all evidence tokens at once; flattened only for attention
            focus = evidence_focus.reshape(batch, count * length, -1)  # (B, K*Le, Dc)
            focus_mask = evidence_mask.reshape(batch, count * length)  # (B, K*Le)
            matches = self.match_features(claim_ids, claim_mask, evidence_ids.reshape(batch, count * length), focus_mask)
            new, attention = self.attconv(source, beneficiary, claim_mask, focus,
                                          focus_mask, matches)  # (B, Lc, H), (B, Lc, K*Le)
            claim_vector = masked_max(new, claim_mask.unsqueeze(-1), dim=1)  # (B, H)
            per_evidence = masked_sum(attention.reshape(batch, -1, count, length),
                                      evidence_mask.unsqueeze(1), dim=-1)  # (B, Lc, K)
            mass = masked_mean(per_evidence, claim_mask.unsqueeze(-1), dim=1)  # (B, K)
            # renormalise over valid evidences; an example with no valid claim token scores 0
            evidence_scores = mass / mass.sum(dim=-1, keepdim=True).clamp(min=1e-12)  # (B, K)
            shares = evidence_scores

        if self.config.direction == "single":
            features = claim_vector  # (B, H)
        else:
            # each evidence sentence attends the claim; pooled over every valid evidence token
            claim_focus = self.attconv.focus(claim, claim_mask)  # (B, Lc, Dc)
            evidence_source, evidence_beneficiary = self.attconv.query(evidence, flat_mask)
            slot_claim_mask = repeat_per_slot(claim_mask, count)  # (B*K, Lc)
            matches = self.match_features(flat_ids, flat_mask, repeat_per_slot(claim_ids, count), slot_claim_mask)
            evidence_new, _ = self.attconv(evidence_source, evidence_beneficiary, flat_mask,
                                           repeat_per_slot(claim_focus, count),
                                           slot_claim_mask, matches)  # (B*K, Le, H)
            evidence_vector = masked_max(evidence_new.reshape(batch, count * length, -1),
                                         evidence_mask.reshape(batch, count * length, 1), dim=1)  # (B, H)
            features = pair_features(claim_vector, evidence_vector)  # (B, 4H)
        return self.classifier(features), evidence_scores, shares
