"""Every architecture x mode the acceptance tests run, at small sizes so CI stays fast."""

from __future__ import annotations

SMALL = {
    "attconv": {"embedding_dim": 16, "hidden_dim": 16, "head_hidden": 16},
    "abcnn": {"embedding_dim": 16, "num_filters": 12, "max_length": 48, "head_hidden": 16},
    "act": {"embedding_dim": 24, "model_dim": 24, "num_heads": 2, "num_filters": 8, "num_layers": 2,
            "max_length": 64, "fc_dim": 16},
}

# (architecture, task, overrides); the id is derived from them.
CASES: list[tuple[str, str, dict]] = [
    # AttConv light: three matching functions, every mode
    ("attconv-light", "classification", {"match": "dot"}),
    ("attconv-light", "entailment", {"match": "dot"}),
    ("attconv-light", "entailment", {"match": "bilinear"}),
    ("attconv-light", "entailment", {"match": "additive"}),
    ("attconv-light", "entailment", {"match": "dot", "direction": "single"}),
    ("attconv-light", "verification", {"match": "dot", "multi_context": "wise"}),
    ("attconv-light", "verification", {"match": "dot", "multi_context": "conc"}),
    # AttConv advanced
    ("attconv-advanced", "classification", {}),
    ("attconv-advanced", "entailment", {}),
    ("attconv-advanced", "entailment", {"direction": "single", "match": "bilinear"}),
    ("attconv-advanced", "verification", {"multi_context": "wise"}),
    ("attconv-advanced", "verification", {"multi_context": "conc"}),
    # the exact-match channel, in each place it reads ids
    ("attconv-advanced", "entailment", {"exact_match": True}),
    ("attconv-advanced", "verification", {"multi_context": "wise", "exact_match": True}),
    ("attconv-light", "verification", {"multi_context": "conc", "exact_match": True}),
    # ABCNN family, one and two blocks
    ("bcnn", "entailment", {"num_blocks": 1}),
    ("bcnn", "entailment", {"num_blocks": 2}),
    ("abcnn-1", "entailment", {"num_blocks": 1}),
    ("abcnn-1", "entailment", {"num_blocks": 2}),
    ("abcnn-2", "entailment", {"num_blocks": 1}),
    ("abcnn-2", "entailment", {"num_blocks": 2}),
    ("abcnn-3", "entailment", {"num_blocks": 1}),
    ("abcnn-3", "entailment", {"num_blocks": 2}),
    # ACT and its Transformer baseline
    ("act", "classification", {}),
    ("transformer", "classification", {}),
]


def family(arch: str) -> str:
    if arch.startswith("attconv"):
        return "attconv"
    if arch in ("bcnn",) or arch.startswith("abcnn"):
        return "abcnn"
    return "act"


def case_id(case: tuple[str, str, dict]) -> str:
    arch, task, over = case
    extra = "-".join(f"{k}={v}" for k, v in sorted(over.items()))
    return f"{arch}/{task}" + (f"/{extra}" if extra else "")


def build(case, num_labels: int = 3, vocab_size: int = 60, **more):
    from models import build_network

    arch, task, over = case
    network = build_network(arch, task=task, vocab_size=vocab_size, num_labels=num_labels,
                            **SMALL[family(arch)], **over, **more)
    if getattr(network.config, "exact_match", False):
        import torch

        # the channel starts at zero (it adds nothing); the tests need it to compute something
        torch.nn.init.normal_(network.attconv.exact_match.conv.weight)
    return network
