"""Tiny random BERT checkpoints built in-process, for tests of the classification plugin.

:func:`build_tiny_bert` trains a WordPiece tokenizer on a few sentences (with
``tokenizers``, nothing downloaded), builds a randomly initialised BERT with a
sequence- or token-classification head and saves both to a directory that the
plugin's backends (and ``CrossEncoder`` / ``pipeline``) load like any checkpoint::

    from flexserv_classification.testing import build_tiny_bert

    path = build_tiny_bert(tmp_path / "ce", num_labels=1)  # a cross-encoder
    app = make_app(["classification"], settings={"model": [f"rerank:ce={path}"]})
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["SENTIMENT_LABELS", "TOKEN_LABELS", "build_tiny_bert", "train_wordpiece_tokenizer"]

#: Labels for a tiny sequence classifier: ``build_tiny_bert(path, labels=SENTIMENT_LABELS)``.
SENTIMENT_LABELS = ["negative", "neutral", "positive"]

#: The labels of :func:`build_tiny_bert`'s token-classification head.
TOKEN_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "Marie Curie worked in Paris and Warsaw with Pierre Curie.",
    "Apples and oranges are fruit; carrots are vegetables.",
    "What is the weather like today? It is sunny and warm.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and symbols ( ) [ ] , . ; : ! ?",
    "Unicode: héllo wörld, naïve café, 世界",
]


def train_wordpiece_tokenizer(vocab_size: int = 400):  # type: ignore[no-untyped-def]
    """A BERT-style ``BertTokenizerFast`` ([CLS] a [SEP] b [SEP], lower-cased) trained on a few sentences."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    # transformers 5 keeps BertTokenizerFast only as a runtime alias of BertTokenizer,
    # missing from the names it declares for type checkers.
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        do_lower_case=True,
    )


def build_tiny_bert(
    path: str | Path,
    *,
    head: Literal["sequence", "token"] = "sequence",
    num_labels: int = 1,
    labels: list[str] | None = None,
    max_position_embeddings: int = 64,
    seed: int = 0,
) -> Path:
    """Save a random tiny BERT with a classification head and its tokenizer to ``path``.

    ``head="sequence"`` with ``num_labels=1`` is a cross-encoder (one relevance
    logit per pair); with more labels a classifier. ``head="token"`` uses
    :data:`TOKEN_LABELS` unless ``labels`` is given. The tokenizer's
    ``model_max_length`` is ``max_position_embeddings``.
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertForTokenClassification

    path = Path(path)
    tokenizer = train_wordpiece_tokenizer()
    tokenizer.model_max_length = max_position_embeddings
    if head == "token":
        labels = labels or list(TOKEN_LABELS)
    if labels is not None:
        num_labels = len(labels)
    # num_labels follows from id2label (transformers 5 takes it from there only)
    names = labels or [f"LABEL_{i}" for i in range(num_labels)]
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_position_embeddings,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model_cls = BertForTokenClassification if head == "token" else BertForSequenceClassification
    model = model_cls(config)
    with torch.no_grad():  # random weights, but large enough that labels and scores differ
        for param in model.parameters():
            param.normal_(0.0, 0.5)
    model.eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
