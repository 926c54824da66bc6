"""Bulk scoring of a file, in-process: `attserve score INPUT -o OUTPUT --model NAME` (cli/score.py).

The rows of a JSONL, CSV or Parquet file run through the service's own engine and runtime
(service.inference.engine.Engine over service.inference.runtime.ModelRuntime, as bench/engine.py drives them), with
no HTTP: an answer is the dict the HTTP API renders for the same input (tests/service/
test_scoring.py compares them). The output has the input's format, the input's columns and the
answer's columns added:

- JSONL: each input object with the answer's keys added (`label`, `scores` as an object,
  `model`, `truncated`, `unknown_token_share`, `evidence_scores` ...), exactly the HTTP answer.
- CSV and Parquet: one column per answer key, an object's keys flattened (`scores.entailment`),
  a list (`evidence_scores`, a reranker's `scores`) as a list column in Parquet and as its JSON
  text in CSV. CSV input columns are read and written as text, unchanged.

`--prefix pred_` names them `pred_label`, ...: an input column of the same name is refused, not
overwritten.

Reading is in chunks (Parquet row batches; JSONL and CSV line by line, through the standard
library's json and csv, a line at most MAX_ROW_BYTES and never read whole past that), so the
file never has to fit in memory and the line numbers are exact. A row that cannot be scored (a
missing or empty field, a text over the service's limits, bytes that are not UTF-8, a line that
is not JSON or a CSV record with the wrong number of fields, a row over MAX_ROW_BYTES) is
reported with its line number on stderr and in OUTPUT.errors.jsonl, and skipped; the run goes on.

Resuming: OUTPUT.progress.json is written before the output is, and replaced atomically after
each chunk, once the output and the errors file are flushed and fsynced: it records how many
input lines (Parquet: rows) are consumed and how many output bytes are good, with the run's
arguments and the input's fingerprint (size, mtime, a hash of its first MiB). A run killed
anywhere leaves at most a chunk's rows past the recorded length: the next run with the same
arguments cuts the output back to that length and reads on from the recorded line, so each row
is written exactly once. An input that changed since (fixed, or replaced) is scored afresh.
Parquet cannot be appended to, so its chunks go to numbered part files (OUTPUT.parts/) renamed
into place when whole, and are joined into OUTPUT at the end.
"""

from __future__ import annotations

import asyncio
import codecs
import csv
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO, Iterable, Iterator, Literal, Sequence

from core.tasks import TASKS, Task
from service.inference.errors import InvalidInput, ServiceError
from service.settings import Settings
from service.inference.tasks import check_texts

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet",
           ".pq": "parquet"}
DEFAULT_BATCH_SIZE = 32
DEFAULT_CHUNK_ROWS = 4096
# chunks scored ahead of the one being written, so the engine has the next rows while a chunk
# is written
CHUNKS_AHEAD = 2
MAX_ERRORS_SHOWN = 20  # on stderr; every one goes to the errors file
# A JSONL line or CSV line longer than this is a skipped row, read past in pieces: a row is
# at most the service's 256 Ki characters of texts (4 bytes each at worst) plus its other columns
MAX_ROW_BYTES = 16 << 20
READ_PIECE_BYTES = 1 << 20
FINGERPRINT_BYTES = 1 << 20  # the input's first MiB is hashed into the run's record
# what a list field (evidence, texts) takes, shown where a cell is not one
LIST_EXAMPLE = '["first sentence", "second sentence"]'


class ScoringError(Exception):
    """A problem with the run's arguments or files (exit 2), said in one line."""


def file_format(path: Path) -> str:
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise ScoringError(f"{path}: unknown format {path.suffix!r}; the formats are .jsonl, .csv and .parquet") from None


def side_paths(output: Path) -> tuple[Path, Path, Path]:
    """The progress file, the errors file and the Parquet parts folder of `output`."""
    return (output.with_name(output.name + ".progress.json"), output.with_name(output.name + ".errors.jsonl"),
            output.with_name(output.name + ".parts"))


def written_paths(output: Path) -> list[Path]:
    """Every file a run writes, truncates or removes (the parts folder's files aside)."""
    progress_path, errors_path, parts_dir = side_paths(output)
    return [output, output.with_name(output.name + ".tmp"), progress_path,
            progress_path.with_name(progress_path.name + ".tmp"), errors_path, parts_dir]


def check_not_input(input_path: Path, output: Path) -> None:
    """Refuse a run whose output or side files are the input (by path, link or inode): a run
    truncates and removes them."""
    source = input_path.resolve()
    parts_dir = side_paths(output)[2].resolve()
    for path in written_paths(output):
        if path.resolve() == source or (path.exists() and os.path.samefile(path, input_path)):
            raise ScoringError(f"{path} is the input {input_path}, and a run would overwrite or remove it; name "
                               "another output")
    if parts_dir in source.parents:
        raise ScoringError(f"the input {input_path} is inside {parts_dir}, whose files a run removes; move it or "
                           "name another output")


