"""What a split's stored tokens depend on, as one digest: the split's fingerprint, the kind
that lays out its batches, the tokenizer (its content: vocabulary, merges, normalizer, special
tokens, chat template, whatever name or path it was loaded by), the collate's `max_length`
(a prompt is cut to fit before it is tokenized), and the format of the stored files. Two runs
that agree on all of these read the same files; a change in any one is another directory."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ..file_digests import file_digests

FORMAT = 1  # the stored files' layout (one `tokens` column per row: its texts' token ids)
# Files of a tokenizer's directory that are weights, never tokenizer content.
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt")


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """The tokenizer as what it does: a fast tokenizer's whole pipeline (its `tokenizers` JSON),
    else the digests of the files of its directory that are not weights; with its class, special
    tokens and chat template, and the versions of the libraries that run it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    content: dict[str, str] | str
    if backend is not None:
        content = hashlib.sha256(backend.to_str().encode()).hexdigest()
    else:
        content = directory_content(Path(str(getattr(tokenizer, "name_or_path", ""))))
    return {
        "class": type(tokenizer).__name__,
        "content": content,
        "special_tokens": {k: str(v) for k, v in tokenizer.special_tokens_map.items()},
        "chat_template": getattr(tokenizer, "chat_template", None),
        "transformers": version("transformers"),
        "tokenizers": version("tokenizers"),
    }


def directory_content(directory: Path) -> dict[str, str] | str:
    """Each non-weight file of a local tokenizer's directory with its SHA-256; its name when
    it is not a local directory."""
    if not directory.is_dir():
        return str(directory)
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix not in WEIGHTS)
    return dict(zip((p.name for p in files), file_digests(files), strict=True))


def tokens_key(data: str, kind: str, collator: Any) -> dict[str, Any]:
    """Everything the stored tokens of a split depend on (`data`: the split's fingerprint as
    stored with it, :func:`~catwalk_steps.kinds.stored.split_fingerprint`, the one a run's
    identity records; `kind`: its kind's name; `collator`: the collate that reads them)."""
    return {
        "format": FORMAT,
        "data": data,
        "task_kind": kind,
        "tokenizer": tokenizer_identity(collator.encoder.tokenizer),
        "max_length": collator.encoder.max_length,
        "unconditioned_rows": collator.unconditioned_rows,
    }


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
