"""Analyzers: the tokens a retrieval index sees in a post and in a lexicon entry.

- ``words`` (default): lowercase runs of Unicode letters and digits, stop words kept
  (``splits.text.words``).
- ``wordpiece``: BERT WordPiece from a vocabulary file the user names (``bert-base-uncased``'s
  ``vocab.txt`` is what the 2026 release uses; nothing is downloaded): BERT's normaliser
  (lowercase, accents stripped, control characters dropped, CJK characters split), its
  pre-tokeniser (whitespace and punctuation) and WordPiece (``##`` continuation pieces, ``[UNK]``
  for a word it cannot split or longer than 100 characters), without special tokens. This is
  Anserini's ``hgf_tokenizer`` analyzer (``HuggingFaceTokenizerAnalyzer``: the tokenizer's
  tokens joined by spaces and split on whitespace). Long documents: the release's pyserini 0.44.0
  (Anserini 0.39.0) sets the tokenizer's ``maxLength`` and ``modelMaxLength`` to
  Integer.MAX_VALUE, so every piece of a post is indexed, however long (its analyzer run on an
  844-piece text returns 844 pieces); ``max_tokens: null`` (the default) does the same. Later
  Anserini versions (DJL 0.28 with ``maxLength`` 512) keep only the first 512 pieces
  ("FirstP"): ``max_tokens: 512`` reproduces those.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from splits.errors import ConfigError
from splits.text import words

WORDS, WORDPIECE = "words", "wordpiece"
ANALYZERS = (WORDS, WORDPIECE)
RELEASE_MAX_TOKENS = None  # pyserini 0.44.0 keeps every piece
BATCH_TEXTS = 4096


class Analyzer(Protocol):
    name: str

    def tokenize(self, text: str | None) -> list[str]: ...

    def tokenize_many(self, texts: Sequence[str | None]) -> list[list[str]]: ...


class WordsAnalyzer:
    name = WORDS

    def tokenize(self, text: str | None) -> list[str]:
        return words(text)

    def tokenize_many(self, texts: Sequence[str | None]) -> list[list[str]]:
        return [words(t) for t in texts]


class WordPieceAnalyzer:
    """WordPiece over ``vocab`` (a ``vocab.txt``: one piece per line) or a ``tokenizer.json``."""

    name = WORDPIECE

    def __init__(self, vocab: str | Path, max_tokens: int | None = RELEASE_MAX_TOKENS):
        path = Path(vocab)
        if not path.is_file():
            raise ConfigError(f"hypotheses.retrieval.vocab: {path} does not exist")
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError("hypotheses.retrieval.max_tokens: must be at least 1 (or null)")
        try:
            from tokenizers import Tokenizer
            from tokenizers.implementations import BertWordPieceTokenizer
        except ImportError as err:  # pragma: no cover - tokenizers ships with transformers
            raise ConfigError("the wordpiece analyzer needs the `tokenizers` package") from err
        try:
            if path.suffix == ".json":
                self._tokenizer = Tokenizer.from_file(str(path))
            else:
                self._tokenizer = BertWordPieceTokenizer(str(path), lowercase=True)
        except Exception as err:  # the library's own message names the problem
            raise ConfigError(f"{path}: not a WordPiece vocabulary ({err})") from err
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.path = path
        self.max_tokens = max_tokens

    def tokenize(self, text: str | None) -> list[str]:
        return self.tokenize_many([text])[0]

    def tokenize_many(self, texts: Sequence[str | None]) -> list[list[str]]:
        out: list[list[str]] = []
        texts = ["" if t is None else str(t) for t in texts]
        for start in range(0, len(texts), BATCH_TEXTS):
            batch = self._tokenizer.encode_batch(
                texts[start : start + BATCH_TEXTS], add_special_tokens=False
            )
            for encoding in batch:
                tokens = encoding.tokens
                # Anserini joins the pieces with spaces and splits on whitespace
                tokens = [t for t in " ".join(tokens).split() if t]
                out.append(tokens if self.max_tokens is None else tokens[: self.max_tokens])
        return out


def make_analyzer(
    name: str = WORDS, vocab: str | Path | None = None, max_tokens: int | None = RELEASE_MAX_TOKENS
) -> Analyzer | None:
    """The analyzer of a config (None: the index's built-in ``words`` tokens)."""
    if name == WORDS:
        return None
    if name == WORDPIECE:
        if not vocab:
            raise ConfigError(
                "hypotheses.retrieval.vocab: the wordpiece analyzer needs a vocabulary file "
                "(bert-base-uncased's vocab.txt for the release's analyzer)"
            )
        return WordPieceAnalyzer(vocab, max_tokens)
    raise ConfigError(f"hypotheses.retrieval.analyzer: unknown value {name!r} (words or wordpiece)")
