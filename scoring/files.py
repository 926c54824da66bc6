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

Reading is in chunks (pyarrow's streaming CSV reader and Parquet row batches; JSONL line by
line, which keeps each object as it was and the line numbers exact), so the file never has to
fit in memory. A row that cannot be scored (a missing or empty field, a text over the
service's limits, a malformed CSV line, a line that is not JSON) is reported with its line
number on stderr and in OUTPUT.errors.jsonl, and skipped; the run goes on.

Resuming: after each chunk the output (and the errors file) is flushed and fsynced, then
OUTPUT.progress.json records how many input rows are consumed and how many output bytes are
good; it is replaced atomically. A run killed anywhere leaves at most a chunk's rows past the
recorded length: the next run with the same arguments cuts the output back to that length and
reads on from the recorded row, so each row is written exactly once. Parquet cannot be
appended to, so its chunks go to numbered part files (OUTPUT.parts/) renamed into place when
whole, and are joined into OUTPUT at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator, Sequence

from core.tasks import TASKS, Task
from service.errors import InvalidInput, ServiceError
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
    consumed: int  # input rows (JSONL: lines) this chunk takes past the previous one
    extra_errors: list[tuple[int, str]] = field(default_factory=list)  # rows the reader dropped (malformed CSV)


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
                if isinstance(value, str):  # a CSV cell: the list as JSON text
                    try:
                        value = json.loads(value)
                    except ValueError:
                        return f"{column}: not a JSON list of texts"
                if not isinstance(value, (list, tuple)) or not value or not all(isinstance(t, str) for t in value):
                    return f"{column}: expected a non-empty list of texts"
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


# --- readers ---------------------------------------------------------------------------------

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


def read_jsonl(path: Path, skip_lines: int, chunk_rows: int, check: RowChecker) -> Iterator[Chunk]:
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        line_no = 0
        for _ in range(skip_lines):
            if not fh.readline():
                return
            line_no += 1
        while True:
            lines, inputs, errors, objects = [], [], {}, []
            consumed = 0
            for raw in fh:
                line_no += 1
                consumed += 1
                if not raw.strip():
                    continue  # a blank line is no row
                k = len(lines)
                lines.append(line_no)
                try:
                    obj = json.loads(raw)
                except ValueError as exc:
                    obj, why = None, f"not JSON ({exc.msg} at column {exc.colno})"
                else:
                    why = None if isinstance(obj, dict) else "not a JSON object"
                if why is None:
                    x = check(obj.get)
                    why = x if isinstance(x, str) else None
                inputs.append(None if why else x)
                if why:
                    errors[k] = why
                objects.append(obj)
                if len(lines) >= chunk_rows:
                    break
            if consumed == 0:
                return
            yield Chunk(lines, inputs, errors, objects, consumed)


def _checked_batch(batch: Any, first_line: int, check: RowChecker, line_of: Any = None) -> Chunk:
    columns = {name: batch.column(name).to_pylist() for name in set(check.columns.values())
               if name in batch.schema.names}
    lines, inputs, errors = [], [], {}
    for k in range(batch.num_rows):
        lines.append(line_of(k) if line_of is not None else first_line + k)
        x = check(lambda column, k=k: columns[column][k] if column in columns else None)
        if isinstance(x, str):
            inputs.append(None)
            errors[k] = x
        else:
            inputs.append(x)
    return Chunk(lines, inputs, errors, batch, batch.num_rows)


def read_parquet(path: Path, skip_rows: int, chunk_rows: int, check: RowChecker) -> Iterator[Chunk]:
    import pyarrow.parquet as pq

    for seen, batch in _after(pq.ParquetFile(path).iter_batches(batch_size=chunk_rows), skip_rows):
        yield _checked_batch(batch, seen + 1, check)


def read_csv(path: Path, skip_rows: int, chunk_rows: int, check: RowChecker, reported_through: int) -> Iterator[Chunk]:
    """Every column as text. A line with the wrong number of fields is dropped by the reader and
    reported by its line number (`reported_through`: the last line a previous run reported)."""
    import csv

    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, encoding="utf-8-sig", newline="") as fh:
        header = next(csv.reader(fh), None)
    if not header:
        raise ScoringError(f"{path}: no header row")
    dropped: list[tuple[int, str]] = []

    def on_invalid(row: Any) -> str:
        if row.number is None or row.number > reported_through:
            dropped.append((row.number or 0, f"{row.actual_columns} fields, the header has {row.expected_columns}"))
        return "skip"

    reader = pacsv.open_csv(
        path, read_options=pacsv.ReadOptions(block_size=1 << 22, use_threads=False),
        parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid, newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types={name: pa.string() for name in header},
                                             strings_can_be_null=False, quoted_strings_can_be_null=False))
    dropped_before: list[int] = []  # line numbers of the dropped lines, ascending

    def line_of(row_index: int) -> int:
        """A read row's line: the header, the rows before it, and the dropped lines before it
        (a quoted newline inside a value makes the real line later)."""
        line = row_index + 2
        for n in dropped_before:
            if n <= line:
                line += 1
        return line

    for seen, batch in _after(_batches(reader), skip_rows):  # seen: rows the reader gave before it
        for start in range(0, batch.num_rows, chunk_rows):
            part = batch.slice(start, chunk_rows)
            # the reader parses ahead: a dropped line is reported with the chunk its line falls in,
            # so a resumed run (which skips the lines through the last committed chunk) reports it once
            dropped_before[:] = sorted(set(dropped_before) | {n for n, _ in dropped})
            base = seen + start
            chunk = _checked_batch(part, 0, check, line_of=lambda k, base=base: line_of(base + k))
            last = chunk.lines[-1] if chunk.lines else 0
            chunk.extra_errors = [(n, why) for n, why in dropped if n <= last]
            dropped[:] = [(n, why) for n, why in dropped if n > last]
            yield chunk
    if dropped:  # dropped lines after the last row
        empty = Chunk([], [], {}, None, 0, extra_errors=list(dropped))
        yield empty


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


