"""The tasks, each written once: what a request of the task holds, the graph it runs and what its
answer adds. Training, export, the networks and the service all read this registry; nothing here
imports torch, onnxruntime or a web framework.

A task's input is a few texts (`TextField`): each one is a graph input of token ids, rank 2
`(B, L)`, or for a field that holds a list of texts (verification's `evidence`) rank 3
`(B, K, L)`. A labelled task's graph returns `logits (B, C)` over its bundle's labels first
(answers: `label`, `scores`); a task with a list field may add one score per text of the list
(`(B, K)`, verification's `evidence_scores`).

    classification  text                      input_ids (B, L)                  -> logits
    entailment      premise, hypothesis       premise_ids, hypothesis_ids       -> logits
    verification    claim, evidence[]         claim_ids, evidence_ids (B, K, L) -> logits, evidence_scores
    rerank          query, texts[]            query_ids, texts_ids (B, K, L)    -> scores (B, K)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextField:
    """One text of a task's input: the request field, the graph input of its ids, and whether
    the field is a list of texts (ids of rank 3, one row of ids per text)."""

    name: str
    input: str
    many: bool = False
    # a list field: what a client over the model's max_evidence can do instead (the 422's advice)
    too_many: str = ""
    description: str = ""  # the request field's description in the API schema ("": none)

    @property
    def rank(self) -> int:
        return 3 if self.many else 2


@dataclass(frozen=True)
class Task:
    """A task: its endpoint, its texts (in graph-input order) and its graph outputs."""

    name: str
    endpoint: str  # "/verify"
    label: str  # the endpoint's name: route name and the `endpoint` metric label ("verify")
    summary: str  # one line for the route's documentation and the service index
    fields: tuple[TextField, ...]
    per_text: str | None = None  # the output with one score per text of the list field, if any
    labelled: bool = True  # the graph's first output is logits (B, C) over the bundle's labels
    per_text_description: str = ""  # the answer field of the per-text output, in the API schema

    @property
    def outputs(self) -> tuple[str, ...]:
        """The graph's outputs, in order: logits (a labelled task), then the per-text scores."""
        return (("logits",) if self.labelled else ()) + ((self.per_text,) if self.per_text else ())

    @property
    def inputs(self) -> tuple[str, ...]:
        """The graph's ids inputs, in order."""
        return tuple(f.input for f in self.fields)

    @property
    def input_ranks(self) -> tuple[int, ...]:
        return tuple(f.rank for f in self.fields)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def list_field(self) -> TextField | None:
        """The field that holds a list of texts, if any (at most one per task)."""
        return next((f for f in self.fields if f.many), None)

    def named_texts(self, x: Any) -> list[tuple[str, str]]:
        """(where, text) of every text of one input: `claim`, `evidence[0]`, ..."""
        out: list[tuple[str, str]] = []
        for f in self.fields:
            value = getattr(x, f.name)
            if f.many:
                out += [(f"{f.name}[{k}]", text) for k, text in enumerate(value)]
            else:
                out.append((f.name, value))
        return out


def _registry(*tasks: Task) -> dict[str, Task]:
    for task in tasks:
        if sum(f.many for f in task.fields) > 1:
            raise ValueError(f"task {task.name}: at most one field holds a list of texts")
        if task.per_text is not None and task.list_field is None:
            raise ValueError(f"task {task.name}: a per-text output needs a list field")
        if not task.outputs:
            raise ValueError(f"task {task.name}: its graph has no output")
    return {task.name: task for task in tasks}


TASKS: dict[str, Task] = _registry(
    Task("classification", "/classify", "classify",
         "Label a text with a classifier (topic, sentiment, ...), one text or a batch.",
         (TextField("text", "input_ids"),)),
    Task("entailment", "/entailment", "entailment",
         "Does the premise entail the hypothesis? One pair or a batch.",
         (TextField("premise", "premise_ids"), TextField("hypothesis", "hypothesis_ids"))),
    Task("verification", "/verify", "verify",
         "Verify a claim against evidence sentences; `evidence_scores` weighs each one.",
         (TextField("claim", "claim_ids"),
          TextField("evidence", "evidence_ids", many=True,
                    too_many="send the most relevant sentences or split the claim's evidence over several inputs",
                    description="evidence sentences; at most the model's max_evidence")),
         per_text="evidence_scores", per_text_description="weight of each evidence sentence, in input order"),
    Task("rerank", "/rerank", "rerank",
         "Rank texts by their relevance to a query (TEI's /rerank): one score per text, best first.",
         (TextField("query", "query_ids"),
          TextField("texts", "texts_ids", many=True,
                    too_many="split the texts over several requests (each text is scored on its own) and merge "
                             "the rankings by score")),
         per_text="scores", labelled=False),
)

# endpoint name ("verify") -> its task
TASK_OF_LABEL: dict[str, Task] = {task.label: task for task in TASKS.values()}

# ids input -> the request field of its text, over every task ("evidence_ids" -> "evidence")
TEXT_FIELD_OF_INPUT: dict[str, str] = {f.input: f.name for task in TASKS.values() for f in task.fields}
