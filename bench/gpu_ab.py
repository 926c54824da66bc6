"""Same-run A/B of two source trees on a GPU machine (the request path on CUDA): the
service from BEFORE (a tree without its model_repository, e.g. `git archive` of the older commit)
and from this tree, both on this tree's model_repository, on CUDA, 1 and 8 workers, single-item
requests at c=64 and c=512 and 32-pair requests at c=512, one run of DUR seconds per arm, arms
interleaved. Bodies: a `{premise, hypothesis, label}` jsonl file (PAIRS), as bench.gpu takes.

    BEFORE=.gputools/before PAIRS=.gputools/snli_1.0_dev.jsonl DUR=5 python3 -m bench.gpu_ab

Writes $OUT/ab_gpu.json (each arm as it finishes). DEVICE=cpu runs the same arms on the CPU
provider (a smoke run without a GPU)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from bench import loadgen, servers
from bench.workloads import test_examples, write_bodies


def spec(repo: Path, tree: Path, workers: int, conc: int) -> servers.ServerSpec:
    p = servers.free_port()
    if workers == 1:
        s = servers.service_spec(p, repo / "model_repository", "snli-attconv-light", max_batch_size=256,
                                 max_batch_delay_ms=0.0, intra_op_threads=1)
    else:
        s = servers.service_workers_spec(p, repo / "model_repository", "snli-attconv-light", workers=workers,
                                         max_batch_size=256, max_batch_delay_ms=0.0)
    s.env.update({"ATTSERVE_DEVICE": os.environ.get("DEVICE", "cuda"), "ATTSERVE_MAX_QUEUE": str(max(4096, conc * 32))})
    s.code_root = tree
    return s


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    repo = Path.cwd()
    before = Path(os.environ.get("BEFORE", repo / ".gputools" / "before")).resolve()
    bodies = Path("/tmp/abbodies")
    write_bodies(test_examples(os.environ.get("PAIRS", ".gputools/snli_1.0_dev.jsonl"), None, 2000), bodies)
    seconds = int(os.environ.get("DUR", 5))
    arms = [(t, w, form, c) for w in (1, 8) for (form, c) in (("single", 64), ("single", 512), ("batch", 512))
            for t in ("before", "after")]
    rows = []
    for tree, workers, form, conc in arms[: int(os.environ.get("LIMIT", len(arms)))]:
        s = spec(repo, before if tree == "before" else repo, workers, conc)
        try:
            with servers.Server(s, None, Path("/tmp/ablogs")) as server:
                per = 32 if form == "batch" else 1
                loadgen.closed_loop(server.url, "/entailment", bodies / f"{form}.jsonl", conc, 2, None, per)
                m = loadgen.closed_loop(server.url, "/entailment", bodies / f"{form}.jsonl", conc, seconds, None, per)
        except Exception as exc:
            m = {"error": repr(exc)[:300]}
        row = {"tree": tree, "workers": workers, "form": form, "concurrency": conc, **m}
        rows.append(row)
        print(tree, workers, form, conc, m.get("items_per_s"), (m.get("latency_ms") or {}).get("p99"), m.get("errors", m.get("error")), flush=True)
        (out / "ab_gpu.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
