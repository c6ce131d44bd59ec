"""Packed SFT (`collate_fn.packing: true`): a batch's documents packed into rows of max_length
by best-fit decreasing, positions restarting per document and no attention across documents,
give every answer token the log-probability it has unpacked (fp32, 1e-6), so the loss is the
unpacked batch's, on GPT-2 and Llama; flash attention's varlen form (the rows flattened into
one) gives the same; through `tango run` (2 processes) packed and unpacked training give the
same losses, from tokens stored once for both, and a damaged token file is one line."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from catwalk_steps.kinds.generative import training_batch
from catwalk_steps.scoring.packed_documents import (
    best_fit_decreasing,
    document_log_probs,
    flattened,
    packed_answer_batch,
)
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import ChoiceSequence

from .conftest import QA_TASK, run_tango, step_result
from .families import FAMILIES


def test_best_fit_decreasing_puts_each_document_where_least_room_is_left():
    assert best_fit_decreasing([5, 3, 8, 2, 4], 10) == [[2, 3], [0, 4], [1]]
    assert best_fit_decreasing([6, 3, 3, 4], 10) == [[0, 3], [1, 2]]
    assert best_fit_decreasing([10, 10], 10) == [[0], [1]]
    assert best_fit_decreasing([], 10) == []


def documents(count: int, seed: int = 1) -> list[ChoiceSequence]:
    """Prompt-and-answer sequences of random lengths (2 to 40 tokens, at least 1 each)."""
    rng = random.Random(seed)
    sequences = []
    for index in range(count):
        length = rng.randint(2, 40)
        ids = tuple(rng.randrange(250) for _ in range(length))
        sequences.append(ChoiceSequence(ids, rng.randint(1, length - 1), index, 0, 1))
    return sequences


def unpacked_log_probs(lm, sequences) -> torch.Tensor:
    """Each answer token's log-probability, each document alone in its own row."""
    found = []
    for s in sequences:
        ids = torch.tensor([s.token_ids])
        logits = lm(input_ids=ids[:, :-1]).logits[0].float().log_softmax(-1)
        start = len(s.token_ids) - s.continuation_length
        rows = torch.arange(start - 1, len(s.token_ids) - 1)
        found.append(logits[rows, ids[0, start:]])
    return torch.cat(found)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_packed_rows_give_every_answer_token_and_the_loss_their_unpacked_values(family):
    torch.manual_seed(0)
    model = RankClassifier(config=FAMILIES[family][0], tokenizer="catwalk::byte_level").train()
    sequences = documents(12)
    weights = [1.0] * 11 + [0.0]  # the last one a padding item
    batch = packed_answer_batch(sequences, weights, 0, 64)
    rows = batch["documents"]["packed_input_ids"]
    assert rows.size(0) < len(sequences) and rows.size(1) <= 64  # packed, within max_length
    with torch.no_grad():
        packed = document_log_probs(model.lm, batch["documents"])
        alone = unpacked_log_probs(model.lm, sequences)
        order = torch.argsort(batch["documents"]["packed_target_sequence"], stable=True)
        assert torch.allclose(packed[order], alone, rtol=0, atol=1e-6)
    loss = model(**batch)["loss"]
    expected = model(**training_batch(sequences, weights, 0, 64))["loss"]
    assert float(loss) == pytest.approx(float(expected), rel=0, abs=1e-6)
    loss.backward()  # it trains: gradients reach the weights
    assert all(p.grad is not None for p in model.lm.parameters() if p.requires_grad)


def test_the_flattened_varlen_form_gives_the_same_log_probabilities():
    """Flash attention's form: one row, no padding, no mask, positions restarting per document
    (here SDPA, which Transformers gives the same block-diagonal mask from those positions)."""
    torch.manual_seed(0)
    model = RankClassifier(config=FAMILIES["llama"][0], tokenizer="catwalk::byte_level").eval()
    sequences = documents(9, seed=2)
    batch = packed_answer_batch(sequences, [1.0] * 9, 0, 64)["documents"]
    flat = flattened(batch)
    assert flat["input_ids"].size(0) == 1 and 0 not in flat["input_ids"].shape
    with torch.no_grad():
        inputs = {"input_ids": flat["input_ids"], "position_ids": flat["position_ids"]}
        logits = model.lm(**inputs, use_cache=False).logits
        log_probs = logits[0, flat["cols"]].float().log_softmax(-1)
        varlen = log_probs.gather(-1, batch["packed_target_ids"][:, None])[:, 0]
        assert torch.allclose(varlen, document_log_probs(model.lm, batch), rtol=0, atol=1e-6)


# --- Through `tango run` ----------------------------------------------------------------------

QA = {
    **QA_TASK,
    "max_gen_toks": 24,
    "metric_list": [{"metric": "exact_match"}],
}


