"""The offline training pack (training/pack.py): `attserve data pack` of a tiny verification recipe
(its own files, a GloVe text file, out-of-domain selection, `extends`), then `attserve train
--data-dir PACK` with the sources gone, on CPU in seconds."""

from __future__ import annotations

import json
import lzma
import random
import shutil
import tomllib

import numpy as np
import pytest
from safetensors.numpy import load_file
from typer.testing import CliRunner

from cli.main import app
from training.checkpoint import load_checkpoint
from training.checkpoint_transfer import restore, slim
from training.pack import MANIFEST
from training.pack_writer import toml_text

pytestmark = pytest.mark.timeout(300)

WORDS = [f"w{i}" for i in range(40)]
LABELS = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
PRETRAINED_ONLY = 5  # [tokenizer] pretrained_vocab of the tiny recipe
DIM = 8
UNUSED_WORDS = 30  # GloVe words the data never uses


def claims(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        claim = rng.sample(WORDS, 4)
        kind = rng.randrange(3)
        evidence = [" ".join(rng.sample(WORDS, 6)) for _ in range(rng.randint(1, 3))]
        if kind < 2:
            evidence[0] = " ".join(claim + ["not"] * kind)
        rows.append({"claim": " ".join(claim), "evidence": evidence, "label": LABELS[kind]})
    return rows


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A recipe on its own FEVER-style files, extending a base recipe, with a GloVe text file that
    holds the data's words, 'not', and 30 words the data never uses; out-of-domain dev sets."""
    root = tmp_path / "sources"
    root.mkdir()
    for split, (count, seed) in {"train": (90, 1), "dev": (30, 2), "test": (30, 3)}.items():
        write_jsonl(root / f"{split}.jsonl", claims(count, seed))
    rng = np.random.default_rng(0)
    # unused words first, so the recipe's pretrained prefix comes from them
    glove_words = [f"extra{i}" for i in range(UNUSED_WORDS)] + WORDS + ["not"]
    (root / "glove.txt").write_text("".join(f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=DIM)) + "\n"
                                            for w in glove_words), encoding="utf-8")
    (root / "tiny-base.toml").write_text(
        'name = "tiny-base"\n'
        '[data]\ntrain = "train.jsonl"\ndev = "dev.jsonl"\ntest = "test.jsonl"\nformat = "fever-jsonl"\n'
        f'labels = {json.dumps(LABELS)}\ntask = "verification"\n'
        f'[model]\narchitecture = "attconv-light"\nembedding_dim = {DIM}\nhidden_dim = 8\nhead_hidden = 8\n'
        f'[tokenizer]\npretrained_vocab = {PRETRAINED_ONLY}\noov_buckets = 10\n'
        f'[embeddings]\nglove = true\nglove_file = "{root / "glove.txt"}"\n'
        '[limits]\nmax_lengths = { claim_ids = 8, evidence_ids = 10 }\nmax_evidence = 3\n'
        '[train]\nepochs = 1\nbatch_size = 16\nlr = 0.01\nselect_on = "dev+ood"\n',
        encoding="utf-8",
    )
    (root / "tiny.toml").write_text('name = "tiny-pack"\nextends = "tiny-base"\n[train]\nseed = 3\n', encoding="utf-8")
    ood = tmp_path / "ood"
    ood.mkdir()
    pairs = [{"premise": r["evidence"][0], "hypothesis": r["claim"], "label": ["entailment", "contradiction", "neutral"][i % 3]}
             for i, r in enumerate(claims(12, 4))]
    write_jsonl(ood / "snli_1.0_dev.jsonl", pairs)
    write_jsonl(ood / "rte_train_dev.jsonl", [{**p, "label": "entailment" if i % 2 else "not_entailment"} for i, p in enumerate(pairs)])
    write_jsonl(ood / "fever_symmetric_v0.2_dev.jsonl",
                [{"claim": p["hypothesis"], "evidence": p["premise"], "label": "SUPPORTS" if i % 2 else "REFUTES"} for i, p in enumerate(pairs)])
    monkeypatch.setenv("ATTSERVE_OOD_DIR", str(ood))
    return root


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_pack_trains_the_recipe_offline_with_the_same_vocabulary_and_data(sources, tmp_path, monkeypatch):
    common = ["--threads", "1", "--no-progress"]
    direct = run("train", str(sources / "tiny.toml"), "-o", str(tmp_path / "direct"), *common)
    assert direct.exit_code == 0, direct.output

    pack = tmp_path / "pack"
    packed = run("data", "pack", str(sources / "tiny.toml"), "-o", str(pack))
    assert packed.exit_code == 0, packed.output
    manifest = json.loads((pack / MANIFEST).read_text())
    assert set(manifest["recipes"]) == {"tiny-pack"}
    # the vectors cut to the words the vocabulary takes: the data's 41 words and the 5 first unused ones
    vectors = manifest["vectors"]["file-tiny-pack"]
    assert (vectors["words"], vectors["of_words"]) == (len(WORDS) + 1 + PRETRAINED_ONLY, UNUSED_WORDS + len(WORDS) + 1)
    with np.load(pack / vectors["file"]) as saved:
        assert saved["vectors"].dtype == np.float16
        assert list(saved["words"][:PRETRAINED_ONLY]) == [f"extra{i}" for i in range(PRETRAINED_ONLY)]
    # the recipe resolved: no extends, its own seed over the base's keys
    flat = tomllib.loads((pack / "recipes" / "tiny-pack.toml").read_text())
    assert "extends" not in flat and flat["train"]["seed"] == 3 and flat["train"]["select_on"] == "dev+ood"
    assert f"MiB  {pack}" in packed.output

    # the machine without the sources: no files, no out-of-domain folder, no data cache
    shutil.rmtree(sources)
    for variable in ("ATTSERVE_OOD_DIR", "ATTSERVE_BENCHMARK_DIR", "ATTSERVE_DATA_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / "absent"))
    offline = run("train", str(pack / "recipes" / "tiny-pack.toml"), "--data-dir", str(pack), "-o", str(tmp_path / "offline"), *common)
    assert offline.exit_code == 0, offline.output

    def read(directory, name):
        return json.loads((tmp_path / directory / name).read_text())

    assert read("offline", "tokenizer.json")["model"]["vocab"] == read("direct", "tokenizer.json")["model"]["vocab"]
    direct_summary, offline_summary = read("direct", "metrics.json"), read("offline", "metrics.json")
    assert offline_summary["train_examples"] == direct_summary["train_examples"] == 90
    assert offline_summary["glove_coverage"] == direct_summary["glove_coverage"]
    assert set(offline_summary["ood_dev"]) == set(direct_summary["ood_dev"]) == {"fever-symmetric", "rte", "snli-dev"}
    assert read("offline", "config.json")["data_checksums"] == read("direct", "config.json")["data_checksums"]

    # what comes back from the GPU machine: the frozen pretrained table dropped, rebuilt here bit for bit
    slim_dir, restored_dir = tmp_path / "slim", tmp_path / "restored"
    dropped = slim(tmp_path / "offline", pack, slim_dir)
    assert list(dropped) == ["embeddings.weight"]
    assert (slim_dir / "model.safetensors").stat().st_size < (tmp_path / "offline" / "model.safetensors").stat().st_size
    restore(slim_dir, pack, restored_dir)
    original, rebuilt = load_file(tmp_path / "offline" / "model.safetensors"), load_file(restored_dir / "model.safetensors")
    assert original.keys() == rebuilt.keys() and all(np.array_equal(original[k], rebuilt[k]) for k in original)
    load_checkpoint(restored_dir)
    # a rebuild from other vectors is refused, not silently wrong
    other = json.loads((slim_dir / "rebuilt_tensors.json").read_text())
    other["embeddings.weight"]["sha256"] = "0" * 64
    (slim_dir / "rebuilt_tensors.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="not the table the checkpoint was trained with"):
        restore(slim_dir, pack, tmp_path / "refused")


def test_a_changed_pack_file_is_refused(sources, tmp_path):
    pack = tmp_path / "pack"
    assert run("data", "pack", str(sources / "tiny.toml"), "-o", str(pack)).exit_code == 0
    data = pack / "data" / "files-tiny-pack.jsonl.xz"
    rows = lzma.decompress(data.read_bytes()).decode().replace("REFUTES", "SUPPORTS")
    data.write_bytes(lzma.compress(rows.encode()))
    result = run("train", str(pack / "recipes" / "tiny-pack.toml"), "--data-dir", str(pack), "-o", str(tmp_path / "ckpt"), "--no-progress")
    assert result.exit_code != 0
    assert "the pack was changed after it was written" in str(result.exception) + result.output


def test_a_recipe_that_starts_from_a_checkpoint_is_not_packed(sources, tmp_path):
    (sources / "tuned.toml").write_text('name = "tiny-tuned"\nextends = "tiny"\n[train]\ninit_from = "tiny-pack"\n', encoding="utf-8")
    result = run("data", "pack", str(sources / "tuned.toml"), "-o", str(tmp_path / "pack"))
    assert result.exit_code == 2 and "not checkpoints" in result.output


def test_recipe_tables_survive_toml_writing():
    table = {"name": "x", "ship": False, "data": {"dataset": "fever"}, "limits": {"max_lengths": {"claim_ids": 40}, "max_evidence": 16},
             "train": {"lr": 1e-05, "init_labels": {"NOT ENOUGH INFO": "neutral"}, "note": 'quote " and é'}}
    assert tomllib.loads(toml_text(table)) == table


def test_only_the_pack_subcommand_takes_an_output_directory(tmp_path):
    refused = run("data", "snli", "-o", str(tmp_path / "out"))
    assert refused.exit_code == 2 and "only `attserve data pack` writes to --out" in refused.output
    no_out = run("data", "pack", "recipes/gpu/scitail-attconv-gpu.toml")
    assert no_out.exit_code == 2 and "attserve data pack RECIPE.toml... -o DIR" in no_out.output
    assert not (tmp_path / "out").exists()
