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
from ..scoring.tokenization import Known, TextKey, tokenize_keys
from ..tasks.preference import PreferenceInstance, prompt_key

CHUNK = 1024  # pairs tokenized at once when they are counted
Whole = tuple[list[int], list[int], list[int]]  # a pair's (prompt, chosen, rejected) tokens, uncut


def pair_texts(tokenizer: Any, instance: PreferenceInstance) -> list[TextKey]:
    """What a pair's batch tokenizes: its prompt with the tokenizer's special tokens unless it
    starts with BOS (a chat template writes it: kept once), and each answer alone, without
    (TRL's tokenization of a prompt and a completion)."""
    return [
        prompt_key(tokenizer, instance.prompt),
        (instance.chosen, False),
        (instance.rejected, False),
    ]


def fitted(
    prompt: Sequence[int], chosen: Sequence[int], rejected: Sequence[int], max_length: int
) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
    """A pair's tokens within `max_length` for each (prompt, answer), as TRL's
    `truncation_mode='keep_end'` cuts a sequence: the prompt keeps its end, as many of its last
    tokens as leave the longer answer whole after it (the prompt is run once for both answers);
    an answer that does not fit even after one prompt token keeps its start."""
    chosen, rejected = chosen[: max_length - 1], rejected[: max_length - 1]
    room = max_length - max(len(chosen), len(rejected))
    return prompt[-room:], chosen, rejected


def whole_pairs(
    tokenizer: Any, instances: Sequence[PreferenceInstance], known: Known | None = None
) -> list[Whole]:
    """Each pair's (prompt, chosen, rejected) tokens, uncut, each answer with the end-of-text
    token after it, as TRL tokenizes a completion (`known`: the texts' tokens as stored, else
    tokenized here)."""
    texts = [pair_texts(tokenizer, instance) for instance in instances]
    if known is None:
        known = tokenize_keys(tokenizer, [key for keys in texts for key in keys])
    end = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return [
        (list(known[prompt]), [*known[chosen], *end], [*known[rejected], *end])
        for prompt, chosen, rejected in texts
    ]


def fitted_pairs(
    tokenizer: Any,
    max_length: int,
    instances: Sequence[PreferenceInstance],
    known: Known | None = None,
) -> list[PreferencePair]:
    """The pairs' tokens, cut to `max_length` as :func:`fitted` says: the same in the reference
    step, training and evaluation, which all batch pairs here."""
    return [
        PreferencePair(*fitted(*whole, max_length))
        for whole in whole_pairs(tokenizer, instances, known)
    ]


def cut_pairs(
    tokenizer: Any, max_length: int, instances: Sequence[Any], known: Known | None = None
) -> tuple[int, int]:
    """(pairs whose prompt loses its start, pairs with an answer cut) in `max_length`: what
    :func:`fitted` drops, counted for the warnings that say so (a chunk of pairs at a time)."""
    prompts = answers = 0
    for start in range(0, len(instances), CHUNK):
        chunk = instances[start : start + CHUNK]
        for whole in whole_pairs(tokenizer, chunk, known):
            kept = fitted(*whole, max_length)
            prompts += len(kept[0]) < len(whole[0])
            answers += len(kept[1]) < len(whole[1]) or len(kept[2]) < len(whole[2])
    return prompts, answers


def pad_id_of(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return pad if pad is not None else tokenizer.eos_token_id


def preference_batch(
    tokenizer: Any,
    max_length: int,
    instances: Sequence[PreferenceInstance],
    weights: Sequence[float],
    known: Known | None = None,
) -> dict[str, Any]:
    """One forward's batch: `preference` (the packed pairs, and TRL's two rows each for a model
    that cannot take packed rows: the collate does not know the model), `weights` (0: padding),
    and `reference` where every pair has it (a list: no engine casts it to a low precision);
    `known`: the pairs' texts' tokens as stored."""
    pairs = fitted_pairs(tokenizer, max_length, instances, known)
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
