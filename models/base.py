"""What every network shares: the base class, the registry that builds a network from a name
and a config, and the ids-only wrapper that ONNX export uses.

A network does a task (core.tasks) by the task's form, never by its name; the tensors each
form takes (pad id 0), named after the task's fields (the current tasks' names shown):

    TEXT      input_ids (B, L)                                    -> logits (B, C)
    PAIR      premise_ids (B, Lp), hypothesis_ids (B, Lh)         -> logits (B, C)
    CONTEXTS  claim_ids (B, Lc), evidence_ids (B, K, Le)          -> logits (B, C),
                                                                     evidence_scores (B, K)

A network's `forward` takes each ids tensor followed by its boolean mask (True = token):
`forward(input_ids, input_mask)`, `forward(premise_ids, premise_mask, hypothesis_ids,
hypothesis_mask)`, `forward(claim_ids, claim_mask, evidence_ids, evidence_mask)`.
A CONTEXTS network whose task has a per-text output returns `(logits, evidence_scores)`;
evidence_scores is a distribution over the valid slots of each example (zeros on padded slots).
A family registers the forms it does (`@register(..., forms=...)`): it does every labelled task
of those forms. An unlabelled task is served by an adapter over a trained network
(`@adapter(form, labelled)`, e.g. models.rerank.PairReranker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from core.tasks import TASKS, Task, TaskForm, classification
from models.layers import cross_entropy, padding_mask

PAD_ID = 0


@dataclass
class NetworkConfig:
    """Fields every family's config has. Family configs subclass this (all fields defaulted)."""

    # the task's name (core.tasks); a config without one does the one-text classification task
    task: str = classification.TASK.name
    vocab_size: int = 1000
    num_labels: int = 2
    embedding_dim: int = 50
    dropout: float = 0.1
    label_smoothing: float = 0.0
    # Fields only one task reads (no weights depend on them): a checkpoint trained for another
    # task may initialise this network when every other field is equal (training.trainer).
    TASK_FIELDS: ClassVar[tuple[str, ...]] = ()
    # Boolean fields that, turned on, add weights starting at zero: a checkpoint trained with the
    # field off may initialise this network with it on, and starts it computing what it computed.
    ADDED_FIELDS: ClassVar[tuple[str, ...]] = ()


class TextClassifier(nn.Module):
    """Base class of every network. Subclasses set `config_class` and implement `forward`."""

    config_class: ClassVar[type]

    def __init__(self, config: Any) -> None:
        super().__init__()
        if config.task not in TASKS:
            raise ValueError(f"unknown task {config.task!r}; expected one of {sorted(TASKS)}")
        self.config = config

    @property
    def task(self) -> Task:
        return TASKS[self.config.task]

    def logits_from_ids(self, *ids: torch.Tensor) -> torch.Tensor:
        """Logits for ids tensors in task order, masks derived from the pad id."""
        out = self._forward_ids(*ids)
        return out[0] if isinstance(out, tuple) else out

    def _forward_ids(self, *ids: torch.Tensor):
        args: list[torch.Tensor] = []
        for t in ids:
            args.extend((t, padding_mask(t, PAD_ID)))
        return self(*args)

    def training_loss(self, ids: tuple[torch.Tensor, ...], labels: torch.Tensor,
                      evidence_targets: torch.Tensor | None = None,
                      bias_log_probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, logits) for one batch. Families with an auxiliary loss (ACT's center loss,
        AttConv's evidence loss) override this; everything else is plain cross-entropy.
        `evidence_targets` (B,) is the deciding evidence slot per claim, -1 where unknown;
        `bias_log_probs` (B, C) turns the label loss into a product of experts with a bias-only
        model (models.layers.cross_entropy). The logits returned are the network's own."""
        logits = self.logits_from_ids(*ids)
        smoothing = float(getattr(self.config, "label_smoothing", 0.0))
        return cross_entropy(logits, labels, smoothing, bias_log_probs), logits

    def evidence_score_step(self) -> float:
        """The smallest change of a discrete evidence score (0 where evidence_scores are
        continuous): export's parity check allows one such step, as a near-tie in float rounding
        may go either way in another runtime."""
        return 0.0

    def label_parameters(self) -> list[str]:
        """State-dict names of the parameters indexed by label on their first axis (the output
        layer's weight and bias): what is reordered when weights trained for other labels
        initialise this network."""
        outputs = [name for name, module in self.named_modules()
                   if isinstance(module, nn.Linear) and module.out_features == self.config.num_labels]
        return [f"{outputs[-1]}.weight", f"{outputs[-1]}.bias"]

    def embedding_layers(self) -> list[nn.Embedding]:
        """Word-embedding tables, so training can initialise them from GloVe."""
        return [m for m in self.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == self.config.vocab_size]


# (form, labelled) of a served task -> the class that wraps a trained network as a network of
# such a task (`@adapter(TaskForm.CONTEXTS, labelled=False)`, e.g. models.rerank.PairReranker: a
# pair network scoring each text of the list)
_ADAPTERS: dict[tuple[TaskForm, bool], Callable[..., TextClassifier]] = {}


def adapter(form: TaskForm, *, labelled: bool) -> Callable[[type], type]:
    """Class decorator: the class wraps a trained network (its first constructor argument) as a
    network of any task of `form` (labelled or not), named by the `task` keyword, for export (a
    recipe's [serve_as])."""

    def wrap(cls: type) -> type:
        key = (TaskForm(form), labelled)
        if key in _ADAPTERS:
            raise ValueError(f"two adapters for {'labelled' if labelled else 'unlabelled'} {form.value} tasks")
        _ADAPTERS[key] = cls
        return cls

    return wrap


class IdsOnly(nn.Module):
    """Wraps a network so its inputs are the ids tensors alone (masks computed in-graph from
    the pad id). This is the graph that export writes and the service feeds."""

    def __init__(self, network: TextClassifier) -> None:
        super().__init__()
        self.network = network

    def forward(self, *ids: torch.Tensor):
        return self.network._forward_ids(*ids)


# ---------------------------------------------------------------------------------------------
# Registry: architecture name -> (network class, config overrides that define the name)

@dataclass(frozen=True)
class Architecture:
    name: str
    network: type[TextClassifier]
    preset: dict[str, Any]
    forms: tuple[TaskForm, ...]  # the task forms it does, every labelled task of each
    description: str

    def does(self, task: Task) -> bool:
        """Whether the architecture does `task`: a labelled task of one of its forms."""
        return task.labelled and task.form in self.forms

    @property
    def tasks(self) -> tuple[str, ...]:
        """The registered tasks (core.tasks) it does, by name."""
        return tuple(name for name, task in TASKS.items() if self.does(task))


_REGISTRY: dict[str, Architecture] = {}


def register(name: str, *, forms: tuple[TaskForm, ...], description: str, **preset: Any) -> Callable[[type], type]:
    """Class decorator: `@register("attconv-light", forms=(TaskForm.TEXT, ...), variant="light")`:
    the network does every labelled task of those forms. May be stacked to register several
    names for one class."""

    def wrap(cls: type[TextClassifier]) -> type[TextClassifier]:
        if name in _REGISTRY:
            raise ValueError(f"architecture {name!r} registered twice")
        _REGISTRY[name] = Architecture(name, cls, dict(preset), tuple(TaskForm(f) for f in forms), description)
        return cls

    return wrap
