"""Text -> padded int64 id arrays, from a bundle's `tokenizer.json` (Hugging Face `tokenizers`).

This is the only encoder in the project: training, the export parity check and the service all
call it, so the ids a network was trained on are produced by the code that serves it.
numpy + tokenizers only (the serving image has no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
PAD_ID = 0
# One short text goes through `encode`: `encode_batch` dispatches to rayon's pool, ~30% dearer
# for one text. Longer texts take `encode_batch` even alone, because it releases the GIL and
# `encode` does not: a 1 MB text tokenized in a worker thread would otherwise stall the event loop.
SHORT_TEXT_CHARS = 2048


@dataclass(frozen=True)
class Encoded:
    """A list of token-id lists, each cut to the max length; `truncated[i]` says whether
    text i lost tokens."""

    ids: list[list[int]]
    truncated: list[bool]

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


class TextEncoder:
    def __init__(self, tokenizer: Tokenizer) -> None:
        pad = tokenizer.token_to_id(PAD_TOKEN)
        if pad != PAD_ID:
            raise ValueError(f"tokenizer must map {PAD_TOKEN} to id {PAD_ID}, it maps it to {pad}")
        if tokenizer.token_to_id(UNK_TOKEN) is None:
            raise ValueError(f"tokenizer has no {UNK_TOKEN} token")
        # Padding and truncation are ours (numpy, per input); the file must not do them too.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path) -> "TextEncoder":
        return cls(Tokenizer.from_file(str(path)))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, texts: Sequence[str], max_length: int) -> Encoded:
        """Token ids of each text, truncated to `max_length`."""
        if not texts:
            return Encoded([], [])
        if len(texts) == 1 and len(texts[0]) <= SHORT_TEXT_CHARS:
            encodings = [self.tokenizer.encode(texts[0], add_special_tokens=False)]
        else:
            encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ids = [e.ids for e in encodings]
        truncated = [len(x) > max_length for x in ids]
        return Encoded([x[:max_length] for x in ids], truncated)

    def tokens(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens


def pad_2d(rows: Sequence[Sequence[int]], min_length: int = 1) -> np.ndarray:
    """(B, L) int64, right-padded with PAD_ID; L >= min_length so no axis is ever empty."""
    length = max([len(r) for r in rows] + [min_length])
    out = np.zeros((len(rows), length), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def pad_3d(groups: Sequence[Sequence[Sequence[int]]], min_length: int = 1) -> np.ndarray:
    """(B, K, L) int64 for lists of id lists (evidence sets); missing slots are all PAD_ID."""
    count = max([len(g) for g in groups] + [1])
    length = max([len(r) for g in groups for r in g] + [min_length])
    out = np.zeros((len(groups), count, length), dtype=np.int64)
    for i, g in enumerate(groups):
        for k, r in enumerate(g):
            out[i, k, : len(r)] = r
    return out
