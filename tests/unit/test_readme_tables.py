"""The tables of the README and of the docs it links (docs/models.md, docs/performance.md) equal
what the shipped bundles and the bench record: the README's "Bundled models" table (test accuracy from `card.in_domain`, train/test sizes, parity
`parity.max_abs_diff`, the float16 footnote) and the out-of-domain table (`card.ood_dev`,
`card.unknown_token_share`), each figure rounded as printed; and the Performance section's
ratio table (measured, target, met, and the quoted A / B figures) against
`bench-results/results.json`. Retrain, re-export or re-run the bench without updating the README
and this names the cell. Reads JSON and Markdown only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPOSITORY = ROOT / "model_repository"


def configs() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(REPOSITORY.glob("*/config.json"))}


def table_after(text: str, header_start: str) -> list[list[str]]:
    """Rows (cells stripped) of the Markdown table whose header line starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:  # header, then the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def percent(x: float) -> str:
    return f"{100 * x:.1f}"


def short_e(x: float) -> str:
    """2.4e-6 as the README prints it (Python writes 2.4e-06)."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def bundle_name(cell: str) -> str:
    match = re.match(r"`([^`]+)`", cell)
    assert match, f"no `bundle` name in {cell!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def readme() -> str:
    """The README and the pages under docs/ (the detailed tables moved there), one text."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    return "\n\n".join(page.read_text(encoding="utf-8") for page in pages)


def test_bundled_models_table_matches_the_configs(readme):
    bundles = configs()
    rows = table_after(readme, "| bundle | network |")
    named = [bundle_name(row[0]) for row in rows]
    assert sorted(named) == sorted(bundles), "the table and model_repository/ list different bundles"
    for row in rows:
        name, cells = bundle_name(row[0]), dict(zip(("bundle", "network", "data", "acc", "baseline", "target", "parity"), row))
        config = bundles[name]
        where = f"README Bundled models, {name}"
        in_domain = config["card"]["in_domain"]["test"]
        if "map" in in_domain:  # a reranker: MAP (MRR) through its graph
            ranked = re.match(r"\*\*MAP (0\.\d{3})\*\* \(MRR (0\.\d{3})\)", cells["acc"])
            assert ranked, (where, cells["acc"])
            assert ranked.groups() == (f"{in_domain['map']:.3f}", f"{in_domain['mrr']:.3f}"), (where, cells["acc"], in_domain)
        else:
            acc = re.match(r"\*\*(\d+\.\d)%\*\*", cells["acc"])
            assert acc, (where, cells["acc"])
            assert acc.group(1) == percent(in_domain["accuracy"]), \
                f"{where}: test acc. {acc.group(1)}%, card.in_domain.test.accuracy is {percent(in_domain['accuracy'])}%"
        trained_on = re.search(r"\((\d+\.\d)% on the set it was trained on\)", cells["acc"])
        if trained_on:
            assert trained_on.group(1) == percent(config["metrics"]["test"]["accuracy"]), (where, cells["acc"])
        sizes = re.search(r"\(([\d,]+) / ([\d,]+)\)", cells["data"])
        if sizes:
            train, test = (int(s.replace(",", "")) for s in sizes.groups())
            assert train == config["card"]["training_data"]["train_examples"], (where, cells["data"])
            assert test == in_domain.get("examples", in_domain.get("questions")), (where, cells["data"])
        parity = config["parity"]
        printed = cells["parity"].replace("\\*", "").replace("†", "").replace("‡", "").strip()
        assert printed == short_e(parity["max_abs_diff"]), \
            f"{where}: parity {printed}, config.json parity.max_abs_diff is {parity['max_abs_diff']:.3g}"
        assert parity["argmax_mismatches"] == 0  # "no argmax differed"
        # the asterisk marks exactly the bundles whose embeddings were stored as float16 after export
        assert ("\\*" in cells["parity"]) == (parity.get("embeddings_float16") is not None), (where, cells["parity"])
        # the dagger (frozen rows) and double dagger (tuned rows) mark the bundles given more words after export
        extended = (parity.get("vocabulary_extended") or {}).get("rows")
        assert ("†" in cells["parity"]) == (extended == "frozen"), (where, cells["parity"])
        assert ("‡" in cells["parity"]) == (extended == "tuned"), (where, cells["parity"])


def test_float16_footnote_matches_the_configs(readme):
    # a bundle exported with float16 tables records embeddings_float16 as null: it had no float32 graph
    converted = [c["parity"]["embeddings_float16"] for c in configs().values() if c["parity"].get("embeddings_float16") is not None]
    assert converted
    moved = re.search(r"logits moved by at\s+most (\S+) against the float32 graph, no label changed", readme)
    assert moved, "the float16 footnote lost its figure"
    assert moved.group(1) == short_e(max(f["max_abs_diff_vs_float32_graph"] for f in converted))
    assert all(f["argmax_mismatches"] == 0 for f in converted)


