"""A task is one module of core/tasks/ and nothing else spells it: the other packages read the
registry (a task's form, fields, datasets, example) and never branch on a task's name. Reads the
source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.tasks import TASK_OF_DATASET, TASKS, TaskForm, tasks_of_form
from core.tasks.base import Task, TextField, check_task

ROOT = Path(__file__).resolve().parents[2]
# every package but the task modules themselves and the tests
PACKAGES = ("core", "models", "training", "export", "service", "scoring", "cli")
NAMES = frozenset(TASKS)


def _constants(node: ast.AST) -> list[str]:
    """The string constants of `node` itself, or of the tuple/list/set it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _constants(e)]
    return []


def task_name_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each place that branches on, selects or declares a task by its name:
    a comparison with a task name (`task == "rerank"`, `task in ("a", "b")`), a `task=`/`tasks=`
    argument, `TASKS["name"]`, and a mapping with two or more task names as its keys or values
    (a hand-written task table). A label that happens to be spelled like a task (SNLI's
    "entailment") is data: it is never compared with or declared as a task here."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                hits = NAMES.intersection(_constants(operand))
                if hits:
                    found.append((node.lineno, f"compares with {sorted(hits)}: {ast.unparse(node)[:80]}"))
        elif isinstance(node, ast.keyword) and node.arg in ("task", "tasks"):
            hits = NAMES.intersection(_constants(node.value))
            if hits:
                found.append((node.value.lineno, f"{node.arg}={sorted(hits)}"))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("TASKS"):
            hits = NAMES.intersection(_constants(node.slice))
            if hits:
                found.append((node.lineno, f"TASKS[{sorted(hits)}]"))
        elif isinstance(node, ast.Dict):
            keys = NAMES.intersection(c for k in node.keys if k is not None for c in _constants(k))
            values = NAMES.intersection(c for v in node.values for c in _constants(v))
            if len(keys) >= 2 or len(values) >= 2:
                found.append((node.lineno, f"a table of tasks {sorted(keys | values)}"))
    return found


def test_the_check_finds_each_kind_of_task_branch():
    source = '''
if config.task == "entailment": pass
if task in ("classification", "verification"): pass
register("x", tasks=("entailment",))
schema = TASKS["rerank"]
DATASET_TASKS = {"snli": "entailment", "fever": "verification"}
LABELS = ["entailment", "neutral", "contradiction"]
prediction_map = {"entailment": "entailment", "neutral": "not_entailment"}
'''
    lines = sorted(line for line, _ in task_name_uses(ast.parse(source)))
    assert lines == [2, 3, 4, 5, 6]  # the label list and the one-task label map are data


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_branches_on_a_task_name(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.is_relative_to(ROOT / "core" / "tasks"):
            continue
        for line, what in task_name_uses(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert offenders == []


HTML_WORDS = {"text"}  # field names that are also HTML/JavaScript words (an input's type="text")


def test_the_ui_holds_no_copy_of_the_registry():
    """The UI builds its forms from the registry the server sends, so no endpoint or field of
    a task is written in its code."""
    ui = ROOT / "service" / "static" / "ui"
    code = "\n".join(p.read_text(encoding="utf-8") for p in sorted(ui.glob("*")) if p.suffix in (".js", ".html"))
    spelled = [f"{t.endpoint} ({t.name})" for t in TASKS.values() if f'"{t.endpoint}"' in code or f"'{t.endpoint}'" in code]
    spelled += [f"{f.name} ({t.name})" for t in TASKS.values() for f in t.fields
                if f.name not in HTML_WORDS and (f'"{f.name}"' in code or f"'{f.name}'" in code)]
    assert spelled == []


def test_each_task_module_is_named_after_its_task_and_declares_an_example():
    for name, task in TASKS.items():
        assert (ROOT / "core" / "tasks" / f"{name}.py").is_file()
        assert set(task.example) == set(task.field_names), name


def test_a_dataset_has_one_task_and_every_recipe_dataset_is_claimed():
    from training.recipes import Recipe  # noqa: F401 - the recipes read TASK_OF_DATASET

    for dataset, task in TASK_OF_DATASET.items():
        assert dataset in TASKS[task].datasets


def test_forms_follow_the_fields():
    assert TASKS["classification"].form is TaskForm.TEXT
    assert set(tasks_of_form(TaskForm.PAIR)) >= {"entailment"}
    assert set(tasks_of_form(TaskForm.CONTEXTS, labelled=False)) == {"rerank"}
    with pytest.raises(ValueError, match="at most one field"):
        check_task(Task("x", "/x", "x", "", (TextField("a", "a_ids", many=True), TextField("b", "b_ids", many=True))))
    with pytest.raises(ValueError, match="example"):
        check_task(Task("x", "/x", "x", "", (TextField("a", "a_ids"),), example={"b": "?"}))
    with pytest.raises(ValueError, match="no form"):
        check_task(Task("x", "/x", "x", "", (TextField("a", "a_ids"), TextField("b", "b_ids"), TextField("c", "c_ids"))))


def test_a_file_format_belongs_to_one_task_and_names_it_for_own_files():
    """Own pair files need no `[data] task` while their format is one task's (core.tasks:
    Task.formats), however many tasks share the pair form."""
    from training.readers import READERS

    claimed = [f for t in TASKS.values() for f in t.formats]
    assert len(claimed) == len(set(claimed)) and set(claimed) <= set(READERS)
    for task in TASKS.values():
        assert all(task.labelled for _ in task.formats), task.name  # files train labelled tasks
