"""Probe: the nli-attconv-advanced recipe on `nli-mix` with some sources' train pairs repeated
(e.g. the scarce multi-genre pairs), starting from a checkpoint, for a time budget. It writes a
checkpoint with the per-source dev/test accuracies in metrics.json, as `attserve train` does; the
dataset itself is not changed (docs/models.md, "Beyond captions": MultiNLI and XNLI x3 for 43
minutes from the shipped default's checkpoint).

    python tools/nli_mix_repeat_probe.py runs/probe-nli-multigenre-x3 '{"mnli": 3, "xnli": 3}' \\
        --minutes 40 --init-from checkpoints/nli-attconv-advanced --lr 0.00025
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "nli-attconv-advanced.toml"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("repeats", help='JSON: source -> how many times its train pairs appear, e.g. {"mnli": 3}')
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--init-from", type=Path, required=True)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    from training.datasets import load_dataset
    from training.recipes import TrainSection, load_recipe
    from training.trainer import train

    repeats = json.loads(args.repeats)
    recipe = load_recipe(RECIPE)
    changes = {"max_wall_minutes": args.minutes, **({"lr": args.lr} if args.lr else {})}
    recipe = recipe.model_copy(update={"name": f"probe-{args.out.name}",
                                       "train": TrainSection.model_validate({**recipe.train.model_dump(), **changes})})
    splits = load_dataset("nli-mix")
    unknown = set(repeats) - set(splits.sources["train"])
    if unknown:
        raise SystemExit(f"no such source in nli-mix: {sorted(unknown)}")
    examples, sources = [], []
    for example, source in zip(splits.train, splits.sources["train"]):
        for _ in range(repeats.get(source, 1)):
            examples.append(example)
            sources.append(source)
    splits = dataclasses.replace(splits, train=examples, sources={**splits.sources, "train": sources})
    result = train(recipe, args.out, progress=False, threads=args.threads, splits=splits, init_from=args.init_from)
    print(json.dumps({"train_pairs": len(examples), "dev_by_source": result.dev.get("by_source"),
                      "test_by_source": result.test.get("by_source"), "wall_time_s": result.wall_time_s}))


if __name__ == "__main__":
    main()
