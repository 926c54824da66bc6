"""Results -> a Markdown report and PNG plots (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _run_rows(label: str, runs: list[dict] | None) -> list[str]:
    rows = []
    for run in runs or []:
        split = run.get("server_split") or {}
        lat = run["latency_ms"]
        rows.append("| " + " | ".join([
            label, run["loop"], _fmt(run.get("target_rate") or run["concurrency"]),
            _fmt(run["requests_per_s"]), _fmt(run["items_per_s"]), _fmt(lat["p50"], 2), _fmt(lat["p95"], 2),
            _fmt(lat["p99"], 2), _fmt(run["errors"]["total"]),
            _fmt(split.get("mean_batch_size"), 1) if split else "-",
            _fmt(split.get("queue_wait_ms_mean"), 2) if split else "-",
            _fmt(split.get("inference_ms_mean_per_batch"), 2) if split else "-",
        ]) + " |")
    return rows


# What each knob trades; the table under it gives the measured effect (one knob at a time).
KNOB_NOTES = [
    "- `ATTSERVE_MAX_BATCH_SIZE`: the most items one onnxruntime call takes. Larger batches amortise the "
    "per-call cost only when the event loop delivers items faster than the engine runs them (see mean batch).",
    "- `ATTSERVE_MAX_BATCH_DELAY_MS`: how long the oldest item of a bucket may wait for company. It is "
    "added to every answer at low load (c=1 p50 ~ delay + compute) and buys fuller batches only under load.",
    "- `ATTSERVE_INTRA_OP_THREADS`: onnxruntime threads per model. On 2 cores a second thread competes "
    "with the event loop, which is the busier of the two for small models.",
    "- uvicorn workers: each worker is a process with its own model copy and batcher; it buys parallel "
    "Python (HTTP, validation, tokenization) at the price of smaller batches and twice the memory.",
    "- uvloop + httptools vs asyncio + h11: the event loop and HTTP parser under the same app "
    "(`auto` picks uvloop + httptools when installed, as `attserve serve` does).",
    "- JSON library: stdlib `json` vs `orjson` for parsing and rendering, measured on the HTTP floor. "
    "The service parses bodies with the stdlib (FastAPI) and renders answers with the stdlib (Starlette's "
    "JSONResponse), so this says what switching it to orjson would buy; it is not a setting.",
]

RUN_HEADER = [
    "| server | loop | concurrency (or rate/s) | req/s | items/s | p50 ms | p95 ms | p99 ms | errors | "
    "mean batch | queue ms/item | inference ms/batch |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def markdown(r: dict) -> str:
    m, s = r["machine"], r["settings"]
    lines = [
        f"# attserve benchmark ({r['mode']} mode)",
        "",
        f"`{r['command']}` — {r['started_at']} to {r['finished_at']} ({r['wall_s']} s). "
        f"{m['cpu_model']}, {m['cpu_count']} CPUs, {m['memory_gib']} GiB; load average "
        f"{m['load_average_start']} at start, {m['load_average_end']} at end.",
        f"Pinned runs: measured process on CPU {s['cores']['server']}, load generator on CPU "
        f"{s['cores']['loadgen']}, 1 intra-op thread. Closed loop: {s['load_generators']['closed_loop']}, "
        f"{s['duration_s']} s per point; open loop: {s['load_generators']['open_loop']}.",
        f"Service: max_batch_size {s['service']['max_batch_size']}, max_batch_delay_ms "
        f"{s['service']['max_batch_delay_ms']}. Primary workload: `{r['primary_workload']}`.",
        "",
        "## Ratios",
        "",
        "| ratio | value | target | met | definition |",
        "|---|---:|---|---|---|",
    ]
    for name, x in r["ratios"].items():
        met = {True: "yes", False: "**no**", None: "-"}[x["met"]]
        lines.append(f"| {name} | {_fmt(x['value'], 3)} | {x['target'] or '-'} | {met} | {x['definition']} |")
    lines += _engine_sections(r)
    lines += _load_run_section(r)
    lines += _ort_and_act_sections(r)
    lines += _knobs_section(r["knobs"])
    lines += _profile_section(r["profile"])
    return "\n".join(lines) + "\n"


def _engine_sections(r: dict) -> list[str]:
    """The engine ceiling and the engine on the bench's requests, as Markdown lines."""
    s = r["settings"]
    lines = ["", "## Engine ceiling (in-process onnxruntime, items/s)", "",
              "| workload | cores | " + " | ".join(f"batch {b}" for b in s["batch_sizes"]) + " |",
              "|---|---|" + "---:|" * len(s["batch_sizes"])]
    for name, sections in r["engine_ceiling"].items():
        for where in ("pinned", "unpinned"):
            if where in sections:
                cells = [_fmt(sections[where].get(str(b), {}).get("items_per_s")) for b in s["batch_sizes"]]
                lines.append(f"| {name} | {where} | " + " | ".join(cells) + " |")

    concurrencies = s["concurrencies"]
    lines += ["", "## Engine on the bench's requests (in-process Engine.submit, pinned, items/s; mean batch)", "",
              "The service's engine with no HTTP in front: the same request bodies, checks, tokenizing, "
              "batching in arrival order, planned graph calls and rendered answers.", "",
              "| workload | requests | " + " | ".join(f"c={c}" for c in concurrencies) + " |",
              "|---|---|" + "---:|" * len(concurrencies)]
    for name, forms in (r.get("engine_requests") or {}).items():
        for form, runs in (forms or {}).items():
            by = {x["concurrency"]: x for x in runs}
            cells = [f"{_fmt(by[c]['items_per_s'])} ({_fmt(by[c]['mean_batch_size'])})" if c in by else "-"
                     for c in concurrencies]
            lines.append(f"| {name} | {form} | " + " | ".join(cells) + " |")
    return lines


