"""Tiny Hugging Face sequence classifiers built locally (no download), exported to ONNX as
`optimum-cli export onnx --task text-classification` lays them out: model.onnx, tokenizer.json,
config.json (and the PyTorch weights, the parity reference). Built in a few seconds each:
transformers from a config, a tokenizer trained with `tokenizers` on a small corpus.

- bert: WordPiece, [CLS] a [SEP] b [SEP], token_type_ids
- roberta: byte-level BPE, <s> a </s></s> b </s>, no token_type_ids, padding id 1
- deberta-v2: Unigram (SentencePiece-like, Metaspace), [CLS] a [SEP] b [SEP], token_type_ids
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "a man is playing a guitar on the stage .", "a woman is slicing an onion in the kitchen .",
    "two dogs run across the snowy field .", "the children are playing football in the park .",
    "a person is making music .", "nobody is in the kitchen .", "the cat sleeps on the warm mat .",
    "paris is the capital of france .", "shares in the bank fell sharply after the report .",
    "the team won the final match of the season .", "a dog is barking loudly at the mailman outside .",
    "kids play in a field of tall grass on a sunny afternoon .",
]
NLI_LABELS = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
# position tables: BERT reads 40 tokens, RoBERTa 42 - (pad id 1 + 1) = 40
MAX_POSITIONS = {"bert": 40, "roberta": 42, "deberta-v2": 40}
# the feeds of each (RoBERTa has no token types)
TOKEN_TYPES = {"bert": True, "roberta": False, "deberta-v2": True}


def bert_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=160, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def roberta_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    return tok


def deberta_tokenizer():
    """A Unigram model over the corpus's words (the trainer prunes a corpus this small to single
    letters): each word a piece, each letter one, anything else [UNK]."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    words = sorted({w for line in CORPUS for w in line.split()})
    letters = sorted({c for w in words for c in w} | {"\u2581"})
    vocab = [(t, 0.0) for t in specials] + [(f"\u2581{w}", -2.0) for w in words] + [(c, -5.0) for c in letters]
    tok = Tokenizer(models.Unigram(vocab, unk_id=specials.index("[UNK]")))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


TOKENIZERS = {"bert": bert_tokenizer, "roberta": roberta_tokenizer, "deberta-v2": deberta_tokenizer}


def build_model(kind: str, vocab_size: int, id2label: dict[int, str]):
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
        RobertaConfig,
        RobertaForSequenceClassification,
    )

    torch.manual_seed(7)
    sizes = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=48, max_position_embeddings=MAX_POSITIONS[kind], initializer_range=0.2,
                 id2label=id2label, label2id={v: k for k, v in id2label.items()}, attn_implementation="eager")
    if kind == "bert":
        return BertForSequenceClassification(BertConfig(pad_token_id=0, **sizes)).eval()
    if kind == "deberta-v2":
        return DebertaV2ForSequenceClassification(DebertaV2Config(
            pad_token_id=0, type_vocab_size=2, relative_attention=True, position_buckets=16, max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"], **sizes)).eval()
    return RobertaForSequenceClassification(RobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                                          type_vocab_size=1, **sizes)).eval()


def export_onnx(model, path: Path, token_types: bool) -> None:
    """torch.onnx.export of the classifier, as optimum lays it out (inputs by name, `logits`):
    the route examples/hf/export_onnx.py documents, on its default example batch of ones."""
    from examples.hf.export_onnx import export_logits

    export_logits(model, path, ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else []))


def build_export(kind: str, root: Path, id2label: dict[int, str] = NLI_LABELS, *, weights: bool = True) -> Path:
    """`root/kind`: model.onnx, tokenizer.json, config.json (+ the PyTorch weights with `weights`)."""
    out = root / kind
    out.mkdir(parents=True)
    tok = TOKENIZERS[kind]()
    tok.save(str(out / "tokenizer.json"))
    model = build_model(kind, tok.get_vocab_size(), id2label)
    if weights:
        model.save_pretrained(out)
    else:
        model.config.save_pretrained(out)
    export_onnx(model, out / "model.onnx", token_types=TOKEN_TYPES[kind])
    return out


def reference(export: Path):
    """transformers' own model and fast tokenizer of an export (the parity reference)."""
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast

    model = AutoModelForSequenceClassification.from_pretrained(str(export)).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(export / "tokenizer.json"))
    tokenizer.pad_token_id = model.config.pad_token_id
    # the feeds the model reads (a bare PreTrainedTokenizerFast makes no token_type_ids)
    types = TOKEN_TYPES[model.config.model_type]
    tokenizer.model_input_names = ["input_ids", *(["token_type_ids"] if types else []), "attention_mask"]
    return model, tokenizer