# --- rows: the task's inputs from a row, checked as the service checks a request ---------------

@dataclass
class Chunk:
    """Rows read together: each row's line number (1-based, as an editor shows it; Parquet: the
    row's number), its task input or the reason it cannot be scored, and the format's own
    payload (parsed JSON objects, or a pyarrow RecordBatch)."""

    lines: list[int]
    inputs: list[SimpleNamespace | None]
    errors: dict[int, str]  # row index in the chunk -> why it is skipped
    payload: Any
    consumed: int  # input lines (Parquet: rows) this chunk takes past the previous one
    extra_errors: list[tuple[int, str]] = field(default_factory=list)  # rows not in the payload (unreadable)


def text_list(value: str) -> Any:
    """A list field's text (a CSV cell, a JSON string): a JSON list as its items, any other
    text as a list of that one text."""
    if value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            pass
    return [value]


class RowChecker:
    """A row's task input from its fields (`columns`: task field -> input column), checked
    against the service's limits for one input (service.inference.tasks.check_texts, the model's
    max_evidence), so a bad row is refused alone instead of failing its whole batch."""

    def __init__(self, task: Task, columns: dict[str, str], settings: Settings, max_evidence: int | None) -> None:
        self.task, self.columns, self.settings, self.max_evidence = task, columns, settings, max_evidence

    def __call__(self, get: Any) -> SimpleNamespace | str:
        values: dict[str, Any] = {}
        for f in self.task.fields:
            column = self.columns[f.name]
            value = get(column)
            if value is None:
                return f"{column}: missing"
            if f.many:
                if isinstance(value, str):
                    value = text_list(value)
                if not isinstance(value, (list, tuple)) or not value or not all(isinstance(t, str) for t in value):
                    return f"{column}: expected a non-empty list of texts, as JSON {LIST_EXAMPLE} (a plain text " \
                           "is a list of one)"
                if self.max_evidence is not None and len(value) > self.max_evidence:
                    return f"{column}: {len(value)} texts; the model takes at most {self.max_evidence}"
                value = list(value)
            elif not isinstance(value, str):
                return f"{column}: expected a text, got {type(value).__name__}"
            values[f.name] = value
        for f in self.task.fields:
            texts = values[f.name] if f.many else [values[f.name]]
            if any(not t.strip() for t in texts):
                return f"{self.columns[f.name]}: empty or whitespace-only text"
        x = SimpleNamespace(**values)
        try:
            check_texts([x], self.task.name, False, self.settings.max_text_chars, self.settings.max_request_chars)
        except InvalidInput as exc:
            return exc.message
        return x


def check_columns(lines: list[int], columns: dict[str, list], check: RowChecker, payload: Any,
                  consumed: int) -> Chunk:
    """A chunk of rows given as columns of values (only those `check` reads need be there)."""
    inputs, errors = [], {}
    for k in range(len(lines)):
        x = check(lambda column, k=k: columns[column][k] if column in columns else None)
        if isinstance(x, str):
            inputs.append(None)
            errors[k] = x
        else:
            inputs.append(x)
    return Chunk(lines, inputs, errors, payload, consumed)


# --- readers ---------------------------------------------------------------------------------

@dataclass
class LongLine:
    """A line over the row limit, read past: its quote characters, which a CSV reader needs to
    know where the record goes on."""

    quotes: int


def read_lines(fh: BinaryIO, max_bytes: int) -> Iterator[bytes | LongLine]:
    """Each line of a binary file with its newline; a line over `max_bytes` (newline aside) as a
    LongLine, read in pieces of at most READ_PIECE_BYTES and never held whole."""
    while True:
        line = fh.readline(max_bytes + 1)
        if not line:
            return
        if len(line) <= max_bytes or line.endswith(b"\n"):
            yield line
            continue
        quotes = line.count(b'"')
        while not line.endswith(b"\n"):
            line = fh.readline(READ_PIECE_BYTES)
            if not line:
                break
            quotes += line.count(b'"')
        yield LongLine(quotes)


def not_utf8(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"


def count_rows(path: Path, fmt: str) -> int | None:
    """Rows in the file, for the progress bar (CSV: lines less the header)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    lines = 0
    last = b"\n"
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            lines += block.count(b"\n")
            last = block[-1:]
    lines += last != b"\n"
    return lines - (fmt == "csv")


def json_object(raw: bytes | LongLine, max_bytes: int) -> tuple[dict | None, str | None]:
    """A JSONL line's object, or why it is none."""
    if isinstance(raw, LongLine):
        return None, f"a line over {max_bytes} bytes"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, not_utf8(raw, exc)
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})" if hasattr(exc, "colno") else f"not JSON ({exc})"
    except RecursionError:
        return None, "not JSON this reader takes: nested too deep"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    if "\\u" in text:  # only an escape makes a lone surrogate, which no UTF-8 output (or tokenizer) takes
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            return None, f"a lone surrogate \\u{ord(exc.object[exc.start]):04x}: not text (a JSON escape without " \
                         "its pair)"
    return obj, None


