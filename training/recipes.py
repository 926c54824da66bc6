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

    [tokenizer]    min_frequency, max_vocab, pretrained_vocab, oov_buckets
    [embeddings]   glove (default true), trainable, tuned_channel, ...
    [limits]       max_lengths = {premise_ids = 64, hypothesis_ids = 48}, max_evidence
    [train]        seed, epochs, batch_size, optimizer, lr, schedule, patience, ...

Every key is described in its Field(description=...) (the network config fields in
MODEL_FIELD_DESCRIPTIONS); `attserve recipe-options` prints them as docs/recipes.md, which a test
keeps equal to the output. A minimal recipe (MINIMAL_RECIPE: name, [data], [model] architecture,
[limits]) trains on 50-d GloVe vectors with a 40,000-word pretrained vocabulary and, for AttConv,
the tuned second channel: defaults that follow other keys, filled in by Recipe._resolve_defaults.

`extends = "NAME"` starts from another recipe (NAME.toml beside it, else in the folder above, so
recipes/compare/ extends recipes/), replacing its keys one level deep (`recipe_table`); `name`,
`wall_time`, `ship` and `default` are each file's own.

Every table is strict (unknown keys are errors). The [model] table takes any key, because
the architecture's config dataclass decides which fields exist: `Recipe.network_config()`
checks them through `models.make_config`, which rejects unknown ones. `task`, `vocab_size`
and `num_labels` come from the data and tokenizer, so a recipe may not set them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.tasks import TASK_OF_DATASET, TASKS

# A recipe name (and so a checkpoint and bundle name): what `name`, `extends`, init_from and average_with hold.
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)

# The task each named dataset has: the task registry's (each task's `datasets`, core.tasks).
DATASET_TASKS: dict[str, str] = dict(TASK_OF_DATASET)
# The tasks file data may be: every labelled task of the registry (core.tasks), in its order.
_FILE_TASKS = tuple(name for name, task in TASKS.items() if task.labelled)
# Defaults that follow other keys (a minimal recipe gets the pretrained vectors, a
# pretrained vocabulary and, for AttConv, the tuned second channel: what served small own data
# best, tools/own_data_defaults_probe.py). Recipe._resolve_defaults fills them in.
DEFAULT_PRETRAINED_VOCAB = 40_000  # [tokenizer] pretrained_vocab with glove = true
DEFAULT_OOV_BUCKETS = 1_000  # [tokenizer] oov_buckets with the tuned channel
TUNED_CHANNEL_ARCHITECTURES = ("attconv-light", "attconv-advanced")  # networks with a tuned_vocab_size field
# Config fields the trainer fills in from the data; a recipe setting them would be ignored.
DATA_DERIVED_FIELDS = ("task", "vocab_size", "num_labels", "tuned_vocab_size")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSection(_Strict):
    """A named dataset, or train/dev/test files in one reader format."""

    dataset: str | None = Field(None, description=f"A named dataset (`attserve data` fetches it): one of {', '.join(f'`{d}`' for d in DATASET_TASKS)}. Give either this or the four file keys.")
    train: Path | None = Field(None, description="Training file, relative to the recipe's directory.")
    dev: Path | None = Field(None, description="Development file (model selection, early stopping, and the temperature `attserve card` fits), relative to the recipe.")
    test: Path | None = Field(None, description="Test file (scored once, after training), relative to the recipe.")
    format: str | None = Field(None, description="Reader of the three files: `text-csv`, `text-tsv`, `text-jsonl` (single texts); `snli-jsonl`, `snli-txt`, `nli-jsonl` (pairs); `fever-jsonl` (claim + evidence list).")
    labels: list[str] | None = Field(None, description="Label order for file data (default: order of first appearance in train).")
    # one of the registered labelled tasks (core.tasks), which pydantic's error lists
    task: Literal[_FILE_TASKS] | None = Field(None, description="The task the files must turn out to be (file data only; checked against the format).")
    label_names: dict[str, str] | None = Field(None, description="Rename labels as the data spells them to the names the model answers, e.g. MSRP's `{\"0\" = \"not_paraphrase\", \"1\" = \"paraphrase\"}` (the label order stays).")

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
    """`architecture`, plus any field of that architecture's network config (see the table of
    network config fields): the architecture's defaults apply to the rest."""

    # extra="allow": the keys besides `architecture` are config overrides, validated by
    # models.make_config against the architecture's own dataclass.
    model_config = ConfigDict(extra="allow")

    architecture: str = Field(description="The network: `attconv-light`, `attconv-advanced` (every task); `abcnn-1`, `abcnn-2`, `abcnn-3`, `bcnn` (pairs); `act`, `transformer` (single texts).")

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
    """The word vocabulary built from the training split (and the pretrained vectors)."""

    min_frequency: int = Field(1, ge=1, description="A training word joins the vocabulary when it occurs at least this often.")
    max_vocab: int | None = Field(None, ge=3, description="Keep at most this many training words (most frequent first); none = all.")
    pretrained_vocab: int | None = Field(None, ge=0, json_schema_extra={"default_text": f"`{DEFAULT_PRETRAINED_VOCAB}` (glove), `0` (no glove)"}, description=(
        "The N most frequent words of the [embeddings] vectors join the training words, so words training never saw keep "
        f"their pretrained vector at inference (needs glove = true). Default: {DEFAULT_PRETRAINED_VOCAB} with glove = true, 0 without."))
    oov_buckets: int | None = Field(None, ge=0, json_schema_extra={"default_text": f"`{DEFAULT_OOV_BUCKETS}` (tuned channel), `0` (else)"}, description=(
        "Hash buckets for the remaining unknown words (`[OOV<i>]` tokens): an unknown word matches itself, not every other "
        f"unknown word. 0 = one `[UNK]`. Default: {DEFAULT_OOV_BUCKETS} when [embeddings] tuned_channel is on, else 0."))