def sft_rows(count: int, seed: int = 0) -> list[dict]:
    """Questions and answers of lengths spread over 10 to 100 bytes (byte-level tokens)."""
    rng = random.Random(seed)
    words = ["fox", "jumps", "over", "the", "lazy", "dog", "and", "runs", "far", "away"]
    rows = []
    for _ in range(count):
        question = " ".join(rng.choice(words) for _ in range(rng.randint(2, 16)))
        rows.append({"q": question, "a": " ".join(rng.choice(words) for _ in range(4))})
    return rows


SIZES = {"train": 64, "validation": 4}  # rows of each split


def training(packing: bool, lr: float, data: str = "data") -> dict:
    collate = {
        "type": "catwalk::collate",
        "tokenizer": "catwalk::byte_level",
        "max_length": 128,
        "packing": packing,
    }
    return {
        "type": "catwalk::train",
        "model": {
            "type": "catwalk::rank_classifier",
            "config": FAMILIES["gpt2"][0] | {"n_positions": 128},
            "tokenizer": "catwalk::byte_level",
        },
        "training_engine": {
            "type": "catwalk::torch",
            "optimizer": {"type": "torch::AdamW", "lr": lr},
        },
        "dataset_dict": {"type": "ref", "ref": data},
        "train_dataloader": {
            "type": "catwalk::sharded",
            "batch_size": 8,
            "shuffle": True,
            "collate_fn": collate,
        },
        "train_steps": 3,
        "checkpoint_every": 3,
        "device_count": 2,
    }


def history(workspace: Path, run: str, step: str) -> dict:
    info = json.loads((step_result(workspace, run, step) / "catwalk_model.json").read_text())
    return info["metrics_history"]


def tokens_manifests(workspace: Path) -> list[Path]:
    return sorted((workspace / "tokens").glob("*/tokens.json"))


def losses(workspace: Path, run: str, step: str) -> list[float]:
    return [entry["loss"] for entry in history(workspace, run, step)["train"]]


@pytest.mark.slow
@pytest.mark.distributed
def test_packed_and_unpacked_sft_train_to_the_same_losses_from_tokens_stored_once(tmp_path):
    files = {}
    for split, rows in (("train", sft_rows(64)), ("validation", sft_rows(4, seed=1))):
        files[split] = str(tmp_path / f"{split}.jsonl")
        Path(files[split]).write_text("".join(json.dumps(row) + "\n" for row in rows))
    steps = {
        "data": {"type": "catwalk::load_task", "task": {**QA, "data_files": files}},
        "padded": training(False, 1e-3),
        "packed": training(True, 1e-3),
        "faster": training(False, 2e-3),  # a sweep's other cell: the same tokens
    }
    experiment = tmp_path / "sft.json"
    experiment.write_text(json.dumps({"steps": steps}))
    workspace = tmp_path / "ws"
    output = run_tango(experiment, workspace, "sft")
    assert output.count("Tokenized 64 rows once") == 1, output[-3000:]
    padded, packed = losses(workspace, "sft", "padded"), losses(workspace, "sft", "packed")
    assert len(padded) == 2 and all(math.isfinite(x) for x in padded)  # steps 1 and 3
    assert packed == pytest.approx(padded, rel=1e-5)
    assert losses(workspace, "sft", "faster") != padded
    # Validation generates as without packing (the validation batches are not packed).
    validated = [history(workspace, "sft", step)["validation"] for step in ("padded", "packed")]
    assert validated[0][-1]["count"] == 4 and "exact_match,none" in validated[0][-1]
    assert validated[0] == validated[1]
    # The training split's tokens and the validation split's, each keyed by its fingerprint
    # as stored with it: the training one is what every checkpoint records of the data.
    manifests = {path.parent: json.loads(path.read_text()) for path in tokens_manifests(workspace)}
    keys = {manifest["rows"]: manifest["key"]["data"] for manifest in manifests.values()}
    record = json.loads((step_result(workspace, "sft", "data") / "splits.json").read_text())
    stored = {rows: record["splits"][name]["fingerprint"] for name, rows in SIZES.items()}
    assert keys == stored and output.count("Tokenized 4 rows once") == 1
    checkpointed = [json.loads(p.read_text()) for p in workspace.rglob("COMPLETE.json")]
    assert {manifest["data"]["sha256"] for manifest in checkpointed} == {stored[64]}
    [tokens] = [d / "tokens-0.arrow" for d, m in manifests.items() if m["rows"] == 64]
    data = bytearray(tokens.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tokens.write_bytes(bytes(data))
    steps["fastest"] = training(True, 3e-3)
    experiment.write_text(json.dumps({"steps": steps}))
    with pytest.raises(AssertionError) as failed:
        run_tango(experiment, workspace, "damaged")
    said = [line for line in str(failed.value).splitlines() if "AlteredFileError" in line]
    assert said and f"AlteredFileError: {tokens}: " in said[0], str(failed.value)[-3000:]
