"""Tokenizers: a byte-level one that needs no download, and cached loading by name or path."""

from __future__ import annotations

import functools

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from ..remote import files_only

BYTE_LEVEL_TOKENIZER = "catwalk::byte_level"


def byte_level_tokenizer():
    """A GPT-2-style byte-level tokenizer (256 byte tokens + end-of-text) that needs no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    eot = "<|endoftext|>"
    vocab[eot] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=eot, eos_token=eot, unk_token=eot, pad_token=eot
    )


def load_tokenizer(name_or_path: str, field: str = "tokenizer"):
    """A tokenizer by hub name or local path, or the built-in `catwalk::byte_level` one.

    Cached per process: collators and models asking for the same tokenizer share one object.
    A tokenizer that cannot be loaded is a configuration error naming `field`.
    """
    try:
        return _cached_tokenizer(name_or_path, field)
    except (OSError, ValueError) as e:
        raise ConfigurationError(
            f"{field} '{name_or_path}': cannot load it ({first_line(e)})"
        ) from None


@functools.lru_cache(maxsize=8)
def _cached_tokenizer(name_or_path: str, field: str):
    if name_or_path == BYTE_LEVEL_TOKENIZER:
        tokenizer = byte_level_tokenizer()
    else:
        from transformers import AutoTokenizer

        cached = files_only(name_or_path, field, "tokenizer_config.json")
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=cached)
    if tokenizer.pad_token_id is None:
        # Padding positions are masked out; any id will do, and GPT-2 has only end-of-text.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
