"""Readers for the standard dataset formats: each `read_<format>(path) -> list[Example]`, and
`read_file(path, format)` to pick one by name (the names recipes use in `[data] format`).

    snli-jsonl   SNLI / MultiNLI jsonl: sentence1, sentence2, gold_label ("-" = no consensus, skipped)
    snli-txt     SNLI / MultiNLI .txt: tab-separated with a header row naming the same columns
    scitail-tsv  SciTail tsv: premise \\t hypothesis \\t label (entails / neutral), no header
    nli-jsonl    plain NLI jsonl: premise, hypothesis, label per object (the shared data folder's
                 SciTail, MultiNLI, XNLI and QNLI files, xz-compressed); labels as the file spells them
    sick         SICK: the full release SICK.txt (12 columns with a header, `entailment_label`,
                 `SemEval_set` = TRAIN/TRIAL/TEST) or the SemEval-2014 split files (id, sentence_A,
                 sentence_B, relatedness, entailment_judgment; with or without their header row)
    msrp         Microsoft Research Paraphrase Corpus: header Quality, #1 ID, #2 ID, #1 String,
                 #2 String (tab-separated, usually with a BOM); label = Quality ("1" = paraphrase)
    wikiqa-tsv   WikiQA answer selection: header QuestionID, Question, DocumentID, DocumentTitle,
                 SentenceID, Sentence, Label (CRLF); premise = question, hypothesis = candidate
                 sentence, label "1" = an answer
    fever-jsonl  FEVER-style jsonl: claim, evidence (a list of sentence strings), label
    fever-csv    FEVER rows with their evidence text (id, verifiable, label, claim, evidence = a
                 Python list literal of sentences in the FEVER dump's tokenization, made plain
                 text); claims without evidence are skipped, as in fever-jsonl
    text-csv     classification csv with `text` and `label` columns (names configurable)
    text-tsv     the same, tab-separated
    text-jsonl   classification jsonl with `text` and `label` keys (names configurable)

Every reader strips a UTF-8 BOM, accepts LF or CRLF, and reads a file ending in `.xz` through
lzma. The csv/tsv classification formats fall
back to latin-1 when the file is not UTF-8 (spreadsheet and tweet exports often are not); the
others are UTF-8 by their specifications and fail loudly instead. Labels are kept as the file
spells them. Standard library only.
"""

from __future__ import annotations

import ast
import csv
import io
import lzma
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from training.examples import ClaimExample, Example, PairExample, TextExample

logger = logging.getLogger(__name__)

NO_GOLD_LABEL = "-"  # SNLI/MultiNLI: annotators did not agree
SICK_SETS = ("TRAIN", "TRIAL", "TEST")


class FormatError(ValueError):
    """A file does not hold the format it was read as (message names file and line)."""


def read_text(path: str | Path, latin1_fallback: bool = False) -> str:
    """A file's text: UTF-8 with any BOM removed; latin-1 if allowed and UTF-8 fails."""
    raw = lzma.decompress(Path(path).read_bytes()) if str(path).endswith(".xz") else Path(path).read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if not latin1_fallback:
            raise FormatError(f"{path}: not UTF-8 ({exc})") from exc
        logger.warning("%s is not UTF-8, reading it as latin-1", path, extra={"path": str(path), "encoding": "latin-1"})
        return raw.decode("latin-1")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each non-blank line, LF or CRLF. Split on "\\n" only:
    str.splitlines would also split inside JSON strings that hold U+2028 or \\x1c."""
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip():
            yield number, line


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a jsonl file."""
    for number, line in _lines(read_text(path)):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise FormatError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        yield number, row


def _tsv_rows(text: str) -> list[list[str]]:
    """Tab-separated rows with quotes taken literally (NLI sentences contain unbalanced quotes)."""
    rows = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    return [row for row in rows if any(cell.strip() for cell in row)]


def _field(row: dict[str, Any], key: str, path: str | Path, number: int) -> Any:
    if key not in row or row[key] is None:
        raise FormatError(f"{path}:{number}: missing {key!r} (has {sorted(row)})")
    return row[key]


# --- entailment ------------------------------------------------------------------------------


def iter_snli_records(path: str | Path) -> Iterator[tuple[PairExample, dict[str, Any]]]:
    """SNLI/MultiNLI jsonl rows with a gold label, each as (example, the raw row); the raw row
    keeps `captionID`/`pairID` for group splits."""
    for number, row in iter_jsonl(path):
        label = _field(row, "gold_label", path, number)
        if label == NO_GOLD_LABEL:
            continue
        premise = str(_field(row, "sentence1", path, number))
        hypothesis = str(_field(row, "sentence2", path, number))
        yield PairExample(premise, hypothesis, str(label)), row