def read_jsonl(path: Path, skip_lines: int, chunk_rows: int, check: RowChecker,
               max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[Chunk]:
    with open(path, "rb") as fh:
        lines = read_lines(fh, max_row_bytes)
        line_no = 0
        for _ in range(skip_lines):
            if next(lines, None) is None:
                return
            line_no += 1
        while True:
            numbers, inputs, errors, objects = [], [], {}, []
            consumed = 0
            for raw in lines:
                line_no += 1
                consumed += 1
                if line_no == 1 and isinstance(raw, bytes) and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]
                if isinstance(raw, bytes) and not raw.strip():
                    continue  # a blank line is no row
                obj, why = json_object(raw, max_row_bytes)
                x = None
                if why is None:
                    x = check(obj.get)
                    why = x if isinstance(x, str) else None
                if why:
                    errors[len(numbers)] = why
                numbers.append(line_no)
                inputs.append(None if why else x)
                objects.append(obj)
                if len(numbers) >= chunk_rows:
                    break
            if consumed == 0:
                return
            yield Chunk(numbers, inputs, errors, objects, consumed)


def read_parquet(path: Path, skip_rows: int, chunk_rows: int, check: RowChecker) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        for seen, batch in _after(pq.ParquetFile(path).iter_batches(batch_size=chunk_rows), skip_rows):
            columns = {name: batch.column(name).to_pylist() for name in set(check.columns.values())
                       if name in batch.schema.names}
            yield check_columns(list(range(seen + 1, seen + 1 + batch.num_rows)), columns, check, batch,
                                batch.num_rows)
    except (pa.ArrowException, OSError) as exc:
        raise ScoringError(f"{path}: cannot read it as Parquet ({exc})") from None


def _after(batches: Iterable[Any], skip_rows: int) -> Iterator[tuple[int, Any]]:
    """(rows before it, batch) for each record batch, the first `skip_rows` rows of them all left
    out (a resumed run's rows already written)."""
    seen = 0
    for batch in batches:
        if seen + batch.num_rows <= skip_rows:
            seen += batch.num_rows
            continue
        if seen < skip_rows:
            batch = batch.slice(skip_rows - seen)
            seen = skip_rows
        yield seen, batch
        seen += batch.num_rows


class CsvRecords:
    """The records of a CSV file (the standard library's csv module, fed line by line by
    read_lines), each with its first line number, or why it cannot be read: bytes that are not
    UTF-8, a line over the row limit, a field over it, the wrong number of fields."""

    def __init__(self, fh: BinaryIO, max_row_bytes: int) -> None:
        self.max_row_bytes = max_row_bytes
        self.unreadable: dict[int, str] = {}  # line number -> why its record cannot be read
        # a field's limit is the process's (the csv module's only setting of it); raised, never lowered
        csv.field_size_limit(max(csv.field_size_limit(), max_row_bytes))
        self.reader = csv.reader(self._texts(fh))

    def _texts(self, fh: BinaryIO) -> Iterator[str]:
        for number, raw in enumerate(read_lines(fh, self.max_row_bytes), 1):
            if isinstance(raw, LongLine):  # what stands in keeps the quotes' parity, so the records after stay whole
                self.unreadable[number] = f"a line over {self.max_row_bytes} bytes"
                yield '"' * (raw.quotes % 2) + "\n"
                continue
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.unreadable[number] = not_utf8(raw, exc)
                yield raw.decode("utf-8", "replace")

    @property
    def lines_read(self) -> int:
        return self.reader.line_num

    def next(self) -> tuple[int, list[str] | None, str | None] | None:
        """(first line, fields, None) or (first line, None, why), or None at the end; a blank
        line is a record of no fields."""
        first = self.reader.line_num + 1
        try:
            fields, why = next(self.reader), None
        except StopIteration:
            return None
        except csv.Error as exc:
            fields, why = None, f"not CSV ({exc})"
        if self.unreadable:
            reasons = [self.unreadable.pop(n) for n in range(first, self.reader.line_num + 1) if n in self.unreadable]
            if reasons:
                fields, why = None, reasons[0]
        return first, fields, why


