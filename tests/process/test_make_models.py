"""tools/make_models.sh (`make models`) on a folder of small recipes with a stand-in CLI that
records its calls: every recipe is trained, each after the recipes whose checkpoints it starts
from or averages with ([train] init_from / average_with, passed as --init-from / --average-with)
although name order says otherwise, also when a recipe takes its init_from from the recipe it
`extends`; only `ship = true` recipes are exported and carded (`ship` and `default` are never
taken from an extended recipe); the bundles of `default = true` recipes come out marked
`"default": true` (right after "name", where the shipped configs have it), the others unmarked.
Seconds: no training happens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_CLI = """#!/usr/bin/env bash
# records each call; `export` writes a config.json as the real one would (name near the top)
echo "$*" >> "$CALLS"
if [[ "$1" == export ]]; then
    while [[ $# -gt 0 && "$1" != --out ]]; do shift; done
    mkdir -p "$2"
    printf '{"format_version": 1, "name": "%s", "version": "v", "task": "t"}' "$(basename "$2")" > "$2/config.json"
fi
"""

# name -> extra TOML lines; a chain whose start sorts last by name
RECIPES = {
    "zeta-base": 'ship = false\n',
    "alpha-child": 'default = true\n[train]\ninit_from = "zeta-base"\n',
    "beta-grandchild": '[train]\ninit_from = "alpha-child"\n',
    "mid-plain": '',
    "aaa-soup": '[train]\ninit_from = "alpha-child"\naverage_with = "mid-plain"\nepochs = 0\n',
    # alpha-child's init_from, not its default = true
    "aab-stage": 'extends = "alpha-child"\n[train]\nseed = 3\n',
}


def run_make_models(tmp_path: Path) -> tuple[list[str], Path]:
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "make_models.sh", tree / "tools" / "make_models.sh")
    (tree / "recipes").mkdir()
    for name, extra in RECIPES.items():
        # top-level keys first: TOML puts everything after a [table] header into that table
        top, _, tables = extra.partition("[")
        (tree / "recipes" / f"{name}.toml").write_text(f'name = "{name}"\n{top}' + (f"[{tables}" if tables else ""))
    fake = tmp_path / "attserve"
    fake.write_text(FAKE_CLI)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "ATTSERVE": str(fake), "CALLS": str(calls), "CHECKPOINTS": "ckpt", "REPOSITORY": "repo",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "tools/make_models.sh"], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines(), tree / "repo"


def test_make_models_orders_by_init_from_ships_and_marks_defaults(tmp_path):
    lines, repo = run_make_models(tmp_path)
    assert lines[0] == "data"
    trained = [line.split()[1] for line in lines if line.startswith("train ")]
    assert trained == ["recipes/zeta-base.toml", "recipes/alpha-child.toml", "recipes/mid-plain.toml", "recipes/aaa-soup.toml",
                       "recipes/aab-stage.toml", "recipes/beta-grandchild.toml"]
    train_lines = {line.split()[1]: line for line in lines if line.startswith("train ")}
    assert "--init-from ckpt/zeta-base" in train_lines["recipes/alpha-child.toml"]
    assert "--init-from ckpt/alpha-child" in train_lines["recipes/beta-grandchild.toml"]
    assert "--init-from ckpt/zeta-base" in train_lines["recipes/aab-stage.toml"]
    assert "--init-from" not in train_lines["recipes/zeta-base.toml"] + train_lines["recipes/mid-plain.toml"]
    assert "--init-from ckpt/alpha-child --average-with ckpt/mid-plain" in train_lines["recipes/aaa-soup.toml"]
    assert "--average-with" not in "".join(v for k, v in train_lines.items() if k != "recipes/aaa-soup.toml")

    exported = [line.split("--out ")[1].split()[0] for line in lines if line.startswith("export ")]
    carded = [line.split()[1] for line in lines if line.startswith("card ")]
    assert exported == carded == ["repo/alpha-child", "repo/mid-plain", "repo/aaa-soup", "repo/aab-stage",
                                  "repo/beta-grandchild"]  # not zeta-base
    assert not (repo / "zeta-base").exists()
    configs = {name: json.loads((repo / name / "config.json").read_text())
               for name in ("alpha-child", "beta-grandchild", "mid-plain", "aab-stage")}
    assert list(configs["alpha-child"]) == ["format_version", "name", "default", "version", "task"]
    assert configs["alpha-child"]["default"] is True
    assert not any("default" in configs[name] for name in ("beta-grandchild", "mid-plain", "aab-stage"))


@pytest.mark.parametrize("name, recipe", [
    ("zeta-base", '[train]\ninit_from = "beta-grandchild"\n'),  # through init_from
    ("mid-plain", '[train]\ninit_from = "zeta-base"\naverage_with = "aaa-soup"\n'),  # through average_with
], ids=["init_from", "average_with"])
def test_make_models_refuses_a_cycle(tmp_path, monkeypatch, name, recipe):
    monkeypatch.setitem(RECIPES, name, recipe)
    try:
        run_make_models(tmp_path)
    except AssertionError as exc:
        assert "cycle through" in str(exc)
    else:
        raise AssertionError("a cycle of recipes was trained")
