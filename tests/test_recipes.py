"""Recipes: every file in recipes/ parses, names a registered architecture with valid config
fields, builds a network that runs; the schema is strict; the command module stays torch-free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from models import TASKS, architectures, build_network
from training.recipes import DATASET_TASKS, Recipe, load_recipe, recipe_files

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parent.parent
RECIPES = recipe_files(REPO / "recipes")
DEFAULT_MODELS = {
    "snli-attconv-advanced",  # not shipped: nli-attconv-advanced starts from its checkpoint
    "nli-attconv-advanced",
    "scitail-attconv",
    "snli-attconv-light",
    "snli-abcnn3",
    "fever-attconv",
    "bbc-act",
    "tweets-act",
}


def test_every_default_model_has_a_recipe():
    assert {p.stem for p in RECIPES} == DEFAULT_MODELS


def test_the_shipped_recipes_are_the_bundles_and_mark_the_same_defaults():
    """`make models` exports the `ship = true` recipes and marks the `default = true` ones: the
    repository holds exactly those bundles, with those defaults, one per task at most; a recipe
    another starts from ([train] init_from) is in recipes/ too."""
    import json

    recipes = {p.stem: load_recipe(p) for p in RECIPES}
    bundles = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in (REPO / "model_repository").glob("*/config.json")}
    assert {name for name, r in recipes.items() if r.ship} == set(bundles)
    assert {name for name, r in recipes.items() if r.default} == {name for name, c in bundles.items() if c.get("default")}
    tasks = [DATASET_TASKS[r.data.dataset] for r in recipes.values() if r.default]
    assert len(tasks) == len(set(tasks)), "two defaults for one task"
    for recipe in recipes.values():
        assert recipe.train.init_from is None or recipe.train.init_from in recipes, recipe.name


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses_and_builds_its_network(path):
    recipe = load_recipe(path)
    assert recipe.name == path.stem
    assert recipe.description and recipe.wall_time
    assert recipe.model.architecture in architectures(), f"{recipe.model.architecture} is not registered"
    task = DATASET_TASKS[recipe.data.dataset]
    assert task in architectures()[recipe.model.architecture].tasks
    recipe.check_limits(task)

    # make_config rejects unknown fields and tasks the architecture does not do
    config = recipe.network_config(vocab_size=50, num_labels=3)
    assert config.task == task
    for key, value in recipe.model.overrides.items():
        assert getattr(config, key) == value
    if recipe.embeddings.glove:
        dim = {"glove-6b-50d": 50, "glove-6b-100d": 100}[recipe.embeddings.vectors]
        assert config.embedding_dim == dim, f"the {recipe.embeddings.vectors} vectors are {dim}-d"
    limit = getattr(config, "max_length", None)
    if limit is not None:
        assert max(recipe.limits.max_lengths.values()) <= limit

    # the sizes are consistent (heads divide dims, ...): a forward pass at the recipe's limits
    torch.manual_seed(0)
    network = build_network(recipe.model.architecture, task=task, vocab_size=50, num_labels=3, **recipe.model.overrides).eval()
    ids = []
    for name, rank in zip(TASKS[task].inputs, TASKS[task].input_ranks):
        length = recipe.limits.max_lengths[name]
        shape = (2, length) if rank == 2 else (2, recipe.limits.max_evidence, length)
        ids.append(torch.randint(1, 50, shape))
    with torch.no_grad():
        logits = network.logits_from_ids(*ids)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()


def _minimal(**changes) -> dict:
    raw = {
        "name": "x-test",
        "data": {"dataset": "snli"},
        "model": {"architecture": "abcnn-3"},
        "limits": {"max_lengths": {"premise_ids": 8, "hypothesis_ids": 8}},
    }
    for key, value in changes.items():
        raw[key] = value
    return raw


@pytest.mark.parametrize(
    "bad",
    [
        {"train": {"epochz": 3}},  # typo in a strict table
        {"bogus": 1},  # unknown top-level key
        {"data": {"dataset": "snli", "train": "a.jsonl"}},  # both sources
        {"data": {"train": "a.jsonl", "dev": "b.jsonl"}},  # incomplete files
        {"data": {"dataset": "imagenet"}},
        {"model": {"architecture": "abcnn-3", "task": "classification"}},  # comes from the data
        {"model": {"architecture": "abcnn-3", "num_labels": 7}},
        {"train": {"optimizer": "lbfgs"}},
        {"train": {"schedule": "cosine"}},
        {"train": {"optimizer": "adam", "momentum": 0.9}},
        {"embeddings": {"glove": False, "trainable": False}},
        {"embeddings": {"glove": True, "vectors": "glove-6b-300d"}},  # not a pinned set
        {"embeddings": {"vectors": "glove-6b-100d"}},  # vectors without glove = true
        {"limits": {"max_lengths": {"premise_ids": 0, "hypothesis_ids": 8}}},
        {"name": "Has Spaces"},
        {"ship": False, "default": True},  # only a shipped bundle can be a default
    ],
)
def test_schema_is_strict(bad):
    with pytest.raises(ValidationError):
        Recipe.model_validate(_minimal(**bad))


def test_embeddings_vectors_choice():
    from typing import get_args

    from training.embeddings import DEFAULT_VECTORS, VECTOR_SETS
    from training.recipes import EmbeddingsSection

    assert set(get_args(EmbeddingsSection.model_fields["vectors"].annotation)) == set(VECTOR_SETS)
    assert Recipe.model_validate(_minimal()).embeddings.vectors == DEFAULT_VECTORS == "glove-6b-50d"
    recipe = Recipe.model_validate(_minimal(embeddings={"glove": True, "vectors": "glove-6b-100d"}))
    assert recipe.embeddings.vectors == "glove-6b-100d"


def test_unknown_model_field_and_wrong_task_are_rejected_by_make_config():
    with pytest.raises(TypeError, match="hidden_dimm"):
        Recipe.model_validate(_minimal(model={"architecture": "abcnn-3", "hidden_dimm": 3})).network_config()
    with pytest.raises(ValueError, match="does not do task"):
        Recipe.model_validate(_minimal(data={"dataset": "bbc"})).network_config()
    with pytest.raises(KeyError):
        Recipe.model_validate(_minimal(model={"architecture": "no-such-net"})).network_config()


def test_limits_must_name_the_task_inputs():
    recipe = Recipe.model_validate(_minimal())
    recipe.check_limits("entailment")
    with pytest.raises(ValueError, match="input_ids"):
        recipe.check_limits("classification")
    verification = Recipe.model_validate(
        _minimal(data={"dataset": "snli-verification"}, limits={"max_lengths": {"claim_ids": 8, "evidence_ids": 8}})
    )
    with pytest.raises(ValueError, match="max_evidence"):
        verification.check_limits("verification")


def test_file_data_paths_resolve_against_the_recipe(tmp_path):
    (tmp_path / "sub").mkdir()
    recipe_path = tmp_path / "sub" / "r.toml"
    recipe_path.write_text(
        'name = "files"\n'
        '[data]\ntrain = "data/train.jsonl"\ndev = "data/dev.jsonl"\ntest = "/abs/test.jsonl"\nformat = "snli-jsonl"\n'
        '[model]\narchitecture = "abcnn-3"\nnum_filters = 7\n'
        '[limits]\nmax_lengths = { premise_ids = 8, hypothesis_ids = 8 }\n',
        encoding="utf-8",
    )
    recipe = load_recipe(recipe_path)
    assert recipe.data.train == (tmp_path / "sub" / "data" / "train.jsonl").resolve()
    assert recipe.data.test == Path("/abs/test.jsonl")
    assert recipe.model.overrides == {"num_filters": 7}
    assert recipe.network_config(task="entailment").num_filters == 7
    # the recipe survives the JSON round trip through a checkpoint's config.json
    assert Recipe.model_validate(recipe.model_dump(mode="json")) == recipe


def test_command_module_imports_no_torch():
    code = "import sys, training.commands, training.recipes; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