class EmbeddingsSection(_Strict):
    """The word vectors the network starts from."""

    glove: bool = Field(True, description=(
        "Start the embedding table from pretrained GloVe vectors (fetched once by `attserve data glove`, or on first use; "
        "`embedding_dim` must equal their width). false = random vectors learnt from your data alone (no download)."))
    vectors: str = Field("glove-6b-50d", description=(
        "The pinned vector set: glove-6b-50d (PyPI, 400k words), glove-6b-100d (npm, 341k words: no single letters such as "
        "\"a\", no word starting with a digit, no non-ASCII word; `attserve data` needs npm to fetch it), wordllama-256 "
        "(WordLlama's pieces averaged into a vector per GloVe word; wordllama-256-first: the first piece; wordllama-256-scaled: the averages scaled to glove-6b-100d's mean norm), spacy-md-300 "
        "(spaCy en_core_web_md), random-256 (a control: seeded random rows at WordLlama's width and scale), or sets joined by \"+\" (`glove-6b-100d+wordllama-256`: their vectors concatenated). "
        "Measured against each other: docs/models.md, \"Pretrained vector sets\"."))
    glove_file: str | None = Field(None, description=(
        "A GloVe text file (`word v1 ... vD` per line) read instead of the pinned package: other GloVe sets, or the "
        "package's vectors cut to a corpus's words for a machine that cannot fetch the package."))
    trainable: bool = Field(True, description="The embedding table trains with the network (false: the vectors stay as loaded; needs glove = true).")
    freeze_pretrained: bool = Field(False, description=(
        "Rows that have a pretrained vector stay fixed while the rest (training words without a vector, hash buckets) "
        "train: seen and unseen pretrained words stay in one vector space."))
    tuned_channel: bool | None = Field(None, json_schema_extra={"default_text": "`true` (attconv-* with glove), `false` (else)"}, description=(
        "Two channels (AttConv): the pretrained table frozen, plus a trainable copy of the rows training can see (its words "
        "and the OOV buckets), concatenated, so a word training never saw keeps a vector in the same space as the ones it "
        "tuned. Needs [tokenizer] oov_buckets > 0. Default: true for attconv-light/-advanced with glove = true, trainable = "
        "true and no freeze_pretrained; false otherwise."))
    export_dtype: Literal["float32", "float16", "int8"] = Field("float32", description=(
        "How export stores the embedding tables: float16 halves a large pretrained vocabulary's bytes; int8 (each row "
        "its own float16 scale) keeps about twice as many words as float16 in the same bytes, for a rounding of at most "
        "1/254 of the row's largest value. The parity check runs against the network with the same rounded weights."))
    export_pretrained_vocab: int | None = Field(None, ge=0, description=(
        "Export keeps only the first N pretrained-only words (`attserve export --pretrained-vocab`): their rows are frozen "
        "vectors, so the bundle shrinks without retraining; none keeps them all."))

    @field_validator("vectors")
    @classmethod
    def _known_vectors(cls, vectors: str) -> str:
        from training.embeddings import vector_set_parts  # numpy only; the recipe knows the sets from there

        vector_set_parts(vectors)
        return vectors

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
    """How much of each input the model reads (longer inputs are truncated, at training and serving)."""

    max_lengths: dict[str, int] = Field(description=(
        "Tokens read per ids input: `input_ids` (single texts); `premise_ids`, `hypothesis_ids` (pairs); `claim_ids`, "
        "`evidence_ids` (claims), e.g. `{ input_ids = 64 }`. Required."))
    max_evidence: int | None = Field(None, ge=1, description="Evidence sentences read per claim (verification only, and required there).")

    @field_validator("max_lengths")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in value.items() if v < 1}
        if bad:
            raise ValueError(f"max_lengths must be >= 1: {bad}")
        return value


