"""The probes kept in tools/ still run: each on a few examples, as a subprocess (tools/ is run
by hand, never imported). A probe whose data is not on this machine is skipped, saying which."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def test_zero_shot_eval_scores_every_set_and_model_on_a_few_examples():
    if not all((ROOT / "data_cache" / name).is_dir() for name in ("bbc", "tweets")):
        pytest.skip("the BBC and tweets sets are not prepared here (`attserve data bbc tweets`)")
    run = subprocess.run([sys.executable, "tools/zero_shot_eval.py", "--limit", "4"], cwd=ROOT, capture_output=True,
                         text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert set(report) == {"bbc", "tweets"}
    for name, classifier in (("bbc", "bbc-act"), ("tweets", "tweets-act")):
        result = report[name]
        assert result["examples"] == 4
        assert 0.0 <= result[classifier]["accuracy"] <= 1.0
        zero_shot = [key for key in result if key.startswith("zero-shot ")]
        assert len(zero_shot) == 4  # two entailment models x two templates
        for key in zero_shot:
            assert sum(result[key]["predicted"].values()) == 4
            assert set(result[key]["predicted"]) <= set(result["labels"])