def _load_run_section(r: dict) -> list[str]:
    """Every load run of the service, the HTTP floor, the naive server and the peer."""
    lines = ["", "## Load runs", "", *RUN_HEADER]
    for name, sections in r["service"].items():
        for form in ("single", "batch32"):
            for where, runs in sections[form].items():
                lines += _run_rows(f"service {name} ({form}, {where})", runs)
        lines += _run_rows(f"service {name} (single, open loop)", sections.get("open_loop"))
    lines += _run_rows("HTTP floor", r["http_floor"].get("pinned"))
    lines += _run_rows("naive PyTorch", r["naive"].get("pinned"))
    lines += _run_rows("peer (BentoML)", r["peer"].get("pinned"))
    if r["peer"]["status"] != "ok":
        lines += ["", f"Peer: {r['peer']['status']}: {r['peer']['reason']}"]
    return lines


def _ort_and_act_sections(r: dict) -> list[str]:
    """onnxruntime vs PyTorch eager per batch size, and ACT vs a Transformer at the paper's settings."""
    lines = ["", "## onnxruntime vs PyTorch eager (ms per batch, pinned, 1 thread)", "",
              "| workload | batch | onnxruntime | PyTorch eager | speed-up | max logit diff |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, sizes in r["ort_vs_torch"].items():
        for size, x in (sizes or {}).items():
            lines.append(f"| {name} | {size} | {_fmt(x['onnxruntime']['median_ms'], 3)} | "
                         f"{_fmt(x['torch_eager']['median_ms'], 3)} | {_fmt(x['speedup'], 2)} | {x['max_abs_logit_diff']} |")

    act = r["act_vs_transformer"]
    st = act["settings"]
    lines += ["", f"## ACT vs Transformer (paper settings: d_w 300, 3 layers, 6 heads, batch {st['batch']}, "
                  f"length {st['length']}, PyTorch eager, 1 thread)", "",
              "| network | params (no word emb.) | encoder params | ms per batch |", "|---|---:|---:|---:|"]
    for name in ("act", "transformer"):
        x = act[name]
        lines.append(f"| {name} | {_fmt(x['parameters_without_word_embeddings'])} | {_fmt(x['encoder_parameters'])} | "
                     f"{_fmt(x['median_ms'], 2)} |")
    lines.append(f"\nACT / Transformer parameters {act['params_ratio']} (paper 0.44); speed-up {act['speedup']}x "
                 f"(paper 2.7x).")
    return lines


def _knobs_section(knobs: dict) -> list[str]:
    """The knob sweep: what each knob trades, then its runs (or why it was not measured)."""
    lines = ["", "## Knobs", "", *KNOB_NOTES, ""]
    if knobs["status"] != "ok":
        lines.append(f"Not measured: {knobs['reason']}.")
    else:
        lines += ["| knob | value | concurrency | req/s | p50 ms | p99 ms | mean batch | errors |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for x in knobs["runs"]:
            split = x.get("server_split") or {}
            lines.append(f"| {x['knob']} | {x['value']} | {x['concurrency']} | {_fmt(x['requests_per_s'])} | "
                         f"{_fmt(x['latency_ms']['p50'], 2)} | {_fmt(x['latency_ms']['p99'], 2)} | "
                         f"{_fmt(split.get('mean_batch_size'), 1) if split else '-'} | {x['errors']['total']} |")
        for x in knobs.get("failed", []):
            lines.append(f"\nNot measured: {x['knob']} = {x['value']}: {x['reason'].strip().splitlines()[-1]}")
    return lines


def _profile_section(prof: dict) -> list[str]:
    """The py-spy profile of the service under load: the share of samples by thread and layer."""
    lines = ["", "## Profile of the service (py-spy, pinned, single-item requests)", ""]
    if prof["status"] != "ok":
        lines.append(f"Not measured: {prof['reason']}.")
    else:
        lines.append(f"{prof['samples']} samples at {prof['rate_hz']} Hz during a c={prof['concurrency']} run "
                     f"({_fmt(prof['run']['requests_per_s'])} req/s). Share of samples:")
        lines += ["", "| where | share |", "|---|---:|"]
        lines += [f"| thread {k} | {v:.1%} |" for k, v in prof["threads"].items()]
        lines += [f"| {k} (inclusive) | {v:.1%} |" for k, v in prof["layers_inclusive"].items()]
        lines += [f"| `{k}` (self) | {v:.1%} |" for k, v in prof["top_self"].items()]
    return lines


def plots(r: dict, throughput_path: Path, latency_path: Path, knobs_path: Path | None = None) -> list[Path]:
    """Throughput and p99 vs concurrency (pinned, single-item requests) for the service, the
    naive server, the peer and the floor, with the engine ceiling as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = r["primary_workload"]
    series = {
        "service": r["service"][name]["single"]["pinned"],
        "service (32-item requests, items/s)": r["service"][name]["batch32"]["pinned"],
        "naive PyTorch": r["naive"].get("pinned"),
        "peer (BentoML)": r["peer"].get("pinned"),
        "HTTP floor": r["http_floor"].get("pinned"),
    }
    ceiling = r["engine_ceiling"][name]["pinned"]
    written = []
    for path, key, ylabel, title in (
        (throughput_path, "items_per_s", "items / s", "Throughput vs concurrency"),
        (latency_path, "p99", "p99 latency (ms)", "p99 latency vs concurrency"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        for label, runs in series.items():
            if not runs:
                continue
            xs = [x["concurrency"] for x in runs]
            ys = [x["latency_ms"]["p99"] if key == "p99" else x[key] for x in runs]
            ax.plot(xs, ys, marker="o", label=label)
        if key == "items_per_s":
            for size, style in ((r["settings"]["service"]["max_batch_size"], "--"), (1, ":")):
                value = ceiling.get(str(size), {}).get("items_per_s")
                if value:
                    ax.axhline(value, linestyle=style, color="grey", label=f"engine ceiling, batch {size}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(r["settings"]["concurrencies"], [str(x) for x in r["settings"]["concurrencies"]])
        ax.set_yscale("log")
        ax.set_xlabel("concurrency (closed loop, wrk connections)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {name}, pinned 1 core ({r['mode']} mode)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    if knobs_path is not None and r["knobs"]["status"] == "ok":
        runs = r["knobs"]["runs"]
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
        labels = [f"{x['knob']}={x['value']}\nc={x['concurrency']}" for x in runs]
        ax.bar(range(len(runs)), [x["requests_per_s"] for x in runs])
        ax.set_xticks(range(len(runs)), labels, rotation=70, fontsize=6)
        ax.set_ylabel("requests / s")
        ax.set_title(f"Knobs, one at a time: {name}")
        fig.tight_layout()
        fig.savefig(knobs_path)
        plt.close(fig)
        written.append(knobs_path)
    return written