def _batches(reader: Any) -> Iterator[Any]:
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return


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
    from service.inference.runtime import CPU, ModelRuntime, requested_providers

    settings = engine_settings(bundle.parent, batch_size, threads)
    providers = [CPU] if device == "cpu" else requested_providers(device)
    runtime = ModelRuntime.load(bundle, providers, threads, settings.cuda_provider_options())
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


# --- writers ----------------------------------------------------------------------------------

class Progress:
    """OUTPUT.progress.json: what a resumed run needs, replaced atomically after each chunk."""

    def __init__(self, path: Path, identity: dict) -> None:
        self.path, self.identity = path, identity
        self.state = {"rows_read": 0, "output_bytes": 0, "errors_bytes": 0, "parts": 0, "scored": 0, "bad": 0,
                      "last_line": 0, "done": False}

    def load(self) -> bool:
        if not self.path.exists():
            return False
        saved = json.loads(self.path.read_text(encoding="utf-8"))
        if saved.get("identity") != self.identity:
            raise ScoringError(f"{self.path} records another run ({saved.get('identity')}); pass --overwrite to "
                               "start over")
        self.state.update(saved["state"])
        return True

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"identity": self.identity, "state": self.state}), encoding="utf-8")
        os.replace(tmp, self.path)


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


def score_file(input_path: Path, output: Path, bundle: Path, *, columns: dict[str, str] | None = None,
               batch_size: int = DEFAULT_BATCH_SIZE, chunk_rows: int = DEFAULT_CHUNK_ROWS, threads: int | None = None,
               prefix: str = "", overwrite: bool = False, progress_bar: bool = True, device: str = "cpu") -> Summary:
    """Score `input_path` with the bundle at `bundle` into `output` (see the module's docstring)."""
    return asyncio.run(_score_file(input_path, output, bundle, columns=columns or {}, batch_size=batch_size,
                                   chunk_rows=chunk_rows, threads=threads, prefix=prefix, overwrite=overwrite,
                                   progress_bar=progress_bar, device=device))


def task_columns(task: Task, columns: dict[str, str]) -> dict[str, str]:
    unknown = set(columns) - set(task.field_names)
    if unknown:
        raise ScoringError(f"--columns names {sorted(unknown)}, not fields of {task.name} (its fields: "
                           f"{', '.join(task.field_names)})")
    return {name: columns.get(name, name) for name in task.field_names}


