"""No absolute local path in a bundle field a client sees (/v1/models, /ui), even in
a bundle exported before descriptions carried file names only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.bundle import BundleConfig, strip_local_paths

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, expected", [
    ("text-csv files: /tmp/tmpab12/train.csv, /tmp/tmpab12/dev.csv, /tmp/tmpab12/test.csv",
     "text-csv files: train.csv, dev.csv, test.csv"),
    ("snli-jsonl files: (/home/me/data/snli.jsonl)", "snli-jsonl files: (snli.jsonl)"),
    ("text-tsv files: C:\\data\\train.tsv", "text-tsv files: train.tsv"),
    # what is not an absolute path stays as it is
    ("SNLI 1.0 (https://nlp.stanford.edu/projects/snli/), 70/10/20 split, data/train.csv",
     "SNLI 1.0 (https://nlp.stanford.edu/projects/snli/), 70/10/20 split, data/train.csv"),
])
def test_strip_local_paths(text, expected):
    assert strip_local_paths(text) == expected


def test_an_old_bundles_config_shows_file_names_only():
    raw = json.loads((ROOT / "model_repository" / "bbc-act" / "config.json").read_text(encoding="utf-8"))
    raw["description"] = "text-csv files: /tmp/x/train.csv, /tmp/x/dev.csv, /tmp/x/test.csv"
    raw["card"] = {**(raw.get("card") or {}), "training_data": {
        "dataset": "files", "train_examples": 3, "description": "text-csv files: /tmp/x/train.csv"}}
    config = BundleConfig.model_validate(raw)
    assert config.description == "text-csv files: train.csv, dev.csv, test.csv"
    assert config.card.training_data["description"] == "text-csv files: train.csv"
    assert "/tmp" not in config.model_dump_json()
