"""Recipes: every file in recipes/ parses, names a registered architecture with valid config
fields, builds a network that runs; the schema is strict; the command module stays torch-free."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from models import TASKS, architectures, build_network
from training.recipes import DATASET_TASKS, Recipe, load_recipe, recipe_files

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
RECIPES = recipe_files(REPO / "recipes")
DEFAULT_MODELS = {
    "snli-attconv-advanced",  # not shipped: nli-attconv-advanced starts from its checkpoint
    "nli-attconv-advanced",
    "scitail-attconv",
    "snli-attconv-light",
    "wikiqa-attconv",
    "paraphrase-attconv",
    "fever-attconv",
    "fever-attconv-base",  # not shipped: the first of fever-attconv's stages
    "fever-attconv-tuned",  # not shipped: fever-attconv-average averages it with the next
    "fever-attconv-debias",  # not shipped: fever-attconv-average averages it with the one before
    "fever-attconv-average",  # not shipped: fever-attconv averages it with the next
    "fever-attconv-swaps",  # not shipped: fever-attconv-swaps-average averages it with the one before
    "fever-attconv-swaps-average",  # not shipped: fever-attconv-match starts from it
    "fever-attconv-match",  # not shipped: fever-attconv-swaps-half starts from it and is averaged with it
    "fever-attconv-swaps-half",  # not shipped: fever-attconv-swaps-half-average averages it with the one before
    "fever-attconv-swaps-half-average",  # not shipped: fever-attconv-halfavg-swaps starts from it
    "fever-attconv-halfavg-swaps",  # not shipped: fever-attconv-swaps-half2 starts from it and is averaged with it
    "fever-attconv-swaps-half2",  # not shipped: fever-attconv-swaps-half2-average averages it with the one before
    "fever-attconv-swaps-half2-average",  # not shipped: fever-attconv starts from it
    "bbc-act",
    "tweets-act",
}


def test_every_default_model_has_a_recipe():
    assert {p.stem for p in RECIPES} == DEFAULT_MODELS


def test_the_shipped_recipes_are_the_bundles_and_mark_the_same_defaults():
    """`make models` exports the `ship = true` recipes and marks the `default = true` ones: the
    repository holds exactly those bundles, with those defaults, one per task at most; a recipe
    another starts from or averages with ([train] init_from, average_with) is in recipes/ too."""
    import json

    recipes = {p.stem: load_recipe(p) for p in RECIPES}
    bundles = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in (REPO / "model_repository").glob("*/config.json")}
    assert {name for name, r in recipes.items() if r.ship} == set(bundles)
    assert {name for name, r in recipes.items() if r.default} == {name for name, c in bundles.items() if c.get("default")}
    tasks = [DATASET_TASKS[r.data.dataset] for r in recipes.values() if r.default]
    assert len(tasks) == len(set(tasks)), "two defaults for one task"
    for recipe in recipes.values():
        assert recipe.train.init_from is None or recipe.train.init_from in recipes, recipe.name
        assert recipe.train.average_with is None or recipe.train.average_with in recipes, recipe.name


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
        {"embeddings": {"glove": False, "vectors": "glove-6b-100d"}},  # vectors without glove = true
        {"embeddings": {"glove": False}, "tokenizer": {"pretrained_vocab": 10}},  # a pretrained vocabulary without vectors
        {"limits": {"max_lengths": {"premise_ids": 0, "hypothesis_ids": 8}}},
        {"name": "Has Spaces"},
        {"ship": False, "default": True},  # only a shipped bundle can be a default
    ],
)
def test_schema_is_strict(bad):
    with pytest.raises(ValidationError):
        Recipe.model_validate(_minimal(**bad))


def test_embeddings_vectors_choice():
    from training.embeddings import DEFAULT_VECTORS, VECTOR_SETS
    from training.recipes import EmbeddingsSection

    for name in [*VECTOR_SETS, "glove-6b-100d+wordllama-256"]:  # every pinned set, and a concatenation
        assert EmbeddingsSection(vectors=name).vectors == name
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


BASE_RECIPE = (
    'name = "base"\ndescription = "the base"\nwall_time = "1 min"\nship = false\ndefault = true\n'
    '[data]\ndataset = "snli"\n'
    '[model]\narchitecture = "abcnn-3"\nnum_filters = 7\n'
    '[limits]\nmax_lengths = { premise_ids = 8, hypothesis_ids = 8 }\n'
    '[train]\nseed = 1\nlr = 0.01\nepochs = 2\n'
)


def test_extends_takes_the_base_tables_key_by_key_and_not_its_own_keys(tmp_path):
    (tmp_path / "base.toml").write_text(BASE_RECIPE, encoding="utf-8")
    (tmp_path / "child.toml").write_text(
        'name = "child"\nextends = "base"\nwall_time = "2 min"\n'
        '[model]\nhidden_dim = 30\n[limits]\nmax_lengths = { premise_ids = 5, hypothesis_ids = 6 }\n[train]\nseed = 4\n',
        encoding="utf-8")
    (tmp_path / "grandchild.toml").write_text('name = "grandchild"\nextends = "child"\n[train]\nlr = 0.5\n', encoding="utf-8")
    child = load_recipe(tmp_path / "child.toml")
    assert child.name == "child" and child.wall_time == "2 min" and child.description == "the base"
    assert child.ship and not child.default  # each file's own: the schema defaults, not the base's false / true
    assert child.data.dataset == "snli" and child.model.architecture == "abcnn-3"
    assert child.model.overrides == {"num_filters": 7, "hidden_dim": 30}  # merged key by key
    assert child.limits.max_lengths == {"premise_ids": 5, "hypothesis_ids": 6}  # an inline table is one value
    assert (child.train.seed, child.train.lr, child.train.epochs) == (4, 0.01, 2)
    grandchild = load_recipe(tmp_path / "grandchild.toml")
    assert (grandchild.train.seed, grandchild.train.lr, grandchild.train.epochs) == (4, 0.5, 2)  # through the chain
    assert grandchild.model.overrides == child.model.overrides and grandchild.wall_time == ""
    assert grandchild.model_copy(update={"name": "child", "wall_time": "2 min", "train": child.train}) == child


@pytest.mark.parametrize("files, message", [
    ({"a": 'name = "a"\nextends = "a"\n'}, "extends it again: a -> a"),
    ({"a": 'name = "a"\nextends = "b"\n', "b": 'name = "b"\nextends = "a"\n'}, "extends it again: a -> b -> a"),
    ({"a": 'name = "a"\nextends = "missing"\n'}, "no .*missing.toml"),
    ({"a": 'name = "a"\nextends = "../base"\n'}, "expected a recipe name"),
    ({"a": 'name = "a"\nextends = 3\n'}, "expected a recipe name"),
], ids=["itself", "a-cycle", "missing", "a-path", "not-a-string"])
def test_extends_refuses_a_cycle_a_missing_base_and_a_path(tmp_path, files, message):
    (tmp_path / "base.toml").write_text(BASE_RECIPE, encoding="utf-8")
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_recipe(tmp_path / "a.toml")


def test_extends_looks_beside_first_then_in_the_folder_above(tmp_path):
    """A variant in recipes/compare/ extends a recipe in recipes/; a recipe of that name beside it wins."""
    (tmp_path / "base.toml").write_text(BASE_RECIPE, encoding="utf-8")
    compare = tmp_path / "compare"
    compare.mkdir()
    (compare / "variant.toml").write_text('name = "variant"\nextends = "base"\n[train]\nseed = 9\n', encoding="utf-8")
    variant = load_recipe(compare / "variant.toml")
    assert (variant.description, variant.train.seed, variant.train.lr) == ("the base", 9, 0.01)
    (compare / "base.toml").write_text(BASE_RECIPE.replace('"the base"', '"the base beside it"'), encoding="utf-8")
    assert load_recipe(compare / "variant.toml").description == "the base beside it"


def test_a_chain_stage_that_extends_another_is_short():
    """The shipped /verify chain's stages extend each other: each file says what its stage changes."""
    from training.recipes import recipe_table

    extended = [path for path in RECIPES if "extends" in tomllib.loads(path.read_text(encoding="utf-8"))]
    assert len(extended) >= 10
    for path in extended:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
        assert len(lines) <= 20, f"{path.name}: {len(lines)} lines; extend the nearest stage"
        assert recipe_table(path)["name"] == path.stem


