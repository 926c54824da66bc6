"""The own-data acceptance check: does the minimal recipe train as well as one with every
useful option on?

Takes 400 positive/negative tweets (200 of each, seeded) from the `tweets` dataset's train split,
200 dev rows (100 + 100) from its dev split and 1,000 test rows (500 + 500) from its test split,
writes them as text-csv files to a temporary directory, and trains, side by side on those files,
with `attserve train --threads 1`:

- `old-defaults`: the minimal recipe (name, [data], [model] architecture, [limits]) with the
  schema's former defaults written out (no GloVe, no pretrained vocabulary; the [train]
  defaults, unchanged: 10 epochs, batch 32, lr 1e-3, patience 3);
- `readme-before`: the README's former minimal recipe (16-d, 15 epochs, batch 8, lr 0.01);
- `new-defaults`: the minimal recipe (`training.recipes.MINIMAL_RECIPE`, as the README and
  docs/recipes.md show it), nothing else set: GloVe, a 40,000-word pretrained vocabulary, 1,000
  OOV hash buckets and the tuned second channel, by default;
- `all-options`: every option that could help on top: a 100,000-word pretrained vocabulary,
  OOV buckets, the tuned channel, linear warm-up, 20 epochs with patience 5.

Prints one JSON object: each variant's dev/test accuracy, macro F1 and wall time (mean over
`--seeds`), `new_minus_all_points` in test accuracy points, and the card `attserve card --recipe`
writes for the first new-defaults model (exported to a bundle). Needs the `tweets` and `glove` data
(`attserve data tweets glove`).

    .venv/bin/python tools/own_data_defaults_probe.py [--seeds 0 1 2 3 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# what each variant adds to the minimal recipe (TOML tables, merged in by hand)
VARIANTS: dict[str, dict[str, dict]] = {
    "old-defaults": {
        "embeddings": {"glove": False},  # and with it no pretrained vocabulary, no buckets, no tuned channel
        "train": {"epochs": 10, "batch_size": 32, "lr": 0.001, "patience": 3},
    },
    "readme-before": {
        "model": {"embedding_dim": 16, "hidden_dim": 16, "head_hidden": 16},
        "embeddings": {"glove": False},
        "train": {"epochs": 15, "batch_size": 8, "lr": 0.01, "patience": 3},
    },
    "new-defaults": {},
    "all-options": {
        "tokenizer": {"pretrained_vocab": 100000, "oov_buckets": 1000},
        "embeddings": {"glove": True, "trainable": True, "tuned_channel": True},
        "train": {"epochs": 20, "patience": 5, "schedule": "linear-warmup", "warmup_fraction": 0.1},
    },
}


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def recipe_text(name: str, extra: dict[str, dict], seed: int) -> str:
    """The minimal recipe plus `extra`'s keys (a [model] key goes under [model]; other tables are appended)."""
    from training.recipes import MINIMAL_RECIPE

    lines = MINIMAL_RECIPE.splitlines(keepends=True)
    assert lines[0].startswith("name = ")
    extra = {k: dict(v) for k, v in extra.items()}
    extra.setdefault("train", {})["seed"] = seed
    model = extra.pop("model", {})
    at = next(i for i, line in enumerate(lines) if line.startswith("architecture = ")) + 1
    lines[at:at] = [f"{k} = {_toml_value(v)}\n" for k, v in model.items()]
    text = f'name = "{name}"\n' + "".join(lines[1:])
    for table, values in extra.items():
        text += f"\n[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())
    return text


def balanced(examples, per_label: int, seed: int) -> list:
    rng = random.Random(seed)
    rows = []
    for label in ("negative", "positive"):
        pool = [e for e in examples if e.label == label]
        rows += rng.sample(pool, per_label)
    rng.shuffle(rows)
    return rows


