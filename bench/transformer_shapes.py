"""Two cross-encoders with real shapes and random weights, built here (no download), for
bench.peers' transformer arms: a MiniLM-L6-shaped and a BERT-base-shaped
BertForSequenceClassification (3 NLI labels), each with a WordPiece tokenizer trained with
`tokenizers` on SNLI train text (pair template `[CLS] a [SEP] b [SEP]`).

Each goes the way a user's fine-tuned model would: `save_pretrained` of the model and its
tokenizer into `<cache>/hf/<shape>`, `torch.onnx.export` of the classifier beside it
(examples/hf/export_onnx.export_logits, the route the docs give users: dynamic batch and sequence axes, `logits`), then
`attserve bundle import-hf` into `<cache>/repository/<shape>` (parity-checked against
transformers on the saved weights) and once more with `--int8 --dev` into `<shape>-int8`, on
SNLI dev pairs. BERT-base fp32 is ~440 MB: the cache is outside git (default
/tmp/attserve-hf-shapes).

    ATTSERVE_DATA_DIR=... python -m bench.transformer_shapes build [--shape minilm-l6] [--cache DIR]
    ATTSERVE_DATA_DIR=... python -m bench.transformer_shapes calls   # one graph call, timed (below)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from bench.servers import REPO

app = typer.Typer(add_completion=False)

DEFAULT_CACHE = Path("/tmp/attserve-hf-shapes")
# BERT's vocabulary size: the embedding table has its real shape even where the SNLI-trained
# WordPiece vocabulary is smaller (ids past it are never fed).
VOCAB_SIZE = 30_522
SHAPES = {
    "minilm-l6": {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536},
    "bert-base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
}
NLI_LABELS = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def snli_texts(split: str) -> list:
    from training.datasets import load_dataset

    return list(getattr(load_dataset("snli"), split))


def train_tokenizer(examples: list):
    """A BERT-style WordPiece tokenizer (lower case) trained on the examples' texts, with the pair
    template, longest-first truncation to 512 and padding with [PAD]."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    texts = (t for e in examples for t in (e.premise, e.hypothesis))
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.enable_truncation(512)
    return tok


def hf_tokenizer(tok):
    """The tokenizer as transformers saves and reloads it (tokenizer.json + tokenizer_config.json)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=512, model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def build_model(sizes: dict):
    """A BertForSequenceClassification of `sizes` (an entry of SHAPES), random weights."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    # eager attention, as the tests' tiny models export it: the graph onnxruntime's attention fusion reads
    config = BertConfig(vocab_size=VOCAB_SIZE, max_position_embeddings=512, type_vocab_size=2, pad_token_id=0,
                        id2label=NLI_LABELS, label2id={v: k for k, v in NLI_LABELS.items()},
                        attn_implementation="eager", **sizes)
    return BertForSequenceClassification(config).eval()


def save_and_export(source: Path, sizes: dict, tok) -> Path:
    """What a user has after fine-tuning and exporting: `source` with the weights, config and
    tokenizer (`save_pretrained`) and model.onnx beside them."""
    from examples.hf.export_onnx import export_logits

    source.mkdir(parents=True, exist_ok=True)
    model = build_model(sizes)
    model.save_pretrained(source)
    hf_tokenizer(tok).save_pretrained(source)
    export_logits(model, source / "model.onnx", ["input_ids", "attention_mask", "token_type_ids"])
    return source


def write_dev(examples: list, path: Path) -> Path:
    path.write_text("".join(json.dumps({"premise": e.premise, "hypothesis": e.hypothesis}) + "\n" for e in examples))
    return path


def import_bundle(source: Path, out: Path, *extra: str) -> str:
    """`attserve bundle import-hf` as a user runs it; its report."""
    argv = [str(REPO / ".venv" / "bin" / "attserve"), "bundle", "import-hf", str(source), "--task", "entailment",
            "-o", str(out), "--force", *extra]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout.strip()


def build_shape(shape: str, cache: Path, tok, dev_file: Path) -> dict:
    """Save, export and import one shape (fp32 and int8); the import reports and timings."""
    began = time.monotonic()
    source = save_and_export(cache / "hf" / shape, SHAPES[shape], tok)
    exported = time.monotonic()
    fp32 = import_bundle(source, cache / "repository" / shape)
    int8 = import_bundle(source, cache / "repository" / f"{shape}-int8", "--int8", "--dev", str(dev_file))
    metrics = json.loads((cache / "repository" / f"{shape}-int8" / "config.json").read_text())["metrics"]["int8"]
    return {"shape": shape, **SHAPES[shape], "onnx_bytes": (source / "model.onnx").stat().st_size,
            "export_s": round(exported - began, 1), "import_s": round(time.monotonic() - exported, 1),
            "import_fp32": fp32, "import_int8": int8, "int8": metrics}


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(tok, pairs: list[tuple[str, str]], length: int | None = None) -> dict:
    import numpy as np

    tok.enable_padding(pad_id=0, length=length)
    encodings = tok.encode_batch(pairs)
    columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    return {name: np.array([getattr(e, c) for e in encodings], dtype=np.int64) for name, c in columns.items()}


