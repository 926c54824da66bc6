"""Checkpoints: `model.safetensors` + `config.json` + `tokenizer.json` in one directory.

Never pickle: weights go through safetensors, everything else is JSON, so loading a checkpoint
from an untrusted source cannot run code.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from models import TextClassifier, config_to_dict, network_from_dict
from training.examples import ClaimExample, Example, PairExample, TextExample

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
# A few hundred held-out examples kept with the checkpoint, so export can check parity on
# real inputs without the dataset.
EXAMPLES_FILE = "parity_examples.jsonl"


@dataclass
class CheckpointMeta:
    """Everything a checkpoint records besides its weights."""

    name: str  # default bundle name, e.g. "snli-attconv-advanced"
    architecture: str
    network: dict[str, Any]  # config_to_dict(...) payload
    labels: list[str]
    max_lengths: dict[str, int]  # per ids input, e.g. {"premise_ids": 64, "hypothesis_ids": 48}
    max_evidence: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. {"dev": {...}, "test": {...}}
    data_checksums: dict[str, str] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def task(self) -> str:
        return self.network["config"]["task"]


def save_checkpoint(
    directory: str | Path,
    network: TextClassifier,
    meta: CheckpointMeta,
    tokenizer_path: str | Path,
    examples: list[Example] | None = None,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # contiguous clones: safetensors refuses shared or strided storage
    state = {k: v.detach().cpu().contiguous().clone() for k, v in network.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE))
    (directory / CONFIG_FILE).write_text(json.dumps(meta.__dict__, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if Path(tokenizer_path).resolve() != (directory / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_path, directory / TOKENIZER_FILE)
    if examples:
        with open(directory / EXAMPLES_FILE, "w", encoding="utf-8") as fh:
            for example in examples:
                # ASCII escapes: raw U+0085 or U+2028 (mojibake tweets hold them) would break lines
                fh.write(json.dumps(dataclasses.asdict(example), ensure_ascii=True) + "\n")
    return directory


def load_examples(directory: str | Path) -> list[Example]:
    """The parity examples saved with a checkpoint ([] if none)."""
    path = Path(directory) / EXAMPLES_FILE
    if not path.is_file():
        return []
    out: list[Example] = []
    for line in path.read_text(encoding="utf-8").split("\n"):  # not splitlines(): see save_checkpoint
        if not line.strip():
            continue
        row = json.loads(line)
        if "evidence" in row:
            out.append(ClaimExample(row["claim"], tuple(row["evidence"]), row["label"]))
        elif "premise" in row:
            out.append(PairExample(**row))
        else:
            out.append(TextExample(**row))
    return out


def load_checkpoint(directory: str | Path) -> tuple[TextClassifier, CheckpointMeta]:
    """Rebuild the network from config.json and load its safetensors weights (eval mode)."""
    directory = Path(directory)
    meta = CheckpointMeta(**json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8")))
    network = network_from_dict(meta.network)
    state = load_file(str(directory / WEIGHTS_FILE))
    network.load_state_dict(state, strict=True)
    network.eval()
    return network, meta


def make_meta(name: str, network: TextClassifier, labels: list[str], **kwargs: Any) -> CheckpointMeta:
    arch = kwargs.pop("architecture")
    return CheckpointMeta(name=name, architecture=arch, network=config_to_dict(arch, network.config), labels=labels, **kwargs)


def cut_pretrained_words(directory: str | Path, max_pretrained: int, out: str | Path) -> Path:
    """A copy of a checkpoint that keeps only the first `max_pretrained` of its pretrained-only
    words (training.tokenizer.cut_pretrained: a prefix of the vocabulary, every kept word keeps
    its id and its rows; the cut words hash into the [OOV] buckets like any unknown word). Those
    words' rows are frozen pretrained vectors that training never moved, so this trades unknown
    tokens for bytes without retraining; `attserve card` measures what it costs."""
    import tempfile

    from tokenizers import Tokenizer

    from training.tokenizer import cut_pretrained, pretrained_count, save_tokenizer

    directory, out = Path(directory), Path(out)
    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    if not 0 <= max_pretrained < pretrained_count(tokenizer):
        raise ValueError(f"{directory}: has {pretrained_count(tokenizer)} pretrained-only words; cannot keep {max_pretrained}")
    cut = cut_pretrained(tokenizer, max_pretrained)
    meta = CheckpointMeta(**json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8")))
    new_size = cut.get_vocab_size()
    state = load_file(str(directory / WEIGHTS_FILE))
    full = network_from_dict(meta.network)
    layers = full.embedding_layers()  # the word tables of vocab_size rows (not the tuned channel)
    tables = [f"{name}.weight" for name, module in full.named_modules() if any(module is layer for layer in layers)]
    for key in tables:
        state[key] = state[key][:new_size].clone()
    meta.network = json.loads(json.dumps(meta.network))
    meta.network["config"]["vocab_size"] = new_size
    network = network_from_dict(meta.network)
    network.load_state_dict(state, strict=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = save_tokenizer(cut, Path(tmp) / TOKENIZER_FILE)
        return save_checkpoint(out, network.eval(), meta, path, load_examples(directory))


__all__ = ["CheckpointMeta", "save_checkpoint", "load_checkpoint", "load_examples", "make_meta", "cut_pretrained_words"]
