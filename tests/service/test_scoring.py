"""`attserve score` (scoring.files): a file's rows through the service's engine, in-process.
Each scored row must carry exactly the HTTP API's answer for the same input, bad rows must be
reported by line and skipped, and a run killed half-way and started again must write each row
exactly once."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scoring.files import ScoringError, score_file, side_paths
from service.settings import Settings
from tests.bundles import running_app

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["a man is playing a guitar", "two dogs run across the snowy field", "nobody is playing any music",
         "the children are sleeping in a tent", "a woman is slicing an onion", "the stock market fell sharply"]


def pair_rows(n: int) -> list[dict]:
    return [{"id": i, "premise": f"{WORDS[i % 6]} on day {i} .", "hypothesis": f"{WORDS[(i * 5 + 1) % 6]} ."}
            for i in range(n)]


def http_answers(repository: Path, path: str, inputs: list[dict], model: str) -> list[dict]:
    """The HTTP API's answers to `inputs`, in order (requests of 64)."""
    async def scenario():
        async with running_app(Settings(model_repository=repository)) as (_, client):
            out = []
            for i in range(0, len(inputs), 64):
                response = await client.post(path, json={"inputs": inputs[i : i + 64], "model": model})
                assert response.status_code == 200, response.text
                out += response.json()["results"]
            return out
    return asyncio.run(scenario())


def write_input(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=97)


def read_output(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if path.suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def answer_of(row: dict, fmt: str, labels: list[str], prefix: str = "pred_") -> dict:
    """The HTTP answer back from an output row: JSONL holds it as it is; CSV and Parquet flatten
    `scores` into `scores.<label>` columns (CSV: as text; a float's repr round-trips exactly)."""
    if fmt == "jsonl":
        return {k[len(prefix):]: v for k, v in row.items() if k.startswith(prefix)}
    out: dict = {}
    for key, value in row.items():
        if not key.startswith(prefix):
            continue
        key = key[len(prefix):]
        if fmt == "csv":
            value = {"truncated": value == "true"}.get(key, value) if key == "truncated" else \
                (json.loads(value) if key == "evidence_scores" else value)
            if key.startswith("scores.") or key == "unknown_token_share":
                value = float(value)
        if key.startswith("scores."):
            out.setdefault("scores", {})[key[len("scores."):]] = value
        else:
            out[key] = value
    out["scores"] = {label: out["scores"][label] for label in labels}
    return out


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_outputs_equal_the_http_answers_and_bad_rows_are_skipped_by_line(service_bundles, tmp_path, suffix):
    rows = pair_rows(300)
    bad = {5: "", 77: "   ", 150: "x " * 200_000}  # row index -> premise that cannot be scored
    for i, text in bad.items():
        rows[i]["premise"] = text
    source = tmp_path / f"in{suffix}"
    write_input(source, rows)
    if suffix == ".jsonl":  # a line that is not JSON, a blank line (no row), a row without a hypothesis
        lines = source.read_text(encoding="utf-8").splitlines()
        lines[200:200] = ["{not json", "", json.dumps({"id": -1, "premise": "a man ."})]
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if suffix == ".csv":  # a line with more fields than the header, before row 100
        lines = source.read_text(encoding="utf-8").splitlines()
        lines[101:101] = ["1,a man .,a man .,extra"]
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / f"out{suffix}"
    summary = score_file(source, output, service_bundles / "nli", batch_size=16, chunk_rows=64, prefix="pred_",
                         progress_bar=False)
    good = [r for i, r in enumerate(rows) if i not in bad]
    assert summary.scored == len(good) and summary.bad == len(bad) + {".jsonl": 2, ".csv": 1}.get(suffix, 0)

    written = read_output(output)
    assert [int(r["id"]) for r in written] == [r["id"] for r in good]  # input order, each once
    expected = http_answers(service_bundles, "/entailment",
                            [{"premise": r["premise"], "hypothesis": r["hypothesis"]} for r in good], "nli")
    labels = ["entailment", "neutral", "contradiction"]
    fmt = suffix.lstrip(".")
    assert [answer_of(r, fmt, labels) for r in written] == expected
    assert [r["premise"] for r in written] == [r["premise"] for r in good]  # input columns kept

    errors = [json.loads(line) for line in side_paths(output)[1].read_text(encoding="utf-8").splitlines()]
    if suffix == ".jsonl":  # line = row + 1 (three lines inserted at line 201)
        lines = {6: "empty", 78: "empty", 151: "characters", 201: "not JSON", 203: "hypothesis: missing"}
    elif suffix == ".csv":  # the header is line 1, the malformed line 102
        lines = {7: "empty", 79: "empty", 102: "4 fields, the header has 3", 153: "characters"}
    else:  # Parquet: the row's number
        lines = {6: "empty", 78: "empty", 151: "characters"}
    assert [e["line"] for e in errors] == sorted(lines)
    for e in errors:
        assert lines[e["line"]] in e["error"], e


def test_a_list_field_in_every_format(service_bundles, tmp_path):
    """Verification's evidence list: a JSON list in JSONL, a list column in Parquet, JSON text in
    CSV; evidence_scores come back as a list (CSV: its JSON); too many sentences is a bad row."""
    rows = [{"id": i, "claim": f"{WORDS[i % 6]} .", "evidence": [f"{WORDS[(i + k) % 6]} ." for k in range(1 + i % 3)]}
            for i in range(40)]
    rows[9]["evidence"] = ["a man ."] * 6  # the test bundle takes at most 5
    expected = http_answers(service_bundles, "/verify",
                            [{"claim": r["claim"], "evidence": r["evidence"]} for r in rows if r["id"] != 9], "fever")
    for suffix in (".jsonl", ".parquet", ".csv"):
        source, output = tmp_path / f"claims{suffix}", tmp_path / f"scored{suffix}"
        write_input(source, rows)
        summary = score_file(source, output, service_bundles / "fever", chunk_rows=16, prefix="pred_",
                             progress_bar=False)
        assert (summary.scored, summary.bad) == (39, 1)
        got = [answer_of(r, suffix.lstrip("."), ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]) for r in read_output(output)]
        assert got == expected, suffix