def test_command_module_imports_no_torch():
    code = "import sys, training.commands, training.recipes; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# ---------------------------------------------------------------------------------------------
# The minimal recipe uses pretrained vectors and vocabulary by default; the recipes that
# relied on the old defaults spell them out; every option is documented from the schema.

# Defaults that changed, with their value before: a recipe that leaves one of these keys out
# would now train differently, so every recipe here must either set it or be unaffected.
OLD_DEFAULTS = {("embeddings", "glove"): False, ("tokenizer", "pretrained_vocab"): 0,
                ("embeddings", "tuned_channel"): False, ("tokenizer", "oov_buckets"): 0}
ALL_RECIPE_FILES = sorted((REPO / "recipes").rglob("*.toml")) + [REPO / "examples" / "own-data" / "recipe.toml"]


def test_the_minimal_recipe_uses_glove_and_a_pretrained_vocabulary_by_default():
    from training.recipes import DEFAULT_PRETRAINED_VOCAB, MINIMAL_RECIPE

    raw = tomllib.loads(MINIMAL_RECIPE)
    assert set(raw) == {"name", "data", "model", "limits"} and set(raw["model"]) == {"architecture"}
    recipe = Recipe.model_validate(raw)
    assert recipe.embeddings.glove and recipe.embeddings.vectors == "glove-6b-50d"
    assert recipe.tokenizer.pretrained_vocab == DEFAULT_PRETRAINED_VOCAB == 40_000
    # AttConv gets the tuned second channel (and the hash buckets it needs); other networks do not
    from training.recipes import DEFAULT_OOV_BUCKETS, TUNED_CHANNEL_ARCHITECTURES

    assert recipe.embeddings.tuned_channel and recipe.tokenizer.oov_buckets == DEFAULT_OOV_BUCKETS == 1000
    act = Recipe.model_validate({**raw, "model": {"architecture": "act"}})
    assert act.embeddings.glove and not act.embeddings.tuned_channel and act.tokenizer.oov_buckets == 0
    frozen = Recipe.model_validate({**raw, "embeddings": {"freeze_pretrained": True}})
    assert not frozen.embeddings.tuned_channel and frozen.tokenizer.oov_buckets == 0
    from training.recipes import builtin_architectures

    assert set(TUNED_CHANNEL_ARCHITECTURES) == {name for name, arch in builtin_architectures().items()
                                               if "tuned_vocab_size" in arch.network.config_class.__dataclass_fields__}
    # the architecture's embedding width matches the pinned 50-d vectors without a [model] key
    assert recipe.network_config(vocab_size=10).embedding_dim == 50
    # one switch turns the download off: no vectors, no pretrained vocabulary
    off = Recipe.model_validate({**raw, "embeddings": {"glove": False}})
    assert not off.embeddings.glove and off.tokenizer.pretrained_vocab == 0
    assert not off.embeddings.tuned_channel and off.tokenizer.oov_buckets == 0
    # an explicit size is kept, and survives the JSON round trip through a checkpoint
    sized = Recipe.model_validate({**raw, "tokenizer": {"pretrained_vocab": 5000}})
    assert sized.tokenizer.pretrained_vocab == 5000
    assert Recipe.model_validate(sized.model_dump(mode="json")) == sized
    assert Recipe.model_validate(off.model_dump(mode="json")).tokenizer.pretrained_vocab == 0


