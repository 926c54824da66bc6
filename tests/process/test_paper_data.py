"""The ABCNN paper's benchmarks: the MSRP and WikiQA readers on small files written here, and the
sick / msrp / wikiqa loaders on a synthetic benchmark folder (splits, the MSRP dev carve and
swap, WikiQA's unanswerable questions, the missing-data message, `attserve data` skipping)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import training.datasets as datasets
from tests.paper_benchmarks import write_benchmarks, write_msrp, write_sick, write_wikiqa
from training.datasets import BenchmarkDataMissing, answerable_questions, load_benchmark, load_dataset, split_msrp_train
from training.examples import PairExample
from training.readers import FormatError, iter_wikiqa_records, read_file, read_msrp, read_wikiqa_tsv
from training.recipes import DATASET_TASKS

REPO = Path(__file__).resolve().parents[2]
MSRP_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
WIKIQA_HEADER = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# --- readers ---------------------------------------------------------------------------------


def test_msrp_reader_strips_the_bom_and_keeps_quotes_literally(tmp_path):
    path = write(tmp_path / "m.txt", "\ufeff" + MSRP_HEADER + "\n"
                 + '1\t1\t2\tHe said "yes today.\tHe agreed "today.\n'
                 + "0\t3\t4\tShares rose 5%.\tThe CEO resigned.\n")
    assert read_msrp(path) == [
        PairExample('He said "yes today.', 'He agreed "today.', "1"),
        PairExample("Shares rose 5%.", "The CEO resigned.", "0"),
    ]
    assert read_file(path, "msrp") == read_msrp(path)


@pytest.mark.parametrize(
    "body, message",
    [
        ("Quality\t#1 String\t#2 String\n1\ta\tb\n", "not a MSRP file"),
        (MSRP_HEADER + "\n1\t1\t2\tonly one sentence\n", "5 columns"),
        (MSRP_HEADER + "\nyes\t1\t2\ta\tb\n", "Quality must be 0 or 1"),
    ],
)
def test_msrp_reader_refuses_other_layouts(tmp_path, body, message):
    with pytest.raises(FormatError, match=message):
        read_msrp(write(tmp_path / "m.txt", body))


def test_wikiqa_reader_reads_crlf_rows_with_their_question_ids(tmp_path):
    path = write(tmp_path / "w.tsv", "\r\n".join([
        WIKIQA_HEADER,
        "Q1\thow tall is it?\tD1\tTower\tD1-0\tThe tower is 300 m tall .\t1",
        "Q1\thow tall is it?\tD1\tTower\tD1-1\tIt was built in 1889 .\t0",
        "Q2\twho sang it?\tD2\tSong\tD2-0\tThe song is \"old\" .\t0",
    ]) + "\r\n")
    records = list(iter_wikiqa_records(path))
    assert [qid for qid, _ in records] == ["Q1", "Q1", "Q2"]
    assert records[0][1] == PairExample("how tall is it?", "The tower is 300 m tall .", "1")
    assert records[2][1].hypothesis == 'The song is "old" .'  # no csv quote handling, no \r left
    assert read_wikiqa_tsv(path) == [e for _, e in records] == read_file(path, "wikiqa-tsv")


def test_wikiqa_reader_refuses_a_bad_label_and_other_headers(tmp_path):
    with pytest.raises(FormatError, match="Label must be 0 or 1"):
        read_wikiqa_tsv(write(tmp_path / "a.tsv", WIKIQA_HEADER + "\nQ1\tq\tD1\tT\tD1-0\ts\t2\n"))
    with pytest.raises(FormatError, match="not a WikiQA file"):
        read_wikiqa_tsv(write(tmp_path / "b.tsv", "Question\tSentence\tLabel\nq\ts\t1\n"))


# --- loaders ---------------------------------------------------------------------------------


def test_the_benchmarks_are_entailment_datasets_recipes_may_name():
    """The ABCNN paper's benchmarks (the test keeps its name): WikiQA and SICK are entailment data (answer selection as a
    two-label pair task), MSRP is the paraphrase task's."""
    for name in datasets.BENCHMARKS:
        assert DATASET_TASKS[name] == ("paraphrase" if name == "msrp" else "entailment")
        assert name in datasets.LOADERS and datasets.DATASETS[name] == ()  # no registry source