def read_csv(path: Path, skip_lines: int, chunk_rows: int, check: RowChecker,
             max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[Chunk]:
    """Every column as text; `skip_lines`: the lines after the header that a previous run
    consumed. A record that cannot be read is reported with the chunk its line falls in."""
    import pyarrow as pa

    with open(path, "rb") as fh:
        records = CsvRecords(fh, max_row_bytes)
        first = records.next()
        header = first[1] if first else None
        if not header:
            raise ScoringError(f"{path}: no header row" + (f" ({first[2]})" if first and first[2] else ""))
        while records.lines_read - 1 < skip_lines and records.next() is not None:
            pass
        wanted = {name: header.index(name) for name in set(check.columns.values()) if name in header}
        while True:
            start = records.lines_read
            lines, rows, unreadable = [], [], []
            while len(lines) + len(unreadable) < chunk_rows and (record := records.next()) is not None:
                line, fields, why = record
                if fields == []:
                    continue  # a blank line is no row
                if why is None and len(fields) != len(header):
                    why = f"{len(fields)} fields, the header has {len(header)}"
                if why is None:
                    lines.append(line)
                    rows.append(fields)
                else:
                    unreadable.append((line, why))
            if records.lines_read == start:
                return
            columns = [pa.array([row[i] for row in rows], pa.string()) for i in range(len(header))]
            payload = pa.RecordBatch.from_arrays(columns, names=header)
            chunk = check_columns(lines, {name: [row[i] for row in rows] for name, i in wanted.items()}, check,
                                  payload, records.lines_read - start)
            chunk.extra_errors = unreadable
            yield chunk


# --- answers as columns ------------------------------------------------------------------------

def flat_answer(answer: dict, prefix: str) -> dict[str, Any]:
    """An answer as flat columns: an object's keys as `key.sub`, the rest as they are."""
    out: dict[str, Any] = {}
    for key, value in answer.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                out[f"{prefix}{key}.{sub}"] = v
        else:
            out[f"{prefix}{key}"] = value
    return out


def answer_columns(answers: list[dict], prefix: str, csv: bool) -> dict[str, Any]:
    """pyarrow arrays of the answers' flat columns (CSV: a list as its JSON text)."""
    import pyarrow as pa

    rows = [flat_answer(a, prefix) for a in answers]
    names = list(rows[0]) if rows else []
    out = {}
    for name in names:
        values = [r.get(name) for r in rows]
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, list):
            out[name] = pa.array([json.dumps(v) for v in values], pa.string()) if csv else \
                pa.array(values, pa.list_(pa.float64()))
        elif isinstance(sample, bool):
            out[name] = pa.array(values, pa.bool_())
        elif isinstance(sample, (int, float)):
            out[name] = pa.array([float(v) for v in values], pa.float64())
        else:
            out[name] = pa.array(values, pa.string())
    return out


# --- the engine, in-process ----------------------------------------------------------------------

def engine_settings(repository: Path, batch_size: int, threads: int) -> Settings:
    """The service's settings for an engine that is fed whole files: requests of `batch_size`
    rows, a queue and a deadline that never refuse them (the rows were checked one by one
    already: a request's shared character budget does not apply)."""
    return Settings(model_repository=[repository], max_batch_size=batch_size, max_inputs_per_request=batch_size,
                    max_queue=1 << 20, request_timeout_ms=24 * 3600 * 1000, intra_op_threads=threads,
                    max_request_chars=1 << 40)


def load_engine_parts(bundle: Path, threads: int, batch_size: int, device: str = "cpu") -> tuple[Any, Settings]:
    """The service's runtime of `bundle`, warmed up as the service warms it (service.inference.engine.warm_up)."""
    from service.inference.engine import warm_up
    from service.inference.runtime import load_runtime

    settings = engine_settings(bundle.parent, batch_size, threads)
    runtime = load_runtime(bundle, settings.model_copy(update={"device": device}), threads)
    warm_up(runtime, settings)
    return runtime, settings


async def score_inputs(engine: Any, inputs: Sequence[SimpleNamespace], batch_size: int) -> list[dict | str]:
    """Each input's answer (the HTTP API's dict) or why it failed, in order: requests of
    `batch_size` inputs submitted together; a request that fails on one input (a text with no
    tokens after normalisation) is retried one input at a time, so only that one fails."""
    loop = asyncio.get_running_loop()

    async def one_request(part: Sequence[SimpleNamespace]) -> list[dict | str]:
        try:
            answers = await engine.submit(part, deadline=loop.time() + 86400.0, batch=True)
            return answers.results
        except ServiceError as exc:
            if len(part) == 1:  # the row's own error, without the request's "inputs[0]"
                return [re.sub(r"^inputs\[0\]\.?", "", exc.message).lstrip(": ")]
            out: list[dict | str] = []
            for x in part:
                out += await one_request([x])
            return out

    parts = await asyncio.gather(*(one_request(inputs[i : i + batch_size]) for i in range(0, len(inputs), batch_size)))
    return [a for part in parts for a in part]


# --- the run's record --------------------------------------------------------------------------