class ServeAsSection(_Strict):
    """Export the trained network as another task's graph, through the adapter its model family
    registers (models.adapters): a two-label answer-selection pair network served as a reranker."""

    task: str = Field(description="The task the bundle serves, e.g. `rerank` (the adapter decides which trained task it takes).")
    max_lengths: dict[str, int] | None = Field(None, description=(
        "Tokens read per ids input of the served task (default: the trained inputs' limits, in order, e.g. "
        "premise_ids -> query_ids, hypothesis_ids -> texts_ids)."))
    max_evidence: int | None = Field(None, ge=1, description="The most texts one input's list may hold (a served task with a list field: required).")


class TrainSection(_Strict):
    """The optimisation."""

    seed: int = Field(0, description="Seed of every random draw (initialisation, shuffling, dropout, subsets): same seed, data and threads give the same weights on CPU.")
    epochs: int = Field(10, ge=0, description=(
        "Passes over the training split (at most: early stopping may end sooner); 0 only with average_with (the "
        "checkpoint is then the average, evaluated as a trained one is)."))
    batch_size: int = Field(32, ge=1, description="Training examples per optimiser step.")
    optimizer: Literal["adagrad", "adam", "adamw", "sgd"] = Field("adam", description="The optimiser.")
    lr: float = Field(1e-3, gt=0, description="Learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay (decoupled for adamw).")
    momentum: float = Field(0.0, ge=0, description="Momentum (sgd only).")
    schedule: Literal["constant", "linear-warmup", "plateau"] = Field("constant", description=(
        "Learning-rate schedule: constant; linear-warmup (warm up, then decay linearly to 0); plateau (cut when dev accuracy stalls)."))
    warmup_fraction: float = Field(0.05, ge=0, lt=1, description="linear-warmup: share of all steps spent warming up.")
    plateau_factor: float = Field(0.5, gt=0, lt=1, description="plateau: lr *= factor when dev accuracy stalls.")
    plateau_patience: int = Field(0, ge=0, description="plateau: evaluations without improvement before cutting the lr.")
    grad_clip: float | None = Field(5.0, gt=0, description="Max global gradient norm; none = no clipping.")
    patience: int | None = Field(3, ge=1, description="Early stopping: stop after this many evaluations without a better dev accuracy; none = never.")
    max_train_examples: int | None = Field(None, ge=1, description="Train on a seeded subset of this many training examples (smoke runs, budgets).")
    eval_every: int | None = Field(None, ge=1, description="Steps between dev evaluations; none = once per epoch.")
    eval_batch_size: int = Field(256, ge=1, description="Examples per forward pass when evaluating.")
    bucket_batches: int = Field(50, ge=1, description="Batches per length-sorted chunk (less padding, still shuffled).")
    max_wall_minutes: float | None = Field(None, gt=0, description="Time budget: stop after the first dev evaluation past it.")
    select_on: Literal["dev", "dev+ood"] = Field("dev", description=(
        "Model selection (early stopping, lr plateau, the kept weights): dev = in-domain dev accuracy; dev+ood = the mean "
        "of it and the mean accuracy on the task's out-of-domain dev sets (evaluated, never trained on; falls back to dev "
        "where they are absent)."))
    debias: Literal["none", "statement-only"] = Field("none", description=(
        "statement-only: product-of-experts training with a hypothesis/claim-only TF-IDF + LR model, so the network is paid "
        "for what the statement alone cannot tell. Pair tasks only; inference is unchanged."))
    init_from: str | None = Field(None, pattern=NAME_PATTERN, description=(
        "Start from the checkpoint of another recipe (its name; found at checkpoints/NAME, or `attserve train --init-from DIR`) "
        "instead of GloVe: same architecture and vocabulary, possibly another task."))
    init_labels: dict[str, str] | None = Field(None, description=(
        "With init_from: maps each label of this recipe's data to the checkpoint label whose output row it starts from "
        "(needed when the labels differ)."))
    average_with: str | None = Field(None, pattern=NAME_PATTERN, description=(
        "Weight-space averaging (WiSE-FT, Wortsman et al. 2022): once init_from's weights are loaded, every weight becomes "
        "(1 - average_weight) x init_from's + average_weight x this checkpoint's (a recipe name, found at checkpoints/NAME, "
        "or `attserve train --average-with DIR`): the same network and vocabulary, typically a model fine-tuned from "
        "init_from for another goal. Needs init_from; with epochs = 0 nothing is trained."))
    average_weight: float = Field(0.5, gt=0, lt=1, description="With average_with: the share of its weights in the average.")

    @model_validator(mode="after")
    def _momentum_for_sgd(self) -> "TrainSection":
        if self.momentum and self.optimizer != "sgd":
            raise ValueError(f"momentum applies to sgd only, not {self.optimizer}")
        return self

    @model_validator(mode="after")
    def _averaging_needs_a_start(self) -> "TrainSection":
        if self.average_with is not None and self.init_from is None:
            raise ValueError("[train] average_with needs init_from (the checkpoint it is averaged with)")
        if self.epochs == 0 and self.average_with is None:
            raise ValueError("[train] epochs = 0 trains nothing; it needs average_with (the checkpoint is the average)")
        return self


