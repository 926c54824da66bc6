"""The task registry: every module of this package but `base` is one task, holding `TASK` (and
whatever else is that task's own). Adding a task is adding its module; `TASKS` finds it."""

from __future__ import annotations

import importlib
import pkgutil

from core.tasks.base import Task, TaskForm, TextField, check_task


def _discover() -> dict[str, Task]:
    tasks: dict[str, Task] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"):
        task = check_task(importlib.import_module(f"{__name__}.{module}").TASK)
        if task.name != module:
            raise ValueError(f"core/tasks/{module}.py declares task {task.name!r}: a task's module is named after it")
        tasks[task.name] = task
    endpoints = [t.endpoint for t in tasks.values()]
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"two tasks share an endpoint: {endpoints}")
    for kind in ("datasets", "formats"):
        claimed = [name for t in tasks.values() for name in getattr(t, kind)]
        if len(set(claimed)) != len(claimed):
            raise ValueError(f"{kind} claimed by two tasks: {sorted({n for n in claimed if claimed.count(n) > 1})}")
    return tasks


TASKS: dict[str, Task] = _discover()

# endpoint name ("verify") -> its task
TASK_OF_LABEL: dict[str, Task] = {task.label: task for task in TASKS.values()}

# ids input -> the request field of its text, over every task ("evidence_ids" -> "evidence")
TEXT_FIELD_OF_INPUT: dict[str, str] = {f.input: f.name for task in TASKS.values() for f in task.fields}

# training dataset name -> the task of its examples
TASK_OF_DATASET: dict[str, str] = {d: task.name for task in TASKS.values() for d in task.datasets}


def tasks_of_form(form: TaskForm, labelled: bool | None = None) -> tuple[str, ...]:
    """The names of the tasks of `form` (and, when given, labelled or not)."""
    return tuple(t.name for t in TASKS.values() if t.form is form and (labelled is None or t.labelled is labelled))


__all__ = ["TASKS", "TASK_OF_LABEL", "TASK_OF_DATASET", "TEXT_FIELD_OF_INPUT", "Task", "TaskForm", "TextField",
           "tasks_of_form"]
