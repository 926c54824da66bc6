"""`attserve reproduce` end to end on a few hundred synthetic pairs per task (seconds): the paper
recipes train, the dev-fitted feature stage is scored, and the table sets paper beside ours.
A small fake GloVe table replaces the 400k-word download, so the recipes run unchanged."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import training.datasets as datasets
import training.embeddings
from tests.paper_benchmarks import write_benchmarks
from training.recipes import load_recipe
from training.reproduce import (
    EXTRA_MODELS,
    MODELS,
    PAPER_MODELS,
    REPORTED_SPLIT,
    SCITAIL_MODELS,
    TASK_MODELS,
    PAPER_WITH_FEATURES,
    PAPER_WITHOUT_FEATURES,
    TASKS,
    markdown_table,
    recipe_path,
    run_row,
    table_rows,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def fake_glove(monkeypatch):
    words = ["the", "a", "man", "dog", "park", "running", "monday", "tower", "is", "was", "in", "no"]
    vectors = np.random.default_rng(0).normal(scale=0.5, size=(len(words), 50)).astype(np.float32)
    monkeypatch.setattr(training.embeddings, "load_glove", lambda cache_dir=None, **_: (words, vectors))


@pytest.fixture(scope="module")
def benchmark_root(tmp_path_factory):
    return write_benchmarks(tmp_path_factory.mktemp("benchmarks"))


ABCNN_TASKS = ("wikiqa", "msrp", "sick")


def test_every_paper_row_has_a_recipe_that_matches_its_name():
    assert set(TASKS) == {*ABCNN_TASKS, "scitail"}
    for task in ABCNN_TASKS:
        assert set(PAPER_WITH_FEATURES[task]) == set(PAPER_MODELS)  # Tables 3, 4, 6: every row
        for model in PAPER_MODELS:
            recipe = load_recipe(recipe_path(task, model))
            variant, depth = model.rsplit("-", 1)
            assert recipe.data.dataset == task and recipe.name == f"paper-{task}-{model}"
            assert recipe.model.architecture == variant
            assert recipe.model.overrides["num_blocks"] == {"one": 1, "two": 2}[depth]
            assert recipe.model.overrides["num_filters"] == 50  # Table 2: 50 kernels throughout
            assert recipe.model.overrides["kernel_size"] == (4 if task == "wikiqa" else 3)  # Table 2's w
            assert max(recipe.limits.max_lengths.values()) <= recipe.model.overrides["max_length"]
    assert load_recipe(recipe_path("wikiqa", "abcnn-3-two")).limits.max_lengths["hypothesis_ids"] == 40  # answers cut to 40


def test_attconv_comparison_rows_use_the_abcnn_rows_data_vectors_and_training():
    """The AttConv rows differ from ABCNN-3 two-conv only in the network: same dataset,
    vocabulary, frozen vectors, limits and training settings."""
    assert set(MODELS) == set(PAPER_MODELS) | set(EXTRA_MODELS)
    for task in ABCNN_TASKS:
        reference = load_recipe(recipe_path(task, "abcnn-3-two"))
        for model in EXTRA_MODELS:
            recipe = load_recipe(recipe_path(task, model))
            assert recipe.name == f"paper-{task}-{model}" and recipe.model.architecture == model
            assert recipe.data == reference.data and recipe.limits == reference.limits
            assert recipe.tokenizer == reference.tokenizer and recipe.embeddings == reference.embeddings
            assert recipe.train == reference.train
            assert model not in PAPER_WITH_FEATURES[task]  # shown with "-" as the paper figure


def test_scitail_rows_are_table_5s_on_scitail():
    """The AttConv paper's Table 5: its two AttConv variants at the paper's hidden size and an
    ABCNN-3 per depth, all on SciTail with its lengths; the paper figures are network-only."""
    assert TASK_MODELS["scitail"] == SCITAIL_MODELS and REPORTED_SPLIT == {"scitail": "dev"}
    assert PAPER_WITHOUT_FEATURES["scitail"] == {"attconv-light": {"accuracy": 0.781}, "attconv-advanced": {"accuracy": 0.792},
                                                 "abcnn-3-one": {"accuracy": 0.758}, "abcnn-3-two": {"accuracy": 0.758}}
    assert PAPER_WITH_FEATURES["scitail"] == {}
    for model in SCITAIL_MODELS:
        recipe = load_recipe(recipe_path("scitail", model))
        assert recipe.name == f"paper-scitail-{model}" and recipe.data.dataset == "scitail"
        assert recipe.limits.max_lengths == {"premise_ids": 64, "hypothesis_ids": 40}
        if model.startswith("attconv"):
            assert recipe.model.architecture == model and recipe.model.overrides["hidden_dim"] == 300  # the paper's
            assert recipe.model.overrides["kernel_size"] == 3
        else:
            assert recipe.model.architecture == "abcnn-3" and recipe.model.overrides["num_blocks"] == {"abcnn-3-one": 1, "abcnn-3-two": 2}[model]
            assert recipe.model.overrides["max_length"] >= 64
    with pytest.raises(ValueError, match="unknown model 'bcnn-one' for scitail"):
        recipe_path("scitail", "bcnn-one")


def test_a_short_scitail_row_is_the_network_alone_beside_the_papers_test_figure(tmp_path, fake_glove, benchmark_root):
    row = run_row("scitail", "attconv-light", tmp_path / "scitail", threads=1, epochs=1, benchmark_root=benchmark_root)
    assert row.with_features is None and row.feature_names == []
    assert row.dev_network["examples"] == 80 and 0 <= row.dev_network["accuracy"] <= 1
    assert row.network["examples"] == 20  # the test carved from train: 5 of 100 questions x 4 sentences
    lines = table_rows([row])
    assert lines == [{
        "task": "scitail", "model": "attconv-light", "setting": "network", "metric": "dev acc", "paper": 0.781,
        "ours": row.dev_network["accuracy"], "difference": pytest.approx(row.dev_network["accuracy"] - 0.781),
        "train_wall_s": row.train_wall_s, "command": "attserve reproduce scitail --model attconv-light --epochs 1",
    }]
    assert "| scitail | attconv-light | network | dev acc | 78.1 |" in markdown_table(lines)


@pytest.mark.parametrize("task", ABCNN_TASKS)
def test_a_short_run_of_each_task_scores_network_and_feature_stage(task, tmp_path, fake_glove, benchmark_root):
    row = run_row(task, "abcnn-3-two", tmp_path / task, threads=1, epochs=2, benchmark_root=benchmark_root)
    saved = json.loads((tmp_path / task / "reproduce.json").read_text())
    assert saved["task"] == task and saved["epochs_run"] <= 2 and saved["train_wall_s"] > 0
    key = "map" if task == "wikiqa" else "accuracy"
    assert 0 <= row.network[key] <= 1
    # the synthetic data's features separate the classes (answers repeat the question's words,
    # contradictions hold "no", paraphrases share their words): the dev-fitted stage uses them
    assert row.with_features[key] > 0.9, row.with_features
    if task == "wikiqa":
        assert row.with_features["questions"] == 15  # 20 test questions, every 4th unanswerable
    # SICK (sec. 5.4): a NONOVER copy of the network trained beside the ORIG one
    assert (row.orig_only is not None) == (task == "sick")
    assert (tmp_path / f"{task}-nonover" / "model.safetensors").is_file() == (task == "sick")
    assert row.command == "attserve reproduce " + task + " --model abcnn-3-two --epochs 2"

    lines = table_rows([row])
    metrics = {"wikiqa": ["MAP", "MRR"], "msrp": ["acc", "F1"], "sick": ["acc"]}[task]
    assert [(line["setting"], line["metric"]) for line in lines] == [(s, m) for s in ("network", "+features") for m in metrics]
    for line in lines:
        paper = (PAPER_WITHOUT_FEATURES if line["setting"] == "network" else PAPER_WITH_FEATURES)[task]["abcnn-3-two"]
        assert line["paper"] == paper[{"MAP": "map", "MRR": "mrr", "acc": "accuracy", "F1": "f1"}[line["metric"]]]
        assert line["difference"] == pytest.approx(line["ours"] - line["paper"])


def test_rows_the_paper_reports_only_with_features_have_no_network_figure(tmp_path, fake_glove, benchmark_root):
    row = run_row("sick", "bcnn-one", tmp_path, threads=1, epochs=1, max_train_examples=100, benchmark_root=benchmark_root)
    lines = table_rows([row])
    assert [line["paper"] for line in lines] == [None, 0.848]
    assert lines[0]["difference"] is None
    text = markdown_table(lines)
    assert "| sick | bcnn-one | network | acc | - |" in text and "| 84.8 |" in text
    assert "--max-train-examples 100" in text


def test_the_cli_prints_the_table_and_writes_results(tmp_path, fake_glove, benchmark_root, monkeypatch):
    from cli.main import app

    monkeypatch.setenv("COLUMNS", "250")
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, [
        "--log-level", "WARNING", "reproduce", "msrp", "--model", "abcnn-1-one", "--epochs", "1",
        "--max-train-examples", "120", "--benchmark-dir", str(benchmark_root), "--out", str(out),
        "--markdown", str(tmp_path / "table.md"),
    ])
    assert result.exit_code == 0, result.output
    assert re.search(r"msrp\s+│\s+abcnn-1-one\s+│\s+\+features\s+│\s+acc\s+│\s+78\.5", result.output)
    saved = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in saved["rows"]] == ["abcnn-1-one"] and len(saved["table"]) == 4
    assert (out / "msrp-abcnn-1-one" / "model.safetensors").is_file()
    assert "| msrp | abcnn-1-one | +features | F1 | 84.5 |" in (tmp_path / "table.md").read_text()


def test_the_cli_refuses_unknown_rows_and_says_where_missing_data_goes(tmp_path, monkeypatch):
    from cli.main import app

    result = CliRunner().invoke(app, ["reproduce", "snli"])
    assert result.exit_code == 2 and "unknown task 'snli'" in result.output
    result = CliRunner().invoke(app, ["reproduce", "scitail", "--model", "bcnn-one"])
    assert result.exit_code == 2 and "no scitail row has model 'bcnn-one'" in result.output
    result = CliRunner().invoke(app, ["reproduce", "sick", "--model", "abcnn-4-one"])
    assert result.exit_code == 2 and "unknown model 'abcnn-4-one'" in result.output
    monkeypatch.setenv(datasets.BENCHMARK_DIR_ENV, str(tmp_path / "nowhere"))
    result = CliRunner().invoke(app, ["reproduce", "sick", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "never downloaded" in result.output


def test_the_command_module_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, training.reproduce, training.pair_evaluation; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"  # `attserve --help` and the serving image stay light
