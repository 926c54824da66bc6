"""Shortcuts in the snli-verification data: what a model could score without reading it.

Loads the dataset through `training.datasets.load_dataset("snli-verification")` (built by
training/verification.py) and reports, for one split:

  claim_only        TF-IDF + logistic regression trained on the train claims alone (no
                    evidence), scored on the split, next to the majority-label rate
  evidence_shortcuts on claims that keep their gold premise (`gold_evidence` set): how often
                    "the shortest sentence is gold", "the longest sentence is gold" and "the
                    sentence sharing the most content words with the claim is gold" are right
                    (ties count as a uniform pick among the tied), next to chance = mean 1/K;
                    the point-biserial correlation of sentence length (words) with being gold
  overlap_only      logistic regression on claim/evidence word-overlap features only (K, max and
                    mean overlap, max overlap fraction): how much of the label "is anything on
                    topic?" gives away, next to the majority rate
  topic             ROC AUC of the best sentence's overlap with the claim for telling "gold
                    premise removed" from "gold kept" (1 = "nothing on topic" gives NOT ENOUGH
                    INFO away), and how often a distractor holds every content word of the claim
                    (a label-noise proxy: such a sentence may decide the claim)
  label and evidence-count distributions

    .venv/bin/python tools/verification_shortcuts.py --split test --out runs/shortcuts.json

Writes JSON to stdout (and to --out); logs go to stderr. Single-threaded and CPU-light.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional, Sequence

import numpy as np
import typer
from scipy.stats import pointbiserialr
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from training.examples import ClaimExample, DatasetSplits

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in ENGLISH_STOP_WORDS}


def _pick_rate(values: Sequence[float], gold: int, best) -> float:
    """Expected accuracy of picking uniformly among the sentences whose value is `best`."""
    target = best(values)
    tied = [i for i, v in enumerate(values) if v == target]
    return 1.0 / len(tied) if gold in tied else 0.0


def evidence_shortcuts(claims: Sequence[ClaimExample]) -> dict:
    with_gold = [c for c in claims if c.gold_evidence is not None]
    out: dict = {"claims_with_gold": len(with_gold)}
    if not with_gold:
        return out
    for name, subset in (("all", with_gold), ("k_gt_1", [c for c in with_gold if len(c.evidence) > 1])):
        if not subset:
            continue
        lengths = [[len(words(s)) for s in c.evidence] for c in subset]
        overlaps = [[len(content_words(s) & content_words(c.claim)) for s in c.evidence] for c in subset]
        golds = [c.gold_evidence for c in subset]
        is_gold = np.asarray([i == g for c, g in zip(subset, golds) for i in range(len(c.evidence))], dtype=float)
        flat_len = np.asarray([n for row in lengths for n in row], dtype=float)
        flat_overlap = np.asarray([n for row in overlaps for n in row], dtype=float)
        entry = {
            "claims": len(subset),
            "chance": float(np.mean([1.0 / len(c.evidence) for c in subset])),
            "shortest_is_gold": float(np.mean([_pick_rate(n, g, min) for n, g in zip(lengths, golds)])),
            "longest_is_gold": float(np.mean([_pick_rate(n, g, max) for n, g in zip(lengths, golds)])),
            "most_overlap_is_gold": float(np.mean([_pick_rate(o, g, max) for o, g in zip(overlaps, golds)])),
            "mean_words_gold": float(flat_len[is_gold == 1].mean()),
            "mean_words_other": float(flat_len[is_gold == 0].mean()) if (is_gold == 0).any() else None,
            "mean_overlap_gold": float(flat_overlap[is_gold == 1].mean()),
            "mean_overlap_other": float(flat_overlap[is_gold == 0].mean()) if (is_gold == 0).any() else None,
        }
        if (is_gold == 0).any():
            entry["pointbiserial_length_vs_gold"] = float(pointbiserialr(is_gold, flat_len).statistic)
            entry["pointbiserial_overlap_vs_gold"] = float(pointbiserialr(is_gold, flat_overlap).statistic)
        out[name] = entry
    return out


def topic_checks(claims: Sequence[ClaimExample]) -> dict:
    """Is "nothing on topic" a NOT ENOUGH INFO shortcut? The ROC AUC of the best sentence's share
    of the claim's content words for telling claims whose gold premise was removed from claims
    that keep it (0.5 = no signal, 1 = a perfect shortcut). And a label-noise proxy: how often a
    distractor holds every content word of the claim (it might support or refute it)."""
    removed, best_share, covering_distractors, covering_gold, distractors, golds = [], [], 0, 0, 0, 0
    for c in claims:
        claim_words = content_words(c.claim)
        if not claim_words:
            continue
        shares = [len(content_words(s) & claim_words) / len(claim_words) for s in c.evidence]
        removed.append(c.gold_evidence is None)
        best_share.append(max(shares))
        for i, share in enumerate(shares):
            if i == c.gold_evidence:
                golds += 1
                covering_gold += share == 1.0
            else:
                distractors += 1
                covering_distractors += share == 1.0
    out: dict = {"claims_with_content_words": len(removed)}
    if 0 < sum(removed) < len(removed):
        out["gold_removed_auc_of_best_overlap_share"] = float(1.0 - roc_auc_score(removed, best_share))
    out["distractors_holding_all_claim_words"] = covering_distractors / max(1, distractors)
    out["gold_holding_all_claim_words"] = covering_gold / max(1, golds)
    return out


def _overlap_features(claims: Sequence[ClaimExample]) -> np.ndarray:
    rows = []
    for c in claims:
        claim_words = content_words(c.claim)
        shared = [len(content_words(s) & claim_words) for s in c.evidence]
        fraction = max(shared) / max(1, len(claim_words))
        rows.append([len(c.evidence), max(shared), float(np.mean(shared)), fraction, sum(n > 0 for n in shared)])
    return np.asarray(rows, dtype=float)


def _majority(train: Sequence[ClaimExample], evaluated: Sequence[ClaimExample]) -> dict:
    label, _ = Counter(c.label for c in train).most_common(1)[0]
    return {"label": label, "rate": float(np.mean([c.label == label for c in evaluated]))}


def claim_only(train: Sequence[ClaimExample], evaluated: Sequence[ClaimExample]) -> dict:
    vectorizer = TfidfVectorizer(lowercase=True, ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform([c.claim for c in train])
    model = LogisticRegression(max_iter=1000, C=1.0)
    model.fit(x_train, [c.label for c in train])
    predicted = model.predict(vectorizer.transform([c.claim for c in evaluated]))
    return {"accuracy": float(np.mean([p == c.label for p, c in zip(predicted, evaluated)])), "majority": _majority(train, evaluated)}


def overlap_only(train: Sequence[ClaimExample], evaluated: Sequence[ClaimExample]) -> dict:
    model = LogisticRegression(max_iter=1000)
    model.fit(_overlap_features(train), [c.label for c in train])
    predicted = model.predict(_overlap_features(evaluated))
    return {"accuracy": float(np.mean([p == c.label for p, c in zip(predicted, evaluated)])), "majority": _majority(train, evaluated)}


def report(splits: DatasetSplits, split: str) -> dict:
    evaluated: list[ClaimExample] = getattr(splits, split)
    train: list[ClaimExample] = splits.train
    return {
        "dataset": splits.name,
        "split": split,
        "claims": len(evaluated),
        "labels": dict(sorted(Counter(c.label for c in evaluated).items())),
        "evidence_count": {str(k): v for k, v in sorted(Counter(len(c.evidence) for c in evaluated).items())},
        "claims_without_gold": sum(c.gold_evidence is None for c in evaluated),
        "claim_only": claim_only(train, evaluated),
        "overlap_only": overlap_only(train, evaluated),
        "evidence_shortcuts": evidence_shortcuts(evaluated),
        "topic": topic_checks(evaluated),
    }


def main(
    split: Annotated[str, typer.Option(help="dev or test (train is what the classifiers fit)")] = "test",
    out: Annotated[Optional[Path], typer.Option(help="also write the JSON here")] = None,
) -> None:
    from training.datasets import load_dataset

    if split not in ("train", "dev", "test"):
        raise typer.BadParameter(f"split must be train, dev or test, not {split!r}")
    result = report(load_dataset("snli-verification"), split)
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
