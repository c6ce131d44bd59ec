"""Rank classification over any Hugging Face causal LM.

A multiple-choice instance becomes one sequence per choice: context tokens followed by the
choice's (continuation) tokens. A choice's score is the sum of its continuation tokens'
log-probabilities; the predicted answer is the highest score (`acc`) or the highest score per
character (`acc_norm`, lm-evaluation-harness's definition). One `forward` serves training,
validation and prediction, so every rank of a sharded engine runs the same root forward.

Model code knows nothing of distribution or devices: batches arrive on the right device.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

BYTE_LEVEL_TOKENIZER = "catwalk::byte_level"
OBJECTIVES = ("lm", "rank")


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


def load_tokenizer(name_or_path: str, field: str = "tokenizer"):
    """A tokenizer by hub name or local path, or the built-in `catwalk::byte_level` one.

    Cached per process: collators and models asking for the same tokenizer share one object.
    A tokenizer that cannot be loaded is a configuration error naming `field`.
    """
    try:
        return _cached_tokenizer(name_or_path)
    except (OSError, ValueError) as e:
        raise ConfigurationError(
            f"{field} '{name_or_path}': cannot load it ({first_line(e)})"
        ) from None


def first_line(error: Exception) -> str:
    """A one-line reason from a library error whose message may span many lines."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


