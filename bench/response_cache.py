"""The response cache's three paths (issue 54), as one interleaved bench.ab run of one tree:

- `nocache`: the cache off, single-input /entailment bodies (2,000 SNLI test pairs, cycled);
- `miss`: the same bodies with a cache too small to hold a cycle (64 KiB, ~100 answers, against
  2,000 distinct requests in a row): every request looks up, misses, runs, stores and evicts
  one answer: the cost of a cache when nothing repeats;
- `hit`: the same bodies with a cache that holds them all (64 MiB): after the warm-up's first
  cycle every request is answered from it;
- `mix`: every other request one of 50 hot pairs, the others the 2,000 cold ones, with a cache
  of 256 KiB (~400 answers: the hot 50 stay, a cold pair is gone before it comes back): half
  the requests hit.

wrk (one thread, bench/wrk.lua) sends a body file's lines in order, cycling, so which requests
hit is fixed by the file and the cache's size; `expected_hit_share` replays each arm's
sequence through service.http.cache.ResponseCache with the answers' real sizes to say it (answers
only: on the hot path a miss also stores its raw body's entry, about doubling what an answer
costs; the hot 50 still stay in 256 KiB, and 64 KiB still holds no cycle).

    python -m bench.response_cache --out bench-results/cache-54/ab.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from bench.workloads import request_input, test_examples

HOT = 50
SIZES = {"miss": 64 << 10, "hit": 64 << 20, "mix": 256 << 10}

app = typer.Typer(add_completion=False)


def write_files(directory: Path, examples: int) -> dict[str, Path]:
    """single.jsonl (the cold pairs) and mix.jsonl (a hot pair, a cold pair, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    inputs = [request_input(e) for e in test_examples("snli", 5, examples + HOT)]
    hot, cold = inputs[:HOT], inputs[HOT:]
    single = [json.dumps(x, ensure_ascii=False) for x in cold]
    mix = [line for i, c in enumerate(single) for line in (json.dumps(hot[i % HOT], ensure_ascii=False), c)]
    files = {"single": directory / "single.jsonl", "mix": directory / "mix.jsonl"}
    files["single"].write_text("\n".join(single) + "\n", encoding="utf-8")
    files["mix"].write_text("\n".join(mix) + "\n", encoding="utf-8")
    return files


def expected_hit_share(lines: list[str], max_bytes: int, answer_bytes: int = 190, cycles: int = 5) -> float:
    """The share of hits after the first cycle of `lines` through a ResponseCache of `max_bytes`
    (keys as the service makes them from these bodies; answers of `answer_bytes`, the size of a
    single-pair SNLI answer)."""
    from pydantic import TypeAdapter

    from service.http.cache import ResponseCache
    from service.metrics import Metrics
    from service.inference.registry import ModelEntry
    from service.http.schemas import TASK_SCHEMAS

    cache = ResponseCache(max_bytes, Metrics())
    entry = ModelEntry("snli-attconv-light", Path("."), load_id=1)
    parse = TypeAdapter(TASK_SCHEMAS["entailment"].body).validate_json
    keys = [ResponseCache.key(entry, "entailment", parse(line)) for line in lines]
    hits = total = 0
    for cycle in range(cycles):
        for key in keys:
            found = cache.get(key) is not None
            if cycle:
                hits, total = hits + found, total + 1
            if not found:
                cache.put(key, b"x" * answer_bytes, {})
    return hits / total


@app.command()
def main(
    out: Annotated[Path, typer.Option(help="the bench.ab report (JSON)")] = Path("bench-results/cache-54/ab.json"),
    repeats: Annotated[int, typer.Option()] = 5,
    duration: Annotated[int, typer.Option(help="seconds per run")] = 10,
    concurrency: Annotated[int, typer.Option()] = 32,
    examples: Annotated[int, typer.Option()] = 2000,
    warmup: Annotated[int, typer.Option(help="seconds of load before each run: enough for one cycle of the bodies, "
                                              "so the hit arm's cache is full")] = 4,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    files = write_files(work, examples)
    lines = {name: path.read_text(encoding="utf-8").splitlines() for name, path in files.items()}
    shares = {"miss": expected_hit_share(lines["single"], SIZES["miss"]),
              "hit": expected_hit_share(lines["single"], SIZES["hit"]),
              "mix": expected_hit_share(lines["mix"], SIZES["mix"])}
    typer.echo(f"expected hit shares after the first cycle: {shares}", err=True)
    argv = [sys.executable, "-m", "bench.ab", "--model", "snli-attconv-light", "--dataset", "snli",
            "--repeats", str(repeats), "--duration", str(duration), "--concurrency", str(concurrency),
            "--warmup", str(warmup),
            "--out", str(out),
            "--arm", "nocache=.:single", "--arm", f"miss=.:{files['single']}", "--arm", f"hit=.:{files['single']}",
            "--arm", f"mix=.:{files['mix']}"]
    for arm in ("miss", "hit", "mix"):
        argv += ["--arm-env", f"{arm}=ATTSERVE_RESPONSE_CACHE_BYTES={SIZES[arm]}"]
    subprocess.run(argv, check=True)
    report = json.loads(out.read_text())
    report["expected_hit_shares"] = shares
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    app()