def input_fingerprint(path: Path) -> dict:
    """What tells a changed input from the one a recorded run read: size, mtime and a hash of
    its first FINGERPRINT_BYTES (the whole file is not read twice)."""
    stat = path.stat()
    with open(path, "rb") as fh:
        head = hashlib.sha256(fh.read(FINGERPRINT_BYTES)).hexdigest()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head_sha256": head}


class Progress:
    """OUTPUT.progress.json: what a resumed run needs, replaced atomically after each chunk.
    `identity`: the arguments that change the answers; `source`: the input's fingerprint."""

    def __init__(self, path: Path, identity: dict, source: dict) -> None:
        self.path, self.identity, self.source = path, identity, source
        self.state = {"rows_read": 0, "output_bytes": 0, "errors_bytes": 0, "parts": 0, "scored": 0, "bad": 0,
                      "done": False}

    def load(self) -> Literal["none", "same input", "input changed"]:
        if not self.path.exists():
            return "none"
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError:
            raise ScoringError(f"{self.path} is not a run's record; pass --overwrite to start over") from None
        if saved.get("identity") != self.identity:
            raise ScoringError(f"{self.path} records a run of other arguments ({saved.get('identity')}); pass "
                               "--overwrite to start over with these")
        if saved.get("source") != self.source:
            return "input changed"
        self.state.update(saved["state"])
        return "same input"

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"identity": self.identity, "source": self.source, "state": self.state}),
                       encoding="utf-8")
        os.replace(tmp, self.path)


def remove_outputs(output: Path) -> None:
    """The output and its side files, as --overwrite forgets them."""
    progress_path, errors_path, parts_dir = side_paths(output)
    for path in (output, progress_path, errors_path):
        path.unlink(missing_ok=True)
    if parts_dir.exists():
        for part in parts_dir.iterdir():
            part.unlink()
        parts_dir.rmdir()


def resumed_progress(input_path: Path, output: Path, identity: dict, overwrite: bool) -> Progress:
    """The run's record: a recorded run of the same arguments on the same input goes on; an
    input changed since (fixed, or replaced) starts afresh; an output no run recorded is
    refused. The record is written before the output is, so a kill at any point leaves one."""
    progress = Progress(side_paths(output)[0], identity, input_fingerprint(input_path))
    try:
        if overwrite:
            remove_outputs(output)
        found = progress.load()
        if found == "input changed":
            print(f"{input_path}: the input changed since the run recorded in {progress.path.name} (size, mtime or "
                  "content); scoring it afresh", file=sys.stderr)
            remove_outputs(output)
        elif found == "none" and (output.exists() or side_paths(output)[2].exists()):
            raise ScoringError(f"{output} exists and records no unfinished run ({progress.path.name}); pass "
                               "--overwrite to replace it")
        if not progress.state["done"]:
            progress.save()
    except OSError as exc:
        raise ScoringError(f"{output}: cannot write ({exc.strerror}: {exc.filename})") from None
    return progress


def _fsync(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())


@dataclass
class Summary:
    scored: int
    bad: int
    rows_read: int
    resumed_from: int
    seconds: float
    output: Path
    errors: Path | None


def skipped_verdict(summary: Summary, max_skipped_share: float) -> str | None:
    """Why a finished run is a failure (it scored nothing, or skipped more than the share
    allowed), or None."""
    rows = summary.scored + summary.bad
    where = f"; the reasons are in {summary.errors}" if summary.errors else ""
    if summary.scored == 0:
        return f"no row scored ({summary.bad} skipped{where})"
    if summary.bad > max_skipped_share * rows:
        return (f"{summary.bad} of {rows} rows skipped ({summary.bad / rows:.1%}), more than --max-skipped-share "
                f"{max_skipped_share}{where}")
    return None


def score_file(input_path: Path, output: Path, bundle: Path, *, columns: dict[str, str] | None = None,
               batch_size: int = DEFAULT_BATCH_SIZE, chunk_rows: int = DEFAULT_CHUNK_ROWS, threads: int | None = None,
               prefix: str = "", overwrite: bool = False, progress_bar: bool = True, device: str = "cpu",
               max_row_bytes: int = MAX_ROW_BYTES) -> Summary:
    """Score `input_path` with the bundle at `bundle` into `output` (see the module's docstring)."""
    return asyncio.run(_score_file(input_path, output, bundle, columns=columns or {}, batch_size=batch_size,
                                   chunk_rows=chunk_rows, threads=threads, prefix=prefix, overwrite=overwrite,
                                   progress_bar=progress_bar, device=device, max_row_bytes=max_row_bytes))


def task_columns(task: Task, columns: dict[str, str]) -> dict[str, str]:
    unknown = set(columns) - set(task.field_names)
    if unknown:
        raise ScoringError(f"--columns names {sorted(unknown)}, not fields of {task.name} (its fields: "
                           f"{', '.join(task.field_names)})")
    return {name: columns.get(name, name) for name in task.field_names}


