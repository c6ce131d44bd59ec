"""The tokens of a split training collates (its training split, its validation split; never a
stream, which its loader tokenizes a batch at a time), computed once and stored as Arrow: the
token ids of every text its kind's batches tokenize (:meth:`~catwalk_steps.kinds.TaskKind.
token_texts`), keyed by what they depend on (the split's stored fingerprint, the tokenizer's
content and chat template, `max_length`), in a directory of the workspace that every rank,
`--parallelism` slot and sweep cell reads: the batches are collated from them, equal to
batches tokenized at collate time.

- :mod:`.key`: what the tokens depend on, as one digest;
- :mod:`.build`: the tokens of a split computed cold, on every core, streaming;
- :mod:`.store`: the directory, written once under a lock, checked when read; the split whose
  items carry their tokens (:class:`~.store.TokenizedSplit`).
"""

from .store import StoredTokens, TokenizedSplit, tokens_root, training_tokens

__all__ = ["StoredTokens", "TokenizedSplit", "tokens_root", "training_tokens"]
