"""WikiQA-trained ranker vs the verification model's evidence_scores: on the
SNLI-derived verification test claims whose evidence holds the gold premise among 2+ sentences,
how often each one's top-scored sentence is the gold premise.

    python tools/wikiqa_evidence_ranking.py runs/reproduce/wikiqa-abcnn-3-two checkpoints/snli-verification-attconv

The ranker scores (claim, sentence) as (question, candidate answer). JSON to stdout.
"""
import json
import sys
from pathlib import Path

import numpy as np

from core.tokenization import TextEncoder
from training.checkpoint import load_checkpoint
from training.datasets import SPLIT_SEED, _snli_pairs
from training.trainer import EncodedExamples, predict_batches, predict_logits
from training.verification import build_claims
from training.examples import PairExample

ranker_dir, verif_dir = Path(sys.argv[1]), Path(sys.argv[2])
(train, dev, test), _ = _snli_pairs(None)
records = build_claims(test, seed=SPLIT_SEED, split="test")
kept = [r for r in records if r.gold_index is not None and len(r.example.evidence) > 1]
print("claims with gold and K>1:", len(kept), file=sys.stderr)

network, meta = load_checkpoint(verif_dir)
enc = TextEncoder.from_file(verif_dir / "tokenizer.json")
data = EncodedExamples.encode(enc, [r.example for r in kept], meta.labels, meta.max_lengths, meta.max_evidence)
top_v = np.zeros(len(kept), dtype=np.int64)
for idx, (logits, ev) in predict_batches(network, data, 256):
    top_v[idx] = ev.argmax(-1).cpu().numpy()

rnet, rmeta = load_checkpoint(ranker_dir)
renc = TextEncoder.from_file(ranker_dir / "tokenizer.json")
pairs, owner = [], []
for i, r in enumerate(kept):
    for k, s in enumerate(r.example.evidence[: meta.max_evidence or None]):
        pairs.append(PairExample(r.example.claim, s, "0")); owner.append((i, k))
rdata = EncodedExamples.encode(renc, pairs, rmeta.labels, rmeta.max_lengths, None)
logits = predict_logits(rnet, rdata, 512)
score = logits[:, rmeta.labels.index("1")] - logits[:, rmeta.labels.index("0")]
best = {}
for (i, k), s in zip(owner, score):
    if i not in best or s > best[i][1]:
        best[i] = (k, s)
top_r = np.array([best[i][0] for i in range(len(kept))])
gold = np.array([r.gold_index for r in kept])
chance = float(np.mean([1 / len(r.example.evidence) for r in kept]))
print(json.dumps({"claims": len(kept), "verification_evidence_scores_top1_gold": float((top_v == gold).mean()),
                  "wikiqa_ranker_top1_gold": float((top_r == gold).mean()), "random_pick": chance}, indent=2))
