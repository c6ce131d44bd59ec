"""TRL's own dataset preparation, timed, for bench/data_scale.py to compare with (run in a
throwaway venv with TRL 1.16: `pip install torch==2.13.0 && pip install trl==1.16.0`).

    <venv>/bin/python bench/trl_prepare.py FILE.jsonl --form sft_text|sft_chat|preference \\
        --tokenizer TOKENIZER.json --max-length 512 [--packing] [--num-proc 2]

What TRL does with a data file before its first step: `datasets.load_dataset('json')`, then the
trainer's constructor tokenizes every row (`SFTTrainer`: prompt-completion or conversational
rows, then best-fit-decreasing packing with `packing`; `DPOTrainer`: prompt, chosen and
rejected), `dataset_num_proc` processes. Timed: loading the file, and the trainer's
preparation of it (a trainer built on 8 rows, then its `_prepare_dataset` on the whole file:
what its constructor runs on a training set). The model is a tiny GPT-2 of the tokenizer's
vocabulary.
Prints one JSON line: {"load_s", "prepare_s", "rows", "peak_rss_mib"}.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def tokenizer_of(path: str):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=path)
    eos = next(t for t in ("<|endoftext|>", "</s>", "<eos>") if t in tokenizer.get_vocab())
    tokenizer.eos_token = tokenizer.pad_token = eos
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def trainer(form: str, data, tokenizer, args):
    """A trainer of `data` (8 rows: the set-up, not the data, costs here)."""
    import copy

    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(tokenizer), n_positions=2048)
    model = GPT2LMHeadModel(config)
    common = dict(
        output_dir=tempfile.mkdtemp(),
        report_to=[],
        dataset_num_proc=args.num_proc,
        max_length=args.max_length,
        use_cpu=True,
        bf16=False,
    )
    if form == "preference":
        return DPOTrainer(
            model=model,
            ref_model=copy.deepcopy(model),
            args=DPOConfig(**common),
            train_dataset=data,
            processing_class=tokenizer,
        )
    config = SFTConfig(**common, packing=args.packing, packing_strategy="bfd")
    return SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)


def prepared(form: str, built, data, tokenizer, args):
    """TRL's preparation of `data` as its constructor runs it (`_prepare_dataset`, private in
    TRL 1.16: the one place it tokenizes, and packs, a training set)."""
    if form == "preference":
        return built._prepare_dataset(data, tokenizer, built.args, "train")
    return built._prepare_dataset(data, tokenizer, built.args, args.packing, None, "train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--form", required=True, choices=["sft_text", "sft_chat", "preference"])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--packing", action="store_true")
    parser.add_argument("--num-proc", type=int, default=2)
    args = parser.parse_args()
    import datasets

    datasets.disable_caching()  # every run prepares the data, as a first run does
    tokenizer = tokenizer_of(args.tokenizer)
    start = time.perf_counter()
    data = datasets.load_dataset("json", data_files=args.file, split="train")
    load_s = time.perf_counter() - start
    built = trainer(args.form, data.select(range(8)), tokenizer, args)
    start = time.perf_counter()
    ready = prepared(args.form, built, data, tokenizer, args)
    prepare_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"load_s": load_s, "prepare_s": prepare_s, "rows": len(data), "prepared_rows": len(ready)}
    print(json.dumps({**out, "peak_rss_mib": peak}))


if __name__ == "__main__":
    main()
