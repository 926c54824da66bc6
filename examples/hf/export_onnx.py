"""Export a saved sequence classifier to ONNX as `optimum-cli export onnx --task
text-classification` lays it out, with torch.onnx alone: the route for a transformers release
optimum does not support yet (optimum-onnx 0.1 needs transformers < 4.58).

    .venv/bin/python -m examples.hf.export_onnx /tmp/hf-journey/fever-bert /tmp/hf-journey/exported

Writes model.onnx (inputs input_ids, attention_mask and token_type_ids where the model reads
them; output logits; batch and sequence axes dynamic), tokenizer.json and config.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def export_logits(model, path: Path, names: list[str], example: tuple | None = None, opset: int = 17) -> None:
    """torch.onnx.export of a sequence classifier, as optimum lays it out: its feeds `names` by
    name (batch and sequence axes dynamic), its logits alone out as `logits`. The example batch
    only fixes the traced shapes' ranks; none given, a (2, 7) batch of ones per feed."""
    import torch

    if example is None:
        example = tuple(torch.ones((2, 7), dtype=torch.long) for _ in names)

    class Logits(torch.nn.Module):
        """The feeds by position, as torch.onnx passes them; the logits alone out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *feeds):
            return self.model(**dict(zip(names, feeds, strict=True))).logits

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    torch.onnx.export(Logits(), example, str(path), input_names=names, output_names=["logits"],
                      dynamic_axes={**axes, "logits": {0: "batch"}}, opset_version=opset, dynamo=False)


def export(model_dir: Path, out: Path, opset: int = 17) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if model.config.type_vocab_size > 1 else [])
    example = tokenizer([["a premise .", "a hypothesis ."]] * 2, return_tensors="pt")
    example = tuple(example.get(n, torch.zeros_like(example["input_ids"])) for n in names)
    out.mkdir(parents=True, exist_ok=True)
    export_logits(model, out / "model.onnx", names, example, opset)
    tokenizer.save_pretrained(str(out))
    model.config.save_pretrained(str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a save_pretrained folder: config.json, weights, tokenizer")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    export(args.model, args.out)
    print(f"wrote {args.out}: " + ", ".join(sorted(p.name for p in args.out.iterdir())))


if __name__ == "__main__":
    main()
