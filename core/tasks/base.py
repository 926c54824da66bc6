"""What a task is: its texts (`TextField`), the graph it runs and what its answer adds. Each task
is one module beside this one (core/tasks/<name>.py, holding `TASK`); the package collects them
into `TASKS`. Training, export, the networks and the service all read the registry; nothing here
imports torch, onnxruntime or a web framework.

A task's input is a few texts: each one is a graph input of token ids, rank 2 `(B, L)`, or for a
field that holds a list of texts rank 3 `(B, K, L)`. A labelled task's graph returns `logits (B,
C)` over its bundle's labels first (answers: `label`, `scores`); a task with a list field may add
one score per text of the list (`(B, K)`). What a network or a data reader does depends on the
task's `form` (one text, a pair, a text with a list of texts), never on its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TaskForm(str, Enum):
    """The shape of a task's input, which is all a network, a data reader or an explanation
    needs to know of it: one text; two texts; a text and a list of texts."""

    TEXT = "text"  # one text (classification)
    PAIR = "pair"  # two texts, each attending to the other (entailment, paraphrase)
    CONTEXTS = "contexts"  # a text and a list of texts it is read against (verification, rerank)


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
    # the training datasets (training.datasets names) whose examples are this task's
    datasets: tuple[str, ...] = ()
    # the file formats (training.readers names) whose records are this task's examples, so that
    # own files in one need no `[data] task` when several tasks share the form
    formats: tuple[str, ...] = ()
    # one input, as a client writes it: the API docs', the UI's and the error messages' example
    example: dict[str, Any] = field(default_factory=dict)
    # a model made elsewhere (`attserve bundle import-hf`): each label of the task and the names a
    # model's config may give it (lower case, "_" for "-" and " "); none: the model keeps its own
    label_synonyms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the label such a model must have: (label, what it means in a model's words, why it is needed)
    required_label: tuple[str, str, str] | None = None

    @property
    def form(self) -> TaskForm:
        single = [f for f in self.fields if not f.many]
        if len(self.fields) == 1 and single:
            return TaskForm.TEXT
        if len(self.fields) == 2 and len(single) == 2:
            return TaskForm.PAIR
        if len(self.fields) == 2 and self.fields[0] in single:
            return TaskForm.CONTEXTS
        raise ValueError(f"task {self.name}: fields {self.field_names} fit no form (one text, a pair, a text and a list)")

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




def check_task(task: Task) -> Task:
    """`task`, once its declaration is consistent (raises ValueError otherwise)."""
    if sum(f.many for f in task.fields) > 1:
        raise ValueError(f"task {task.name}: at most one field holds a list of texts")
    if task.per_text is not None and task.list_field is None:
        raise ValueError(f"task {task.name}: a per-text output needs a list field")
    if not task.outputs:
        raise ValueError(f"task {task.name}: its graph has no output")
    task.form  # noqa: B018 - raises for fields of no form
    if task.example and set(task.example) != set(task.field_names):
        raise ValueError(f"task {task.name}: its example's fields {sorted(task.example)} are not {list(task.field_names)}")
    return task
