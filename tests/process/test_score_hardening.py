"""`attserve score` against inputs and states that once lost data or failed the run (issues 61
and 65): a side file naming the input, a run that scored nothing, a rerun after the input was
fixed or replaced, rows that cannot be read, a kill before the first chunk, an output it cannot
write, a corrupt Parquet file."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scoring.files import LIST_EXAMPLE, ScoringError, score_file, side_paths
from tests.service.test_scoring import ROOT, pair_rows, read_output, write_input


def cli(*args: str | Path, bundles: Path, popen: bool = False):
    command = [sys.executable, "-m", "cli.main", "score", *map(str, args), "--model-repository", str(bundles),
               "--threads", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if popen:
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def claim_rows(n: int, evidence) -> list[dict]:
    return [{"id": i, "claim": f"paris is in france {i} .", "evidence": evidence(i)} for i in range(n)]


# --- 65.1: no side file, and no output, may be the input -----------------------------------------

def test_the_errors_file_of_the_output_named_as_the_input_is_refused(service_bundles, tmp_path):
    """`score data.jsonl.errors.jsonl -o data.jsonl --overwrite` truncated its own input as the
    errors file and removed it as empty."""
    source = tmp_path / "data.jsonl.errors.jsonl"
    write_input(source, [{"premise": "a man .", "hypothesis": "a dog ."}])
    before = source.read_bytes()
    (tmp_path / "data.jsonl").write_text("")
    done = cli(source, "-o", tmp_path / "data.jsonl", "--model", "nli", "--overwrite", bundles=service_bundles)
    assert done.returncode == 2 and "the input" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert source.read_bytes() == before


@pytest.mark.parametrize("side", [0, 1, 2])  # progress file, errors file, parts folder
def test_a_side_file_that_is_the_input_by_another_name_is_refused(service_bundles, tmp_path, side):
    source = tmp_path / "in.parquet"
    write_input(source, pair_rows(5))
    before = source.read_bytes()
    output = tmp_path / "out.parquet"
    alias = side_paths(output)[side]
    if side == 2:  # the input inside the parts folder, whose stale parts a run removes
        alias.mkdir()
        os.link(source, alias / "part-000003.parquet")
        source = alias / "part-000003.parquet"
    else:
        os.link(source, alias)  # a hard link: another path, the same file
    with pytest.raises(ScoringError, match="the input"):
        score_file(source, output, service_bundles / "nli", progress_bar=False, overwrite=True)
    assert source.read_bytes() == before


# --- 61.2: a run that scored nothing, or skipped too much, is a failure ---------------------------

def test_plain_sentences_in_a_list_column_are_scored_as_lists_of_one(service_bundles, tmp_path):
    """A CSV whose `evidence` cells each held one plain sentence: 0 scored, all skipped, exit 0."""
    plain, as_json = tmp_path / "plain.csv", tmp_path / "json.csv"
    write_input(plain, claim_rows(20, lambda i: f"paris is the capital of france {i} ."))
    write_input(as_json, claim_rows(20, lambda i: [f"paris is the capital of france {i} ."]))
    done = cli(plain, "-o", tmp_path / "plain.out.csv", "--model", "fever", "--prefix", "p_", bundles=service_bundles)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["scored"] == 20
    score_file(as_json, tmp_path / "json.out.csv", service_bundles / "fever", prefix="p_", progress_bar=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "evidence"} for r in rows]  # noqa: E731
    assert strip(read_output(tmp_path / "plain.out.csv")) == strip(read_output(tmp_path / "json.out.csv"))


def test_a_run_that_scored_nothing_exits_3_shows_what_to_send_and_writes_the_header(service_bundles, tmp_path):
    source, output = tmp_path / "claims.csv", tmp_path / "out.csv"
    write_input(source, claim_rows(30, lambda i: "[1, 2]"))
    done = cli(source, "-o", output, "--model", "fever", "--prefix", "p_", bundles=service_bundles)
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["scored"], summary["skipped"]) == (0, 30)
    assert LIST_EXAMPLE in done.stderr and "no row scored" in done.stderr
    with open(output, encoding="utf-8", newline="") as fh:
        header = next(csv.reader(fh))
        assert next(csv.reader(fh), None) is None
    assert header[:3] == ["id", "claim", "evidence"] and "p_label" in header and "p_scores.SUPPORTS" in header
    # the header is the one a scored row gets
    write_input(source, claim_rows(1, lambda i: ["a ."]))
    score_file(source, tmp_path / "one.csv", service_bundles / "fever", prefix="p_", progress_bar=False)
    assert (tmp_path / "one.csv").read_text().splitlines()[0] == output.read_text().splitlines()[0]


def test_a_parquet_output_that_no_row_reached_has_the_columns_of_one_that_did(service_bundles, tmp_path):
    import pyarrow.parquet as pq

    rows = claim_rows(6, lambda i: ["paris is the capital of france ."])
    for name, claims in (("none", [" "] * 6), ("one", [" "] * 5 + ["paris is in france ."])):
        write_input(tmp_path / f"{name}.parquet", [{**r, "claim": c} for r, c in zip(rows, claims)])
        summary = score_file(tmp_path / f"{name}.parquet", tmp_path / f"{name}.out.parquet", service_bundles / "fever",
                             prefix="p_", progress_bar=False)
        assert summary.scored == (name == "one")
    empty, one = pq.read_schema(tmp_path / "none.out.parquet"), pq.read_schema(tmp_path / "one.out.parquet")
    assert "p_evidence_scores" in empty.names and "p_scores.REFUTES" in empty.names
    assert empty.equals(one, check_metadata=False), (empty, one)


def test_more_skipped_than_the_allowed_share_exits_3(service_bundles, tmp_path):
    rows = pair_rows(10)
    for i in (2, 5, 7):
        rows[i]["premise"] = " "
    source = tmp_path / "in.jsonl"
    write_input(source, rows)
    done = cli(source, "-o", tmp_path / "a.jsonl", "--model", "nli", "--prefix", "p_", bundles=service_bundles)
    assert done.returncode == 3 and "--max-skipped-share" in done.stderr, done.stderr
    assert len(read_output(tmp_path / "a.jsonl")) == 7  # the rows it could score are written all the same
    done = cli(source, "-o", tmp_path / "b.jsonl", "--model", "nli", "--prefix", "p_", "--max-skipped-share", "0.5",
               bundles=service_bundles)
    assert done.returncode == 0, done.stderr


# --- 61.3: the run's record is keyed on the input's content ----------------------------------------

def test_a_rerun_after_fixing_the_input_scores_it_afresh(service_bundles, tmp_path, capsys):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = pair_rows(12)
    write_input(source, [{**r, "premise": ""} for r in rows])
    first = score_file(source, output, service_bundles / "nli", prefix="p_", progress_bar=False)
    assert (first.scored, first.bad) == (0, 12)
    again = score_file(source, output, service_bundles / "nli", prefix="p_", progress_bar=False)
    assert (again.scored, again.bad) == (0, 12)
    said = capsys.readouterr().err
    assert "complete already" in said and "--overwrite" in said
    write_input(source, rows)  # fixed, same path
    fixed = score_file(source, output, service_bundles / "nli", prefix="p_", progress_bar=False)
    assert (fixed.scored, fixed.bad) == (12, 0) and fixed.errors is None
    assert [r["id"] for r in read_output(output)] == list(range(12))
    assert "input changed" in capsys.readouterr().err


def test_an_input_replaced_before_a_resume_is_not_mixed_with_the_old_rows(service_bundles, tmp_path):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, pair_rows(10))
    score_file(source, output, service_bundles / "nli", prefix="p_", chunk_rows=4, progress_bar=False)
    # the state after the first chunk of that run: 4 rows read and written, not done
    progress = side_paths(output)[0]
    record = json.loads(progress.read_text())
    first_four = b"".join(output.read_bytes().splitlines(keepends=True)[:4])
    record["state"].update(rows_read=4, output_bytes=len(first_four), scored=4, done=False)
    progress.write_text(json.dumps(record))
    output.write_bytes(first_four)
    replaced = [{**r, "id": 100 + r["id"]} for r in pair_rows(10)]
    write_input(source, replaced)
    summary = score_file(source, output, service_bundles / "nli", prefix="p_", chunk_rows=4, progress_bar=False)
    assert summary.resumed_from == 0 and summary.scored == 10
    assert [r["id"] for r in read_output(output)] == [r["id"] for r in replaced]


def test_a_changed_option_is_refused_naming_overwrite(service_bundles, tmp_path):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, pair_rows(3))
    score_file(source, output, service_bundles / "nli", prefix="p_", progress_bar=False)
    with pytest.raises(ScoringError, match="--overwrite"):
        score_file(source, output, service_bundles / "nli", prefix="q_", progress_bar=False)


# --- 65.9: a row that cannot be read is skipped, not the end of the run --------------------------

def test_unreadable_rows_are_skipped_and_reported_in_every_text_format(service_bundles, tmp_path):
    jsonl = tmp_path / "in.jsonl"
    good = json.dumps({"premise": "a man .", "hypothesis": "a dog ."}).encode() + b"\n"
    jsonl.write_bytes(good + b"[" * 100_000 + b"\n" + b'{"premise": "caf\xe9", "hypothesis": "a ."}\n'
                      + b'{"premise": "\\ud800", "hypothesis": "a ."}\n' + good)
    done = cli(jsonl, "-o", tmp_path / "out.jsonl", "--model", "nli", "--max-skipped-share", "1",
               bundles=service_bundles)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [2, 3, 4]
    assert len(read_output(tmp_path / "out.jsonl")) == 2

    table = tmp_path / "in.csv"
    table.write_bytes(b"premise,hypothesis\na man .,a dog .\ncaf\xe9,a .\n\"" + b"x" * (10 << 20) + b"\",a .\n"
                      + b"a man .,a dog .\n")
    done = cli(table, "-o", tmp_path / "out.csv", "--model", "nli", "--max-skipped-share", "1",
               bundles=service_bundles)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [json.loads(line) for line in (tmp_path / "out.csv.errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == [3, 4] and "not UTF-8" in errors[0]["error"]
    assert len(read_output(tmp_path / "out.csv")) == 2


# --- LOW: a kill before the first chunk; files it cannot read or write ---------------------------

def test_a_rerun_after_a_kill_before_the_first_chunk_proceeds(service_bundles, tmp_path):
    source, output = tmp_path / "in.csv", tmp_path / "out.csv"
    write_input(source, pair_rows(3000))
    progress = side_paths(output)[0]
    first = cli(source, "-o", output, "--model", "nli", "--chunk-rows", "3000", "--batch-size", "4", popen=True,
                bundles=service_bundles)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None and not (output.exists() or progress.exists()):
        time.sleep(0.002)
    assert first.poll() is None, first.communicate()
    first.send_signal(signal.SIGKILL)
    first.wait()
    if progress.exists():
        assert json.loads(progress.read_text())["state"]["rows_read"] == 0  # no chunk committed
    second = cli(source, "-o", output, "--model", "nli", bundles=service_bundles)
    assert second.returncode == 0, second.stderr
    assert [int(r["id"]) for r in read_output(output)] == list(range(3000))


def test_an_output_it_cannot_write_and_a_corrupt_parquet_are_one_line_errors(service_bundles, tmp_path):
    source = tmp_path / "in.jsonl"
    write_input(source, pair_rows(3))
    done = cli(source, "-o", tmp_path / "no-such-folder" / "out.jsonl", "--model", "nli", bundles=service_bundles)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "cannot write" in done.stderr, done.stderr
    corrupt = tmp_path / "in.parquet"
    corrupt.write_bytes(b"PAR1" + os.urandom(4096))
    done = cli(corrupt, "-o", tmp_path / "out.parquet", "--model", "nli", bundles=service_bundles)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "cannot read" in done.stderr, done.stderr
