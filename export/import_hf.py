"""`attserve bundle import-hf DIR --task entailment -o model_repository/NAME`: a Hugging Face
sequence classifier exported to ONNX (the folder `optimum-cli export onnx --task
text-classification` writes, or `torch.onnx.export` of an AutoModelForSequenceClassification
with tokenizer.json and config.json beside it) as a served bundle of kind "transformers"
(core.transformers_bundle, docs/transformers.md).

The folder's config.json is kept as transformers_config.json; ours is config.json. Their label
names are mapped to the task's (`map_labels`, refused when a name fits none or two fit one).
With torch and transformers installed, and the PyTorch weights at hand (the folder itself or
`--reference`), the served answers are checked against transformers' own forward.
Nothing heavy is imported at module level: the command runs on the serving install too.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import typer

from core.bundle import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, BundleConfig, BundleError, Parity, external_data
from core.tasks import TASKS, TaskForm
from core.transformers_bundle import (
    GRAPH_INPUTS,
    KIND,
    LOGITS,
    TRANSFORMERS_CONFIG_FILE,
    TemplateEncoder,
)

# names a config writes when nobody named the labels (transformers' default id2label)
_GENERIC = re.compile(r"^label_?\d+$", re.IGNORECASE)
# model types whose position ids start after the padding id (RoBERTa's create_position_ids):
# max_position_embeddings - (pad_token_id + 1) tokens fit
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod",
                     "roberta-prelayernorm"}
# a tolerance on logits: transformers' forward against onnxruntime's on the same ids
PARITY_TOLERANCE = 1e-4
PARITY_PAIRS = [("A man is playing a guitar on stage.", "A man is performing music."),
                ("The cat sat on the mat.", "A dog is barking loudly at the mailman outside the house."),
                ("Two children are running through a field of tall grass on a sunny afternoon.", "Kids play."),
                ("Paris is the capital of France.", "Paris is in Germany.")]


class ImportRefused(ValueError):
    """A folder that cannot become a bundle; the message says what to do."""


def _norm(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def map_labels(task: str, source: list[str], given: list[str] | None = None) -> list[str]:
    """The task's names of the model's labels `source` (logits order): `given` when the user
    named them, else by the task's label_synonyms (a classification model keeps its own). Refused
    when a name fits no label of the task, two fit the same one, or names are transformers'
    placeholders (LABEL_0, ...)."""
    if given is not None:
        if len(given) != len(source):
            raise ImportRefused(f"--labels names {len(given)} labels but the model has {len(source)} logits "
                                f"({source}); name each, in logits order")
        labels = given
    elif any(_GENERIC.match(name) for name in source):
        raise ImportRefused(f"the model's config names its labels {source} (transformers' placeholders): say what "
                            f"each logit means with --labels, in logits order, e.g. --labels "
                            f"{','.join(_example_labels(task, len(source)))}")
    elif not TASKS[task].label_synonyms:
        labels = source
    else:
        synonyms = TASKS[task].label_synonyms
        table = {_norm(alias): ours for ours, aliases in synonyms.items() for alias in aliases}
        unknown = [name for name in source if _norm(name) not in table]
        if unknown:
            raise ImportRefused(f"labels {unknown} of the model fit no {task} label ({sorted(synonyms)}); "
                                f"name each logit with --labels, in logits order ({source})")
        labels = [table[_norm(name)] for name in source]
    if len(set(labels)) != len(labels):
        raise ImportRefused(f"labels {source} are ambiguous for {task}: they map to {labels}; name each logit with "
                            "--labels, in logits order")
    if len(labels) < 2:
        raise ImportRefused(f"a {task} model needs at least 2 logits, this one has {len(labels)}")
    required = TASKS[task].required_label
    if required is not None and required[0] not in labels:
        label, meaning, why = required
        raise ImportRefused(f"no label of {source} means {meaning} ({label!r}): a {task} bundle needs one ({why}); "
                            "name each logit with --labels")
    return labels


def _example_labels(task: str, n: int) -> list[str]:
    known = list(TASKS[task].label_synonyms)
    return known[:n] if len(known) >= n else [f"name{i}" for i in range(n)]


def sequence_length(config: dict[str, Any], tokenizer: dict[str, Any], given: int | None) -> int:
    """The most tokens of a sequence the model reads: its position table (less the offset of
    RoBERTa-like models), the tokenizer's own truncation when it has one, or `given` (at most that)."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        raise ImportRefused("config.json has no max_position_embeddings; give the model's length with --max-length")
    if config.get("model_type") in _OFFSET_POSITIONS:
        positions -= int(config.get("pad_token_id") or 0) + 1
    truncation = (tokenizer.get("truncation") or {}).get("max_length")
    most = min(positions, truncation) if isinstance(truncation, int) else positions
    if given is not None:
        if given > most:
            raise ImportRefused(f"--max-length {given} is over the {most} tokens the model reads")
        return given
    return most


