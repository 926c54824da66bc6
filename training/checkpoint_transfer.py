"""Checkpoints small enough to come back from a lent GPU machine (at most 64 MiB of files).

A checkpoint trained from a training pack holds word-embedding tables that training never
changed: the frozen pretrained table of the tuned channel ([embeddings] tuned_channel) is exactly
the pack's vectors for the checkpoint's vocabulary (training.embeddings.embedding_matrix, seeded).
`slim` drops every such table (after checking, on the machine that trained, that rebuilding it
gives the same bits) and records its sha256; `restore`, here, rebuilds it from the same pack and
refuses a rebuild whose sha256 differs. A 100-d FEVER checkpoint goes from ~42 MB to ~19 MB.

    python -m training.checkpoint_transfer slim CHECKPOINT --data-dir PACK -o SLIM
    python -m training.checkpoint_transfer restore SLIM --data-dir PACK -o CHECKPOINT
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

REBUILT_FILE = "rebuilt_tensors.json"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.float32).tobytes()).hexdigest()


def rebuilt_tables(checkpoint_dir: str | Path, pack_dir: str | Path) -> dict[str, np.ndarray]:
    """Each word-embedding table of the checkpoint's network as training initialised it from the
    pack's vectors (name in the state dict -> (V, D) float32)."""
    from tokenizers import Tokenizer

    from models import network_from_dict
    from training.checkpoint import CONFIG_FILE, TOKENIZER_FILE
    from training.embeddings import embedding_matrix
    from training.pack import load_pack_vectors, pack_vectors_std
    from training.recipes import Recipe

    checkpoint_dir = Path(checkpoint_dir)
    config = json.loads((checkpoint_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    recipe = Recipe.model_validate(config["recipe"])
    if not recipe.embeddings.glove:
        return {}
    network = network_from_dict(config["network"])
    vocab = Tokenizer.from_file(str(checkpoint_dir / TOKENIZER_FILE)).get_vocab()
    words, table = load_pack_vectors(pack_dir, recipe)
    scale = ({"oov_scale": pack_vectors_std(pack_dir, recipe)}
             if recipe.embeddings.freeze_pretrained or recipe.embeddings.tuned_channel else {})
    matrix, _ = embedding_matrix(vocab, words, table, seed=recipe.train.seed, **scale)
    tables = network.embedding_layers()
    return {f"{name}.weight": matrix for name, module in network.named_modules() if module in tables}


def slim(checkpoint_dir: str | Path, pack_dir: str | Path, out_dir: str | Path) -> dict[str, dict]:
    """Copy the checkpoint to `out_dir` without the tables `restore` can rebuild bit for bit."""
    from safetensors.numpy import load_file, save_file

    from training.checkpoint import WEIGHTS_FILE

    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    state = load_file(str(checkpoint_dir / WEIGHTS_FILE))
    dropped = {}
    for name, rebuilt in rebuilt_tables(checkpoint_dir, pack_dir).items():
        if name in state and state[name].dtype == np.float32 and np.array_equal(state[name], rebuilt):
            dropped[name] = {"sha256": _digest(rebuilt), "shape": list(rebuilt.shape)}
            del state[name]
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(checkpoint_dir, out_dir, ignore=shutil.ignore_patterns(WEIGHTS_FILE))
    save_file(state, str(out_dir / WEIGHTS_FILE))
    (out_dir / REBUILT_FILE).write_text(json.dumps(dropped, indent=2) + "\n", encoding="utf-8")
    return dropped


def restore(slim_dir: str | Path, pack_dir: str | Path, out_dir: str | Path) -> Path:
    """The full checkpoint from a `slim` one and the pack it was trained from."""
    from safetensors.numpy import load_file, save_file

    from training.checkpoint import WEIGHTS_FILE

    slim_dir, out_dir = Path(slim_dir), Path(out_dir)
    dropped = json.loads((slim_dir / REBUILT_FILE).read_text(encoding="utf-8"))
    state = load_file(str(slim_dir / WEIGHTS_FILE))
    rebuilt = rebuilt_tables(slim_dir, pack_dir)
    for name, expected in dropped.items():
        if name not in rebuilt or _digest(rebuilt[name]) != expected["sha256"]:
            raise ValueError(f"{slim_dir}: {name} rebuilt from {pack_dir} is not the table the checkpoint was trained with "
                             "(another pack, or another attserve): cannot restore it")
        state[name] = rebuilt[name]
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(slim_dir, out_dir, ignore=shutil.ignore_patterns(WEIGHTS_FILE, REBUILT_FILE))
    save_file(state, str(out_dir / WEIGHTS_FILE))
    return out_dir


cli = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])
DataDir = Annotated[Path, typer.Option("--data-dir", exists=True, file_okay=False, help="The training pack it was trained from.")]
Out = Annotated[Path, typer.Option("--out", "-o", file_okay=False, help="Directory to write (replaced).")]


@cli.command("slim")
def slim_command(checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)], data_dir: DataDir, out: Out) -> None:
    """Drop the tables the pack rebuilds."""
    dropped = slim(checkpoint, data_dir, out)
    typer.echo(f"{out}: dropped {', '.join(dropped) or 'nothing'}; "
               f"{sum(p.stat().st_size for p in out.iterdir()) / 2**20:.1f} MiB")


@cli.command("restore")
def restore_command(checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)], data_dir: DataDir, out: Out) -> None:
    """Rebuild the dropped tables from the pack."""
    typer.echo(f"restored {restore(checkpoint, data_dir, out)}")


if __name__ == "__main__":
    cli()
