"""The answers' `unknown_token_share` on in-domain and off-domain text (docs/answers.md).

    python tools/unknown_token_share.py [--cache DIR] [--limit N] [--out FILE]

Each example goes through the service's own request encoder (service.tasks.token_ids, what
an answer's `unknown_token_share` is computed by) for each bundled model, against its own test
text and against text of other domains. Printed per (model, text): examples, mean, median,
90th percentile, the share of examples at or above 0.2 and 0.5, and the share of examples
above the in-domain 95th percentile (what a threshold at that percentile would flag).

Text: the BBC and tweets test splits (`training.datasets.load_dataset`, fetched into
`--cache`, default the project's data cache), and SNLI dev, RTE and FEVER-Symmetric from
`../shared/data/ood-dev`.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.runtime import CPU, ModelRuntime  # noqa: E402
from service.tasks import token_ids  # noqa: E402

OOD_DEV = REPO.parent / "shared" / "data" / "ood-dev"


def _jsonl(path: Path) -> list[dict]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def texts(cache: str | None, limit: int) -> dict[str, dict[str, list]]:
    """Per text source, its examples in each task's form: text (classification), premise +
    hypothesis (entailment), claim + evidence (verification)."""
    from training.datasets import load_dataset

    out: dict[str, dict[str, list]] = {}
    for name in ("bbc", "tweets"):
        test = load_dataset(name, cache).test[:limit]
        out[name] = {"classification": [SimpleNamespace(text=e.text) for e in test]}
    snli = [r for r in _jsonl(OOD_DEV / "snli_1.0_dev.jsonl")][:limit]
    rte = _jsonl(OOD_DEV / "rte_train_dev.jsonl")[:limit]
    fever = _jsonl(OOD_DEV / "fever_symmetric_v0.2_dev.jsonl")[:limit]
    for name, rows, first, second in (("snli-dev", snli, "premise", "hypothesis"), ("rte", rte, "premise", "hypothesis"),
                                      ("fever-symmetric", fever, "evidence", "claim")):
        out[name] = {
            "classification": [SimpleNamespace(text=f"{r[first]} {r[second]}") for r in rows],
            "entailment": [SimpleNamespace(premise=r[first], hypothesis=r[second]) for r in rows],
            "verification": [SimpleNamespace(claim=r[second], evidence=[r[first]]) for r in rows],
        }
    return out


def shares(runtime: ModelRuntime, inputs: list, chunk: int = 256) -> list[float]:
    out: list[float] = []
    for i in range(0, len(inputs), chunk):
        out += [share for *_, share in token_ids(runtime, inputs[i : i + chunk])]
    return out


def summary(values: list[float], threshold: float | None) -> dict:
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    out = {"examples": len(values), "mean": round(statistics.fmean(values), 4), "median": round(at(0.5), 4),
           "p90": round(at(0.9), 4), "p95": round(at(0.95), 4),
           "at_least_0.2": round(sum(v >= 0.2 for v in values) / len(values), 4),
           "at_least_0.5": round(sum(v >= 0.5 for v in values) / len(values), 4)}
    if threshold is not None:
        out["above_in_domain_p95"] = round(sum(v > threshold for v in values) / len(values), 4)
    return out


# model -> (its in-domain text, the other texts)
PLAN = {
    "bbc-act": ("bbc", ("tweets", "snli-dev", "rte", "fever-symmetric")),
    "tweets-act": ("tweets", ("bbc", "snli-dev", "rte", "fever-symmetric")),
    "nli-attconv-advanced": ("snli-dev", ("rte", "fever-symmetric")),
    "fever-attconv": ("fever-symmetric", ("snli-dev", "rte")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="dataset cache (default: $ATTSERVE_DATA_DIR or data_cache)")
    parser.add_argument("--limit", type=int, default=2000, help="examples per text source")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    data = texts(args.cache, args.limit)
    results: dict[str, dict] = {}
    for model, (home, others) in PLAN.items():
        runtime = ModelRuntime.load(REPO / "model_repository" / model, [CPU], 1)
        task = runtime.config.task
        in_domain = shares(runtime, data[home][task])
        threshold = summary(in_domain, None)["p95"]
        results[model] = {f"{home} (in domain)": summary(in_domain, None)}
        for other in others:
            results[model][other] = summary(shares(runtime, data[other][task]), threshold)
        for source, figures in results[model].items():
            print(f"{model:22} {source:20} " + " ".join(f"{k}={v}" for k, v in figures.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
