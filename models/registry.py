"""The architectures by name: importing this module imports every family module, whose
`@register` decorators fill models.base's registry. The families import models.base only, so
the imports run one way (base <- families <- registry)."""

from __future__ import annotations

import dataclasses
from typing import Any

import models.abcnn  # noqa: F401  (registers bcnn, abcnn-1..3)
import models.act  # noqa: F401  (registers act, transformer)
import models.attconv  # noqa: F401  (registers attconv-light, attconv-advanced)
import models.rerank  # noqa: F401  (registers the rerank adapter)
from core.tasks import TASKS
from models.base import _ADAPTERS, _REGISTRY, Architecture, TextClassifier


def architectures() -> dict[str, Architecture]:
    return dict(_REGISTRY)


def serve_as(network: TextClassifier, task: str) -> TextClassifier:
    """`network` wrapped as a network of `task` by the adapter registered for the task's form
    (labelled or not)."""
    if task not in TASKS:
        raise KeyError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")
    spec = TASKS[task]
    key = (spec.form, spec.labelled)
    if key not in _ADAPTERS:
        served = sorted(f"{'labelled' if labelled else 'unlabelled'} {form.value}" for form, labelled in _ADAPTERS)
        raise KeyError(f"no adapter serves task {task!r} ({key[0].value} form, "
                       f"{'labelled' if key[1] else 'unlabelled'}); adapters serve: {served}")
    return _ADAPTERS[key](network, task=task)


def make_config(name: str, **overrides: Any) -> Any:
    """The config of architecture `name` with `overrides` applied (unknown keys rejected)."""
    arch = architectures().get(name)
    if arch is None:
        raise KeyError(f"unknown architecture {name!r}; known: {sorted(_REGISTRY)}")
    values = {**arch.preset, **overrides}
    cls = arch.network.config_class
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"{name}: unknown config fields {unknown}; known: {sorted(known)}")
    config = cls(**values)
    task = TASKS.get(config.task)
    if task is None:
        raise ValueError(f"unknown task {config.task!r}; expected one of {sorted(TASKS)}")
    if not arch.does(task):
        raise ValueError(f"{name} does not do task {config.task!r} ({'a labelled' if task.labelled else 'an unlabelled'} "
                         f"{task.form.value} task); it does labelled {'/'.join(f.value for f in arch.forms)} tasks: "
                         f"{list(arch.tasks)}")
    return config


def build_network(name: str, **overrides: Any) -> TextClassifier:
    return architectures()[name].network(make_config(name, **overrides))


def config_to_dict(name: str, config: Any) -> dict[str, Any]:
    """JSON-ready description that `network_from_dict` rebuilds the network from."""
    return {"architecture": name, "config": dataclasses.asdict(config)}


def network_from_dict(payload: dict[str, Any]) -> TextClassifier:
    name = payload["architecture"]
    config = dict(payload["config"])
    # JSON turns tuples into lists; dataclass fields accept either.
    return build_network(name, **config)
