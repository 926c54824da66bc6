"""Reranking (`/rerank`, TEI's contract): one relevance score per text of the list, best first.
Its graph is unlabelled (scores, no logits); a pair network answers it (models.rerank).

The contract is the task's own, so it lives here, as the hooks a task module may declare for a
request and an answer that follow an outside API rather than the service's labelled schemas
(service.http.schemas reads them, naming no task):

- `REQUEST_OPTIONS`: the request's fields beside the task's texts, as a pydantic model; the
  service adds the texts (from `TASK.fields`), `truncate`, `model` and `version`, and its own
  handling of unknown fields;
- `ANSWER`: the answer's type (its OpenAPI schema);
- `answer_of(body, results)`: the answer to a validated body, from the engine's one result.

There is no batch form: a request is one query and its texts.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool

from core.tasks.base import Task, TextField

TASK = Task(
    "rerank", "/rerank", "rerank",
    "Rank texts by their relevance to a query (TEI's /rerank): one score per text, best first.",
    (TextField("query", "query_ids"),
     TextField("texts", "texts_ids", many=True,
               too_many="split the texts over several requests (each text is scored on its own) and merge "
                        "the rankings by score",
               description="the candidate texts; at most the model's max_evidence")),
    per_text="scores", labelled=False,
    example={"query": "What is deep learning?",
             "texts": ["Deep learning is a kind of machine learning.", "Paris is the capital of France."]},
)


class RequestOptions(BaseModel):
    """TEI's rerank request beside `query` and `texts`. Texts longer than the model's max length
    are cut (`truncate`, the service's, defaults to true: these models read at most a few dozen
    tokens per text); `truncate: false` asks for a 422 instead, as TEI answers it."""

    raw_scores: StrictBool = Field(False, description="true: each text's log-odds of relevance; false: its sigmoid, a "
                                   "probability in [0, 1]")
    return_text: StrictBool = Field(False, description="also return each text")
    truncation_direction: Literal["Right", "right"] = Field("Right", description="texts are cut at the right only")


class Rank(BaseModel):
    index: int = Field(description="the text's position in the request's `texts`")
    score: float = Field(description="its relevance: a probability, or with raw_scores the log-odds")
    text: str | None = Field(None, description="the text, when the request asked for it (return_text)")


# the hooks service.http.schemas reads (see the module's docstring)
REQUEST_OPTIONS = RequestOptions
ANSWER = list[Rank]


def _sigmoid(x: float) -> float:
    z = math.exp(-abs(x))  # never overflows
    return 1.0 / (1.0 + z) if x >= 0 else z / (1.0 + z)


def answer_of(body: Any, results: list[dict]) -> list[dict]:
    """TEI's rerank answer: the texts by score, best first (ties: request order)."""
    [result] = results
    scores = result["scores"] if body.raw_scores else [_sigmoid(s) for s in result["scores"]]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if body.return_text:
        return [{"index": i, "score": scores[i], "text": body.texts[i]} for i in order]
    return [{"index": i, "score": scores[i]} for i in order]