def input_column_names(path: Path, fmt: str) -> list[str] | None:
    """The input's column names where the file declares them (CSV header, Parquet schema)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    if fmt == "csv":
        import csv

        with open(path, encoding="utf-8-sig", newline="") as fh:
            return next(csv.reader(fh), [])
    return None


async def _score_file(input_path: Path, output: Path, bundle: Path, *, columns: dict[str, str], batch_size: int,
                      chunk_rows: int, threads: int | None, prefix: str, overwrite: bool, progress_bar: bool,
                      device: str) -> Summary:
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
    if output.resolve() == input_path.resolve():
        raise ScoringError("the output would overwrite the input")
    config = load_bundle(bundle).config
    task = TASKS[config.task]
    mapping = task_columns(task, columns)
    names = input_column_names(input_path, fmt)
    if names is not None:
        missing = [c for c in mapping.values() if c not in names]
        if missing:
            raise ScoringError(f"{input_path}: no column {missing} (columns: {names}); map the task's fields with "
                               f"--columns {','.join(f'{f}=COLUMN' for f in task.field_names)}")
    taken = set(names) if names is not None else _first_object_keys(input_path)
    collide = sorted(name for name in expected_answer_columns(task, config.labels, prefix, flat=fmt != "jsonl")
                     if name in taken)
    if collide:
        raise ScoringError(f"the answer's {collide} would overwrite input columns of the same name; pass --prefix "
                           "(e.g. --prefix pred_)")
    progress_path, errors_path, parts_dir = side_paths(output)
    identity = {"input": str(input_path.resolve()), "model": bundle.name, "version": config.version,
                "columns": mapping, "prefix": prefix, "format": fmt}
    progress = Progress(progress_path, identity)
    if overwrite:
        for path in (output, progress_path, errors_path):
            path.unlink(missing_ok=True)
        if parts_dir.exists():
            for part in parts_dir.iterdir():
                part.unlink()
            parts_dir.rmdir()
    resumed = progress.load()
    if not resumed and (output.exists() or parts_dir.exists()):
        raise ScoringError(f"{output} exists and records no unfinished run ({progress_path.name}); pass --overwrite "
                           "to replace it")
    state = progress.state
    if state["done"]:
        print(f"{output}: complete already ({state['scored']} rows scored, {state['bad']} skipped)", file=sys.stderr)
        return Summary(state["scored"], state["bad"], state["rows_read"], state["rows_read"], 0.0, output,
                       errors_path if state["bad"] else None)

    threads = threads or available_cpus()
    runtime, settings = load_engine_parts(bundle, threads, batch_size, device)
    limits = Settings()  # the HTTP service's own limits for one input
    check = RowChecker(task, mapping, limits, config.max_evidence if task.list_field else None)
    engine = Engine(runtime, settings, Metrics())
    engine.start()

    # the files, cut back to what the last run committed
    if fmt == "parquet":
        parts_dir.mkdir(exist_ok=True)
        for part in parts_dir.iterdir():
            if part.suffix != ".parquet" or int(part.stem.split("-")[1]) >= state["parts"]:
                part.unlink()  # a part being written when the run stopped
        output.unlink(missing_ok=True)  # a join that did not finish
    else:
        with open(output, "ab") as fh:
            fh.truncate(state["output_bytes"])
    with open(errors_path, "ab") as fh:
        fh.truncate(state["errors_bytes"])

    if fmt == "jsonl":
        chunks = read_jsonl(input_path, state["rows_read"], chunk_rows, check)
    elif fmt == "csv":
        chunks = read_csv(input_path, state["rows_read"], chunk_rows, check, state["last_line"])
    else:
        chunks = read_parquet(input_path, state["rows_read"], chunk_rows, check)

    total = count_rows(input_path, fmt)
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=state["rows_read"], unit="rows",
                   desc=f"score {bundle.name}", dynamic_ncols=True, smoothing=0.1)
    shown = 0
    resumed_from = state["rows_read"]
    t0 = time.perf_counter()
    csv_writer = None
    out_fh = open(output, "ab") if fmt != "parquet" else None
    err_fh = open(errors_path, "ab")
    try:
        ahead: list[tuple[Chunk, asyncio.Task]] = []

        def write(chunk: Chunk, answers: list[dict | str]) -> None:
            nonlocal csv_writer, shown
            errors = list(chunk.extra_errors)
            good_rows, good_answers = [], []
            it = iter(answers)
            for k, x in enumerate(chunk.inputs):
                if x is None:
                    errors.append((chunk.lines[k], chunk.errors[k]))
                    continue
                answer = next(it)
                if isinstance(answer, str):
                    errors.append((chunk.lines[k], answer))
                else:
                    good_rows.append(k)
                    good_answers.append(answer)
            if good_rows:
                collide = _collisions(chunk, fmt, good_answers[0], prefix)
                if collide:
                    raise ScoringError(f"the answer's {collide} would overwrite input columns of the same name; "
                                       "pass --prefix (e.g. --prefix pred_)")
            if fmt == "jsonl":
                lines = []
                for k, answer in zip(good_rows, good_answers):
                    obj = dict(chunk.payload[k])
                    obj.update({prefix + key: value for key, value in answer.items()})
                    lines.append(json.dumps(obj, ensure_ascii=False))
                if lines:
                    out_fh.write(("\n".join(lines) + "\n").encode("utf-8"))
            elif good_rows:
                import pyarrow as pa

                table = pa.Table.from_batches([chunk.payload]).take(pa.array(good_rows, pa.int64()))
                for name, array in answer_columns(good_answers, prefix, fmt == "csv").items():
                    table = table.append_column(name, array)
                if fmt == "csv":
                    import pyarrow.csv as pacsv

                    if csv_writer is None:
                        csv_writer = pacsv.CSVWriter(out_fh, table.schema,
                                                     write_options=pacsv.WriteOptions(include_header=state["output_bytes"] == 0))
                    csv_writer.write_table(table)
                else:
                    import pyarrow.parquet as pq

                    part = parts_dir / f"part-{state['parts']:06d}.parquet"
                    pq.write_table(table, part.with_suffix(".tmp"))
                    os.replace(part.with_suffix(".tmp"), part)
                    state["parts"] += 1
            errors.sort()
            for line, why in errors:
                err_fh.write((json.dumps({"line": line, "error": why}, ensure_ascii=False) + "\n").encode("utf-8"))
                if shown < MAX_ERRORS_SHOWN:
                    print(f"{input_path}:{line}: skipped: {why}", file=sys.stderr)
                    shown += 1
                    if shown == MAX_ERRORS_SHOWN:
                        print(f"(further skipped rows only in {errors_path})", file=sys.stderr)
            if out_fh is not None:
                _fsync(out_fh)
                state["output_bytes"] = out_fh.tell()
            _fsync(err_fh)
            state["errors_bytes"] = err_fh.tell()
            state["rows_read"] += chunk.consumed
            state["scored"] += len(good_rows)
            state["bad"] += len(errors)
            if chunk.lines:
                state["last_line"] = max(state["last_line"], chunk.lines[-1])
            progress.save()
            if bar is not None:
                bar.update(chunk.consumed)

        # Reading, checking and writing run in a worker thread, one at a time: on the event loop
        # they held up the engine's batching (writing a chunk is tens of milliseconds with its fsync)
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            good = [x for x in chunk.inputs if x is not None]
            ahead.append((chunk, asyncio.ensure_future(score_inputs(engine, good, batch_size))))
            while len(ahead) > CHUNKS_AHEAD:
                done_chunk, fut = ahead.pop(0)
                await asyncio.to_thread(write, done_chunk, await fut)
        while ahead:
            done_chunk, fut = ahead.pop(0)
            await asyncio.to_thread(write, done_chunk, await fut)
        if fmt == "parquet":
            _join_parts(parts_dir, output, state["parts"])
        state["done"] = True
        progress.save()
    finally:
        for _, fut in locals().get("ahead", []):
            fut.cancel()
        if bar is not None:
            bar.close()
        if csv_writer is not None:
            csv_writer.close()
        if out_fh is not None:
            out_fh.close()
        err_fh.close()
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
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    return set()
                return set(obj) if isinstance(obj, dict) else set()
    return set()


def _collisions(chunk: Chunk, fmt: str, answer: dict, prefix: str) -> list[str]:
    if fmt == "jsonl":
        taken = set().union(*(obj.keys() for obj in chunk.payload if isinstance(obj, dict)))
        return sorted(prefix + key for key in answer if prefix + key in taken)
    taken = set(chunk.payload.schema.names)
    return sorted(name for name in flat_answer(answer, prefix) if name in taken)


def _join_parts(parts_dir: Path, output: Path, count: int) -> None:
    """The part files, in order, as one Parquet file (row group by row group: never all in memory)."""
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
            import pyarrow as pa

            pq.write_table(pa.table({}), tmp)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, output)
    for i in range(count):
        (parts_dir / f"part-{i:06d}.parquet").unlink()
    parts_dir.rmdir()