class Recipe(_Strict):
    """A training recipe: one TOML file says everything a trained checkpoint depends on."""

    name: str = Field(pattern=NAME_PATTERN, description="The recipe's name and the default checkpoint/bundle name: lower-case letters, digits, `.`, `_`, `-`.")
    description: str = Field("", description="What the model does, shown in the bundle's config.json and `/v1/models` (default: a description of the data, file names only).")
    wall_time: str = Field("", description="Measured (or estimated, and then said so) training time.")
    ship: bool = Field(True, description="`make models` exports the checkpoint into the model repository; false for a recipe trained only because another starts from it ([train] init_from).")
    default: bool = Field(False, description="`make models` marks the bundle `\"default\": true`: the model a request of its task that names none runs on.")
    data: DataSection = Field(description="Where the examples come from. Required.")
    model: ModelSection = Field(description="The architecture and its config overrides. Required.")
    tokenizer: TokenizerSection = Field(default_factory=TokenizerSection, description="The vocabulary.")
    embeddings: EmbeddingsSection = Field(default_factory=EmbeddingsSection, description="The word vectors.")
    limits: LimitsSection = Field(description="Input lengths. Required.")
    train: TrainSection = Field(default_factory=TrainSection, description="The optimisation.")
    serve_as: ServeAsSection | None = Field(None, description="Export as another task (e.g. a pair network as a reranker).")

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
    def _resolve_defaults(self) -> "Recipe":
        """The defaults that follow other keys (None = left out of the recipe); after this every
        value is concrete, so a checkpoint's dumped recipe reloads to the same one."""
        embeddings, tokenizer = self.embeddings, self.tokenizer
        if embeddings.tuned_channel is None:
            embeddings.tuned_channel = bool(embeddings.glove and embeddings.trainable and not embeddings.freeze_pretrained
                                            and self.model.architecture in TUNED_CHANNEL_ARCHITECTURES)
        if tokenizer.oov_buckets is None:
            tokenizer.oov_buckets = DEFAULT_OOV_BUCKETS if embeddings.tuned_channel else 0
        if tokenizer.pretrained_vocab is None:
            tokenizer.pretrained_vocab = DEFAULT_PRETRAINED_VOCAB if embeddings.glove else 0
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
        if TASKS[task].list_field is not None and self.limits.max_evidence is None:
            raise ValueError(f"{self.name}: a {task} recipe needs [limits] max_evidence")


