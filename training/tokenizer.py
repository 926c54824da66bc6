"""Build the word-level tokenizer (Hugging Face `tokenizers`) and save it as tokenizer.json.

Lower-casing (after NFKC) normaliser, punctuation-aware pre-tokeniser (words and each
punctuation mark separately), min frequency, [PAD]=0 and [UNK]=1. The service loads the same
file through `service.tokenization.TextEncoder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from tokenizers.trainers import WordLevelTrainer

from service.tokenization import PAD_TOKEN, UNK_TOKEN


def build_tokenizer(texts: Iterable[str], min_frequency: int = 1, max_vocab: int | None = None) -> Tokenizer:
    tokenizer = Tokenizer(WordLevel(unk_token=UNK_TOKEN))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    trainer = WordLevelTrainer(
        vocab_size=(max_vocab or 10_000_000),
        min_frequency=min_frequency,
        special_tokens=[PAD_TOKEN, UNK_TOKEN],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path
