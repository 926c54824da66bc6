"""Mutation check: does the default suite catch the bugs that matter most here?

Each mutation below is a one-line bug (a mask dropped, rows swapped, a checksum skipped, a
budget ignored, work moved back onto the event loop). For each, the tracked files are copied
to a temporary directory, the line is changed there, and the tests that should catch it (all
of them in the default `make test` suite) run against the copy. A mutation that survives is a
hole in the suite. The repository itself is never modified.

    python tests/mutation_check.py            # every mutation, a table at the end
    python tests/mutation_check.py --only 2,8 # some of them
    make mutations

Exit code 1 when any mutation survives. tests/unit/test_mutation_check.py keeps the snippets in
step with the code (each must occur exactly once in its file).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation("shared masked max ignores its mask", "models/layers.py",
             "    filled = values.masked_fill(~mask, MASK_FILL)\n    out = filled.max(dim=dim).values\n",
             "    filled = values\n    out = filled.max(dim=dim).values\n",
             ("tests/unit/test_layers.py", "tests/unit/test_networks.py")),
    Mutation("ACT global max without its mask", "models/act.py",
             "pooled = masked_max(feature_map, mask[:, None, :, None], dim=2)",
             "pooled = feature_map.max(dim=2).values",
             ("tests/unit/test_act.py",)),
    Mutation("ACT global max with row 0's mask for every row", "models/act.py",
             "pooled = masked_max(feature_map, mask[:, None, :, None], dim=2)",
             "pooled = masked_max(feature_map, mask[:1, None, :, None].expand(mask.shape[0], 1, mask.shape[1], 1), dim=2)",
             ("tests/unit/test_act.py",)),
    Mutation("inference returns a batch's rows in reverse order", "service/inference/runtime.py",
             "        logits = outputs[0]  # (B, C)\n",
             "        logits = outputs[0][::-1]  # (B, C)\n",
             ("tests/service/test_engine_batching.py", "tests/service/test_service_batching.py")),
    Mutation("every item gets row 0's evidence scores", "service/inference/runtime.py",
             "per_text = [scores[row][: len(item.ids[list_index])] for row, item in enumerate(items)]",
             "per_text = [scores[0][: len(item.ids[list_index])] for row, item in enumerate(items)]",
             ("tests/service/test_engine_batching.py", "tests/service/test_service_batching.py")),
    Mutation("every item gets row 0's explanation", "service/inference/runtime.py",
             "outputs[-1], row, items[row], feeds, None if per_text is None else per_text[row])",
             "outputs[-1], 0, items[row], feeds, None if per_text is None else per_text[row])",
             ("tests/service/test_explanations.py::test_explanations_through_the_service",)),
    Mutation("explanation exposes the second attention (premise over hypothesis)", "export/explanations.py",
             "    for node in graph.node:\n        if node.op_type == \"Softmax\"",
             "    for node in reversed(graph.node):\n        if node.op_type == \"Softmax\"",
             ("tests/service/test_explanations.py::test_exposed_attention_is_the_networks_own_and_batch_invariant",)),
    Mutation("all checksum checks skipped", "core/bundle.py",
             "    if actual != expected:\n",
             "    if False:\n",
             ("tests/process/test_reliability.py::test_altered_tokenizer_is_refused_by_its_checksum_naming_the_file",
              "tests/service/test_service_api.py")),
    Mutation("only the tokenizer's checksum skipped", "core/bundle.py",
             "    tokenizer = _read_checked(path / TOKENIZER_FILE, config.tokenizer_sha256)\n",
             "    tokenizer = (path / TOKENIZER_FILE).read_bytes()\n",
             ("tests/process/test_reliability.py::test_altered_tokenizer_is_refused_by_its_checksum_naming_the_file",)),
    Mutation("batch formation ignores the token budget", "service/inference/batcher.py",
             "                    if runtime.shape_tokens(grown) * (n + 1) > budget:\n",
             "                    if False:\n",
             ("tests/service/test_engine_batching.py",)),
    Mutation("a batch closes at once, ignoring max_batch_delay_ms", "service/inference/batcher.py",
             "close_at = self._queue[0].enqueued + self.max_delay_s",
             "close_at = self._queue[0].enqueued",
             ("tests/service/test_service_batching.py::test_requests_arriving_within_the_batch_delay_run_as_one_batch",
              "tests/service/test_service_batching.py::test_full_queue_is_429_with_retry_after")),
    Mutation("tokenizing back on the event loop", "service/inference/batcher.py",
             "encoded = await loop.run_in_executor(self._executor, self._encode, live)",
             "encoded = self._encode(live)",
             ("tests/service/test_engine_batching.py",)),
    Mutation("workers outlive a killed supervisor", "service/process/workers.py",
             "    watch_supervisor(supervisor_pid)\n",
             "    pass\n",
             ("tests/process/test_workers.py::test_workers_stop_when_their_supervisor_is_killed",)),
    Mutation("Open Inference Protocol scores in reversed label order", "service/http/oip.py",
             'np.asarray([[r["scores"][label] for label in config.labels] for r in results], dtype=np.float32)',
             'np.asarray([[r["scores"][label] for label in reversed(config.labels)] for r in results], dtype=np.float32)',
             ("tests/process/test_open_inference_protocol.py",)),
]


def tracked_copy(target: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = Path(raw.decode())
        source = ROOT / rel
        if not source.is_file():
            continue
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / rel)


def apply(copy: Path, mutation: Mutation) -> None:
    file = copy / mutation.path
    text = file.read_text(encoding="utf-8")
    count = text.count(mutation.old)
    if count != 1:
        raise SystemExit(f"{mutation.path}: the snippet for {mutation.name!r} occurs {count} times, not once")
    file.write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("E ") and line[1:].strip():
            return re.sub(r"\s+", " ", line[1:].strip())[:160]
    for line in output.splitlines():
        if line.startswith("FAILED") or line.startswith("ERROR"):
            return line[:160]
    return ""


def main(
    only: Annotated[Optional[str], typer.Option(help="Comma-separated mutation numbers (1-based).")] = None,
    timeout_s: Annotated[int, typer.Option(help="Per-mutation test timeout.")] = 900,
) -> None:
    chosen = list(enumerate(MUTATIONS, 1))
    if only:
        wanted = {int(x) for x in only.split(",")}
        chosen = [(i, m) for i, m in chosen if i in wanted]
    rows = []
    with tempfile.TemporaryDirectory(prefix="attserve-mutation-") as tmp:
        for i, mutation in chosen:
            copy = Path(tmp) / f"m{i}"
            tracked_copy(copy)
            apply(copy, mutation)
            env = {**os.environ, "PYTHONPATH": str(copy)}
            started = time.perf_counter()
            print(f"[{i}/{len(MUTATIONS)}] {mutation.name}: {' '.join(mutation.tests)}", file=sys.stderr, flush=True)
            try:
                done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutation.tests],
                                      cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s)
                caught, output = done.returncode != 0, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                caught, output = True, "E timed out (counted as caught: the suite would go red)"
            seconds = time.perf_counter() - started
            rows.append((i, mutation.name, caught, seconds, first_failure(output) if caught else "survived"))
            shutil.rmtree(copy, ignore_errors=True)
    print("| # | mutation | caught | s | first failure |")
    print("|---|---|---|---:|---|")
    for i, name, caught, seconds, detail in rows:
        print(f"| {i} | {name} | {'yes' if caught else '**no**'} | {seconds:.0f} | {detail.replace('|', '/')} |")
    if not all(caught for _, _, caught, _, _ in rows):
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