# --- the options reference (docs/recipes.md, `attserve recipe-options`) ------------------------

# The smallest recipe: the README shows it, docs/recipes.md opens with it, tests train it.
MINIMAL_RECIPE = """\
name = "support-tickets"

[data]
train = "train.csv"              # paths relative to this file
dev = "dev.csv"
test = "test.csv"
format = "text-csv"
task = "classification"          # classification, entailment, verification or paraphrase

[model]
architecture = "attconv-light"   # attconv-light/-advanced: every task; abcnn-1..3, bcnn: pairs; act, transformer: single texts

[limits]
max_lengths = { input_ids = 64 } # pairs: premise_ids, hypothesis_ids; claims: claim_ids, evidence_ids (+ max_evidence)
"""

# The [model] table's keys besides `architecture`: fields of the architecture's network config
# (models.*Config dataclasses), described here so that docs/recipes.md documents every key a
# recipe may hold. tests/unit/test_recipes.py checks that every config field of every registered
# architecture has an entry.
MODEL_FIELD_DESCRIPTIONS: dict[str, str] = {
    "embedding_dim": "Width of a word vector; must equal the [embeddings] vectors' width when [embeddings] glove = true (50; 100 for glove-6b-100d, 256 for wordllama-256, 300 for spacy-md-300, the sum for sets joined by \"+\").",
    "dropout": "Dropout probability (embeddings and classifier head).",
    "label_smoothing": "Label smoothing of the cross-entropy loss (0 = none).",
    "variant": "Set by the architecture name (e.g. attconv-light -> light); a recipe does not set it.",
    "match": "AttConv: how a word scores its context words: dot, bilinear or additive.",
    "hidden_dim": "AttConv: output width of the attentive convolution.",
    "kernel_size": "Convolution filter width (AttConv: also the phrase granularity; ACT: odd).",
    "direction": "AttConv, pairs: both (symmetric features) or single (the hypothesis attends the premise).",
    "multi_context": "AttConv, verification: wise (max over evidence sentences) or conc (the sentences concatenated).",
    "head_hidden": "Hidden width of the classifier MLP (0 = logistic regression, as in the ABCNN paper).",
    "evidence_loss_weight": "AttConv, verification: weight of the auxiliary loss that makes evidence_scores point at the deciding sentence.",
    "evidence_loss_temperature": "AttConv, verification: softness of that loss's \"which sentence wins\" per dimension.",
    "exact_match": "AttConv, pairs and verification: a width-k conv over two features per token (does its id occur in "
                   "the other text, in context-wise verification in that evidence sentence; the share of its text's "
                   "tokens that do) added to the attentive convolution. Its weights start at zero, so a recipe may turn it on over an init_from checkpoint "
                   "trained without it.",
    "num_filters": "ABCNN: convolution output width of every block; ACT: filters per head.",
    "num_blocks": "ABCNN: convolution-pooling blocks (1 or 2 in the paper).",
    "max_length": "Longest input the network reads (ACT: rows of the position table); [limits] max_lengths may not exceed it.",
    "match_eps": "ABCNN: added inside the square root of the match score, so its gradient stays finite.",
    "use_pooled_vectors": "ABCNN: also feed each block's all-average-pooled vectors to the output layer.",
    "model_dim": "ACT/transformer: model width; a linear projection maps the embeddings to it when they differ.",
    "num_heads": "ACT/transformer: attention heads.",
    "num_layers": "ACT/transformer: encoder layers.",
    "fc_dim": "ACT: width of the fully connected layer before the softmax.",
    "center_loss_weight": "ACT: weight of the center loss added to the cross-entropy.",
    "ffn_dim": "Transformer: feed-forward width (0 = 4 x model_dim).",
    "position_dim": "ACT: width of the position embeddings in the global attention.",
    "attention_dim": "ACT: width of the global attention's scoring layer.",
    # set from the data and the tokenizer (DATA_DERIVED_FIELDS): listed, a recipe may not set them
    "task": "From the data (the task of the dataset or the files).",
    "vocab_size": "From the tokenizer.",
    "num_labels": "From the data.",
    "tuned_vocab_size": "From the tokenizer, with [embeddings] tuned_channel = true.",
}