def test_sick_keeps_the_semeval_parts(tmp_path):
    write_sick(tmp_path, {"TRAIN": 9, "TRIAL": 3, "TEST": 6})
    splits = load_benchmark("sick", tmp_path)
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (9, 3, 6)
    assert splits.labels == ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
    assert {e.label for e in splits.train} == set(splits.labels)
    assert list(splits.checksums) == ["sick/sick/SICK.txt"]


def test_msrp_dev_is_carved_from_train_and_train_pairs_come_in_both_orders(tmp_path):
    write_msrp(tmp_path, train=430, test=12)
    train_file = tmp_path / "msrp" / "msr_paraphrase_train.txt"
    # unique rows, so membership below means "this very pair"
    write(train_file, "\ufeff" + MSRP_HEADER + "\n" + "".join(f"{i % 2}\t{i}\t{i}\tfirst {i}\tsecond {i}\n" for i in range(430)))
    splits = load_benchmark("msrp", tmp_path)
    originals = read_msrp(train_file)
    assert len(splits.dev) == 400 and len(splits.train) == 2 * 30 and len(splits.test) == 12
    assert splits.labels == ["0", "1"]
    dev = set(splits.dev)
    assert dev <= set(originals)
    kept = [p for p in originals if p not in dev]
    assert splits.train[0::2] == kept
    assert splits.train[1::2] == [PairExample(p.hypothesis, p.premise, p.label) for p in kept]
    # seeded: the same dev every time; another seed draws another
    assert split_msrp_train(originals)[1] == splits.dev
    assert split_msrp_train(originals, seed=1)[1] != splits.dev


def test_wikiqa_drops_unanswerable_questions_from_dev_and_test_only(tmp_path):
    paths = write_wikiqa(tmp_path, {"train": 8, "dev": 8, "test": 4}, candidates=3)
    splits = load_benchmark("wikiqa", tmp_path)
    assert len(splits.train) == 8 * 3  # train as is
    assert len(splits.dev) == 6 * 3 and len(splits.test) == 3 * 3  # every 4th question has no answer
    for part in (splits.dev, splits.test):
        by_question: dict[str, list[str]] = {}
        for e in part:
            by_question.setdefault(e.premise, []).append(e.label)
        assert all("1" in labels for labels in by_question.values())
    assert answerable_questions(iter_wikiqa_records(paths["dev"])) == splits.dev


def test_a_missing_benchmark_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv(datasets.BENCHMARK_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(BenchmarkDataMissing, match="never downloaded.*ATTSERVE_BENCHMARK_DIR"):
        load_dataset("wikiqa")
    write_benchmarks(tmp_path / "here")
    monkeypatch.setenv(datasets.BENCHMARK_DIR_ENV, str(tmp_path / "here"))
    assert load_dataset("sick").name == "sick"  # the env var is the default folder


def test_attserve_data_skips_an_absent_benchmark_and_shows_a_present_one(tmp_path):
    env_missing = {"ATTSERVE_BENCHMARK_DIR": str(tmp_path / "nowhere"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "cli.main", "data", "msrp"], cwd=REPO, env=env_missing,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "skipped msrp" in done.stderr and "never downloaded" in done.stderr
    write_benchmarks(tmp_path / "bench")
    done = subprocess.run([sys.executable, "-m", "cli.main", "data", "msrp"], cwd=REPO,
                          env={**env_missing, "ATTSERVE_BENCHMARK_DIR": str(tmp_path / "bench"), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "msrp" in done.stdout and "240" in done.stdout  # (520 - 400) pairs x 2 orders
