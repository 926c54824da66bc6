"""Data readers, tokenizer, embeddings, trainer, recipes -> checkpoints.

Submodules import torch; this package's __init__ does not, so the CLI can list commands
without loading it."""