_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = ()  # filled below the classes


def _type_text(annotation: Any) -> str:
    from typing import Union, get_args, get_origin
    import types

    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        parts = [a for a in get_args(annotation) if a is not type(None)]
        return " \\| ".join(_type_text(a) for a in parts)
    if origin in (list, dict):
        return {list: "list", dict: "table"}[origin] + "[" + ", ".join(_type_text(a) for a in get_args(annotation)) + "]"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "default_text" in extra:
        return str(extra["default_text"])
    if field.default_factory is not None:
        return "(table)"
    if field.default is PydanticUndefined:
        return "**required**"
    if field.default is None:
        return "none"
    if isinstance(field.default, bool):
        return f"`{str(field.default).lower()}`"
    if isinstance(field.default, str):
        return f'`"{field.default}"`' if field.default else '`""`'
    return f"`{field.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def builtin_architectures() -> dict[str, Any]:
    """The architectures the models package registers (not ones a test or script adds)."""
    from models import architectures

    return {name: arch for name, arch in architectures().items() if arch.network.__module__.startswith("models.")}


def options_markdown() -> str:
    """docs/recipes.md: every recipe key, from the pydantic schema and MODEL_FIELD_DESCRIPTIONS."""
    import dataclasses

    lines = [
        "# Recipe options",
        "",
        "<!-- Generated by `attserve recipe-options` from the recipe schema (training/recipes.py); "
        "tests/unit/test_recipes.py checks that this file equals the command's output. Do not edit by hand: "
        "change the schema's descriptions and run `attserve recipe-options --out docs/recipes.md`. -->",
        "",
        "A recipe is a TOML file: `attserve train RECIPE.toml` trains it. Every table is strict (an unknown key is an",
        "error), except `[model]`, whose keys besides `architecture` are the architecture's network config fields.",
        "A key left out takes the default below. The smallest recipe (pretrained GloVe vectors and vocabulary by default):",
        "",
        "```toml",
        MINIMAL_RECIPE.rstrip("\n"),
        "```",
        "",
        "Without the GloVe download (offline, or a language GloVe does not cover): `[embeddings] glove = false`.",
        "",
        "## Extending another recipe",
        "",
        "`extends = \"NAME\"` (top level) starts from the recipe `NAME.toml` in the same directory, or, when there is",
        "none there, in the folder above (a variant in `recipes/compare/` extends a recipe in `recipes/`); it may extend",
        "another in turn. Every table is taken from it key by key and the file's own keys replace its keys, one level",
        "deep: `[train] seed = 4` replaces the seed and keeps the rest of its `[train]`; an inline table such as",
        "`max_lengths` is one value. `name`, `wall_time`, `ship` and `default` are never taken: each file says its own.",
        "A key cannot be removed, only replaced, so a recipe that needs fewer keys extends an earlier one. A stage of a",
        "chain (`recipes/fever-attconv-*.toml`) is a few lines:",
        "",
        "```toml",
        'name = "fever-attconv-swaps-half2"',
        'extends = "fever-attconv-swaps-half"',
        'wall_time = "..."',
        'ship = false',
        "",
        "[train]",
        'init_from = "fever-attconv-halfavg-swaps"',
        "seed = 9",
        "```",
    ]
    for title, cls in _SECTIONS:
        lines += ["", f"## {title}", "", _cell((cls.__doc__ or "").strip().split("\n\n")[0].replace("\n    ", " ")), "",
                  "| key | type | default | description |", "|---|---|---|---|"]
        for key, field in cls.model_fields.items():
            lines.append(f"| `{key}` | {_type_text(field.annotation)} | {_default_text(field)} | {_cell(field.description or '')} |")
    # the network config fields, per config class (architectures sharing one class share its defaults)
    groups: dict[type, list[str]] = {}
    architectures = builtin_architectures()
    for name, arch in architectures.items():
        groups.setdefault(arch.network.config_class, []).append(name)
    field_names = list(dict.fromkeys(f.name for cls in groups for f in dataclasses.fields(cls)))
    lines += ["", "## [model] network config fields", "",
              "Any of these may follow `architecture` in `[model]` (the columns give each architecture's default; "
              "- = the architecture has no such field). The last rows come from the data and the tokenizer: a recipe may not set them.",
              "", "| key | " + " | ".join(", ".join(sorted(names)) for names in groups.values()) + " | description |",
              "|---|" + "---|" * len(groups) + "---|"]
    for key in sorted(field_names, key=lambda k: (k in DATA_DERIVED_FIELDS, field_names.index(k))):
        cells = []
        for cls, names in groups.items():
            fields = {f.name: f for f in dataclasses.fields(cls)}
            if key not in fields:
                cells.append("-")
            elif key == "variant":
                cells.append(", ".join(f"`{architectures[n].preset.get('variant')}`" for n in sorted(names)))
            else:
                default = fields[key].default
                cells.append(f"`{str(default).lower() if isinstance(default, bool) else default}`")
        lines.append(f"| `{key}` | " + " | ".join(cells) + f" | {_cell(MODEL_FIELD_DESCRIPTIONS.get(key, ''))} |")
    return "\n".join(lines) + "\n"


