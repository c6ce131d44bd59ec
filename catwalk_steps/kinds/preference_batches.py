"""Preference pairs as batches: each pair's prompt and answers tokenized and cut (the kind's
part: :class:`~catwalk_steps.scoring.preference.PreferencePair`), packed for one forward with
the prompt once (:func:`~catwalk_steps.scoring.preference.pack_pairs`), with each pair's
weight and, where a `catwalk::reference_logprobs` step has computed them, the reference's
log-probabilities; and every request's answer on one device (evaluation, the reference step)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tango.integrations.torch.util import move_to_device

from ..scoring.choices import evaluating
from ..scoring.preference import PreferencePair, concatenated_pairs, pack_pairs
from ..scoring.preference_objective import (
    LOGPS_CHOSEN,
    LOGPS_REJECTED,
    REWARDS_CHOSEN,
    REWARDS_REJECTED,
)
from ..tasks.preference import PreferenceInstance, prompt_ids


def answer_ids(tokenizer: Any, answer: str) -> list[int]:
    """An answer's tokens and the end-of-text token after it, as TRL tokenizes a completion."""
    ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


def pair_of(tokenizer: Any, max_length: int, instance: PreferenceInstance) -> PreferencePair:
    """The pair's tokens within `max_length` for each (prompt, answer): the prompt cut on the
    left to leave one answer token (a task's `max_length` refuses longer prompts when its data
    is read), each answer cut on the right (TRL's `keep_start`)."""
    prompt = prompt_ids(tokenizer, instance.prompt)[-(max_length - 1) :]
    room = max_length - len(prompt)
    chosen = answer_ids(tokenizer, instance.chosen)[:room]
    rejected = answer_ids(tokenizer, instance.rejected)[:room]
    return PreferencePair(prompt=prompt, chosen=chosen, rejected=rejected)


def pad_id_of(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return pad if pad is not None else tokenizer.eos_token_id


def preference_batch(
    tokenizer: Any,
    max_length: int,
    instances: Sequence[PreferenceInstance],
    weights: Sequence[float],
) -> dict[str, Any]:
    """One forward's batch: `preference` (the packed pairs, and TRL's two rows each for a model
    that cannot take packed rows: the collate does not know the model), `weights` (0: padding),
    and `reference` where every pair has it (a list: no engine casts it to a low precision)."""
    pairs = [pair_of(tokenizer, max_length, instance) for instance in instances]
    pad = pad_id_of(tokenizer)
    batch: dict[str, Any] = {
        "preference": {**pack_pairs(pairs, pad), **concatenated_pairs(pairs, pad)},
        "weights": torch.tensor(list(weights), dtype=torch.float32),
    }
    if all(instance.reference is not None for instance in instances):
        batch["reference"] = [list(instance.reference or ()) for instance in instances]
    return batch


def answer_of(outputs: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One pair's answer, as data: its answers' log-probabilities and, where the model had a
    reference, their rewards."""
    answer: dict[str, Any] = {
        "logps": [float(outputs[LOGPS_CHOSEN][index]), float(outputs[LOGPS_REJECTED][index])]
    }
    if REWARDS_CHOSEN in outputs:
        rewards = (outputs[REWARDS_CHOSEN][index], outputs[REWARDS_REJECTED][index])
        answer["rewards"] = [float(r) for r in rewards]
    return answer


def batch_answers(outputs: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    cpu = {key: value.float().cpu() for key, value in outputs.items() if key != "loss"}
    return [answer_of(cpu, index) for index in range(count)]


def preference_answers(
    model: Any, requests: list, options: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Every pair's answer from `model` on one device: `batch_size` answers (half as many
    pairs) a forward, as sharded workers batch them."""
    device = torch.device(options["device"])
    size = max(1, int(options.get("batch_size") or 16) // 2)
    precision = options.get("precision")
    autocast = precision.autocast(device.type) if precision is not None else torch.no_grad()
    answers: list[dict[str, Any]] = []
    with evaluating(model), autocast:
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            batch = preference_batch(
                model.tokenizer, options["max_length"], chunk, [1.0] * len(chunk)
            )
            outputs = model(**move_to_device(batch, device))
            answers += batch_answers(outputs, len(chunk))
    return answers
