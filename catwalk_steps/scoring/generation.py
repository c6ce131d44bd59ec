"""Greedy generation for generation requests, as lm-evaluation-harness 0.4's Hugging Face backend
runs `generate_until`, batched with a key/value cache and left padding.

- Prompts are tokenized with the tokenizer's special tokens (none before a prompt that already
  starts with BOS) and cut on the left to `max_length - max_gen_toks` tokens.
- Each step appends every row's most likely next token. A row stops at the model's end-of-text
  token, at a stop sequence (seen in its last tokens, as lm-eval's stopping criteria look), or
  after `max_gen_toks` tokens; the text is the decoded tokens (special tokens skipped) cut
  before the first stop sequence or end-of-text text.
- Rows that share their first tokens (a description, fixed few-shot examples) run those tokens
  once: the shared prefix is computed for one row and its cache given to every row.

One decoding step is one call of `step` (:class:`Step`): in one process the model's forward,
under a sharded engine its root wrapper's, where :class:`Ranks` tells every rank whether any
rank still has rows to finish (and whether all share prompt prefixes), so that all ranks run
the same number of forwards.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..tasks import GenerationInstance
from ..tasks.generation import prompt_room
from .decoding import Decoding, Step, shared_prefix
from .sampling import Choice, greedy
from .sequences import CHARS_PER_TOKEN
from .tokenization import Known, TextKey, tokenize_keys

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class GenerationEncoder:
    """Prompts tokenized and cut as lm-evaluation-harness's `tok_batch_encode` does."""

    def __init__(self, tokenizer: Any, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.bos_text = tokenizer.bos_token if tokenizer.bos_token_id is not None else None
        self.eos_text = tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=False)
        # What padding rows are given (masked): the tokenizer's pad token, else its end-of-text.
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else tokenizer.eos_token_id
        self.stop_lengths: dict[str, int] = {}

    def prompts(
        self, instances: Sequence[GenerationInstance], known: Known | None = None
    ) -> list[list[int]]:
        """Each instance's prompt tokens, cut on the left to leave room for its answer
        (`known`: the prompts' tokens as stored, else tokenized here)."""
        keys = [self.prompt_key(instance) for instance in instances]
        found = tokenize_keys(self.tokenizer, keys) if known is None else known
        return [
            list(found[key][-self.room(instance) :])
            for key, instance in zip(keys, instances, strict=True)
        ]

    def prompt_key(self, instance: GenerationInstance) -> TextKey:
        """What a prompt is tokenized as: no token covers more than CHARS_PER_TOKEN characters,
        so a prompt far longer than the room it has is cut before it is tokenized, keeping the
        same last tokens; the tokenizer's special tokens unless it starts with BOS."""
        return self.clip(instance), self.special(instance.context)

    def clip(self, instance: GenerationInstance) -> str:
        return instance.context[-(self.room(instance) + 1) * CHARS_PER_TOKEN :]

    def special(self, context: str) -> bool:
        return not (self.bos_text and context.startswith(self.bos_text))

    def room(self, instance: GenerationInstance) -> int:
        return prompt_room(
            instance.max_gen_toks, self.max_length, "the task", f"max_length {self.max_length}"
        )

    def stop_window(self, until: Sequence[str]) -> int:
        """How many last tokens are decoded to look for a stop sequence (lm-eval's: its
        tokens and two more)."""
        for stop in until:
            if stop not in self.stop_lengths:
                ids = self.tokenizer.encode(stop, add_special_tokens=False)
                self.stop_lengths[stop] = len(ids)
        return max((self.stop_lengths[s] for s in until), default=0) + 2

    def stops(self, tokens: Sequence[int], until: Sequence[str]) -> bool:
        """Whether `tokens` (an answer so far) end in a stop sequence: looked for in the last
        tokens, decoded (:meth:`stop_window`)."""
        if not until:
            return False
        tail = self.tokenizer.decode(list(tokens[-self.stop_window(until) :]))
        return any(stop in tail for stop in until)

    def text(self, tokens: Sequence[int], until: Sequence[str]) -> str:
        """The answer: decoded without special tokens, cut before the first stop sequence."""
        text = self.tokenizer.decode(list(tokens), skip_special_tokens=True)
        for stop in [*until, self.eos_text]:
            if stop:
                text = text.split(stop)[0]
        return text


class Ranks:
    """What the ranks of a sharded run decide together; alone, a rank decides for itself."""

    def any(self, flag: bool) -> bool:
        return flag

    def all(self, flag: bool) -> bool:
        return flag


@dataclass
class Rows:
    """The state of one batch being generated."""

    until: list[tuple[str, ...]]
    budgets: list[int]
    tokens: list[list[int]] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)

    def __post_init__(self):
        self.tokens = [[] for _ in self.budgets]
        self.done = [budget <= 0 for budget in self.budgets]


