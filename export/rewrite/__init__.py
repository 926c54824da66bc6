"""Rewrites of a shipped bundle, in place, when its checkpoint is gone (`attserve bundle ...`).

Each checks the rewritten graph against the old one before it writes anything, and records what
it did in the bundle's config.json with the new checksums and version:

- `extend_vocab`: more pretrained words without retraining (`attserve bundle extend-vocab`);
- `fp16_embeddings`: the embedding tables stored in float16 (`attserve bundle fp16-embeddings`);
- `explanations`: the explaining attention exposed as an output (`attserve bundle explanations`);
- `to_checkpoint`: the bundle back into a training checkpoint (`attserve bundle to-checkpoint`).
"""
