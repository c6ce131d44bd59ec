"""The lm-evaluation-harness half of bench/generation_speed.py; runs in lm-eval's own venv:

    <lm-eval python> bench/lmeval_generate.py --model DIR --requests R.json --batch-size 8 \
        --out O.json

Times `HFLM.generate_until` (what `lm_eval --model hf` runs for generative tasks) on the given
requests (context, until, max_gen_toks), after one warm-up request, and writes the answers and
the seconds. Imports nothing from catwalk_steps.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=args.model, batch_size=args.batch_size, device="cpu", dtype="float32")
    requests = json.loads(Path(args.requests).read_text())

    def instances(rows):
        return [
            Instance(
                request_type="generate_until",
                doc={},
                arguments=(r["context"], {"until": r["until"], "max_gen_toks": r["max_gen_toks"],
                                          "do_sample": False, "temperature": 0.0}),
                idx=0,
            )
            for r in rows
        ]  # fmt: skip

    lm.generate_until(instances(requests[:1]), disable_tqdm=True)  # warm-up
    started = time.perf_counter()
    answers = lm.generate_until(instances(requests), disable_tqdm=True)
    seconds = time.perf_counter() - started
    Path(args.out).write_text(json.dumps({"answers": answers, "seconds": seconds}))


if __name__ == "__main__":
    main()
