"""Reranking (an unlabelled CONTEXTS task of core.tasks, e.g. `rerank`): a query and candidate
texts -> one relevance score per text.

Any pair network trained for answer selection (a network of a labelled PAIR task with the
labels "0" = irrelevant, "1" = relevant, as WikiQA is read) scores each (query, text) pair on
its own; `PairReranker` runs it over a list. The score is the pair's log-odds of "relevant"
(logit_relevant - logit_irrelevant), so sigmoid(score) is the network's P(relevant), as TEI's
rerank answers sigmoid scores unless asked for raw ones. Every pair is scored apart, so a text's
score does not depend on the other texts of its list, nor on the padding of the batch.

    query_ids (B, Lq), texts_ids (B, K, Lt) -> scores (B, K)   (0 on padded text slots)
"""

from __future__ import annotations

import dataclasses

import torch

from core.tasks import TASKS, TaskForm
from models.base import PAD_ID, TextClassifier, adapter

# an id that is not padding, put in the first position of a padded text slot so the pair
# network never sees an empty text (its score is replaced by 0 anyway)
FILLER_ID = 1


@adapter(TaskForm.CONTEXTS, labelled=False)
class PairReranker(TextClassifier):
    """A pair network (a labelled PAIR task, two labels) served as a network of an unlabelled
    CONTEXTS task whose one output scores each text of the list (`task`)."""

    def __init__(self, pair: TextClassifier, relevant: int = 1, *, task: str) -> None:
        trained = TASKS.get(pair.config.task)
        if trained is None or trained.form is not TaskForm.PAIR or not trained.labelled or pair.config.num_labels != 2:
            raise ValueError(f"a reranker wraps a two-label network of a pair task, not a {pair.config.num_labels}-label "
                             f"{pair.config.task} network")
        served = TASKS.get(task)
        if served is None or served.form is not TaskForm.CONTEXTS or served.labelled or served.outputs != (served.per_text,):
            raise ValueError(f"a reranker serves an unlabelled task of a text and a list of texts with one score per "
                             f"text, not {task!r}")
        super().__init__(dataclasses.replace(pair.config, task=task))
        self.pair = pair
        self.relevant = relevant

    def forward(self, query_ids: torch.Tensor, query_mask: torch.Tensor, texts_ids: torch.Tensor,
                texts_mask: torch.Tensor) -> torch.Tensor:
        batch, count, length = texts_ids.shape
        flat = texts_ids.reshape(batch * count, length)  # (B*K, Lt)
        empty = ~texts_mask.reshape(batch * count, length).any(dim=1)  # (B*K,) padded slots
        first = torch.zeros_like(flat, dtype=torch.bool)
        first[:, 0] = True
        flat = torch.where(empty[:, None] & first, torch.full_like(flat, FILLER_ID), flat)
        query = query_ids[:, None, :].expand(batch, count, query_ids.shape[1]).reshape(batch * count, -1)  # (B*K, Lq)
        logits = self.pair(query, query != PAD_ID, flat, flat != PAD_ID)  # (B*K, 2)
        scores = logits[:, self.relevant] - logits[:, 1 - self.relevant]  # (B*K,) log-odds of relevant
        return scores.masked_fill(empty, 0.0).reshape(batch, count)  # (B, K)
