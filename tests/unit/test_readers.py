"""Each reader on small files written here: BOMs, CRLF, latin-1 fallback, header variants, and
the rows each format must skip or refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.examples import ClaimExample, PairExample, TextExample
from training.readers import (
    READERS,
    FormatError,
    read_fever_jsonl,
    read_file,
    read_nli_jsonl,
    read_scitail_tsv,
    read_sick,
    read_snli_jsonl,
    read_snli_txt,
    read_text_csv,
    read_text_jsonl,
    read_text_tsv,
)

BOM = "\ufeff"


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def snli_row(premise: str, hypothesis: str, label: str, caption: str = "1.jpg#0") -> str:
    return json.dumps({"sentence1": premise, "sentence2": hypothesis, "gold_label": label, "captionID": caption, "annotator_labels": [label]})


def test_snli_jsonl_skips_no_consensus_and_handles_bom_crlf(tmp_path: Path) -> None:
    # U+2028 is legal unescaped inside a JSON string: the reader must not split lines on it
    rows = [
        snli_row("A man sleeps.", "A person rests.", "entailment"),
        snli_row("A dog runs.", "A cat\u2028sleeps.", "contradiction"),
        snli_row("Kids play.", "Kids are happy.", "-"),
        snli_row("Two women talk.", "They are sisters.", "neutral"),
    ]
    path = write(tmp_path / "snli.jsonl", BOM + "\r\n".join(rows) + "\r\n\r\n")
    assert read_snli_jsonl(path) == [
        PairExample("A man sleeps.", "A person rests.", "entailment"),
        PairExample("A dog runs.", "A cat\u2028sleeps.", "contradiction"),
        PairExample("Two women talk.", "They are sisters.", "neutral"),
    ]


def test_snli_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", snli_row("a", "b", "neutral") + "\n{not json\n")
    with pytest.raises(FormatError, match=r"bad\.jsonl:2"):
        read_snli_jsonl(path)
    missing = write(tmp_path / "missing.jsonl", json.dumps({"sentence1": "a", "gold_label": "neutral"}) + "\n")
    with pytest.raises(FormatError, match="sentence2"):
        read_snli_jsonl(missing)


def test_snli_txt_reads_by_header_and_keeps_quotes(tmp_path: Path) -> None:
    header = "gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1\tsentence2\tcaptionID\tpairID"
    lines = [
        header,
        'neutral\t( a )\t( b )\tA "quoted" man.\tHe says "hi.\t1.jpg#0\t1.jpg#0r1n',
        "-\t( a )\t( b )\tA man.\tNobody.\t1.jpg#0\t1.jpg#0r1x",
        "entailment\t( a )\t( b )\tA man.\tA person.\t1.jpg#0\t1.jpg#0r1e",
    ]
    path = write(tmp_path / "snli.txt", "\r\n".join(lines) + "\r\n")
    assert read_snli_txt(path) == [
        PairExample('A "quoted" man.', 'He says "hi.', "neutral"),
        PairExample("A man.", "A person.", "entailment"),
    ]


def test_scitail_tsv(tmp_path: Path) -> None:
    path = write(tmp_path / "scitail.tsv", "Plants make food.\tPlants photosynthesize.\tentails\nIron rusts.\tWater is wet.\tneutral\n")
    assert read_scitail_tsv(path) == [
        PairExample("Plants make food.", "Plants photosynthesize.", "entails"),
        PairExample("Iron rusts.", "Water is wet.", "neutral"),
    ]
    bad = write(tmp_path / "bad.tsv", "only\ttwo\n")
    with pytest.raises(FormatError, match="3 columns"):
        read_scitail_tsv(bad)


SICK_HEADER = (
    "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
    "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set"
)


def sick_full_row(pair_id: int, a: str, b: str, label: str, part: str) -> str:
    return f"{pair_id}\t{a}\t{b}\t{label}\t3.5\tA_neutral_B\tB_neutral_A\t{a}\t{b}\tFLICKR\tFLICKR\t{part}"


def write_sick_full(path: Path) -> Path:
    rows = [
        SICK_HEADER,
        sick_full_row(1, "A kid plays.", "A child plays.", "ENTAILMENT", "TRAIN"),
        sick_full_row(2, "A man cooks.", "Nobody cooks.", "CONTRADICTION", "TRIAL"),
        sick_full_row(3, "A dog barks.", "A dog is loud.", "NEUTRAL", "TEST"),
        sick_full_row(4, "A cat naps.", "An animal naps.", "ENTAILMENT", "TRAIN"),
    ]
    return write(path, "\r\n".join(rows) + "\r\n")  # the release is CRLF


def test_sick_full_release_and_semeval_parts(tmp_path: Path) -> None:
    path = write_sick_full(tmp_path / "SICK.txt")
    assert [e.label for e in read_sick(path)] == ["ENTAILMENT", "CONTRADICTION", "NEUTRAL", "ENTAILMENT"]
    assert read_sick(path, semeval_set="TRAIN") == [
        PairExample("A kid plays.", "A child plays.", "ENTAILMENT"),
        PairExample("A cat naps.", "An animal naps.", "ENTAILMENT"),
    ]
    assert read_sick(path, semeval_set="trial") == [PairExample("A man cooks.", "Nobody cooks.", "CONTRADICTION")]
    with pytest.raises(ValueError, match="semeval_set"):
        read_sick(path, semeval_set="DEV")


@pytest.mark.parametrize("with_header", [True, False])
def test_sick_semeval_split_files(tmp_path: Path, with_header: bool) -> None:
    rows = ["6\tNo boy plays.\tKids play.\t3.3\tNEUTRAL", "4\tBoys play.\tNo boy plays.\t3.6\tCONTRADICTION"]
    if with_header:
        rows.insert(0, "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment")
    path = write(tmp_path / "SICK_train.txt", "\n".join(rows) + "\n")
    # a split file is one part already: semeval_set does not filter it
    assert read_sick(path, semeval_set="TEST") == [
        PairExample("No boy plays.", "Kids play.", "NEUTRAL"),
        PairExample("Boys play.", "No boy plays.", "CONTRADICTION"),
    ]


def test_fever_jsonl(tmp_path: Path) -> None:
    rows = [
        {"claim": "Paris is in France.", "evidence": ["Paris is the capital of France.", "It is big."], "label": "SUPPORTS"},
        {"claim": "The sun is cold.", "evidence": "The sun is hot.", "label": "REFUTES"},
        {"claim": "Nobody knows.", "evidence": [], "label": "NOT ENOUGH INFO"},
    ]
    path = write(tmp_path / "claims.jsonl", BOM + "\n".join(json.dumps(r) for r in rows) + "\n")
    assert read_fever_jsonl(path) == [
        ClaimExample("Paris is in France.", ("Paris is the capital of France.", "It is big."), "SUPPORTS"),
        ClaimExample("The sun is cold.", ("The sun is hot.",), "REFUTES"),
    ]
    ids = write(tmp_path / "fever_ids.jsonl", json.dumps({"claim": "x", "evidence": [[[1, 2, "Paris", 0]]], "label": "SUPPORTS"}) + "\n")
    with pytest.raises(FormatError, match="sentence strings"):
        read_fever_jsonl(ids)


def test_text_csv_quotes_newlines_and_latin1_fallback(tmp_path: Path) -> None:
    text = 'text,label\r\n"Caf\xe9, tr\xe8s bien",positive\r\n"two\r\nlines",neutral\r\n"  ",negative\r\n'
    path = write(tmp_path / "latin1.csv", text, encoding="latin-1")
    assert read_text_csv(path) == [TextExample("Café, très bien", "positive"), TextExample("two\r\nlines", "neutral")]
    utf8 = write(tmp_path / "bom.csv", BOM + "text,label\nCafé,positive\n")
    assert read_text_csv(utf8) == [TextExample("Café", "positive")]


def test_text_columns_are_configurable(tmp_path: Path) -> None:
    tsv = write(tmp_path / "data.tsv", "id\tsentiment\tbody\n1\tneg\tawful\n2\tpos\tgreat\n")
    assert read_text_tsv(tsv, text_column="body", label_column="sentiment") == [TextExample("awful", "neg"), TextExample("great", "pos")]
    with pytest.raises(FormatError, match="header lacks"):
        read_text_tsv(tsv)
    jsonl = write(tmp_path / "data.jsonl", '{"body": "fine", "y": "pos"}\r\n{"body": "bad", "y": "neg"}\r\n')
    assert read_text_jsonl(jsonl, text_column="body", label_column="y") == [TextExample("fine", "pos"), TextExample("bad", "neg")]


def test_nli_formats_refuse_non_utf8(tmp_path: Path) -> None:
    row = '{"sentence1": "Caf\xe9", "sentence2": "b", "gold_label": "neutral"}\n'
    path = write(tmp_path / "x.jsonl", row, encoding="latin-1")
    with pytest.raises(FormatError, match="not UTF-8"):
        read_snli_jsonl(path)


def test_read_file_dispatch(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", "words,y\nhello,greeting\n")
    assert read_file(path, "text-csv", text_column="words", label_column="y") == [TextExample("hello", "greeting")]
    assert {"snli-jsonl", "snli-txt", "scitail-tsv", "nli-jsonl", "sick", "msrp", "wikiqa-tsv", "fever-jsonl", "fever-csv", "text-csv", "text-tsv", "text-jsonl"} == set(READERS)
    with pytest.raises(ValueError, match="unknown format"):
        read_file(path, "parquet")


def test_nli_jsonl_reads_xz_and_plain_files_alike(tmp_path: Path) -> None:
    import lzma

    rows = [
        {"premise": "Plants make food from light.", "hypothesis": "Plants photosynthesize.", "label": "entails", "extra": 1},
        {"premise": "Iron rusts.", "hypothesis": "Which metal rusts?", "label": "not_entailment"},
    ]
    text = "\r\n".join(json.dumps(r) for r in rows) + "\r\n"
    plain = write(tmp_path / "pairs.jsonl", BOM + text)
    packed = tmp_path / "pairs.jsonl.xz"
    packed.write_bytes(lzma.compress(text.encode("utf-8")))
    expected = [
        PairExample("Plants make food from light.", "Plants photosynthesize.", "entails"),
        PairExample("Iron rusts.", "Which metal rusts?", "not_entailment"),
    ]
    assert read_nli_jsonl(plain) == expected
    assert read_nli_jsonl(packed) == expected
    assert read_file(packed, "nli-jsonl") == expected
    missing = write(tmp_path / "missing.jsonl", json.dumps(rows[0]) + "\n" + json.dumps({"premise": "a", "label": "neutral"}) + "\n")
    with pytest.raises(FormatError, match=r"missing.jsonl:2: missing 'hypothesis'"):
        read_nli_jsonl(missing)
    blank = write(tmp_path / "blank.jsonl", json.dumps({"premise": "a", "hypothesis": "b", "label": " "}) + "\n")
    with pytest.raises(FormatError, match="blank.jsonl:1: empty label"):
        read_nli_jsonl(blank)