def write_csv(path: Path, examples) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for e in examples:
            writer.writerow([e.text, e.label])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="training seeds (each variant trains once per seed)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--card", action=argparse.BooleanOptionalAction, default=True,
                        help="export the first new-defaults checkpoint and run `attserve card --recipe` on it")
    parser.add_argument("--keep", type=Path, help="write data, recipes and checkpoints here instead of a temporary directory")
    args = parser.parse_args()

    from training.datasets import load_dataset

    tweets = load_dataset("tweets")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="own-data-probe-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        write_csv(work / "train.csv", balanced(tweets.train, 200, seed=0))
        write_csv(work / "dev.csv", balanced(tweets.dev, 100, seed=1))
        write_csv(work / "test.csv", balanced(tweets.test, 500, seed=2))
        results: dict[str, dict] = {}
        for variant in args.variants:
            runs = []
            for seed in args.seeds:
                name = f"probe-{variant}"
                recipe = work / f"{variant}-seed{seed}.toml"
                recipe.write_text(recipe_text(name, VARIANTS[variant], seed), encoding="utf-8")
                out = work / "checkpoints" / f"{variant}-seed{seed}"
                t0 = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "cli.main", "--log-level", "WARNING", "train", str(recipe), "--out", str(out),
                                       "--threads", "1", "--no-progress", "--force"], cwd=ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"{variant} seed {seed} failed:\n{done.stderr[-3000:]}")
                meta = json.loads((out / "config.json").read_text(encoding="utf-8"))
                summary = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
                runs.append({"seed": seed, "dev_accuracy": meta["metrics"]["dev"]["accuracy"],
                             "test_accuracy": meta["metrics"]["test"]["accuracy"], "test_macro_f1": meta["metrics"]["test"]["macro_f1"],
                             "epochs_run": summary["epochs_run"], "vocab_size": summary["vocab_size"],
                             "wall_s": round(time.perf_counter() - t0, 1)})
            mean = lambda key: round(sum(r[key] for r in runs) / len(runs), 4)  # noqa: E731
            results[variant] = {"test_accuracy": mean("test_accuracy"), "dev_accuracy": mean("dev_accuracy"),
                                "test_macro_f1": mean("test_macro_f1"), "wall_s": mean("wall_s"), "runs": runs}
        if args.card and "new-defaults" in results:
            # the acceptance's last line: `attserve card` works on that model (export, then card with its recipe)
            seed = args.seeds[0]
            bundle = work / "bundles" / "probe-new-defaults"
            for command in (["export", str(work / "checkpoints" / f"new-defaults-seed{seed}"), "--out", str(bundle), "--force"],
                            ["card", str(bundle), "--recipe", str(work / f"new-defaults-seed{seed}.toml"), "--no-progress"]):
                t0 = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "cli.main", "--log-level", "WARNING", *command], cwd=ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"attserve {command[0]} failed:\n{done.stderr[-3000:]}")
                results["new-defaults"][f"{command[0]}_wall_s"] = round(time.perf_counter() - t0, 1)
            card = json.loads((bundle / "config.json").read_text(encoding="utf-8"))["card"]
            results["new-defaults"]["card"] = {"seed": seed, "test_accuracy": card["in_domain"]["test"]["accuracy"],
                                               "temperature": round(card["calibration"]["temperature"], 4),
                                               "ece_test": [round(card["calibration"]["ece_before"]["in_domain_test"], 4),
                                                            round(card["calibration"]["ece_after"]["in_domain_test"], 4)]}
        report = {
            "data": {"train": 400, "dev": 200, "test": 1000, "labels": ["negative", "positive"], "source": "tweets (balanced, seeded)"},
            "seeds": args.seeds,
            "variants": results,
            "total_wall_s": round(time.perf_counter() - started, 1),
        }
        if "new-defaults" in results and "all-options" in results:
            report["new_minus_all_points"] = round(100 * (results["new-defaults"]["test_accuracy"] - results["all-options"]["test_accuracy"]), 2)
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
