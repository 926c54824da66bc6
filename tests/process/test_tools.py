"""Every probe kept in tools/ runs: each on a small input, as a subprocess (tools/ is run
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


def run_tool(*argv: str, timeout: int = 280) -> dict:
    run = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_own_data_defaults_probe_trains_the_minimal_recipe_on_a_few_hundred_tweets():
    if not all((ROOT / "data_cache" / name).is_dir() for name in ("tweets", "glove")):
        pytest.skip("the tweets set and GloVe are not prepared here (`attserve data tweets glove`)")
    report = run_tool("tools/own_data_defaults_probe.py", "--seeds", "0", "--variants", "new-defaults", "--no-card")
    assert report["data"]["train"] == 400 and report["data"]["labels"] == ["negative", "positive"]
    run = report["variants"]["new-defaults"]["runs"][0]
    assert run["seed"] == 0 and 0.5 < run["test_accuracy"] <= 1.0  # two balanced labels: above chance


def test_verification_shortcuts_reports_each_shortcut_of_the_snli_verification_data():
    if not (ROOT / "data_cache" / "snli").is_dir():
        pytest.skip("SNLI is not prepared here (`attserve data snli`)")
    report = run_tool("tools/verification_shortcuts.py", "--split", "test")
    assert report["dataset"] == "snli-verification" and report["claims"] == sum(report["labels"].values())
    for name in ("claim_only", "overlap_only"):
        assert 0.0 <= report[name]["majority"]["rate"] <= 1.0 and 0.0 <= report[name]["accuracy"] <= 1.0
    assert 0.0 <= report["topic"]["distractors_holding_all_claim_words"] <= 1.0


def test_every_probe_in_tools_has_a_test_here():
    """tools/ keeps a probe only with a test that runs it (the others were folded into the docs
    that cite them); make_models.sh is `make models` itself."""
    source = Path(__file__).read_text(encoding="utf-8")
    untested = [p.name for p in sorted((ROOT / "tools").glob("*.py")) if f"tools/{p.name}" not in source]
    assert untested == []