def greedy_generate(
    step: Step,
    encoder: GenerationEncoder,
    prompts: Sequence[Sequence[int]],
    instances: Sequence[GenerationInstance],
    eos_ids: set[int],
    live: Sequence[bool] | None = None,
    ranks: Ranks | None = None,
    share_prefix: bool = True,
    choose: Choice = greedy,
) -> list[list[int]]:
    """Each row's generated tokens (without the end-of-text token). `live` marks the rows that
    count (others, stand-ins that even out ranks' shares, stop at once but keep stepping);
    `choose` picks each step's tokens (:mod:`.sampling`: greedy, or sampled)."""
    ranks = ranks or Ranks()
    rows = Rows([x.until for x in instances], [x.max_gen_toks for x in instances])
    if live is not None:
        rows.done = [done or not alive for done, alive in zip(rows.done, live, strict=True)]
    room = max(rows.budgets, default=0)
    decoding, logits = started(step, prompts, encoder.pad_id, ranks, share_prefix, room)
    while True:
        next_tokens = chosen_tokens(rows, logits, eos_ids, encoder, choose)
        if not ranks.any(not all(rows.done)):
            return rows.tokens
        # Finished rows keep stepping (their tokens are not kept): one forward for all.
        logits = decoding.advance(next_tokens)


def started(
    step: Step,
    prompts: Sequence[Sequence[int]],
    pad_id: int,
    ranks: Ranks,
    share_prefix: bool,
    room: int = 0,
) -> tuple[Decoding, torch.Tensor]:
    """A lockstep decoding of `prompts` begun, and their first logits: the prefix every prompt
    shares run once first where every rank has one (one forward more on every rank, or none);
    `room`: the tokens to come that the cache is given room for (:class:`.decoding.Decoding`)."""
    shared = shared_prefix(prompts) if share_prefix else 0
    shared = shared if ranks.all(shared > 0) else 0
    decoding = Decoding(step, pad_id, room)
    decoding.share(prompts[0][:shared])
    return decoding, decoding.start(prompts)


def chosen_tokens(
    rows: Rows,
    logits: torch.Tensor,
    eos_ids: Collection[int],
    encoder: GenerationEncoder,
    choose: Choice = greedy,
) -> list[int]:
    """Each row's next token (`choose`'s: the most likely one, or one sampled), given to the
    rows not done yet (:func:`finish_row`). Done rows are chosen for too: a sampler's draws
    then never depend on which rows are done."""
    tokens = choose(logits).tolist()
    for row, token in enumerate(tokens):
        if not rows.done[row]:
            finish_row(rows, row, token, eos_ids, encoder)
    return tokens


def finish_row(
    rows: Rows, row: int, token: int, eos_ids: Collection[int], encoder: GenerationEncoder
) -> None:
    """Row `row`'s next token: kept, unless it ends the answer; the row is done at end-of-text,
    a stop sequence or its budget."""
    if token in eos_ids:
        rows.done[row] = True
        return
    tokens = rows.tokens[row]
    tokens.append(token)
    rows.done[row] = len(tokens) >= rows.budgets[row] or encoder.stops(tokens, rows.until[row])


def decode_step(
    lm: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    past_key_values: Any = None,
) -> dict[str, Any]:
    """One forward of a causal LM with its cache: the last position's logits (float32) and
    the cache that now holds `input_ids` too."""
    keep = {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(lm) else {}
    outputs = lm(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=True,
        **keep,  # the last position's logits only (a prompt's others would cost most)
    )
    return {"logits": outputs.logits[:, -1, :].float(), "past_key_values": outputs.past_key_values}


@functools.cache
def forward_parameters_of(kind: type[PreTrainedModel]) -> frozenset[str]:
    return frozenset(inspect.signature(kind.forward).parameters)


def forward_parameters(lm: PreTrainedModel) -> frozenset[str]:
    # A class is hashable; mypy checks Hashable against its instances' __hash__ (unbound).
    return forward_parameters_of(type(lm))  # type: ignore[arg-type]


def forward_step(forward: Callable[[dict[str, Any]], dict[str, Any]]) -> Step:
    """A decoding step through `forward` (a batch's forward: the model's own, or an engine's
    `forward_eval` through its root wrapper), which moves the batch to its device."""

    def step(ids, mask, positions, cache):
        batch = {"input_ids": ids, "attention_mask": mask}
        batch["decoding"] = {"position_ids": positions, "past_key_values": cache}
        outputs = forward(batch)
        return outputs["logits"], outputs["past_key_values"]

    return step


def eos_ids_of(lm: Any, tokenizer: Any) -> set[int]:
    """The tokens that end an answer: the model's generation config's end-of-text (what
    `generate` stops at), else the tokenizer's."""
    config = getattr(lm, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}