def input_column_names(path: Path, fmt: str) -> list[str] | None:
    """The input's column names where the file declares them (CSV header, Parquet schema)."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except (pa.ArrowException, OSError) as exc:
            raise ScoringError(f"{path}: cannot read it as Parquet ({exc})") from None
    if fmt == "csv":
        with open(path, "rb") as fh:
            first = CsvRecords(fh, MAX_ROW_BYTES).next()
        if first is not None and first[2]:
            raise ScoringError(f"{path}: cannot read the header: {first[2]}")
        return first[1] if first else []
    return None


def checked_arguments(input_path: Path, output: Path, fmt: str, task: Task, labels: list[str],
                      columns: dict[str, str], prefix: str) -> dict[str, str]:
    """The task field -> column mapping, refused before any work where the run could not be
    right."""
    mapping = task_columns(task, columns)
    names = input_column_names(input_path, fmt)
    if names is not None:
        missing = [c for c in mapping.values() if c not in names]
        if missing:
            raise ScoringError(f"{input_path}: no column {missing} (columns: {names}); map the task's fields with "
                               f"--columns {','.join(f'{f}=COLUMN' for f in task.field_names)}")
    taken = set(names) if names is not None else _first_object_keys(input_path)
    collide = sorted(name for name in expected_answer_columns(task, labels, prefix, flat=fmt != "jsonl")
                     if name in taken)
    if collide:
        raise ScoringError(f"the answer's {collide} would overwrite input columns of the same name; pass --prefix "
                           "(e.g. --prefix pred_)")
    return mapping


def open_reader(fmt: str, input_path: Path, skip: int, chunk_rows: int, check: RowChecker,
                max_row_bytes: int) -> Iterator[Chunk]:
    if fmt == "jsonl":
        return read_jsonl(input_path, skip, chunk_rows, check, max_row_bytes)
    if fmt == "csv":
        return read_csv(input_path, skip, chunk_rows, check, max_row_bytes)
    return read_parquet(input_path, skip, chunk_rows, check)


# --- writing ----------------------------------------------------------------------------------

class ChunkWriter:
    """Each scored chunk's rows into the output and its skipped rows into the errors file, then
    the run's record: the files are first cut back to what the record says is good."""

    def __init__(self, input_path: Path, output: Path, fmt: str, prefix: str, progress: Progress, bar: Any) -> None:
        self.input_path, self.output, self.fmt, self.prefix = input_path, output, fmt, prefix
        self.progress, self.state, self.bar = progress, progress.state, bar
        _, self.errors_path, self.parts_dir = side_paths(output)
        self.csv_writer: Any = None
        self.shown = 0
        if fmt == "parquet":
            self.parts_dir.mkdir(exist_ok=True)
            for part in self.parts_dir.iterdir():
                if part.suffix != ".parquet" or int(part.stem.split("-")[1]) >= self.state["parts"]:
                    part.unlink()  # a part being written when the run stopped
            output.unlink(missing_ok=True)  # a join that did not finish
            self.out_fh = None
        else:
            self.out_fh = open(output, "ab")
            self.out_fh.truncate(self.state["output_bytes"])
        self.err_fh = open(self.errors_path, "ab")
        self.err_fh.truncate(self.state["errors_bytes"])

    def write(self, chunk: Chunk, answers: list[dict | str]) -> None:
        errors = list(chunk.extra_errors)
        good_rows, good_answers = [], []
        it = iter(answers)
        for k, x in enumerate(chunk.inputs):
            answer = chunk.errors[k] if x is None else next(it)
            if isinstance(answer, str):
                errors.append((chunk.lines[k], answer))
            else:
                good_rows.append(k)
                good_answers.append(answer)
        if good_rows:
            collide = _collisions(chunk, self.fmt, good_answers[0], self.prefix)
            if collide:
                raise ScoringError(f"the answer's {collide} would overwrite input columns of the same name; "
                                   "pass --prefix (e.g. --prefix pred_)")
            self._write_rows(chunk, good_rows, good_answers)
        self._write_errors(sorted(errors))
        self._commit(chunk, len(good_rows), len(errors))

    def _write_rows(self, chunk: Chunk, good_rows: list[int], good_answers: list[dict]) -> None:
        if self.fmt == "jsonl":
            lines = []
            for k, answer in zip(good_rows, good_answers):
                obj = dict(chunk.payload[k])
                obj.update({self.prefix + key: value for key, value in answer.items()})
                lines.append(json.dumps(obj, ensure_ascii=False))
            self.out_fh.write(("\n".join(lines) + "\n").encode("utf-8"))
            return
        import pyarrow as pa

        table = pa.Table.from_batches([chunk.payload]).take(pa.array(good_rows, pa.int64()))
        for name, array in answer_columns(good_answers, self.prefix, self.fmt == "csv").items():
            table = table.append_column(name, array)
        if self.fmt == "csv":
            import pyarrow.csv as pacsv

            if self.csv_writer is None:
                self.csv_writer = pacsv.CSVWriter(self.out_fh, table.schema, write_options=pacsv.WriteOptions(
                    include_header=self.state["output_bytes"] == 0))
            self.csv_writer.write_table(table)
        else:
            import pyarrow.parquet as pq

            part = self.parts_dir / f"part-{self.state['parts']:06d}.parquet"
            pq.write_table(table, part.with_suffix(".tmp"))
            os.replace(part.with_suffix(".tmp"), part)
            self.state["parts"] += 1

    def _write_errors(self, errors: list[tuple[int, str]]) -> None:
        for line, why in errors:
            self.err_fh.write((json.dumps({"line": line, "error": why}, ensure_ascii=False) + "\n").encode("utf-8"))
            if self.shown < MAX_ERRORS_SHOWN:
                print(f"{self.input_path}:{line}: skipped: {why}", file=sys.stderr)
                self.shown += 1
                if self.shown == MAX_ERRORS_SHOWN:
                    print(f"(further skipped rows only in {self.errors_path})", file=sys.stderr)

    def _commit(self, chunk: Chunk, scored: int, bad: int) -> None:
        """The chunk's bytes on disk, then the record that counts them (a kill between the two
        leaves bytes past the recorded length, which the next run cuts off)."""
        if self.out_fh is not None:
            _fsync(self.out_fh)
            self.state["output_bytes"] = self.out_fh.tell()
        _fsync(self.err_fh)
        self.state["errors_bytes"] = self.err_fh.tell()
        self.state["rows_read"] += chunk.consumed
        self.state["scored"] += scored
        self.state["bad"] += bad
        self.progress.save()
        if self.bar is not None:
            self.bar.update(chunk.consumed)

    def finish(self, task: Task, labels: list[str]) -> None:
        """The output made whole: Parquet's parts joined; an output that no row reached gets
        the columns (CSV: the header) of one that did all the same."""
        import pyarrow as pa

        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            schema = pq.ParquetFile(self.input_path).schema_arrow
            _join_parts(self.parts_dir, self.output, self.state["parts"],
                        pa.schema(list(schema) + answer_fields(task, labels, self.prefix)))
        elif self.fmt == "csv" and self.state["output_bytes"] == 0:
            import pyarrow.csv as pacsv

            columns = input_column_names(self.input_path, "csv") + expected_answer_columns(task, labels, self.prefix,
                                                                                            flat=True)
            empty = pa.Table.from_arrays([pa.array([], pa.string()) for _ in columns], names=columns)
            pacsv.write_csv(empty, self.out_fh)
            _fsync(self.out_fh)
            self.state["output_bytes"] = self.out_fh.tell()
        self.state["done"] = True
        self.progress.save()

    def close(self) -> None:
        if self.csv_writer is not None:
            self.csv_writer.close()
        if self.out_fh is not None:
            self.out_fh.close()
        self.err_fh.close()