# A recipe's top-level keys about itself: never taken from the recipe it extends.
OWN_KEYS = ("name", "wall_time", "ship", "default")


def recipe_table(path: str | Path) -> dict[str, Any]:
    """The recipe TOML at `path` as one table, with what it extends filled in.

    `extends = "NAME"` starts from recipe NAME.toml in the same directory or, when there is none
    there, in the folder above (a variant in recipes/compare/ extends a recipe in recipes/); it may
    itself extend another. Every table of NAME's is taken key by key, and this file's keys replace
    NAME's, one level deep (`[train] seed = 4` replaces NAME's seed and keeps the rest of its
    [train]; an inline table such as `max_lengths` is one value). The keys in OWN_KEYS are each
    file's own. A key cannot be removed, only replaced: a recipe that needs fewer keys extends an
    earlier one."""
    return _extended_table(Path(path), ())


def _extended_table(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    if not isinstance(base_name, str) or not _NAME.fullmatch(base_name):
        raise ValueError(f"{path}: extends = {base_name!r}: expected a recipe name (NAME for NAME.toml beside it)")
    chain = (*chain, path.resolve())
    beside, above = path.parent / f"{base_name}.toml", path.parent.parent / f"{base_name}.toml"
    base_path = above if not beside.is_file() and above.is_file() else beside
    if base_path.resolve() in chain:
        raise ValueError(f"{path}: extends {base_name!r}, which extends it again: "
                         + " -> ".join(p.stem for p in (*chain, base_path.resolve())))
    if not base_path.is_file():
        raise ValueError(f"{path}: extends {base_name!r}, but there is no {beside} (nor {above})")
    merged = {key: value for key, value in _extended_table(base_path, chain).items() if key not in OWN_KEYS}
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def load_recipe(path: str | Path) -> Recipe:
    """Parse and validate a recipe TOML (`recipe_table`: what it extends filled in); relative data
    paths resolve against its directory."""
    path = Path(path)
    recipe = Recipe.model_validate(recipe_table(path))
    return recipe.model_copy(update={"data": recipe.data.resolved(path.parent)})


def recipe_files(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("*.toml"))


_SECTIONS = (
    ("Top level", Recipe),
    ("[data]", DataSection),
    ("[model]", ModelSection),
    ("[tokenizer]", TokenizerSection),
    ("[embeddings]", EmbeddingsSection),
    ("[limits]", LimitsSection),
    ("[train]", TrainSection),
)


__all__ = ["Recipe", "load_recipe", "recipe_table", "recipe_files", "options_markdown", "DATASET_TASKS", "MINIMAL_RECIPE", "MODEL_FIELD_DESCRIPTIONS"]