@pytest.mark.parametrize("path", ALL_RECIPE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_existing_recipes_keep_the_values_they_trained_with(path):
    """Every recipe in the repository trains as it did before: a key whose default changed is
    either set in the file or would have resolved to the same value."""
    from training.recipes import recipe_table

    raw = recipe_table(path)  # a key set in the recipe it extends counts as set
    recipe = load_recipe(path)
    for (section, key), old in OLD_DEFAULTS.items():
        if key in raw.get(section, {}):
            continue
        assert getattr(getattr(recipe, section), key) == old, f"{path.name}: set [{section}] {key} = {old!r} (its old default)"


def test_every_recipe_option_has_a_description():
    import dataclasses

    from training.recipes import _SECTIONS, MODEL_FIELD_DESCRIPTIONS

    for _, cls in _SECTIONS:
        for key, field in cls.model_fields.items():
            assert field.description and len(field.description) > 10, f"{cls.__name__}.{key} has no description"
    from training.recipes import builtin_architectures

    assert set(builtin_architectures()) >= {"attconv-light", "attconv-advanced", "abcnn-3", "bcnn", "act", "transformer"}
    config_fields = {f.name for arch in builtin_architectures().values() for f in dataclasses.fields(arch.network.config_class)}
    assert config_fields == set(MODEL_FIELD_DESCRIPTIONS), "MODEL_FIELD_DESCRIPTIONS must cover exactly the network config fields"


def test_docs_recipes_md_is_what_recipe_options_generates():
    """docs/recipes.md cannot drift from the schema: regenerate it with
    `attserve recipe-options --out docs/recipes.md`."""
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["recipe-options"])
    assert result.exit_code == 0, result.output
    committed = (REPO / "docs" / "recipes.md").read_text(encoding="utf-8")
    assert result.output == committed, "docs/recipes.md is stale: run `attserve recipe-options --out docs/recipes.md`"
    # every key of every table, and every network config field, is in it
    from training.recipes import _SECTIONS, MODEL_FIELD_DESCRIPTIONS

    for _, cls in _SECTIONS:
        for key in cls.model_fields:
            assert f"| `{key}` |" in committed, key
    for key in MODEL_FIELD_DESCRIPTIONS:
        assert f"| `{key}` |" in committed, key
    assert "glove = false" in committed  # how to train without the download


