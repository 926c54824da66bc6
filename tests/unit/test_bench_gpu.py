"""`attserve bench --device cuda` (bench/gpu.py) on a machine without CUDA: it stops
before loading or writing anything, naming the missing provider; and its plan covers the arms
it is meant to measure."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from service.inference.runtime import CUDA


@pytest.mark.skipif(CUDA in ort.get_available_providers(), reason="this machine has CUDA")
def test_bench_device_cuda_fails_fast_naming_the_provider(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    out = tmp_path / "gpu"
    result = CliRunner().invoke(app, ["bench", "--device", "cuda", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "offers no CUDAExecutionProvider" in result.output and "onnxruntime-gpu" in result.output
    assert not out.exists()  # nothing loaded, nothing written


def test_gpu_bench_plan_covers_the_issue_arms():
    from bench.gpu import plan

    arms = plan(8)
    assert len(arms) == 16
    assert {(a["device"], a["workers"], a["form"], a["concurrency"]) for a in arms} == {
        (d, n, f, c) for d in ("cuda", "cpu") for n in (1, 8) for f in ("single", "batch32") for c in (64, 256)}
    assert len(plan(1)) == 8


def test_workload_from_a_carried_pairs_file(tmp_path):
    """A GPU machine has no data cache: the bench's DATASET may name a {premise, hypothesis, label}
    jsonl file, read whole and in order."""
    import json

    from bench.workloads import request_input, test_examples

    rows = [{"premise": f"premise {i}", "hypothesis": f"hypothesis {i}", "label": "neutral"} for i in range(5)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    chosen = test_examples(str(path), None, 3)
    assert [request_input(e) for e in chosen] == [{"premise": r["premise"], "hypothesis": r["hypothesis"]} for r in rows[:3]]
