"""The model bundle: a directory with `model.onnx`, `tokenizer.json` and `config.json`.

`BundleConfig` is the one schema of config.json: export writes it, the service reads it.
`read_bundle` (and `load_bundle`, its config only) refuses a bundle whose files are missing,
whose checksums do not match, whose model keeps tensors in external data files (which no
checksum covers), or whose labels do not match the model's output width, with a message naming
the file. It reads each file once: the bytes it hashes are the bytes a session is built from.
Nothing here unpickles: config is JSON, weights are ONNX protobuf.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, field_validator,
                      model_serializer, model_validator)

from core.tasks import TASKS

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
FORMAT_VERSION = 1
# The most bytes of a config.json read (the largest shipped one is 11 kB): a huge or endless
# file (a link to /dev/zero) is refused after this many bytes instead of filling the memory.
MAX_CONFIG_BYTES = 1 << 20

# a task's name, as core.tasks registers it
Task = Literal[tuple(TASKS)]  # type: ignore[valid-type]


class BundleError(Exception):
    """A bundle that cannot be served; the message names the file at fault."""


class Float16Rounding(BaseModel):
    """Embedding tables stored as float16 after export (`attserve bundle fp16-embeddings`),
    measured against the float32 graph the export checked against PyTorch."""

    model_config = ConfigDict(extra="forbid")

    applied_after_export: bool
    max_abs_diff_vs_float32_graph: float
    argmax_mismatches: int
    examples: int
    batch_sizes: list[int] = Field(default_factory=list)


class VocabularyExtension(BaseModel):
    """Pretrained words appended after export (`attserve bundle extend-vocab`). "frozen": the
    rows are the vectors training kept frozen, so the network is the one the export checked,
    with more words. "tuned": the vectors join fine-tuned rows that stayed close to them."""

    model_config = ConfigDict(extra="forbid")

    applied_after_export: bool
    vectors: str
    pretrained_words_before: int
    pretrained_words_after: int
    vocab_size_after: int
    rows: Literal["frozen", "tuned"]
    tuned_rows_mean_cosine: float | None = None
    logits_identical_on_old_vocabulary: bool
    examples: int


class ExplanationOutput(BaseModel):
    """An attention tensor of the network exposed as an extra graph output
    (export.explanations): which one, its layout, and how the service turns it into an answer."""

    model_config = ConfigDict(extra="forbid")

    output: str = Field(description="graph output name")
    kind: Literal["alignment", "token_weights"]
    rows: str = Field(description="ids input whose tokens index the rows (token_weights: the positions)")
    columns: str | None = Field(None, description="ids input whose tokens index the columns (alignment)")
    # batch: (B, Lrows, Lcols) or (B, L); evidence_slots: (B*K, Lclaim, Levidence);
    # evidence_concatenated: (B, Lclaim, K*Levidence)
    layout: Literal["batch", "evidence_slots", "evidence_concatenated"] = "batch"
    normalize_rows: bool = Field(False, description="the service divides each row by its sum over valid columns")
    method: str = Field(description="what the weights are, in a sentence (shown to users)")


class Parity(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_abs_diff: float
    argmax_mismatches: int
    examples: int
    batch_sizes: list[int] = Field(default_factory=list)
    embeddings_float16: Float16Rounding | None = None
    vocabulary_extended: VocabularyExtension | None = None
    # the explanation output against the same tensor in PyTorch (export.explanations)
    explanation_max_abs_diff: float | None = None
    # verification: evidence_scores, apart from the logits (max_abs_diff); bundles exported before
    # this field have both outputs in max_abs_diff
    evidence_max_abs_diff: float | None = None


class Calibration(BaseModel):
    """How the service turns logits into scores: softmax(logits / temperature). The label is
    the argmax either way; the temperature only changes how confident the scores are."""

    model_config = ConfigDict(extra="allow")

    temperature: float = Field(1.0, description="fitted on in-domain dev logits (NLL); must be > 0")

    @field_validator("temperature")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"must be a finite number > 0 (scores are softmax(logits / temperature)), got {value}")
        return value


# An absolute local path (/tmp/x/train.csv, C:\\data\\train.csv) inside a description: bundles
# exported before descriptions carried file names only show just the file name.
_LOCAL_PATH = re.compile(r"(?<![\w.:/\\])(?:/|[A-Za-z]:\\)(?:[^\s,;:()'\"/\\]+[/\\])+([^\s,;:()'\"/\\]+)")


def strip_local_paths(text: str) -> str:
    """`text` with every absolute file path cut to its file name."""
    return _LOCAL_PATH.sub(r"\1", text)


class ModelCard(BaseModel):
    """What the model was trained on and how it holds up (written by `attserve card`).
    Only `calibration.temperature` changes serving; the rest is reported by /v1/models."""

    model_config = ConfigDict(extra="allow")

    training_data: dict[str, Any] = Field(default_factory=dict)
    in_domain: dict[str, Any] = Field(default_factory=dict)
    ood_dev: dict[str, Any] = Field(default_factory=dict)
    unknown_token_share: dict[str, float] = Field(default_factory=dict)
    calibration: Calibration = Field(default_factory=Calibration)
    known_failure_modes: list[str] = Field(default_factory=list)

    @field_validator("training_data")
    @classmethod
    def _no_local_paths(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {k: strip_local_paths(v) if isinstance(v, str) else v for k, v in value.items()}


class TransformersGraph(BaseModel):
    """A Hugging Face sequence classifier's graph (bundle kind "transformers", written by
    `attserve bundle import-hf`): its feeds, its one sequence length, its padding id, and the
    labels its own config named, in logits order (`labels` are the task's names for them)."""

    model_config = ConfigDict(extra="forbid")

    model_type: str = Field(description="their config.json's model_type (bert, roberta, deberta-v2, ...)")
    graph_inputs: list[Literal["input_ids", "attention_mask", "token_type_ids"]]
    max_length: int = Field(ge=2, description="tokens of the whole sequence, the template's special tokens included")
    pad_id: int = Field(ge=0)
    source_labels: list[str] = Field(description="their config's id2label, in logits order")
    source_config: str = Field(description="their config.json, kept under this name beside ours")
    inputs_per_call: int | None = Field(None, ge=1, description=(
        "at most this many inputs in one graph call (None: the service's batch size); int8 graphs "
        "take 1: dynamic quantization scales activations over the whole call, so an input's scores "
        "would move with its batch-mates"))

    @model_validator(mode="after")
    def _feeds(self) -> "TransformersGraph":
        if not {"input_ids", "attention_mask"} <= set(self.graph_inputs):
            raise ValueError(f"graph_inputs {self.graph_inputs} lack input_ids or attention_mask")
        return self


class BundleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    format_version: int = FORMAT_VERSION
    # "attserve": a network of models/ exported by `attserve export`; "transformers": a Hugging
    # Face sequence classifier (`transformers` says how its graph is fed)
    kind: Literal["attserve", "transformers"] = "attserve"
    transformers: TransformersGraph | None = None
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    version: str
    task: Task
    architecture: str
    description: str = ""
    # a labelled task's labels, in logits order (at least 2); none for a task without logits
    labels: list[str] = Field(default_factory=list)
    inputs: list[str]
    outputs: list[str]
    # Max tokens per text for each ids input; longer texts are truncated by the service.
    max_lengths: dict[str, int]
    # A task with a list field only (verification's evidence): the most texts one input's list may hold.
    max_evidence: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    data_checksums: dict[str, str] = Field(default_factory=dict)
    parity: Parity | None = None
    opset: int
    onnx_version: str
    onnxruntime_version: str
    torch_version: str | None = None
    model_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tokenizer_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # The task's default model (a request naming no model runs on it) unless
    # ATTSERVE_DEFAULT_<TASK>_MODEL names another.
    default: bool = False
    # The attention exposed as an extra graph output for `"explain": true` (None: the model
    # offers no attention; answers then carry tokens only).
    explanation: ExplanationOutput | None = None
    # Optional model card; not covered by a checksum (it is metadata, rewritten by `attserve card`).
    card: ModelCard | None = None

    @field_validator("description")
    @classmethod
    def _description_without_local_paths(cls, value: str) -> str:
        return strip_local_paths(value)

    @model_serializer(mode="wrap")
    def _first_kind_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An attserve bundle's config.json is written as before the second kind existed (no
        `kind`, no `transformers`): exports stay byte-identical."""
        data = handler(self)
        if self.kind == "attserve":
            data.pop("kind", None)
            data.pop("transformers", None)
        return data

    @property
    def temperature(self) -> float:
        """Logits are divided by this before the softmax (1.0 without a card)."""
        return self.card.calibration.temperature if self.card is not None else 1.0

    @model_validator(mode="after")
    def _consistent(self) -> "BundleConfig":
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not supported (expected {FORMAT_VERSION})")
        task = TASKS[self.task]
        if tuple(self.inputs) != task.inputs:
            raise ValueError(f"inputs {self.inputs} do not match task {self.task} {list(task.inputs)}")
        if tuple(self.outputs) != task.outputs:
            raise ValueError(f"outputs {self.outputs} do not match task {self.task} {list(task.outputs)}")
        missing = [n for n in self.inputs if n not in self.max_lengths]
        if missing:
            raise ValueError(f"max_lengths lacks {missing}")
        if any(v < 1 for v in self.max_lengths.values()):
            raise ValueError("max_lengths must be >= 1")
        if task.labelled and len(self.labels) < 2:
            raise ValueError(f"a {self.task} bundle needs at least 2 labels, got {self.labels}")
        if not task.labelled and self.labels:
            raise ValueError(f"a {self.task} bundle has no logits, so no labels; got {self.labels}")
        if task.list_field is not None and not self.max_evidence:
            raise ValueError(f"a {self.task} bundle needs max_evidence >= 1 (the most {task.list_field.name} texts per input)")
        if self.explanation is not None:
            e = self.explanation
            if e.output in self.outputs:
                raise ValueError(f"explanation.output {e.output!r} is one of the outputs {self.outputs}")
            for axis in (e.rows, e.columns):
                if axis is not None and axis not in self.inputs:
                    raise ValueError(f"explanation axis {axis!r} is not an input {self.inputs}")
            if (e.kind == "alignment") != (e.columns is not None):
                raise ValueError("an alignment explanation has columns; token weights have none")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels are not unique: {self.labels}")
        if (self.kind == "transformers") != (self.transformers is not None):
            raise ValueError("a transformers bundle, and only one, says how its graph is fed (`transformers`)")
        if self.transformers is not None and self.explanation is not None:
            raise ValueError("a transformers bundle exposes no attention output (`explanation`)")
        return self


@dataclass(frozen=True)
class Bundle:
    path: Path
    config: BundleConfig

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_config(path: str | Path) -> BundleConfig:
    """config.json at `path`, read once and at most MAX_CONFIG_BYTES."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise BundleError(f"{path}: missing") from None
    except OSError as exc:
        raise BundleError(f"{path}: not readable ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise BundleError(f"{path}: over {MAX_CONFIG_BYTES} bytes, more than a bundle config holds")
    return parse_config(raw, path)


def parse_config(raw: bytes, path: str | Path) -> BundleConfig:
    """The config in `raw` (the bytes of `path`). The messages name the fields at fault and never
    quote the file's content (a config.json linked to another file must not show it)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else \
            f"byte {exc.start}"
        raise BundleError(f"{path}: not readable JSON (at {where})") from None
    try:
        return BundleConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'config'}: {e['msg']}"
                             for e in exc.errors(include_url=False, include_input=False, include_context=False))
        raise BundleError(f"{path}: invalid bundle config: {problems}") from None


# --- external data ----------------------------------------------------------------------------
# An ONNX tensor may keep its data in another file (`data_location: EXTERNAL`, the file named
# in `external_data`), which onnxruntime reads from the model's directory: config.json's
# checksums would not cover it. The service has onnxruntime's protobuf but not the `onnx`
# package, so this is the part of onnx.proto that says where a tensor's data lives and every
# place a tensor can sit (field numbers as in onnx.proto; tests/process/test_reliability.py checks them
# against onnx's own descriptors). Other fields are skipped unparsed.

_ONNX_TENSOR_PLACES: dict[str, list[tuple[str, int, str]]] = {  # message: (field, number, type; * = repeated)
    "StringStringEntryProto": [("key", 1, "string"), ("value", 2, "string")],
    "TensorProto": [("name", 8, "string"), ("external_data", 13, "*StringStringEntryProto"),
                    ("data_location", 14, "int32")],
    "SparseTensorProto": [("values", 1, "TensorProto"), ("indices", 2, "TensorProto")],
    "AttributeProto": [("t", 5, "TensorProto"), ("g", 6, "GraphProto"), ("tensors", 10, "*TensorProto"),
                       ("graphs", 11, "*GraphProto"), ("sparse_tensor", 22, "SparseTensorProto"),
                       ("sparse_tensors", 23, "*SparseTensorProto")],
    "NodeProto": [("attribute", 5, "*AttributeProto")],
    "GraphProto": [("node", 1, "*NodeProto"), ("initializer", 5, "*TensorProto"),
                   ("sparse_initializer", 15, "*SparseTensorProto")],
    "FunctionProto": [("node", 7, "*NodeProto"), ("attribute_proto", 11, "*AttributeProto")],
    "TrainingInfoProto": [("initialization", 1, "GraphProto"), ("algorithm", 2, "GraphProto")],
    "ModelProto": [("graph", 7, "GraphProto"), ("training_info", 20, "*TrainingInfoProto"),
                   ("functions", 25, "*FunctionProto")],
}
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def _onnx_model_class() -> type:
    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="attserve_onnx_tensor_places.proto", package="attserve_onnx",
                                              syntax="proto2")
    for message, fields in _ONNX_TENSOR_PLACES.items():
        proto = file.message_type.add(name=message)
        for name, number, kind in fields:
            repeated, kind = kind.startswith("*"), kind.lstrip("*")
            field = proto.field.add(name=name, number=number,
                                    label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if kind == "string":
                field.type = F.TYPE_STRING
            elif kind == "int32":
                field.type = F.TYPE_INT32
            else:
                field.type, field.type_name = F.TYPE_MESSAGE, f".attserve_onnx.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("attserve_onnx.ModelProto"))


_ModelTensorPlaces = _onnx_model_class()


def external_data(model: bytes) -> list[str]:
    """`name -> file` of every tensor of the serialized ONNX `model` that keeps its data in an
    external file (initializers, sparse ones, node attributes, subgraphs, functions)."""
    found: list[str] = []

    def tensor(t: Any) -> None:
        if t.data_location == _EXTERNAL or len(t.external_data):
            where = next((e.value for e in t.external_data if e.key == "location"), "?")
            found.append(f"{t.name or '?'} -> {where}")

    def sparse(s: Any) -> None:
        tensor(s.values)
        tensor(s.indices)

    def attribute(a: Any) -> None:
        for t in (a.t, *a.tensors):
            tensor(t)
        for s in (a.sparse_tensor, *a.sparse_tensors):
            sparse(s)
        for g in (a.g, *a.graphs):
            graph(g)

    def nodes(ns: Any) -> None:
        for n in ns:
            for a in n.attribute:
                attribute(a)

    def graph(g: Any) -> None:
        for t in g.initializer:
            tensor(t)
        for s in g.sparse_initializer:
            sparse(s)
        nodes(g.node)

    parsed = _ModelTensorPlaces.FromString(model)
    graph(parsed.graph)
    for info in parsed.training_info:
        graph(info.initialization)
        graph(info.algorithm)
    for function in parsed.functions:
        nodes(function.node)
        for a in function.attribute_proto:
            attribute(a)
    return found


@dataclass(frozen=True)
class BundleFiles:
    """A verified bundle with its graph and tokenizer as read: the very bytes whose sha256
    config.json vouches for. Build the session and the tokenizer from these, never from the
    paths again (a file replaced between the check and a second read would slip in)."""

    bundle: Bundle
    model: bytes = field(repr=False)
    tokenizer: bytes = field(repr=False)


def _read_checked(file: Path, expected: str) -> bytes:
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{file}: missing") from None
    except OSError as exc:
        raise BundleError(f"{file}: not readable ({exc.strerror or type(exc).__name__})") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise BundleError(f"{file}: sha256 {actual} does not match config.json ({expected}); the file was altered")
    return data


def read_bundle(path: str | Path) -> BundleFiles:
    """Read and verify a bundle directory, each file once (files present, checksums match, no
    tensor kept in an external data file)."""
    path = Path(path)
    config = read_config(path / CONFIG_FILE)
    model = _read_checked(path / MODEL_FILE, config.model_sha256)
    tokenizer = _read_checked(path / TOKENIZER_FILE, config.tokenizer_sha256)
    try:
        external = external_data(model)
    except DecodeError:
        raise BundleError(f"{path / MODEL_FILE}: not an ONNX model (protobuf does not parse)") from None
    if external:
        shown = ", ".join(external[:3]) + (f" and {len(external) - 3} more" if len(external) > 3 else "")
        raise BundleError(f"{path / MODEL_FILE}: {len(external)} tensor(s) keep their data in external files "
                          f"({shown}), which config.json's checksums do not cover; export the model with its "
                          "weights inside model.onnx")
    return BundleFiles(Bundle(path, config), model, tokenizer)


def load_bundle(path: str | Path) -> Bundle:
    """Read and verify a bundle directory (`read_bundle`), for its config and paths."""
    return read_bundle(path).bundle


def check_output_width(bundle: Bundle, width: int | str | None) -> None:
    """Reject a bundle whose labels do not match the graph's logits width (the first output's
    last axis; a task without logits has nothing to check)."""
    if TASKS[bundle.config.task].labelled and isinstance(width, int) and width != len(bundle.config.labels):
        raise BundleError(
            f"{bundle.path / CONFIG_FILE}: {len(bundle.config.labels)} labels {bundle.config.labels} "
            f"but {bundle.model_path} outputs {width} logits"
        )