def pad_id(config: dict[str, Any], tokenizer: dict[str, Any]) -> int:
    """The id the model pads with: its config's pad_token_id, else the tokenizer's padding or pad token."""
    if isinstance(config.get("pad_token_id"), int):
        return config["pad_token_id"]
    padding = tokenizer.get("padding") or {}
    if isinstance(padding.get("pad_id"), int):
        return padding["pad_id"]
    for token in tokenizer.get("added_tokens") or ():
        if token.get("content") in ("[PAD]", "<pad>"):
            return token["id"]
    return 0


def _read_source(source: Path) -> tuple[dict, bytes, bytes]:
    """Their config (parsed), graph and tokenizer bytes; ImportRefused naming what is missing."""
    model, tokenizer, config = source / MODEL_FILE, source / TOKENIZER_FILE, source / CONFIG_FILE
    if not model.is_file():
        raise ImportRefused(f"{source} has no {MODEL_FILE}: export it first (optimum-cli export onnx --model "
                            f"YOUR_MODEL --task text-classification {source})")
    if not tokenizer.is_file():
        raise ImportRefused(f"{source} has no {TOKENIZER_FILE}: save the model's fast tokenizer there "
                            "(AutoTokenizer.from_pretrained(YOUR_MODEL).save_pretrained(DIR); optimum-cli writes it)")
    if not config.is_file():
        raise ImportRefused(f"{source} has no {CONFIG_FILE} (the model's Hugging Face config): save it there "
                            "(model.config.save_pretrained(DIR))")
    try:
        their = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportRefused(f"{config}: not readable JSON ({exc})") from None
    if "task" in their and "model_sha256" in their:
        raise ImportRefused(f"{source} is an attserve bundle already, not a Hugging Face export")
    return their, model.read_bytes(), tokenizer.read_bytes()


def graph_feeds(model: bytes, where: Path) -> tuple[list[str], int | str | None]:
    """The graph's inputs (the feeds) and its logits' width; ImportRefused for another graph."""
    import onnxruntime as ort

    if external_data(model):
        raise ImportRefused(f"{where}: its weights are in external data files; export with them inside model.onnx "
                            "(a model under 2 GB: torch.onnx.export(..., external_data=False))")
    try:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise ImportRefused(f"{where}: onnxruntime cannot load it: {exc}") from None
    inputs = [i.name for i in session.get_inputs()]
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if LOGITS not in outputs:
        raise ImportRefused(f"{where}: no output named {LOGITS!r} (outputs: {sorted(outputs)}); export the "
                            "sequence-classification head (optimum-cli export onnx --task text-classification, or "
                            "torch.onnx.export of an AutoModelForSequenceClassification with output_names=['logits'])")
    odd = [name for name in inputs if name not in GRAPH_INPUTS]
    if odd or not {"input_ids", "attention_mask"} <= set(inputs):
        raise ImportRefused(f"{where}: inputs {inputs}; a sequence classifier reads input_ids, attention_mask and "
                            "optionally token_type_ids")
    return inputs, outputs[LOGITS][-1]


def _opset(model: bytes) -> tuple[int, str]:
    try:
        import onnx
    except ImportError:
        return 0, "not installed"
    proto = onnx.load_from_string(model)
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0), onnx.__version__


