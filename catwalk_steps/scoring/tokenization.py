"""Tokenizers: a byte-level one that needs no download, and cached loading by name or path."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tango.common.exceptions import ConfigurationError

from ..remote import files_only, is_hub_name
from ..tasks.base import ModelTokenizer
from ..tasks.chat_templates import ChatTemplate
from .causal_lm import cannot_load

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BYTE_LEVEL_TOKENIZER = "catwalk::byte_level"
OLMO_EVAL_TOKENIZERS = "olmo_eval::"

TextKey = tuple[str, bool]  # a text, and whether the tokenizer adds its special tokens to it
Known = Mapping[TextKey, tuple[int, ...]]  # texts' tokens: tokenized now, or stored


def tokenize_keys(tokenizer: Any, keys: Iterable[TextKey]) -> dict[TextKey, tuple[int, ...]]:
    """Each text's tokens as `tokenizer(texts, add_special_tokens=flag)` gives them: one batched
    call per setting of special tokens, each text once. The one rule every batch's tokens come
    from, whether tokenized at collate time or stored once (:mod:`catwalk_steps.tokenized`)."""
    unique = list(dict.fromkeys(keys))
    found: dict[TextKey, tuple[int, ...]] = {}
    for special in (True, False):
        texts = [text for text, flag in unique if flag == special]
        if texts:
            encoded = tokenizer(texts, add_special_tokens=special)["input_ids"]
            found.update(zip([(t, special) for t in texts], map(tuple, encoded), strict=True))
    return found


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


def tokenizer_file(path: str) -> PreTrainedTokenizerBase:
    """A tokenizer from a `tokenizers` JSON file (`tokenizer.json`), its end-of-text token
    (`<|endoftext|>`, else `</s>`) its end of sequence and padding."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_file(path)
    vocab = backend.get_vocab()
    eos = next((t for t in ("<|endoftext|>", "</s>", "<eos>") if t in vocab), None)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos, pad_token=eos)


def olmo_eval_tokenizer_path(name: str) -> str:
    """The file of a tokenizer ai2-olmo-eval ships: `olmo_eval::gpt-neox-olmo-dolma-v1_5` is
    `olmo_eval/tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json` (found without importing it)."""
    from ..tasks.sources import OLMO_EVAL_INSTALL, olmo_eval_package

    package = olmo_eval_package()
    if package is None:
        raise ValueError(f"the ai2-olmo-eval package is not installed; {OLMO_EVAL_INSTALL}")
    short = name[len(OLMO_EVAL_TOKENIZERS) :]
    path = package / "tokenizers" / f"allenai_{short}.json"
    if not path.is_file():
        shipped = sorted(
            p.name[len("allenai_") : -len(".json")] for p in (package / "tokenizers").iterdir()
        )
        raise ValueError(f"ai2-olmo-eval ships no such tokenizer (it has: {', '.join(shipped)})")
    return str(path)


def load_tokenizer(
    name_or_path: str, field: str = "tokenizer", chat_template: ChatTemplate | None = None
) -> PreTrainedTokenizerBase:
    """A tokenizer by hub name or local path, a `tokenizer.json` file, one ai2-olmo-eval ships
    (`olmo_eval::gpt-neox-olmo-dolma-v1_5`, OLMo's), or the built-in `catwalk::byte_level` one;
    with `chat_template` (a `chat_template` key's), that template instead of its own.

    Cached per process: collators and models asking for the same tokenizer share one object.
    A tokenizer that cannot be loaded is a configuration error naming `field`.
    """
    if not is_hub_name(name_or_path) and not os.path.exists(name_or_path):
        raise ConfigurationError(f"{field} '{name_or_path}': no such file or directory")
    try:
        tokenizer = _cached_tokenizer(name_or_path, field)
    except (OSError, ValueError) as e:
        raise cannot_load(name_or_path, e, field) from None
    return tokenizer if chat_template is None else _templated(name_or_path, field, chat_template)


@functools.lru_cache(maxsize=8)
def _templated(name_or_path: str, field: str, chat_template: ChatTemplate) -> Any:
    """The cached tokenizer's copy with `chat_template` (the shared one keeps its own)."""
    return chat_template.applied(_cached_tokenizer(name_or_path, field))


@functools.lru_cache(maxsize=8)
def _cached_tokenizer(name_or_path: str, field: str) -> PreTrainedTokenizerBase:
    if name_or_path == BYTE_LEVEL_TOKENIZER:
        tokenizer = byte_level_tokenizer()
    elif name_or_path.startswith(OLMO_EVAL_TOKENIZERS):
        tokenizer = tokenizer_file(olmo_eval_tokenizer_path(name_or_path))
    elif name_or_path.endswith(".json") and os.path.isfile(name_or_path):
        tokenizer = tokenizer_file(name_or_path)
    else:
        from transformers import AutoTokenizer

        cached = files_only(name_or_path, field, "tokenizer_config.json")
        tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, local_files_only=cached, trust_remote_code=False
        )
    if tokenizer.pad_token_id is None:
        # Padding positions are masked out; any id will do, and GPT-2 has only end-of-text.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def chat_tokenizer(
    task: Any, tokenizer_name: str, field: str, chat_template: ChatTemplate | None = None
) -> ModelTokenizer | None:
    """The model's tokenizer (`tokenizer_name`, given by `field`; with the `chat_template` a key
    gives) for a task whose prompts its chat template renders, loaded and checked to render
    them (one line if it cannot): what the task's `load` takes. None for other tasks, which
    load nothing."""
    if not task.renders_chat:
        return None
    loaded = load_tokenizer(tokenizer_name, field, chat_template)
    tokenizer = ModelTokenizer(loaded, tokenizer_name, field)
    task.check_tokenizer(tokenizer)
    return tokenizer
