"""`attserve fever-report`: a verification bundle scored on FEVER's dev or test split in every
evaluation view (training.fever.evaluation_views), on substituted claims, and the behaviour
checks, through the bundle's ONNX graph."""

from __future__ import annotations

from pathlib import Path

from core.bundle import load_bundle
from core.tokenization import TextEncoder
from training.card import open_session, score_examples
from training.datasets import SPLIT_SEED, _fever_parts, benchmark_dir
from training.examples import ClaimExample
from training.fever import BEHAVIOUR_CHECKS, MAX_EVIDENCE, evaluation_views, substitution_claims, view_metrics


def fever_report(bundle_dir: str | Path, split: str = "dev", threads: int = 1, root: str | Path | None = None) -> dict:
    """A verification bundle on FEVER's `split` in every evaluation view; in the view
    "substituted", every SUPPORTS claim of the split that has a name or year to swap, swapped
    (training.fever.substitution_claims: REFUTES, with the original's gold evidence; its accuracy
    is the share caught); plus the behaviour checks (each also with its evidence reversed),
    through the bundle's ONNX graph."""
    bundle = load_bundle(Path(bundle_dir))
    config = bundle.config
    encoder = TextEncoder.from_file(bundle.tokenizer_path)
    session = open_session(bundle.model_path, threads)
    labels = list(config.labels)
    claims, lists, _ = _fever_parts(benchmark_dir(root))
    max_evidence = config.max_evidence or MAX_EVIDENCE
    views = evaluation_views(claims[split], lists[split], SPLIT_SEED, split, max_evidence)
    views["substituted"] = [ClaimExample(c.claim, c.evidence[:max_evidence], c.label, 0 if len(c.evidence) == 1 else None)
                            for c in substitution_claims(claims[split], SPLIT_SEED, fraction=1.0)]
    report: dict = {"bundle": config.name, "split": split, "views": {}}
    for name, examples in views.items():
        scored = score_examples(session, encoder, config, examples, progress=False)
        report["views"][name] = view_metrics(examples, scored.logits, labels, scored.evidence_scores)
    probes = [ClaimExample(c, tuple(e), label) for c, e, label in BEHAVIOUR_CHECKS]
    probes += [ClaimExample(p.claim, p.evidence[::-1], p.label) for p in probes]
    predicted = score_examples(session, encoder, config, probes, progress=False).logits.argmax(1)
    report["behaviour"] = [{"claim": p.claim, "evidence": list(p.evidence), "expected": p.label, "got": labels[k]}
                           for p, k in zip(probes, predicted)]
    report["behaviour_passed"] = sum(b["expected"] == b["got"] for b in report["behaviour"])
    return report