def task_labels(task: str, source: list[str], given: list[str] | None, width: int | str | None) -> list[str]:
    """The bundle's labels: `map_labels`, or none for a reranker, whose graph must output one
    logit (a cross-encoder's relevance)."""
    if TASKS[task].labelled:
        if isinstance(width, int) and width != len(source):
            raise ImportRefused(f"config.json names {len(source)} labels but {MODEL_FILE} outputs {width} logits")
        return map_labels(task, source, given)
    if width != 1 or given:
        raise ImportRefused(f"a {task} bundle takes a cross-encoder with one logit (its relevance); this one outputs "
                            f"{width} ({source}); export the one-logit head (num_labels=1)")
    return []


def build_config(source: Path, task: str, name: str, labels: list[str] | None, max_length: int | None,
                 description: str = "", max_texts: int = 32) -> tuple[BundleConfig, bytes, bytes, bytes]:
    """Our config.json for the folder `source`, and the bytes to write (graph, tokenizer, their
    config); `max_texts`: a list field's most texts per input (rerank)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    if task not in TASKS:
        raise ImportRefused(f"--task {task}: not a task; one of {list(TASKS)}")
    their, model, tokenizer = _read_source(source)
    try:
        encoder = TemplateEncoder(Tokenizer.from_str(tokenizer.decode("utf-8")))
    except Exception as exc:  # tokenizers raises plain Exception; the template check ValueError
        raise ImportRefused(f"{source / TOKENIZER_FILE}: {exc}") from None
    inputs, width = graph_feeds(model, source / MODEL_FILE)
    id2label = their.get("id2label") or {}
    source_labels = [id2label[k] for k in sorted(id2label, key=int)] if id2label else []
    if not source_labels:
        raise ImportRefused(f"{source / CONFIG_FILE} has no id2label: name each logit with --labels")
    mapped = task_labels(task, source_labels, labels, width)
    tokenizer_spec = json.loads(tokenizer)
    length = sequence_length(their, tokenizer_spec, max_length)
    if TASKS[task].form is not TaskForm.TEXT and length <= encoder.specials(True) + 1:
        raise ImportRefused(f"a sequence of {length} tokens leaves no room for a pair")
    opset, onnx_version = _opset(model)
    model_type = str(their.get("model_type") or "unknown")
    architecture = (their.get("architectures") or [f"{model_type} sequence classifier"])[0]
    config = BundleConfig(
        kind=KIND, name=name, version=hashlib.sha256(model).hexdigest()[:12], task=task, architecture=architecture,
        description=description or f"{architecture} imported from a Hugging Face export",
        labels=mapped, inputs=list(TASKS[task].inputs), outputs=list(TASKS[task].outputs),
        max_lengths={i: length for i in TASKS[task].inputs}, opset=opset, onnx_version=onnx_version,
        max_evidence=max_texts if TASKS[task].list_field is not None else None,
        onnxruntime_version=ort.__version__, model_sha256=hashlib.sha256(model).hexdigest(),
        tokenizer_sha256=hashlib.sha256(tokenizer).hexdigest(),
        transformers={"model_type": model_type, "graph_inputs": inputs, "max_length": length,
                      "pad_id": pad_id(their, tokenizer_spec), "source_labels": source_labels,
                      "source_config": TRANSFORMERS_CONFIG_FILE})
    return config, model, tokenizer, (source / CONFIG_FILE).read_bytes()


def write_import(config: BundleConfig, model: bytes, tokenizer: bytes, their_config: bytes, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / MODEL_FILE).write_bytes(model)
    (out / TOKENIZER_FILE).write_bytes(tokenizer)
    (out / TRANSFORMERS_CONFIG_FILE).write_bytes(their_config)
    (out / CONFIG_FILE).write_text(config.model_dump_json(indent=2, exclude_none=True) + "\n", encoding="utf-8")


def probe_texts(task_name: str) -> list[tuple[str, ...]]:
    """PARITY_PAIRS in the task's form: single texts for a classifier, (evidence, claim) pairs
    for verification, one query and several texts for a reranker."""
    task = TASKS[task_name]
    if task.form is TaskForm.TEXT:
        return [p[:1] for p in PARITY_PAIRS]
    if task.form is TaskForm.PAIR or task.labelled:
        return list(PARITY_PAIRS)
    return [(PARITY_PAIRS[0][0], hypothesis) for _, hypothesis in PARITY_PAIRS]


def check_parity(bundle: Path, reference: Path) -> Parity:
    """Served logits (onnxruntime through the service's runtime; a reranker's scores) against
    transformers' forward of the weights at `reference`, on PARITY_PAIRS (single texts for a
    classifier), each alone and all as one padded batch of mixed lengths; ImportRefused past
    PARITY_TOLERANCE."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast

    from core.bundle import load_bundle
    from service.inference.runtime import CPU, ModelRuntime

    config = load_bundle(bundle).config
    spec = config.transformers
    texts = probe_texts(config.task)
    model = AutoModelForSequenceClassification.from_pretrained(str(reference)).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bundle / TOKENIZER_FILE))
    tokenizer.pad_token_id = spec.pad_id
    batch = tokenizer(*zip(*texts), padding=True, truncation=True, max_length=spec.max_length, return_tensors="pt",
                      return_token_type_ids="token_type_ids" in spec.graph_inputs)
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    alone, together = served_logits(ModelRuntime.load(bundle, [CPU], 1), texts)
    diff = float(max(np.abs(alone - expected).max(), np.abs(together - expected).max()))
    mismatches = int((alone.argmax(-1) != expected.argmax(-1)).sum()) if config.labels else 0
    if diff > PARITY_TOLERANCE or mismatches:
        raise ImportRefused(f"served logits differ from transformers' forward by {diff:.2e} (over {PARITY_TOLERANCE}) "
                            f"with {mismatches} argmax mismatches: the export does not match {reference}")
    return Parity(max_abs_diff=diff, argmax_mismatches=mismatches, examples=len(texts), batch_sizes=[1, len(texts)])


