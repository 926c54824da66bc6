"""`attserve score --ray ADDRESS`: the bulk scoring of scoring.files on a Ray cluster, for a
file or a set of files too large for one machine. Needs the `ray` extra (ray[data]).

    read (ray.data.read_json / read_csv / read_parquet)
      -> map_batches(ScorePredictor, concurrency=N actors, num_cpus=C each, batch_format="pyarrow")
      -> write (write_json / write_csv / write_parquet: OUTPUT is a folder of files)

Each actor holds ONE onnxruntime session (service.inference.runtime.ModelRuntime with C intra-op threads)
behind the service's own engine (service.inference.engine.Engine, on the actor's private event loop), and
scores its blocks with scoring.files.score_inputs and scoring.files.RowChecker: the same
checks, the same engine and the same answer columns as the local path, so the rows it writes
equal `attserve score`'s (tests/service/test_scoring_ray.py, on 10,000 rows). Row order is kept
(`preserve_order`). A row that cannot be scored is dropped with a warning (its reason) in the actor's log; Ray's blocks carry no
line numbers, so the local path is the one that names them (run it on the rows Ray dropped).
What it does not do: resume (Ray Data rewrites the whole output; split the input instead).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from core.tasks import TASKS
from scoring.files import (DEFAULT_BATCH_SIZE, RowChecker, ScoringError, answer_columns, count_rows,
                             expected_answer_columns, file_format, input_column_names, score_inputs, task_columns)
from service.settings import Settings

log = logging.getLogger("scoring.on_ray")
# rows per block handed to an actor: big enough that the engine's batches stay full
RAY_BLOCK_ROWS = 2048
IO_TASK_CPUS = 0.1


class ScorePredictor:
    """One Ray actor: a session and an engine, scoring a pyarrow block at a time."""

    def __init__(self, bundle: str, columns: dict[str, str], batch_size: int, threads: int, prefix: str,
                 fmt: str) -> None:
        from core.bundle import load_bundle
        from service.inference.engine import Engine
        from service.metrics import Metrics
        from scoring.files import load_engine_parts

        config = load_bundle(bundle).config
        self.task = TASKS[config.task]
        self.check = RowChecker(self.task, columns, Settings(), config.max_evidence if self.task.list_field else None)
        self.batch_size, self.prefix, self.fmt = batch_size, prefix, fmt
        runtime, settings = load_engine_parts(Path(bundle), threads, batch_size)
        self.loop = asyncio.new_event_loop()

        async def start() -> Engine:
            engine = Engine(runtime, settings, Metrics())
            engine.start()
            return engine

        self.engine = self.loop.run_until_complete(start())

    def __call__(self, block: Any) -> Any:
        import pyarrow as pa

        columns = {name: block.column(name).to_pylist() for name in set(self.check.columns.values())
                   if name in block.schema.names}
        inputs, rows = [], []
        for k in range(block.num_rows):
            x = self.check(lambda column, k=k: columns[column][k] if column in columns else None)
            if isinstance(x, str):
                log.warning("row dropped: %s", x)
            else:
                inputs.append(x)
                rows.append(k)
        answers = self.loop.run_until_complete(score_inputs(self.engine, inputs, self.batch_size))
        good = [(k, a) for k, a in zip(rows, answers) if not isinstance(a, str)]
        table = block.take(pa.array([k for k, _ in good], pa.int64()))
        if self.fmt == "jsonl":  # nested, as the local JSONL output (an object is a struct column)
            for key in (good[0][1] if good else {}):
                table = table.append_column(self.prefix + key, pa.array([a[key] for _, a in good]))
        else:
            for name, array in answer_columns([a for _, a in good], self.prefix, self.fmt == "csv").items():
                table = table.append_column(name, array)
        return table


def score_with_ray(input_path: Path, output: Path, bundle: Path, *, address: str, actors: int = 1,
                   actor_cpus: float = 1.0, columns: dict[str, str] | None = None,
                   batch_size: int = DEFAULT_BATCH_SIZE, prefix: str = "", overwrite: bool = False,
                   block_rows: int = RAY_BLOCK_ROWS) -> dict:
    """Score `input_path` into the folder `output` on the Ray cluster at `address` ("local": one
    started in this process with the machine's CPUs). Returns rows, seconds, rows per second."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import ray

    from core.bundle import load_bundle

    fmt = file_format(input_path)
    config = load_bundle(bundle).config
    task = TASKS[config.task]
    mapping = task_columns(task, columns or {})
    names = input_column_names(input_path, fmt)
    if names is not None:
        taken = set(names)
        collide = sorted(n for n in expected_answer_columns(task, config.labels, prefix, flat=fmt != "jsonl")
                         if n in taken)
        if collide:
            raise ScoringError(f"the answer's {collide} would overwrite input columns of the same name; pass --prefix")
    if output.exists():
        if not overwrite:
            raise ScoringError(f"{output} exists; pass --overwrite to replace it")
        shutil.rmtree(output) if output.is_dir() else output.unlink()
    if not ray.is_initialized():
        # a local cluster: the machine's CPUs for the actors, plus one logical CPU for the read and
        # write tasks (N one-CPU actors on N CPUs left them none: the pipeline waited forever)
        ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **({"num_cpus": (os.cpu_count() or 1) + 1} if address == "local" else {}))
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    path = str(input_path.resolve())
    # Reading and writing are light I/O tasks: a sliver of a CPU each, so that N actors of one CPU
    # on an N-CPU machine leave them room (at 1 CPU each, 2 actors on 2 CPUs hung the pipeline)
    io = {"num_cpus": IO_TASK_CPUS}
    if fmt == "parquet":
        dataset = ray.data.read_parquet(path, **io)
    elif fmt == "csv":
        dataset = ray.data.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names or []}, strings_can_be_null=False), **io)
    else:
        dataset = ray.data.read_json(path, lines=True, **io)
    # An actor scores whole blocks, and a file is read as few blocks (one Parquet row group, one
    # JSON file: one block), which would leave all but one actor idle: split it (no shuffle, the
    # order is kept) into blocks of about block_rows rows
    rows = count_rows(input_path, fmt) or 0
    dataset = dataset.repartition(max(actors, math.ceil(rows / block_rows)), shuffle=False)
    threads = max(1, int(actor_cpus))
    scored = dataset.map_batches(
        ScorePredictor, batch_format="pyarrow", batch_size=block_rows, num_cpus=actor_cpus,
        compute=ray.data.ActorPoolStrategy(size=actors),
        fn_constructor_kwargs={"bundle": str(bundle.resolve()), "columns": mapping, "batch_size": batch_size,
                               "threads": threads, "prefix": prefix, "fmt": fmt})
    t0 = time.perf_counter()
    target = str(output.resolve())
    sink = {"ray_remote_args": {"num_cpus": IO_TASK_CPUS}}  # the writers take no named num_cpus
    if fmt == "parquet":
        scored.write_parquet(target, **sink)
    elif fmt == "csv":
        scored.write_csv(target, **sink)
    else:
        scored.write_datasink(_json_lines_sink(target), ray_remote_args={"num_cpus": IO_TASK_CPUS})
    seconds = time.perf_counter() - t0
    written = sum(_rows_in(p, fmt) for p in sorted(Path(target).iterdir()) if p.is_file())
    return {"output": target, "rows": written, "actors": actors, "actor_cpus": actor_cpus,
            "seconds": round(seconds, 3), "rows_per_s": round(written / seconds, 1) if seconds else None}


def _json_lines_sink(path: str) -> Any:
    """JSON lines written by json.dumps, as the local path writes them: Ray's write_json goes
    through pandas, which prints floats to 10 significant digits (0.0184663081 for
    0.018466308057...), so its answers would not equal the local path's."""
    import json

    from ray.data.datasource import BlockBasedFileDatasink

    class JSONLinesDatasink(BlockBasedFileDatasink):
        def write_block_to_file(self, block: Any, file: Any) -> None:
            rows = block.to_arrow().to_pylist()
            file.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8"))

    return JSONLinesDatasink(path, file_format="jsonl")


def _rows_in(path: Path, fmt: str) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with open(path, "rb") as fh:
        lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 22), b""))
    return lines - (fmt == "csv")