async def score_chunks(engine: Any, chunks: Iterator[Chunk], writer: ChunkWriter, batch_size: int) -> None:
    """Each chunk scored while the next CHUNKS_AHEAD are queued on the engine. Reading, checking
    and writing run in a worker thread, one at a time: on the event loop they held up the
    engine's batching (writing a chunk is tens of milliseconds with its fsync)."""
    ahead: list[tuple[Chunk, asyncio.Future]] = []
    try:
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            good = [x for x in chunk.inputs if x is not None]
            ahead.append((chunk, asyncio.ensure_future(score_inputs(engine, good, batch_size))))
            while len(ahead) > CHUNKS_AHEAD:
                done_chunk, fut = ahead.pop(0)
                await asyncio.to_thread(writer.write, done_chunk, await fut)
        while ahead:
            done_chunk, fut = ahead.pop(0)
            await asyncio.to_thread(writer.write, done_chunk, await fut)
    finally:
        for _, fut in ahead:
            fut.cancel()


async def _score_file(input_path: Path, output: Path, bundle: Path, *, columns: dict[str, str], batch_size: int,
                      chunk_rows: int, threads: int | None, prefix: str, overwrite: bool, progress_bar: bool,
                      device: str, max_row_bytes: int) -> Summary:
    import time

    from core.bundle import load_bundle
    from service.inference.engine import Engine
    from service.metrics import Metrics
    from service.settings import available_cpus

    fmt = file_format(input_path)
    if file_format(output) != fmt:
        raise ScoringError(f"{output}: the output has the input's format ({fmt}); name it with the input's suffix")
    if not input_path.is_file():
        raise ScoringError(f"{input_path}: no such file")
    check_not_input(input_path, output)
    config = load_bundle(bundle).config
    task = TASKS[config.task]
    mapping = checked_arguments(input_path, output, fmt, task, config.labels, columns, prefix)
    limits = Settings()  # the HTTP service's own limits for one input
    identity = {"input": str(input_path.resolve()), "model": bundle.name, "version": config.version,
                "columns": mapping, "prefix": prefix, "format": fmt, "max_row_bytes": max_row_bytes,
                "max_text_chars": limits.max_text_chars, "max_request_chars": limits.max_request_chars}
    progress = resumed_progress(input_path, output, identity, overwrite)
    state = progress.state
    errors_path = side_paths(output)[1]
    if state["done"]:
        print(f"{output}: complete already ({state['scored']} rows scored, {state['bad']} skipped); pass "
              "--overwrite to score it again", file=sys.stderr)
        return Summary(state["scored"], state["bad"], state["rows_read"], state["rows_read"], 0.0, output,
                       errors_path if state["bad"] else None)

    runtime, settings = load_engine_parts(bundle, threads or available_cpus(), batch_size, device)
    check = RowChecker(task, mapping, limits, config.max_evidence if task.list_field else None)
    engine = Engine(runtime, settings, Metrics())
    engine.start()
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=count_rows(input_path, fmt), initial=state["rows_read"], unit="rows",
                   desc=f"score {bundle.name}", dynamic_ncols=True, smoothing=0.1)
    resumed_from = state["rows_read"]
    t0 = time.perf_counter()
    writer = None
    try:
        writer = ChunkWriter(input_path, output, fmt, prefix, progress, bar)
        chunks = open_reader(fmt, input_path, state["rows_read"], chunk_rows, check, max_row_bytes)
        await score_chunks(engine, chunks, writer, batch_size)
        writer.finish(task, config.labels)
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
        await engine.drain(5.0)
    seconds = time.perf_counter() - t0
    if state["bad"] == 0:
        errors_path.unlink(missing_ok=True)
    return Summary(state["scored"], state["bad"], state["rows_read"], resumed_from, seconds, output,
                   errors_path if state["bad"] else None)