def served_logits(runtime: Any, texts: list[tuple[str, ...]]) -> tuple[Any, Any]:
    """The runtime's logits of each text (or pair) run alone and all together, (n, C); for
    verification each (evidence, claim) pair as a claim with one sentence; a reranker's (pairs
    of one query): each text alone, then all of them as the query's list."""
    import numpy as np

    from service.inference.tasks import encode

    task = TASKS[runtime.config.task]
    if task.list_field is None:
        items = [e.item for e in encode(runtime, [SimpleNamespace(**dict(zip(task.field_names, t))) for t in texts])]
        return np.stack([runtime.run_call([item]).logits[0] for item in items]), runtime.run_call(items).logits
    first, listed = task.field_names
    if task.labelled:
        items = [e.item for e in encode(runtime, [SimpleNamespace(**{first: claim, listed: [evidence]})
                                                  for evidence, claim in texts])]
        return np.stack([runtime.run_call([item]).logits[0] for item in items]), runtime.run_call(items).logits
    alone = encode(runtime, [SimpleNamespace(**{first: q, listed: [t]}) for q, t in texts])
    scores = [runtime.run_call([e.item]).per_text[0] for e in alone]
    [together] = encode(runtime, [SimpleNamespace(**{first: texts[0][0], listed: [t for _, t in texts]})])
    return np.array(scores), np.array(runtime.run_call([together.item]).per_text[0])[:, None]


def read_dev(path: Path, task: str) -> list[tuple[str, ...]]:
    """The inputs of a dev file, one JSON object a line with the task's fields ({"text": ...},
    {"premise": ..., "hypothesis": ...}); ImportRefused for a line without them."""
    fields = TASKS[task].field_names
    texts = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            record = json.loads(line)
            if not isinstance(record, dict) or any(not isinstance(record.get(f), str) for f in fields):
                raise ImportRefused(f"{path}:{n}: each line is a JSON object with the texts {list(fields)}")
            texts.append(tuple(record[f] for f in fields))
    if not texts:
        raise ImportRefused(f"{path}: no inputs")
    return texts


def served_scores(runtime: Any, texts: list[tuple[str, ...]]) -> tuple[Any, Any]:
    """What the service answers for `texts` (softmax(logits / T); a reranker's sigmoid), each
    run alone and all as one batch."""
    import numpy as np

    from service.inference.runtime import softmax

    alone, together = served_logits(runtime, texts)
    if runtime.config.labels:
        return softmax(alone, runtime.config.temperature), softmax(together, runtime.config.temperature)
    return 1 / (1 + np.exp(-alone.astype(np.float64))), 1 / (1 + np.exp(-together.astype(np.float64)))


