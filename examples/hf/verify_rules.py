"""How should a pair (NLI) classifier meet a claim's evidence list? Measures /verify's rule and
the alternatives on FEVER dev claims, through a running service (examples/hf/journey.sh serves
the two bundles it needs).

    .venv/bin/python -m examples.hf.verify_rules /tmp/hf-journey/fever-dev.jsonl --url http://127.0.0.1:8763

Served: `/verify` (the verification bundle) on each claim and its list, as a user gets it.
Offline, from what `/entailment` (the entailment bundle of the same export) answers on each
(sentence, claim) pair, premise first as /verify pairs them, and on (the list joined, claim):

  least neutral   the claim takes the label of the sentence with the lowest P(neutral) (/verify's
                  rule, recomputed: its agreement with the served answers is printed as a check)
  joined          the sentences joined into one premise, one pair (cut longest-first to the
                  model's length, as the service cuts every pair)
  max E vs max C  SUPPORTS if the largest P(entailment) over the sentences beats the largest
                  P(contradiction), else REFUTES; NOT ENOUGH INFO when neither reaches a
                  threshold t, chosen on one half of the claims and scored on the other (2-fold)
  mean            the mean of the sentences' probabilities, argmax

Per rule: 3-way accuracy, SUPPORTS vs REFUTES accuracy (the 3-way answer on the claims that are
SUPPORTS or REFUTES), NOT ENOUGH INFO recall, and the balanced accuracy (the mean of the three
recalls: the accuracy at equal label shares, which a rule cannot win by never answering one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

FEVER = ["SUPPORTS", "NOT ENOUGH INFO", "REFUTES"]
NLI = ["entailment", "neutral", "contradiction"]  # the same order: column k of a probability row is FEVER[k]
THRESHOLDS = np.round(np.arange(0.0, 0.951, 0.05), 2)  # 0: never NOT ENOUGH INFO


def post_batches(client, path: str, inputs: list[dict], model: str, batch: int) -> list[dict]:
    """Each input's answer, `batch` inputs per request."""
    out = []
    for start in range(0, len(inputs), batch):
        response = client.post(path, json={"inputs": inputs[start : start + batch], "model": model})
        response.raise_for_status()
        out.extend(response.json()["results"])
    return out


def ask_service(claims: list[dict], url: str, verify_model: str, nli_model: str, batch: int):
    """(served /verify labels, per-claim (K, 3) pair probabilities, (n, 3) joined probabilities)."""
    import httpx

    with httpx.Client(base_url=url, timeout=120) as client:
        verified = post_batches(client, "/verify", [{"claim": c["claim"], "evidence": c["evidence"]} for c in claims],
                                verify_model, batch)
        pairs = [{"premise": s, "hypothesis": c["claim"]} for c in claims for s in c["evidence"]]
        answered = post_batches(client, "/entailment", pairs, nli_model, batch)
        joined = post_batches(client, "/entailment", [{"premise": " ".join(c["evidence"]), "hypothesis": c["claim"]}
                                                      for c in claims], nli_model, batch)
    rows = np.asarray([[a["scores"][k] for k in NLI] for a in answered])
    per_claim, start = [], 0
    for c in claims:
        per_claim.append(rows[start : start + len(c["evidence"])])
        start += len(c["evidence"])
    return [v["label"] for v in verified], per_claim, np.asarray([[a["scores"][k] for k in NLI] for a in joined])


def least_neutral(probs: np.ndarray) -> int:
    return int(probs[int(probs[:, 1].argmin())].argmax())


def max_e_vs_max_c(probs: np.ndarray, threshold: float) -> int:
    e, c = probs[:, 0].max(), probs[:, 2].max()
    if max(e, c) < threshold:
        return 1
    return 0 if e >= c else 2


def scores(gold: np.ndarray, predicted: np.ndarray) -> dict:
    decided = gold != 1
    recalls = [float((predicted[gold == k] == k).mean()) for k in range(len(FEVER)) if (gold == k).any()]
    return {"claims": int(len(gold)), "accuracy": round(float((predicted == gold).mean()), 4),
            "supports_vs_refutes": round(float((predicted[decided] == gold[decided]).mean()), 4),
            "nei_recall": round(float((predicted[~decided] == 1).mean()), 4),
            "balanced_accuracy": round(float(np.mean(recalls)), 4)}


def two_fold_threshold(per_claim: list[np.ndarray], gold: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """max E vs max C's answers, each half of the claims answered at the threshold best on the other."""
    halves = [np.arange(len(gold)) % 2 == k for k in (0, 1)]
    answers = np.asarray([[max_e_vs_max_c(p, t) for p in per_claim] for t in THRESHOLDS])  # (thresholds, claims)
    predicted, chosen = np.empty(len(gold), dtype=int), []
    for fit, held in (halves, halves[::-1]):
        best = int(((answers[:, fit] == gold[fit]).mean(1)).argmax())
        predicted[held] = answers[best, held]
        chosen.append(float(THRESHOLDS[best]))
    return predicted, chosen


def compare(claims: list[dict], served: list[str], per_claim: list[np.ndarray], joined: np.ndarray) -> dict:
    gold = np.asarray([FEVER.index(c["label"]) for c in claims])
    threshold_answers, chosen = two_fold_threshold(per_claim, gold)
    rules = {
        "served /verify (least neutral)": np.asarray([FEVER.index(label) for label in served]),
        "least neutral, recomputed": np.asarray([least_neutral(p) for p in per_claim]),
        "joined premise": joined.argmax(1),
        f"max E vs max C, t={'/'.join(map(str, chosen))} (2-fold)": threshold_answers,
        "max E vs max C, t=0.5": np.asarray([max_e_vs_max_c(p, 0.5) for p in per_claim]),
        "mean of the pairs": np.asarray([p.mean(0).argmax() for p in per_claim]),
    }
    report = {name: scores(gold, predicted) for name, predicted in rules.items()}
    report["agreement served vs recomputed"] = round(float(np.mean(rules["served /verify (least neutral)"]
                                                                  == rules["least neutral, recomputed"])), 4)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", type=Path, help="JSONL {claim, evidence, label} (train_fever_nli.py's --dev-out)")
    parser.add_argument("--url", default="http://127.0.0.1:8763")
    parser.add_argument("--verify-model", default="fever-bert-verify")
    parser.add_argument("--nli-model", default="fever-bert-nli")
    parser.add_argument("--limit", type=int, default=0, help="the first N claims (0: all)")
    parser.add_argument("--batch", type=int, default=32, help="inputs per request")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    claims = [json.loads(line) for line in args.dev.read_text(encoding="utf-8").splitlines() if line.strip()]
    claims = claims[: args.limit] if args.limit else claims
    report = compare(claims, *ask_service(claims, args.url, args.verify_model, args.nli_model, args.batch))
    print("| rule | accuracy | SUPPORTS vs REFUTES | NEI recall | balanced accuracy |\n|---|---|---|---|---|")
    for name, figures in report.items():
        if isinstance(figures, dict):
            print(f"| {name} | {figures['accuracy']:.4f} | {figures['supports_vs_refutes']:.4f} | {figures['nei_recall']:.4f} | {figures['balanced_accuracy']:.4f} |")
    print(f"{len(claims)} claims; served /verify agrees with the recomputed rule on "
          f"{report['agreement served vs recomputed']:.2%} of them")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