def read_snli_jsonl(path: str | Path) -> list[PairExample]:
    return [example for example, _ in iter_snli_records(path)]


def read_snli_txt(path: str | Path) -> list[PairExample]:
    rows = _tsv_rows(read_text(path))
    if not rows:
        return []
    header = rows[0]
    missing = {"gold_label", "sentence1", "sentence2"} - set(header)
    if missing:
        raise FormatError(f"{path}: header lacks {sorted(missing)} (has {header})")
    col = {name: i for i, name in enumerate(header)}
    out = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) < len(header):
            raise FormatError(f"{path}:{number}: {len(row)} columns, header has {len(header)}")
        label = row[col["gold_label"]]
        if label != NO_GOLD_LABEL:
            out.append(PairExample(row[col["sentence1"]], row[col["sentence2"]], label))
    return out


def read_scitail_tsv(path: str | Path) -> list[PairExample]:
    out = []
    for number, row in enumerate(_tsv_rows(read_text(path)), start=1):
        if len(row) != 3:
            raise FormatError(f"{path}:{number}: SciTail rows have 3 columns (premise, hypothesis, label), got {len(row)}")
        out.append(PairExample(row[0], row[1], row[2].strip()))
    return out


def read_nli_jsonl(path: str | Path) -> list[PairExample]:
    """Pairs from `{premise, hypothesis, label}` objects (other keys ignored). Every row needs all
    three; an empty label is an error, not a skipped row (these files have no "-" rows)."""
    out = []
    for number, row in iter_jsonl(path):
        label = str(_field(row, "label", path, number)).strip()
        if not label:
            raise FormatError(f"{path}:{number}: empty label")
        out.append(PairExample(str(_field(row, "premise", path, number)), str(_field(row, "hypothesis", path, number)), label))
    return out


def read_sick(path: str | Path, semeval_set: str | None = None) -> list[PairExample]:
    """SICK entailment pairs. `semeval_set` (TRAIN/TRIAL/TEST) keeps one part of the full
    release; the SemEval split files are already one part and ignore it."""
    rows = _tsv_rows(read_text(path))
    if not rows:
        return []
    header = [cell.strip() for cell in rows[0]]
    if "SemEval_set" in header:  # full release
        col = {name: i for i, name in enumerate(header)}
        wanted = None if semeval_set is None else semeval_set.upper()
        if wanted is not None and wanted not in SICK_SETS:
            raise ValueError(f"semeval_set must be one of {SICK_SETS}, got {semeval_set!r}")
        out = []
        for number, row in enumerate(rows[1:], start=2):
            if len(row) != len(header):
                raise FormatError(f"{path}:{number}: {len(row)} columns, header has {len(header)}")
            if wanted is None or row[col["SemEval_set"]].strip() == wanted:
                out.append(PairExample(row[col["sentence_A"]], row[col["sentence_B"]], row[col["entailment_label"]].strip()))
        return out
    # SemEval split files: the header row (pair_ID, ...) is present in the originals, absent in some copies
    body = rows[1:] if header and header[0].lower() == "pair_id" else rows
    out = []
    for number, row in enumerate(body, start=1):
        if len(row) != 5:
            raise FormatError(f"{path}:{number}: SICK SemEval rows have 5 columns, got {len(row)}")
        out.append(PairExample(row[1], row[2], row[4].strip()))
    return out


# --- paraphrase, answer selection ------------------------------------------------------------

MSRP_COLUMNS = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
WIKIQA_COLUMNS = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")


def _header_columns(path: str | Path, rows: list[list[str]], expected: tuple[str, ...], what: str) -> list[list[str]]:
    """The body rows of a tab-separated file whose header names `expected` in that order, each
    checked to have that many columns."""
    if not rows:
        return []
    header = tuple(cell.strip() for cell in rows[0])
    if header != expected:
        raise FormatError(f"{path}: not a {what} file: header {list(header)}, expected {list(expected)}")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(expected):
            raise FormatError(f"{path}:{number}: {what} rows have {len(expected)} columns, got {len(row)}")
    return rows[1:]


def read_msrp(path: str | Path) -> list[PairExample]:
    """MSRP pairs: premise = #1 String, hypothesis = #2 String, label = Quality ("1"/"0")."""
    out = []
    for number, row in enumerate(_header_columns(path, _tsv_rows(read_text(path)), MSRP_COLUMNS, "MSRP"), start=2):
        quality = row[0].strip()
        if quality not in ("0", "1"):
            raise FormatError(f"{path}:{number}: Quality must be 0 or 1, got {quality!r}")
        out.append(PairExample(row[3], row[4], quality))
    return out


