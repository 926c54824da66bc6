"""The README's model tables equal what the shipped bundles record (issue 21): the "Bundled
models" table (test accuracy from `card.in_domain`, train/test sizes, parity
`parity.max_abs_diff`, the float16 footnote) and the out-of-domain table (`card.ood_dev`,
`card.unknown_token_share`), each figure rounded as printed. Retrain or re-export a bundle
without updating the README and this names the cell. Reads JSON and Markdown only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
    return README.read_text(encoding="utf-8")


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
            assert test == in_domain["examples"], (where, cells["data"])
        parity = config["parity"]
        printed = cells["parity"].replace("\\*", "").strip()
        assert printed == short_e(parity["max_abs_diff"]), \
            f"{where}: parity {printed}, config.json parity.max_abs_diff is {parity['max_abs_diff']:.3g}"
        assert parity["argmax_mismatches"] == 0  # "no argmax differed"
        # the asterisk marks exactly the bundles whose embeddings were stored as float16 after export
        assert ("\\*" in cells["parity"]) == ("embeddings_float16" in parity), (where, cells["parity"])


def test_float16_footnote_matches_the_configs(readme):
    converted = [c["parity"]["embeddings_float16"] for c in configs().values() if "embeddings_float16" in c["parity"]]
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
    assert checked >= 4
    majority = next(row for row in rows if row[0] == "majority label")
    snli = [c["card"]["ood_dev"] for c in bundles.values() if "snli-dev" in c["card"].get("ood_dev", {})]
    for ood in snli:  # the same sets for every SNLI model
        assert majority[1:4] == [percent(ood["snli-dev"]["majority"]), percent(ood["rte"]["majority"]),
                                 percent(ood["fever-symmetric"]["majority"])], (majority, ood)