def quantize_int8(model: bytes, work: Path) -> bytes:
    """The graph with its weights quantized to int8 (onnxruntime's dynamic quantization)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work.mkdir(parents=True, exist_ok=True)
    (work / "fp32.onnx").write_bytes(model)
    quantize_dynamic(work / "fp32.onnx", work / "int8.onnx", weight_type=QuantType.QInt8)
    return (work / "int8.onnx").read_bytes()


def int8_report(fp32: Path, int8: Path, texts: list[tuple[str, ...]], source: str, repeats: int = 20) -> dict:
    """The int8 bundle against the fp32 one on `texts` (one batch): the largest score difference,
    the median time of a call of each and its ratio (measured here, on this machine), and how far
    an input's int8 scores move with its batch-mates (dynamic quantization scales activations over
    the whole batch)."""
    import statistics
    import time

    import numpy as np

    from service.inference.runtime import CPU, ModelRuntime
    from service.inference.tasks import encode

    runtimes = [ModelRuntime.load(bundle, [CPU], 1) for bundle in (fp32, int8)]
    (_, fp32_scores), (int8_alone, int8_scores) = (served_scores(r, texts) for r in runtimes)
    task = TASKS[runtimes[0].config.task]
    medians = []
    for runtime in runtimes:
        if task.list_field is None:
            items = [e.item for e in encode(runtime, [SimpleNamespace(**dict(zip(task.field_names, t))) for t in texts])]
        else:  # timed as served_logits runs it
            items = None
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            runtime.run_call(items) if items is not None else served_logits(runtime, texts)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return {"quantization": "onnxruntime.quantization.quantize_dynamic, weights QInt8",
            "dev": source, "examples": len(texts),
            "max_abs_score_diff": float(np.abs(int8_scores - fp32_scores).max()),
            "argmax_changes": int((int8_scores.argmax(-1) != fp32_scores.argmax(-1)).sum()) if task.labelled else 0,
            "max_abs_batch_dependence": float(np.abs(int8_alone - int8_scores).max()),
            "fp32_call_ms": round(medians[0] * 1000, 3), "int8_call_ms": round(medians[1] * 1000, 3),
            "speedup": round(medians[0] / medians[1], 3)}


def make_int8(config: BundleConfig, model: bytes, tokenizer: bytes, their: bytes, staging: Path,
              dev: Path | None) -> BundleConfig:
    """Replace the fp32 bundle at `staging` by its int8 twin, measured against it (int8_report);
    the fp32 parity moves into the report (the int8 graph's logits are not transformers')."""
    texts = read_dev(dev, config.task) if dev is not None else probe_texts(config.task)
    source = dev.name if dev is not None else f"the {len(texts)} parity examples (no --dev)"
    work = staging.parent / f".{staging.name}.int8"
    shutil.rmtree(work, ignore_errors=True)
    try:
        quantized = quantize_int8(model, work / "quantize")
        digest = hashlib.sha256(quantized).hexdigest()
        # one input per graph call: dynamic quantization's activation scales span the whole call
        one_per_call = config.transformers.model_copy(update={"inputs_per_call": 1})
        int8_config = config.model_copy(update={"version": digest[:12], "model_sha256": digest, "parity": None,
                                                "transformers": one_per_call})
        write_import(int8_config, quantized, tokenizer, their, work / "bundle")
        report = int8_report(staging, work / "bundle", texts, source)
        if config.parity is not None:
            report["fp32_parity_max_abs_diff"] = config.parity.max_abs_diff
        int8_config = int8_config.model_copy(update={"metrics": {**config.metrics, "int8": report}})
        shutil.rmtree(staging)
        write_import(int8_config, quantized, tokenizer, their, staging)
        return int8_config
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _has_weights(path: Path) -> bool:
    return any((path / f).is_file() for f in ("model.safetensors", "pytorch_model.bin"))


def import_hf(
    source: Path = typer.Argument(..., exists=True, file_okay=False, help="The exported folder: model.onnx, "
                                  "tokenizer.json and the model's Hugging Face config.json."),
    task: str = typer.Option(..., "--task", help="The task it serves: entailment, paraphrase, classification, "
                             "verification (an NLI model) or rerank (a one-logit cross-encoder)."),
    out: Path = typer.Option(..., "-o", "--out", help="Bundle directory to write, e.g. model_repository/my-nli."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name (default: the --out folder's name)."),
    labels: Optional[str] = typer.Option(None, "--labels", help="The task's name of each logit, in logits order, "
                                         "comma-separated (default: mapped from the config's id2label)."),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=2, help="Tokens per sequence, special "
                                             "tokens included (default: what the model reads)."),
    max_texts: int = typer.Option(32, "--max-texts", min=1, help="rerank and verification: the most texts one "
                                  "request may list (its max_evidence)."),
    reference: Optional[Path] = typer.Option(None, "--reference", help="The PyTorch weights' folder for the parity "
                                             "check (default: the source folder when it holds them)."),
    force: bool = typer.Option(False, "--force", help="Replace the bundle already at --out."),
    int8: bool = typer.Option(False, "--int8", help="Serve the graph with int8 weights (onnxruntime's dynamic "
                              "quantization); its speed-up and largest score difference go into the config's "
                              "metrics.int8."),
    dev: Optional[Path] = typer.Option(None, "--dev", exists=True, dir_okay=False, help="--int8: a JSONL file of "
                                       "inputs (the task's fields) to measure it on (default: the parity examples)."),
) -> None:
    """Import a Hugging Face sequence classifier exported to ONNX as a served bundle (docs/transformers.md)."""
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        typer.echo(f"{out} already exists; pass --force to replace it (or choose another --out)", err=True)
        raise typer.Exit(2)
    given = [label.strip() for label in labels.split(",")] if labels else None
    try:
        config, model, tokenizer, their = build_config(source, task, name or out.name, given, max_length,
                                                       max_texts=max_texts)
    except (ImportRefused, BundleError, ValueError) as exc:
        typer.echo(f"attserve bundle import-hf: {exc}", err=True)
        raise typer.Exit(2) from None
    # written beside --out under a hidden name (a polling server skips it), moved there once checked:
    # a refused import leaves the bundle it would replace as it was
    staging = out.parent / f".{out.name}.importing"
    shutil.rmtree(staging, ignore_errors=True)
    write_import(config, model, tokenizer, their, staging)
    if config.labels:
        typer.echo(f"labels: {dict(zip(config.transformers.source_labels, config.labels))} (theirs -> {task}'s)")
    else:
        typer.echo("scores: each text's one logit (its relevance; /rerank answers its sigmoid unless raw_scores)")
    reference = reference or (source if _has_weights(source) else None)
    if reference is None:
        typer.echo("parity: not checked (no PyTorch weights beside model.onnx; pass --reference)")
    else:
        try:
            parity = check_parity(staging, reference)
        except ImportError as exc:
            typer.echo(f"parity: not checked ({exc.name} is not installed)")
        except (ImportRefused, OSError, RuntimeError, ValueError) as exc:  # a mismatch, or weights transformers
            shutil.rmtree(staging)                                             # cannot load as this model
            typer.echo(f"attserve bundle import-hf: {exc}", err=True)
            raise typer.Exit(2) from None
        else:
            config = config.model_copy(update={"parity": parity})
            write_import(config, model, tokenizer, their, staging)
            typer.echo(f"parity: max |logits - transformers| {parity.max_abs_diff:.2e} over {parity.examples} inputs")
    if int8:
        try:
            config = make_int8(config, model, tokenizer, their, staging, dev)
        except (ImportRefused, ValueError) as exc:
            shutil.rmtree(staging)
            typer.echo(f"attserve bundle import-hf: {exc}", err=True)
            raise typer.Exit(2) from None
        report = config.metrics["int8"]
        typer.echo(f"int8: max |score - fp32| {report['max_abs_score_diff']:.2e} on {report['dev']} "
                   f"({report['examples']} inputs), {report['speedup']:.2f}x ({report['fp32_call_ms']} ms -> "
                   f"{report['int8_call_ms']} ms a batch of {report['examples']})")
    if out.exists():  # --force, or an empty folder
        shutil.rmtree(out)
    staging.rename(out)
    typer.echo(f"wrote {out} ({config.name}, {task}, {config.transformers.max_length} tokens per sequence)")
