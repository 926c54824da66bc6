"""bench.vector_sets: the comparison table read from trainer logs written by the real text
formatter, against the real comparison recipes (their budgets and names)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import vector_sets
from service.logs import TextFormatter


def _line(message: str, **fields) -> str:
    record = logging.makeLogRecord({"name": "training.trainer", "levelname": "INFO", "levelno": logging.INFO,
                                    "msg": message, "args": None, **fields})
    return TextFormatter().format(record)


def _write_log(folder: Path, name: str, evaluations: list[tuple[int, int, float]], trained: bool, coverage: float = 0.97) -> None:
    lines = ["12:00:00 INFO training.embeddings: loaded vectors (400000, 100) licences={\"glove-6b-100d\": \"PDDL 1.0 x=y\"}",
             _line("training", recipe=name, train_examples=20000, glove_coverage=coverage, trainable_parameters=2149603,
                   device="cpu", autocast=None)]
    for epoch, step, accuracy in evaluations:
        lines.append(_line("evaluation", epoch=epoch, step=step, dev_accuracy=accuracy, elapsed_s=100.0 * step, best=True))
    if trained:
        lines.append(_line("trained", recipe=name, dev_accuracy=max(a for *_, a in evaluations), wall_time_s=321.4,
                           train_examples_per_s=185.5, checkpoint=f"/tmp/x y/{name}"))
    (folder / f"{name}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_log_fields_reads_the_text_formatter_back() -> None:
    line = _line("trained", recipe="a b", wall_time_s=1.5, extra={"k": [1, "x=y"]}, done=True, nothing=None)
    assert vector_sets.log_fields(line) == ("trained", {"recipe": "a b", "wall_time_s": 1.5, "extra": {"k": [1, "x=y"]},
                                                        "done": True, "nothing": None})
    assert vector_sets.log_fields("12:00:00 INFO training.embeddings: loaded vectors x=1") is None


def test_the_table_from_logs(tmp_path: Path) -> None:
    _write_log(tmp_path, "scitail-vectors-glove100", [(1, 450, 0.80)], trained=True)
    _write_log(tmp_path, "scitail-vectors-glove100-seed1", [(1, 450, 0.78)], trained=False)  # stopped after its dev evaluation: counts
    _write_log(tmp_path, "scitail-vectors-spacy", [], trained=False)  # still training: not a row
    # the MSRP budget is 2 epochs: a third, better evaluation (a run made before the budget was cut) is left out
    _write_log(tmp_path, "msrp-vectors-glove100", [(1, 230, 0.705), (2, 460, 0.74), (3, 690, 0.76)], trained=False)
    _write_log(tmp_path, "snli-vectors-glove100-curve", [(1, 400, 0.60), (1, 800, 0.66), (1, 1200, 0.68)], trained=True)
    _write_log(tmp_path, "scitail-vectors-glove100-full", [(1, 450, 0.80), (2, 900, 0.83)], trained=False)  # converging: not yet
    (tmp_path / "notes.log").write_text("no recipe of this name\n")
    out = tmp_path / "vectors.json"

    result = CliRunner().invoke(vector_sets.app, ["table", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| scitail | `glove-6b-100d` | 2 | 79.0 ± 1.0 | 80.0, 78.0 | 97.0% |" in result.output
    assert "| msrp | `glove-6b-100d` | 1 | 74.0 (one seed) | 74.0 | 97.0% |" in result.output
    assert "snli-vectors-glove100-curve: dev by step 400 60.0, 800 66.0, 1200 68.0" in result.output
    assert "not finished: scitail-vectors-glove100-full, scitail-vectors-spacy" in result.output

    written = json.loads(out.read_text())
    assert [(r["task"], r["vectors"], r["runs"]) for r in written["summary"]] == [("msrp", "glove-6b-100d", 1), ("scitail", "glove-6b-100d", 2)]
    assert written["summary"][1]["standard_error"] == pytest.approx(0.01)
    (msrp,) = [r for r in written["runs"] if r["task"] == "msrp"]
    assert msrp["dev_accuracy_by_epoch"] == [0.705, 0.74] and msrp["epochs"] == 2 and msrp["wall_s"] == 46000
    (seed0,) = [r for r in written["runs"] if r["run"] == "scitail-vectors-glove100"]
    assert seed0["wall_s"] == 321 and seed0["train_examples_per_s"] == 185.5 and seed0["trainable_parameters"] == 2149603
    assert written["curves"][0]["dev_accuracy_by_step"] == {"400": 0.6, "800": 0.66, "1200": 0.68}
    assert written["converged"] == [] and written["unfinished"] == ["scitail-vectors-glove100-full", "scitail-vectors-spacy"]


def test_rows_follow_the_sets_order() -> None:
    runs = [vector_sets.Run(f"snli-{v}", "snli", v, 0, 1, [{"epoch": 1, "step": 400, "dev_accuracy": 0.6}])
            for v in ("glove-6b-100d+wordllama-256", "spacy-md-300", "wordllama-256", "glove-6b-100d")]
    assert [row["vectors"] for row in vector_sets.summarize(runs)] == ["glove-6b-100d", "wordllama-256", "spacy-md-300",
                                                                         "glove-6b-100d+wordllama-256"]


def test_train_runs_each_recipe_and_records_its_exit(tmp_path: Path, monkeypatch) -> None:
    command = vector_sets.train_command("scitail-vectors-glove100", tmp_path, Path("/data"))
    assert command[:3] == ["nice", "-n", "19"] and command[command.index("--threads") + 1] == "1"
    assert str(vector_sets.RECIPES / "scitail-vectors-glove100.toml") in command and command[-2:] == ["--data-dir", "/data"]

    def fake(name: str, out: Path, data_dir: Path | None) -> list[str]:  # a run that logs its name and fails for one recipe
        return [sys.executable, "-c", f"print('trained {name}'); raise SystemExit({int(name.endswith('seed1'))})"]

    monkeypatch.setattr(vector_sets, "train_command", fake)
    result = CliRunner().invoke(vector_sets.app, ["train", "msrp-vectors-glove100", "msrp-vectors-glove100-seed1", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert (tmp_path / "msrp-vectors-glove100.log").read_text() == "trained msrp-vectors-glove100\n"
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert sorted((r["run"], r["exit"]) for r in records) == [("msrp-vectors-glove100", 0), ("msrp-vectors-glove100-seed1", 1)]

    result = CliRunner().invoke(vector_sets.app, ["train", "msrp-vectors-nothing", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "msrp-vectors-nothing" in result.output
