"""CLI guards: export never replaces a bundle without --force, and the commands of
the training extra (the `attserve bundle ...` group's too) say in one line what to install when
torch is missing."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ("train", "evaluate", "baseline", "card", "export", "reproduce", "bench", "data", "bundle")
BUNDLE_COMMANDS = ("extend-vocab", "fp16-embeddings", "to-checkpoint", "explanations")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def test_export_refuses_an_existing_bundle_without_force(tmp_path):
    from cli.main import app

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    bundle = tmp_path / "repo" / "shipped"
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text('{"kept": true}')
    result = CliRunner().invoke(app, ["export", str(checkpoint), "--out", str(bundle)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bundle) in lines[0] and "--force" in lines[0]
    assert (bundle / "config.json").read_text() == '{"kept": true}'  # untouched
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]


def test_train_names_the_checkpoint_a_recipe_starts_from_when_it_is_missing(tmp_path, monkeypatch):
    """A recipe with [train] init_from starts from checkpoints/<that recipe>; without it, train
    stops before loading any data and says which recipe to train first."""
    from cli.main import app

    recipe = (ROOT / "recipes" / "snli-attconv-light.toml").read_text()
    recipe = recipe.replace("[train]\n", '[train]\ninit_from = "not-trained-yet"\n', 1)
    (tmp_path / "r.toml").write_text(recipe)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(tmp_path / "r.toml"), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "not-trained-yet" in result.output and "train that recipe first" in result.output
    assert not (tmp_path / "checkpoints").exists()


def test_export_with_force_goes_past_the_refusal(tmp_path):
    from cli.main import app

    checkpoint = tmp_path / "checkpoint"  # empty: the export itself fails later, not the guard
    checkpoint.mkdir()
    bundle = tmp_path / "shipped"
    bundle.mkdir()
    (bundle / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["export", str(checkpoint), "--out", str(bundle), "--force"])
    assert result.exit_code != 2 and "--force" not in result.output
    # an empty directory (or none) is no bundle to protect: no --force needed
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["export", str(checkpoint), "--out", str(empty)])
    assert "--force" not in result.output


def test_train_refuses_an_existing_checkpoint_without_force_and_replaces_it_with(tmp_path):
    """Train follows export's rule (exit 2 and one line naming --force)."""
    from cli.main import app

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"kept": true}')
    recipe = str(ROOT / "examples" / "own-data" / "recipe.toml")
    result = CliRunner().invoke(app, ["train", recipe, "--out", str(checkpoint), "--no-progress"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(checkpoint) in lines[0] and "--force" in lines[0]
    assert sorted(p.name for p in checkpoint.iterdir()) == ["config.json"]  # untouched
    result = CliRunner().invoke(app, ["train", recipe, "--out", str(checkpoint), "--force", "--no-progress",
                                      "--epochs", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output[-3000:]
    assert (checkpoint / "model.safetensors").is_file()
    assert '"kept"' not in (checkpoint / "config.json").read_text()


def _cli_without_torch(*args: str) -> subprocess.CompletedProcess:
    """`attserve ARGS` in a process where `import torch` fails, as in the serving venv."""
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['attserve', *sys.argv[1:]]; "
            "from cli.main import app; app()")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("argv", [
    ("train", "recipes/snli-attconv-light.toml"),
    ("export", "recipes", "--out", "/nonexistent/out"),
    ("baseline", "bbc"),
])
def test_training_commands_need_the_extra_in_one_line(argv):
    result = _cli_without_torch(*argv)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr  # no traceback
    # the running interpreter's pip, not a bare `pip` (maybe the system's)
    assert lines[0].startswith(f"attserve {argv[0]} needs the training extra: {shlex.quote(sys.executable)} -m pip "
                               "install -e '.[train]'")
    assert "make install-dev" in lines[0] and "torch" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("argv", [
    ("extend-vocab", "model_repository/bbc-act", "--pretrained-vocab", "10"),
    ("fp16-embeddings", "model_repository/bbc-act"),
    ("to-checkpoint", "model_repository/bbc-act", "recipes/bbc-act.toml", "--out", "/nonexistent/out"),
    ("explanations", "model_repository/bbc-act"),
], ids=lambda argv: argv[0])
def test_bundle_commands_need_the_extra_in_one_line(argv):
    """The bundle rewrites refuse like the other training commands,
    before they touch the bundle."""
    config = (ROOT / "model_repository" / "bbc-act" / "config.json").read_bytes()
    result = _cli_without_torch("bundle", *argv)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"attserve bundle {argv[0]} needs the training extra: {shlex.quote(sys.executable)} "
                               "-m pip install -e '.[train]'")
    assert "Traceback" not in result.stderr + result.stdout
    assert (ROOT / "model_repository" / "bbc-act" / "config.json").read_bytes() == config


def test_bundle_help_lists_the_rewrites_and_the_cli_imports_neither_torch_nor_onnx():
    """`attserve bundle --help` names the four rewrites (export.rewrite); importing the CLI, the
    group's command module included, loads neither torch nor onnx nor the rewrites themselves."""
    from cli.main import app

    result = CliRunner().invoke(app, ["bundle", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    listed = [line.strip("│ ").split()[0] for line in result.output.splitlines()
              if line.strip("│ ").split()[:1] and line.strip("│ ").split()[0] in BUNDLE_COMMANDS]
    assert listed == list(BUNDLE_COMMANDS), result.output
    for command in BUNDLE_COMMANDS:
        assert CliRunner().invoke(app, ["bundle", command, "--help"]).exit_code == 0, command

    code = ("import sys, cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx') "
            "or m.startswith('export.rewrite.') and m != 'export.rewrite.commands'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_help_marks_the_commands_of_the_training_extra():
    result = _cli_without_torch("--help")
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        words = line.strip("│ ").split()
        if words and words[0] in (*TRAINING, "serve"):
            rows[words[0]] = line
    assert set(rows) == {*TRAINING, "serve"}, result.stdout
    for name in TRAINING:
        assert "(needs training extra)" in rows[name], rows[name]
    assert "needs training extra" not in rows["serve"]


def test_data_needs_only_pyarrow_of_the_extra():
    code = ("import sys; sys.modules['pyarrow'] = None; sys.argv = ['attserve', 'data', 'bbc']; "
            "from cli.main import app; app()")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith("attserve data needs the training extra")
    assert result.stderr.strip().endswith("pyarrow")


def test_help_has_no_type_tags_and_plain_usage():
    result = _cli_without_torch("export", "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "<bool>" not in out and "<str>" not in out and "<path>" not in out and "{checkpoint}" not in out
    assert "export [OPTIONS] CHECKPOINT" in out
    assert "PATH" in out and "TEXT" in out  # --out and --version still say what they take
    assert "--force" in out
