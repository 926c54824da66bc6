"""`attserve fever-report`: a verification bundle scored on FEVER's dev or test split in every
evaluation view (training.fever.evaluation_views: substituted claims among them) plus the
behaviour checks, through the bundle's ONNX graph."""

from __future__ import annotations

from pathlib import Path

from core.bundle import load_bundle
from core.tokenization import TextEncoder
from training.card import open_session, score_examples
from training.datasets import SPLIT_SEED, _fever_parts, benchmark_dir
from training.examples import ClaimExample
from training.fever import BEHAVIOUR_CHECKS, MAX_EVIDENCE, evaluation_views, view_metrics


def fever_report(bundle_dir: str | Path, split: str = "dev", threads: int = 1, root: str | Path | None = None) -> dict:
    """A verification bundle on FEVER's `split` in every evaluation view (substituted claims
    included), plus the behaviour checks (each also with its evidence reversed), through the
    bundle's ONNX graph."""
    bundle = load_bundle(Path(bundle_dir))
    config = bundle.config
    encoder = TextEncoder.from_file(bundle.tokenizer_path)
    session = open_session(bundle.model_path, threads)
    labels = list(config.labels)
    claims, lists, _ = _fever_parts(benchmark_dir(root))
    views = evaluation_views(claims[split], lists[split], SPLIT_SEED, split, config.max_evidence or MAX_EVIDENCE)
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
