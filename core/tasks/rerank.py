"""Reranking (`/rerank`, TEI's contract): one relevance score per text of the list, best first.
Its graph is unlabelled (scores, no logits); a pair network answers it (models.rerank)."""

from core.tasks.base import Task, TextField

TASK = Task(
    "rerank", "/rerank", "rerank",
    "Rank texts by their relevance to a query (TEI's /rerank): one score per text, best first.",
    (TextField("query", "query_ids"),
     TextField("texts", "texts_ids", many=True,
               too_many="split the texts over several requests (each text is scored on its own) and merge "
                        "the rankings by score")),
    per_text="scores", labelled=False,
    example={"query": "What is deep learning?",
             "texts": ["Deep learning is a kind of machine learning.", "Paris is the capital of France."]},
)