def test_refusals_are_one_line_errors_before_any_work(service_bundles, tmp_path):
    source = tmp_path / "in.jsonl"
    write_input(source, [{"premise": "a man .", "hypothesis": "a man .", "label": "entailment"}])
    with pytest.raises(ScoringError, match="overwrite input columns"):
        score_file(source, tmp_path / "out.jsonl", service_bundles / "nli", progress_bar=False)
    with pytest.raises(ScoringError, match="input's format"):
        score_file(source, tmp_path / "out.csv", service_bundles / "nli", progress_bar=False, prefix="p_")
    with pytest.raises(ScoringError, match="not fields of entailment"):
        score_file(source, tmp_path / "out.jsonl", service_bundles / "nli", columns={"text": "premise"},
                   progress_bar=False, prefix="p_")
    assert not (tmp_path / "out.jsonl").exists()
    (tmp_path / "other.jsonl").write_text("not ours\n")
    with pytest.raises(ScoringError, match="exists and records no unfinished run"):  # never replaced silently
        score_file(source, tmp_path / "other.jsonl", service_bundles / "nli", progress_bar=False, prefix="p_")
    score_file(source, tmp_path / "out.jsonl", service_bundles / "nli", progress_bar=False, prefix="p_")
    again = score_file(source, tmp_path / "out.jsonl", service_bundles / "nli", progress_bar=False, prefix="p_")
    assert again.scored == 1 and len(read_output(tmp_path / "out.jsonl")) == 1  # a finished run: a no-op


def run_cli(source: Path, output: Path, bundles: Path, chunk_rows: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "score", str(source), "-o", str(output), "--model", "nli",
         "--model-repository", str(bundles), "--chunk-rows", str(chunk_rows), "--batch-size", "8", "--prefix", "pred_",
         "--threads", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_run_killed_half_way_resumes_and_writes_each_row_once(service_bundles, tmp_path, suffix):
    rows = pair_rows(6000)
    rows[4000]["premise"] = " "  # a bad row after the kill: reported once
    source, output = tmp_path / f"in{suffix}", tmp_path / f"out{suffix}"
    write_input(source, rows)
    progress_path = side_paths(output)[0]
    first = run_cli(source, output, service_bundles, chunk_rows=50)
    deadline = time.monotonic() + 120
    read = 0
    while time.monotonic() < deadline and first.poll() is None:
        if progress_path.exists():
            try:
                read = json.loads(progress_path.read_text())["state"]["rows_read"]
            except (ValueError, KeyError):  # replaced while read
                read = 0
            if read >= 1000:
                break
        time.sleep(0.005)
    assert first.poll() is None, f"finished before it could be killed: {first.communicate()}"
    first.send_signal(signal.SIGKILL)
    first.wait()
    state = json.loads(progress_path.read_text())["state"]
    assert 0 < state["rows_read"] < len(rows) and not state["done"]

    second = run_cli(source, output, service_bundles, chunk_rows=50)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["resumed_from_row"] == state["rows_read"] > 0
    written = read_output(output)
    assert [int(r["id"]) for r in written] == [i for i in range(len(rows)) if i != 4000]  # each row once, in order
    errors = side_paths(output)[1].read_text(encoding="utf-8").splitlines()
    assert [json.loads(e)["line"] for e in errors] == [{".jsonl": 4001, ".csv": 4002, ".parquet": 4001}[suffix]]

    # the same answers as one uninterrupted run
    whole = tmp_path / f"whole{suffix}"
    score_file(source, whole, service_bundles / "nli", batch_size=8, chunk_rows=50, prefix="pred_", threads=1,
               progress_bar=False)
    assert written == read_output(whole)


def test_the_command_refuses_in_one_line_with_exit_2(service_bundles, tmp_path):
    source = tmp_path / "in.csv"
    write_input(source, pair_rows(3))
    for args, words in ((["--model", "nope"], "no model 'nope'"),
                        (["--model", "nli", "--columns", "premise"], "expected FIELD=COLUMN"),
                        (["--model", "nli", "--columns", "premise=sentence1"], "no column ['sentence1']"),
                        (["--model", "nli", "-o", str(tmp_path / "out.parquet")], "the input's format")):
        output = [] if "-o" in args else ["-o", str(tmp_path / "out.csv")]
        done = subprocess.run([sys.executable, "-m", "cli.main", "score", str(source), *output,
                               "--model-repository", str(service_bundles), *args],
                              cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr[-500:])
        assert not (tmp_path / "out.csv").exists()