def iter_wikiqa_records(path: str | Path) -> Iterator[tuple[str, PairExample]]:
    """(QuestionID, example) per WikiQA row, in file order: premise = Question, hypothesis =
    Sentence, label = Label ("1" = the sentence answers the question)."""
    for number, row in enumerate(_header_columns(path, _tsv_rows(read_text(path)), WIKIQA_COLUMNS, "WikiQA"), start=2):
        label = row[6].strip()
        if label not in ("0", "1"):
            raise FormatError(f"{path}:{number}: Label must be 0 or 1, got {label!r}")
        yield row[0].strip(), PairExample(row[1], row[5], label)


def read_wikiqa_tsv(path: str | Path) -> list[PairExample]:
    """Every WikiQA question-sentence pair (questions without a correct answer included: the
    answer-selection protocol drops those from dev/test, see training.datasets)."""
    return [example for _, example in iter_wikiqa_records(path)]


# --- verification ----------------------------------------------------------------------------


def read_fever_jsonl(path: str | Path) -> list[ClaimExample]:
    """Claims with their evidence sentences. Rows with no evidence are skipped (a verification
    network needs at least one sentence to score); the count is logged."""
    out, skipped = [], 0
    for number, row in iter_jsonl(path):
        evidence = _field(row, "evidence", path, number)
        if isinstance(evidence, str):
            evidence = [evidence]
        if not isinstance(evidence, list) or not all(isinstance(s, str) for s in evidence):
            raise FormatError(
                f"{path}:{number}: `evidence` must be a list of sentence strings "
                "(FEVER's own files hold Wikipedia ids; resolve them to sentences first)"
            )
        if not evidence:
            skipped += 1
            continue
        out.append(ClaimExample(str(_field(row, "claim", path, number)), tuple(evidence), str(_field(row, "label", path, number))))
    if skipped:
        logger.warning("%s: skipped %d claims without evidence", path, skipped, extra={"path": str(path), "skipped": skipped})
    return out


FEVER_CSV_COLUMNS = ("id", "verifiable", "label", "claim", "evidence")


def iter_fever_csv(path: str | Path) -> Iterator[dict[str, Any]]:
    """Each row of a FEVER csv as {id, verifiable, label, claim, evidence: list[str]}, the
    evidence sentences as the file spells them (FEVER dump tokenization). The evidence column is
    a Python list literal, parsed with ast.literal_eval (never eval)."""
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    missing = [c for c in FEVER_CSV_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise FormatError(f"{path}: missing columns {missing} (has {reader.fieldnames})")
    for number, row in enumerate(reader, start=2):
        try:
            evidence = ast.literal_eval(row["evidence"] or "[]")
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise FormatError(f"{path}:{number}: `evidence` is not a Python list literal ({type(exc).__name__})") from exc
        if not isinstance(evidence, list) or not all(isinstance(s, str) for s in evidence):
            raise FormatError(f"{path}:{number}: `evidence` must be a list of sentence strings")
        yield {**{c: row[c] for c in FEVER_CSV_COLUMNS[:4]}, "evidence": evidence}


SUPPORTS, REFUTES, NOT_ENOUGH_INFO = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"

# The FEVER dump's Penn Treebank escapes and spacing, undone so the text looks as users send it.
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":", "``": '"', "''": '"'}
_ESCAPE = re.compile("|".join(re.escape(k) for k in _PTB_ESCAPES))
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}]|'s\b|'re\b|'ve\b|'ll\b|'d\b|'m\b|n't\b)")
_SPACE_AFTER = re.compile(r"([(\[{$]) ")
_QUOTED = re.compile(r'" ([^"]*?) "')


def detokenize_fever(sentence: str) -> str:
    """A FEVER dump sentence as plain text: `Hoffman -LRB- born 1937 -RRB- , an actor .` ->
    `Hoffman (born 1937), an actor.` Hand-written (a dozen substitutions): the usual
    detokenizers (sacremoses) do not know the dump's -LRB- style escapes."""
    text = _ESCAPE.sub(lambda m: _PTB_ESCAPES[m.group(0)], sentence)
    text = _QUOTED.sub(r'"\1"', text)
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub(r"\1", text)
    return " ".join(text.split())