def expected_answer_columns(task: Task, labels: list[str], prefix: str, flat: bool) -> list[str]:
    """The answer's keys (`flat`: its columns, scoring.files.flat_answer) for a model's task."""
    keys = (["label", "scores"] if task.labelled else []) + ["model", "truncated", "unknown_token_share"]
    keys += [task.per_text] if task.per_text else []
    out = []
    for key in keys:
        if flat and key == "scores" and task.labelled:
            out += [f"{prefix}scores.{label}" for label in labels]
        else:
            out.append(prefix + key)
    return out


def _first_object_keys(path: Path) -> set[str]:
    with open(path, "rb") as fh:
        for raw in read_lines(fh, MAX_ROW_BYTES):
            if isinstance(raw, bytes):
                raw = raw.removeprefix(codecs.BOM_UTF8)
                if not raw.strip():
                    continue
            obj, _ = json_object(raw, MAX_ROW_BYTES)
            return set(obj) if obj is not None else set()
    return set()


def _collisions(chunk: Chunk, fmt: str, answer: dict, prefix: str) -> list[str]:
    if fmt == "jsonl":
        taken = set().union(*(obj.keys() for obj in chunk.payload if isinstance(obj, dict)))
        return sorted(prefix + key for key in answer if prefix + key in taken)
    taken = set(chunk.payload.schema.names)
    return sorted(name for name in flat_answer(answer, prefix) if name in taken)


def answer_fields(task: Task, labels: list[str], prefix: str) -> list[Any]:
    """The answer's Parquet columns with the types answer_columns gives them, for an output
    that no row reached (a reranker's `scores` and `evidence_scores` are lists)."""
    import pyarrow as pa

    types = {"label": pa.string(), "model": pa.string(), "truncated": pa.bool_(), "unknown_token_share": pa.float64()}
    fields = []
    for name in expected_answer_columns(task, labels, prefix, flat=True):
        key = name[len(prefix):]
        fields.append(pa.field(name, types.get(key, pa.float64() if key.startswith("scores.") else
                                               pa.list_(pa.float64()))))
    return fields


def _join_parts(parts_dir: Path, output: Path, count: int, empty_schema: Any) -> None:
    """The part files, in order, as one Parquet file (row group by row group: never all in
    memory); no part: a file of no rows with `empty_schema`."""
    import pyarrow.parquet as pq

    tmp = output.with_name(output.name + ".tmp")
    writer = None
    try:
        for i in range(count):
            part = pq.ParquetFile(parts_dir / f"part-{i:06d}.parquet")
            for g in range(part.num_row_groups):
                table = part.read_row_group(g)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
        if writer is None:  # no row scored
            pq.write_table(empty_schema.empty_table(), tmp)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, output)
    for i in range(count):
        (parts_dir / f"part-{i:06d}.parquet").unlink()
    parts_dir.rmdir()