@functools.lru_cache(maxsize=8)
def _cached_tokenizer(name_or_path: str):
    if name_or_path == BYTE_LEVEL_TOKENIZER:
        tokenizer = byte_level_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token_id is None:
        # Padding positions are masked out; any id will do, and GPT-2 has only end-of-text.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_causal_lm(
    pretrained: str | None, config: Mapping[str, Any] | None, init_seed: int, tokenizer=None
) -> torch.nn.Module:
    """Loads a causal LM by hub name / path, or builds one from a config dict with random init.

    A config that leaves out the vocabulary size or special token ids takes them from
    `tokenizer`. The caller (:class:`RankClassifier`) checks that exactly one is given.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if pretrained is not None:
        try:
            return AutoModelForCausalLM.from_pretrained(pretrained, dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise ConfigurationError(
                f"model.pretrained '{pretrained}': cannot load it ({first_line(e)})"
            ) from None
    config = dict(config)
    if tokenizer is not None:
        config.setdefault("vocab_size", len(tokenizer))
        for field in ("bos_token_id", "eos_token_id", "pad_token_id"):
            config.setdefault(field, getattr(tokenizer, field))
    if "model_type" not in config:
        raise ConfigurationError("model.config: missing field 'model_type' (e.g. \"gpt2\")")
    try:
        hf_config = AutoConfig.for_model(config.pop("model_type"), **config)
    except (ValueError, KeyError) as e:
        raise ConfigurationError(f"model.config: {e}") from None
    # Same weights on every rank and in every process, whatever the global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)


def continuation_log_probs(
    lm: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    continuation_mask: torch.Tensor,
    logits_from: int = 1,
    supports_logits_to_keep: bool = False,
) -> torch.Tensor:
    """Sum of log p(token | prefix) over each sequence's continuation tokens, in float32.

    Sequences are right-padded, so padding never changes the scores of real tokens. No
    continuation token sits before position `logits_from`, so logits are only computed from
    position `logits_from - 1` on when the model supports it, and the vocabulary-sized
    log-softmax only runs over continuation positions.
    """
    length = input_ids.size(1)
    keep = length - logits_from + 1
    kwargs = {"logits_to_keep": keep} if supports_logits_to_keep else {}
    logits = lm(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs
    ).logits
    predicting = logits[:, -keep:-1]  # logits at positions logits_from-1 .. length-2
    targets = input_ids[:, logits_from:]
    mask = continuation_mask[:, logits_from:]
    rows = torch.arange(input_ids.size(0), device=input_ids.device)[:, None].expand_as(mask)[mask]
    token_logits = predicting[mask].float()
    token_log_probs = token_logits.log_softmax(dim=-1).gather(-1, targets[mask][:, None])[:, 0]
    scores = torch.zeros(input_ids.size(0), dtype=torch.float32, device=input_ids.device)
    return scores.index_add(0, rows, token_log_probs)


def choice_metrics(
    scores: torch.Tensor,
    labels: torch.Tensor,
    choice_chars: torch.Tensor,
    weights: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Weighted counts of right answers by raw score and by score per character.

    `scores` and `choice_chars` are [instances, choices]; absent choices score -inf.
    """
    right = (scores.argmax(dim=1) == labels).float()
    right_norm = ((scores / choice_chars.clamp(min=1)).argmax(dim=1) == labels).float()
    return {
        "correct": (right * weights).sum(),
        "correct_norm": (right_norm * weights).sum(),
        "count": weights.sum(),
    }


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over instances; padding instances (weight 0) count for nothing."""
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


@Model.register("catwalk::rank_classifier")
class RankClassifier(Model):
    """Scores each choice of a multiple-choice instance with a causal LM.


    :param pretrained: hub name or local directory of a causal LM (e.g. "gpt2").
    :param config: instead of `pretrained`, a Hugging Face config dict (with `model_type`) for a
        randomly initialised model, e.g. a tiny GPT-2 for tests.
    :param tokenizer: hub name, path, or "catwalk::byte_level"; defaults to `pretrained`.
    :param objective: "lm" trains on the right choice's continuation tokens (mean token NLL, as
        catwalk trains rank classification); "rank" is cross-entropy over the choices' scores.
    :param init_seed: seed for the random init of a `config` model.
    """

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        objective: str = "lm",
        init_seed: int = 0,
    ):
        super().__init__()
        self.spec = {
            "pretrained": pretrained,
            "config": config,
            "tokenizer": tokenizer,
            "objective": objective,
            "init_seed": init_seed,
        }
        if objective not in OBJECTIVES:
            raise ConfigurationError(
                f"model.objective: expected one of {OBJECTIVES}, got {objective!r}"
            )
        if (pretrained is None) == (config is None):
            raise ConfigurationError("model: give exactly one of 'pretrained' or 'config'")
        if tokenizer is None and pretrained is None:
            raise ConfigurationError(
                "model.tokenizer: required when the model is built from 'config'"
            )
        field = "model.tokenizer" if tokenizer else "model.pretrained"
        self.tokenizer = load_tokenizer(tokenizer or pretrained, field)
        self.lm = build_causal_lm(pretrained, config, init_seed, self.tokenizer)
        self.objective = objective
        self.wrapping_root = (
            "lm"  # modules_to_wrap may name `transformer.h.0` for `lm.transformer.h.0`
        )
        self.supports_logits_to_keep = (
            "logits_to_keep" in inspect.signature(self.lm.forward).parameters
        )

    def det_hash_object(self) -> Any:
        """Tango cache identity: the constructor arguments, not the (large) weights."""
        return (type(self).__qualname__, self.spec)

    @classmethod
    def from_directory(cls, directory: str | Path, objective: str = "lm") -> RankClassifier:
        """Loads a model saved by :meth:`save_pretrained` (weights and tokenizer)."""
        return cls(pretrained=str(directory), objective=objective)

    def save_pretrained(self, directory: str | Path) -> None:
        """Writes a standard Hugging Face directory: `from_pretrained` loads it outside Tango."""
        self.lm.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def score_sequences(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        logits_from: int = 1,
    ) -> torch.Tensor:
        """Each sequence's summed continuation log-probability (float32)."""
        return continuation_log_probs(
            self.lm,
            input_ids,
            attention_mask,
            continuation_mask,
            logits_from,
            self.supports_logits_to_keep,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        instance_index: torch.Tensor,
        choice_index: torch.Tensor,
        choice_chars: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor,
        logits_from: int = 1,
        num_choices: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Loss and metrics for a batch of instances, each with all its choices.

        Sequences are flattened: sequence `s` is choice `choice_index[s]` of instance
        `instance_index[s]`. In training with the "lm" objective only the right choices are run,
        since the wrong ones do not enter the loss; otherwise every choice is scored.
        """
        # Sharded engines may cast floating inputs to the compute dtype; counting stays float32.
        weights = weights.float()
        right = choice_index == labels[instance_index]
        right_instances = instance_index[right]
        if self.training and self.objective == "lm":
            right_scores = self.score_sequences(
                input_ids[right], attention_mask[right], continuation_mask[right], logits_from
            )
            return {
                "loss": lm_loss(
                    right_scores, continuation_mask[right], right_instances, labels, weights
                )
            }
        num_choices = num_choices or int(choice_index.max()) + 1
        sequence_scores = self.score_sequences(
            input_ids, attention_mask, continuation_mask, logits_from
        )
        scores = torch.full(
            (labels.size(0), num_choices), float("-inf"), device=sequence_scores.device
        ).index_put((instance_index, choice_index), sequence_scores)
        chars = torch.ones_like(scores).index_put(
            (instance_index, choice_index), choice_chars.to(scores.dtype)
        )
        with torch.no_grad():
            counts = choice_metrics(scores.detach(), labels, chars, weights)
        if self.objective == "rank":
            loss = weighted_mean(F.cross_entropy(scores, labels, reduction="none"), weights)
        else:
            loss = lm_loss(
                sequence_scores[right], continuation_mask[right], right_instances, labels, weights
            )
        count = counts["count"].clamp(min=1.0)
        return {
            "loss": loss,
            "scores": scores.detach(),
            "acc": counts["correct"] / count,
            "acc_norm": counts["correct_norm"] / count,
            **counts,
        }


def lm_loss(
    right_scores: torch.Tensor,
    right_continuation_mask: torch.Tensor,
    right_instances: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """Mean over instances of the right continuation's mean token NLL.

    `right_*` describe the right choices' sequences. Averaging per instance (not per token)
    keeps the loss of a batch independent of how it is split across ranks or micro-batches.
    """
    num_tokens = right_continuation_mask.sum(dim=1).clamp(min=1)
    per_instance = torch.zeros_like(labels, dtype=torch.float32).index_put(
        (right_instances,), -right_scores / num_tokens
    )
    return weighted_mean(per_instance, weights)


@contextlib.contextmanager
def evaluating(model: torch.nn.Module):
    """Eval mode and no autograd for the block, restoring the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