def test_out_of_domain_table_matches_the_cards(readme):
    bundles = configs()
    rows = table_after(readme, "| model | snli-dev | RTE |")
    checked = 0
    for row in rows:
        if not row[0].startswith("`"):
            continue  # baselines: not in a bundle
        name = bundle_name(row[0])
        card = bundles[name]["card"]
        ood, unknown = card["ood_dev"], card["unknown_token_share"]
        want = [
            f"{percent(ood['snli-dev']['accuracy'])} / {percent(ood['snli-dev']['macro_f1'])}",
            f"{percent(ood['rte']['accuracy'])} / {percent(ood['rte']['macro_f1'])}",
            f"{percent(ood['fever-symmetric']['accuracy'])} / {percent(ood['fever-symmetric']['macro_f1'])}",
            f"{percent(ood['fever-symmetric']['accuracy_two_way'])} / {percent(ood['fever-symmetric']['macro_f1_two_way'])}",
            f"{percent(unknown['in_domain_test'])} / {percent(unknown['rte'])} / {percent(unknown['fever-symmetric'])}%",
        ]
        assert row[1:] == want, f"README out-of-domain row {name}: {row[1:]}, the card says {want}"
        checked += 1
    assert checked >= 3  # the bundles with SNLI-style out-of-domain sets (nli, snli-light, fever)
    majority = next(row for row in rows if row[0] == "majority label")
    snli = [c["card"]["ood_dev"] for c in bundles.values() if "snli-dev" in c["card"].get("ood_dev", {})]
    for ood in snli:  # the same sets for every SNLI model
        assert majority[1:4] == [percent(ood["snli-dev"]["majority"]), percent(ood["rte"]["majority"]),
                                 percent(ood["fever-symmetric"]["majority"])], (majority, ood)


# --- the Performance section's ratio table vs bench-results/results.json ---------------------

RESULTS = ROOT / "bench-results" / "results.json"
# the README row (by the start of its first cell) -> the ratio(s) of results.json it prints
RATIO_ROWS = {
    "service / engine ceiling, single-item": ("service_single_vs_engine",),
    "service / engine ceiling, 32-item": ("service_batch32_vs_engine",),
    "service / in-process engine, single-item": ("service_single_vs_engine_requests",),
    "service / in-process engine, 32-item": ("service_batch32_vs_engine_requests",),
    "service / HTTP floor": ("service_vs_http_floor",),
    "service / naive": ("service_vs_naive",),
    "service / BentoML peer": ("service_vs_peer",),
    "p99 at 50% of saturation": ("p99_open50_vs_p50_c1",),
    "onnxruntime / PyTorch eager": ("ort_vs_torch_batch1", "ort_vs_torch_batch32"),
    "ACT / Transformer": ("act_vs_transformer_params", "act_vs_transformer_speed"),
}
NUMBER = r"\d[\d,]*(?:\.\d+)?"


def printed_as(printed: str, value: float) -> bool:
    """`printed` is `value` rounded to the printed decimals (either way at an exact half)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed) - value) <= 0.5 * 10 ** -decimals + 1e-9


def test_performance_ratio_table_matches_results_json(readme):
    ratios = json.loads(RESULTS.read_text(encoding="utf-8"))["ratios"]
    rows = table_after(readme, "| ratio (target) | measured |")
    seen = set()
    for row in rows:
        prefix = next((p for p in RATIO_ROWS if row[0].startswith(p)), None)
        assert prefix, f"README performance row {row[0]!r} maps to no ratio of results.json"
        seen.add(prefix)
        keys = RATIO_ROWS[prefix]
        measured = re.findall(NUMBER, row[1])
        assert len(measured) == len(keys), (row[0], row[1])
        for key, printed in zip(keys, measured):
            value = ratios[key]["value"]
            assert printed_as(printed, value), f"README {row[0]!r}: {printed}, results.json {key} is {value}"
        first = ratios[keys[0]]
        target = re.search(r"\(([<>]=? [\d.]+)\)$", row[0])
        assert (target.group(1) if target else None) == first["target"], (row[0], first["target"])
        assert row[2] == {True: "yes", False: "no", None: "-"}[first["met"]], (row[0], row[2], first["met"])
        # the quoted figures (A / B) give the ratio, to their own rounding (1%)
        quoted = re.match(rf"({NUMBER})[^/]*/ ({NUMBER})", row[3])
        if quoted and len(keys) == 1:
            a, b = (float(x.replace(",", "")) for x in quoted.groups())
            assert abs(a / b - first["value"]) <= 0.01 * first["value"], (row[0], row[3], a / b, first["value"])
    assert seen == set(RATIO_ROWS), f"rows missing from the README: {set(RATIO_ROWS) - seen}"
