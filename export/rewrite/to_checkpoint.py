"""Turn a shipped bundle back into a training checkpoint, to fine-tune it when only the bundle is at hand.

The bundle's ONNX graph holds every weight under its PyTorch name (`network.<parameter>`; tables
stored as float16 carry a `__fp16` suffix and are widened back to float32; int8 tables carry
`__int8` beside their per-row `__scale` and are multiplied back: exactly what the graph computes with). The bundle's config.json does not record the network's sizes, so they come from
the recipe the bundle was trained from. Before anything is written, the rebuilt PyTorch network
must reproduce the bundle's graph on export's random parity batches within export's tolerance.

    attserve bundle to-checkpoint model_repository/snli-attconv-advanced \\
        recipes/snli-attconv-advanced.toml --out checkpoints/snli-attconv-advanced

The checkpoint's metrics are the bundle's; it has no parity examples (export draws random
batches alone then).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from export.onnx_graph import FP16_SUFFIX, INT8_SUFFIX, SCALE_SUFFIX
from export.parity import assert_parity, check_parity
from models import build_network
from training.checkpoint import make_meta, save_checkpoint
from training.recipes import Recipe

PREFIX = "network."  # export wraps the network in models.IdsOnly as `network`


def bundle_weights(model_path: Path) -> dict[str, torch.Tensor]:
    """The graph's PyTorch parameters by state-dict name, as float32."""
    arrays = {init.name[len(PREFIX):]: numpy_helper.to_array(init).astype(np.float32)
              for init in onnx.load(str(model_path)).graph.initializer if init.name.startswith(PREFIX)}
    weights = {}
    for name, values in arrays.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        if name.endswith(INT8_SUFFIX):
            name = name.removesuffix(INT8_SUFFIX)
            values = values * arrays[f"{name}{SCALE_SUFFIX}"]
        weights[name.removesuffix(FP16_SUFFIX)] = torch.from_numpy(values)
    return weights


def convert(bundle: Path, recipe: Recipe, out: Path) -> dict:
    config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
    if recipe.model.architecture != config["architecture"]:
        raise ValueError(f"recipe {recipe.name} trains {recipe.model.architecture}, the bundle is {config['architecture']}")
    weights = bundle_weights(bundle / "model.onnx")
    sizes = {"vocab_size": weights["embeddings.weight"].shape[0], "num_labels": len(config["labels"])}
    if "tuned_embeddings.weight" in weights:
        sizes["tuned_vocab_size"] = weights["tuned_embeddings.weight"].shape[0]
    network = build_network(config["architecture"], task=config["task"], **recipe.model.overrides, **sizes)
    network.load_state_dict(weights, strict=True)  # every parameter, no more: the recipe matches the graph
    network.eval()
    parity = check_parity(network, bundle / "model.onnx", config["max_lengths"], config.get("max_evidence"))
    assert_parity(parity, evidence_step=network.evidence_score_step())
    meta = make_meta(
        config["name"], network, list(config["labels"]), architecture=config["architecture"],
        max_lengths=dict(config["max_lengths"]), max_evidence=config.get("max_evidence"),
        metrics=config.get("metrics", {}), data_checksums=config.get("data_checksums", {}),
        recipe=recipe.model_dump(mode="json"),
        description=config.get("description", "") + f" (rebuilt from bundle {config['name']} version {config['version']})",
    )
    save_checkpoint(out, network, meta, bundle / "tokenizer.json")
    return {"checkpoint": str(out), "bundle": str(bundle), "version": config["version"],
            "parity_max_abs_diff": parity.max_abs_diff, "parity_examples": parity.examples, **sizes}