@dataclass(frozen=True)
class FeverClaim:
    """One FEVER train row, as plain text."""

    id: str
    claim: str
    label: str
    evidence: tuple[str, ...]  # gold sentences, deduplicated in order; empty for NOT ENOUGH INFO


def read_fever(path: str | Path) -> tuple[list[FeverClaim], Counter]:
    """Every usable claim of a FEVER csv (train.csv or its .xz) and the counts of what was dropped."""
    claims: list[FeverClaim] = []
    dropped: Counter = Counter()
    for row in iter_fever_csv(path):
        evidence = tuple(dict.fromkeys(detokenize_fever(s) for s in row["evidence"] if s.strip()))
        if row["label"] != NOT_ENOUGH_INFO and not evidence:
            dropped[f"{row['label']} without evidence"] += 1
            continue
        claims.append(FeverClaim(row["id"], row["claim"].strip(), row["label"], evidence if row["label"] != NOT_ENOUGH_INFO else ()))
    if dropped:
        logger.info("%s: dropped %s", path, dict(dropped), extra={"path": str(path), **{k.replace(" ", "_"): v for k, v in dropped.items()}})
    return claims, dropped


def read_fever_csv(path: str | Path) -> list[ClaimExample]:
    """Claims with their evidence as plain text (detokenize_fever); claims without
    evidence (NOT ENOUGH INFO, and pages missing from the dump) are skipped, with a count.
    `attserve train`'s named dataset `fever` builds evidence lists for all of them instead."""
    claims, _ = read_fever(path)
    out = [ClaimExample(c.claim, c.evidence, c.label) for c in claims if c.evidence]
    if len(out) < len(claims):
        logger.warning("%s: skipped %d claims without evidence", path, len(claims) - len(out), extra={"path": str(path), "skipped": len(claims) - len(out)})
    return out


# --- classification --------------------------------------------------------------------------


def _read_delimited(path: str | Path, delimiter: str, text_column: str, label_column: str) -> list[TextExample]:
    text = read_text(path, latin1_fallback=True)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    fields = [name.strip() for name in (reader.fieldnames or [])]
    reader.fieldnames = fields
    missing = {text_column, label_column} - set(fields)
    if missing:
        raise FormatError(f"{path}: header lacks {sorted(missing)} (has {fields})")
    out = []
    for row in reader:
        if row[text_column] is None or row[label_column] is None:
            raise FormatError(f"{path}:{reader.line_num}: short row")
        if row[text_column].strip():
            out.append(TextExample(row[text_column], row[label_column].strip()))
    return out


def read_text_csv(path: str | Path, text_column: str = "text", label_column: str = "label") -> list[TextExample]:
    return _read_delimited(path, ",", text_column, label_column)


def read_text_tsv(path: str | Path, text_column: str = "text", label_column: str = "label") -> list[TextExample]:
    return _read_delimited(path, "\t", text_column, label_column)


def read_text_jsonl(path: str | Path, text_column: str = "text", label_column: str = "label") -> list[TextExample]:
    return [
        TextExample(str(_field(row, text_column, path, n)), str(_field(row, label_column, path, n)))
        for n, row in iter_jsonl(path)
    ]


READERS: dict[str, Callable[..., list]] = {
    "snli-jsonl": read_snli_jsonl,
    "snli-txt": read_snli_txt,
    "scitail-tsv": read_scitail_tsv,
    "nli-jsonl": read_nli_jsonl,
    "sick": read_sick,
    "msrp": read_msrp,
    "wikiqa-tsv": read_wikiqa_tsv,
    "fever-jsonl": read_fever_jsonl,
    "fever-csv": read_fever_csv,
    "text-csv": read_text_csv,
    "text-tsv": read_text_tsv,
    "text-jsonl": read_text_jsonl,
}


def read_file(path: str | Path, format: str, **options: Any) -> list[Example]:
    """Read `path` as `format` (a READERS key); options go to that reader (e.g. text_column)."""
    try:
        reader = READERS[format]
    except KeyError:
        raise ValueError(f"unknown format {format!r}; known: {sorted(READERS)}") from None
    return reader(path, **options)


__all__ = [
    "READERS",
    "FormatError",
    "iter_jsonl",
    "iter_snli_records",
    "iter_wikiqa_records",
    "iter_fever_csv",
    "read_fever_csv",
    "read_fever_jsonl",
    "read_file",
    "read_msrp",
    "read_nli_jsonl",
    "read_scitail_tsv",
    "read_sick",
    "read_snli_jsonl",
    "read_snli_txt",
    "read_text",
    "read_text_csv",
    "read_text_jsonl",
    "read_text_tsv",
    "read_wikiqa_tsv",
]