def call_times(shape: str, cache: Path, repeats: int = 7) -> dict:
    """Median ms of one onnxruntime call (1 thread) on SNLI test pairs: one pair, 32 pairs padded to
    their longest, 32 padded to 64 (the service's length bucket past 32); the graph as exported
    and as onnxruntime.transformers.optimizer fuses it (Attention, SkipLayerNormalization, ...)."""
    import numpy as np
    from onnxruntime.transformers.optimizer import optimize_model
    from tokenizers import Tokenizer

    from bench.workloads import test_examples

    source = cache / "hf" / shape
    fused_path = cache / f"{shape}-fused.onnx"
    fused = optimize_model(str(source / "model.onnx"), model_type="bert", num_heads=SHAPES[shape]["num_attention_heads"],
                           hidden_size=SHAPES[shape]["hidden_size"], opt_level=0)
    fused.save_model_to_file(str(fused_path))
    sessions = {"exported": _session(source / "model.onnx"), "fused": _session(fused_path)}
    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    pairs = [(e.premise, e.hypothesis) for e in test_examples("snli", 5, 32)]
    cases = {"1 pair": _feeds(tok, pairs[:1]), "32 pairs, longest": _feeds(tok, pairs),
             "32 pairs, bucket 64": _feeds(tok, pairs, 64)}
    logits = [s.run(["logits"], cases["32 pairs, longest"])[0] for s in sessions.values()]
    report: dict = {"shape": shape, "max_abs_logit_diff_fused": float(np.abs(logits[0] - logits[1]).max())}
    for case, feeds in cases.items():
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(repeats if "32" in case else 4 * repeats):
            for name, session in sessions.items():  # interleaved
                began = time.perf_counter()
                session.run(["logits"], feeds)
                times[name].append(time.perf_counter() - began)
        report[case] = {"feed_shape": list(feeds["input_ids"].shape),
                        **{name: round(float(np.median(t)) * 1000, 2) for name, t in times.items()}}
    return report


@app.command()
def calls(
    shape: Annotated[list[str] | None, typer.Option(help="shapes to time (default all)")] = None,
    cache: Annotated[Path, typer.Option(help="where `build` put them")] = DEFAULT_CACHE,
) -> None:
    """Time one graph call per case (call_times) and print the figures as JSON."""
    for name in shape or list(SHAPES):
        typer.echo(json.dumps(call_times(name, cache)))


@app.command()
def build(
    shape: Annotated[list[str] | None, typer.Option(help=f"shapes to build (default all: {', '.join(SHAPES)})")] = None,
    cache: Annotated[Path, typer.Option(help="where the HF folders and the bundles go (outside git)")] = DEFAULT_CACHE,
    dev_pairs: Annotated[int, typer.Option(help="SNLI dev pairs the int8 import is measured on (one batch)")] = 32,
) -> None:
    """Build, export and import (fp32 and --int8) each shape into the cache."""
    names = shape or list(SHAPES)
    unknown = sorted(set(names) - set(SHAPES))
    if unknown:
        raise typer.BadParameter(f"unknown shape(s) {unknown}; known: {list(SHAPES)}")
    cache.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(snli_texts("train"))
    typer.echo(f"WordPiece vocabulary {tok.get_vocab_size()} (trained on SNLI train text)", err=True)
    dev_file = write_dev(snli_texts("dev")[:dev_pairs], cache / "snli-dev.jsonl")
    reports = []
    for name in names:
        report = build_shape(name, cache, tok, dev_file)
        typer.echo(f"{name}: {report['import_fp32']}\n{report['import_int8']}", err=True)
        reports.append({**report, "vocabulary": tok.get_vocab_size(), "dev": str(dev_file), "dev_pairs": dev_pairs})
    # shapes built by an earlier call stay listed unless rebuilt now
    listed = cache / "shapes.json"
    kept = [r for r in (json.loads(listed.read_text()) if listed.is_file() else []) if r["shape"] not in names]
    listed.write_text(json.dumps(kept + reports, indent=2) + "\n")
    typer.echo(f"wrote {cache / 'shapes.json'}", err=True)


if __name__ == "__main__":
    sys.exit(app())