def test_label_names_rename_a_datasets_labels_in_order(tmp_path):
    """`[data] label_names` serves a dataset's "0"/"1" as words; the order stays, every example
    follows, and a name that is not a label, or two labels renamed alike, is refused."""
    from training.examples import DatasetSplits, PairExample, rename_labels

    pairs = [PairExample("a", "b", "1"), PairExample("c", "d", "0")]
    splits = DatasetSplits("msrp", "entailment", ["0", "1"], pairs, pairs[:1], pairs[1:])
    renamed = rename_labels(splits, {"0": "not_paraphrase", "1": "paraphrase"})
    assert renamed.labels == ["not_paraphrase", "paraphrase"]
    assert [e.label for e in renamed.train] == ["paraphrase", "not_paraphrase"]
    assert [e.label for e in renamed.dev + renamed.test] == ["paraphrase", "not_paraphrase"]
    assert [e.texts for e in renamed.train] == [e.texts for e in pairs]
    with pytest.raises(ValueError, match="not among them"):
        rename_labels(splits, {"2": "x"})
    with pytest.raises(ValueError, match="distinct"):
        rename_labels(splits, {"0": "same", "1": "same"})
    path = tmp_path / "r.toml"
    path.write_text('name = "r"\n[data]\ndataset = "snli"\nlabel_names = { "neutral" = "unknown" }\n'
                    '[model]\narchitecture = "abcnn-1"\n[limits]\nmax_lengths = { premise_ids = 8, hypothesis_ids = 8 }\n')
    assert load_recipe(path).data.label_names == {"neutral": "unknown"}
