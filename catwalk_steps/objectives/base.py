"""What every training objective answers for itself: one interface, one object per objective.

An objective (the model block's `objective`: `lm`, `rank`, `dpo`) is how a model is trained on
a task's examples. Every stage that depends on it asks its object and never compares its name:

- :attr:`Objective.trains_on`: the examples it trains on, as each task kind says what its
  examples are (:class:`Examples`, a kind's `examples`): :meth:`Objective.check_task`, at graph
  build, one line;
- :attr:`Objective.settings`: its settings block, the model block's key of its name (`dpo:
  {beta, ...}`), read once (:meth:`Objective.settings_of`);
- :meth:`Objective.choice_loss`: its loss over a batch of choices, and whether its training
  batches score every choice (:attr:`Objective.scores_every_choice`); the losses themselves
  are pure functions in each objective's module (`dpo`'s: :mod:`.dpo_loss`);
- :meth:`Objective.reference`: where its reference model's answers come from, by the one rule
  (:func:`reference_from`).

An objective is registered once, under its name (:func:`register`: one line of
:mod:`catwalk_steps.objectives`, whose order is the registry's; the first is the default).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from tango.common.exceptions import ConfigurationError

FIELD = "model.objective"


class Examples(enum.Enum):
    """What a task's training examples hold (a task kind's `examples`), as an objective's
    messages say it."""

    CHOICES = "choices (one right)"
    ANSWERS = "answers (one per prompt)"
    PAIRS = "preference pairs"


class Reference(enum.Enum):
    """Where a reference model's answers come from."""

    STEP = "a catwalk::reference_logprobs step's log-probabilities, carried by the batches"
    ADAPTER_OFF = "the model's own base, its adapter switched off"
    MODEL = "a frozen model beside the policy (its starting weights, or train.reference)"


def reference_from(adapter: Any) -> Reference:
    """The one rule for where a reference comes from, for a model with `adapter` (its block or
    spec; None: none): its base with the adapter off, in the same model (nothing precomputed:
    torchtune's and TRL's reference for a LoRA run), else a reference step's data. The graph
    build checks a training step by it, the forward scores pairs by it, and the experiment
    library's `lib.preference` wires its steps by it (a test holds the two the same)."""
    return Reference.ADAPTER_OFF if adapter is not None else Reference.STEP


def block_keys(
    settings: Any, given: Mapping[str, Any] | None, field: str, known: Sequence[str] = ()
) -> dict[str, Any]:
    """A settings block as given (None: empty), each key one of the dataclass `settings`'s
    fields (or of `known`, where they are not its fields); another key is one line naming it
    and the keys there are."""
    given = dict(given or {})
    known = known or [f.name for f in fields(settings)]
    for key in given:
        if key not in known:
            raise ConfigurationError(f"{field}.{key}: no such key (it takes {', '.join(known)})")
    return given


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over instances; padding instances (weight 0) count for nothing."""
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


@dataclass(frozen=True)
class ChoiceScores:
    """A batch of choices as an objective's loss reads it (float32, with gradients).

    :ivar right: the right choices' summed continuation log-probabilities [right sequences].
    :ivar right_mask: their continuation tokens [right sequences, length].
    :ivar right_instances: the instance each right choice is of.
    :ivar labels: each instance's right choice.
    :ivar weights: each instance's weight (0: padding).
    :ivar every: every choice's score [instances, choices] (-inf where an instance has fewer);
        None when only the right ones were scored (:attr:`Objective.scores_every_choice`)."""

    right: torch.Tensor
    right_mask: torch.Tensor
    right_instances: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor
    every: torch.Tensor | None = None


class Objective:
    """One training objective, as every stage asks it (see the module)."""

    name: ClassVar[str]
    trains_on: ClassVar[tuple[Examples, ...]]
    # Its settings block's class (a frozen dataclass with `of(block, field)`), under the model
    # block's key of the objective's name; None: it has none.
    settings: ClassVar[Any] = None
    # Whether it compares the model with a reference model (:meth:`reference`).
    compares_with_reference: ClassVar[bool] = False
    # Whether its training batches score every choice (its loss reads them all), or only the
    # right ones (the others are not in its loss).
    scores_every_choice: ClassVar[bool] = True
    # Whether its training batches are prompts whose completions the loop samples, rewards and
    # then trains on (GRPO), rather than examples collated whole.
    samples: ClassVar[bool] = False

    def check_task(self, examples: Examples, task: str) -> None:
        """A task whose examples are `examples`, trained on with this objective: one line
        naming the objectives that train on them when this one does not."""
        if examples in self.trains_on:
            return
        others = [repr(o.name) for o in OBJECTIVES.values() if examples in o.trains_on]
        use = f"use objective {' or '.join(others)}" if others else "no objective trains on it"
        raise ConfigurationError(
            f"{FIELD}: {self.name!r} trains on {' or '.join(e.value for e in self.trains_on)}, "
            f"and task '{task}' holds {examples.value}; {use}"
        )

    def settings_of(self, objective: Objective, block: Any) -> Any:
        """Its settings block as a model of `objective` gives it, read (its defaults when left
        out: a model of another objective scores with them); given to a model of another
        objective, one line."""
        if block is not None and objective is not self:
            raise ConfigurationError(
                f"model.{self.name}: settings of objective {self.name!r}, and the model's "
                f"objective is {objective.name!r}"
            )
        return self.settings.of(block, f"model.{self.name}")

    def updates_per_batch(self, block: Any) -> int:
        """Optimizer steps one batch of its training data gives, by its settings block (GRPO:
        `num_iterations`); 1 for the others."""
        return 1

    def reference(self, adapter: Any, block: Any = None) -> Reference | None:
        """Where its reference comes from for a model with `adapter` (None: it has none) and
        its settings `block` (GRPO: none with beta 0)."""
        return reference_from(adapter) if self.compares_with_reference else None

    def choice_loss(self, choices: ChoiceScores) -> torch.Tensor:
        """Its loss over a batch of choices (training on them, and the `loss` every evaluation
        of choices reports)."""
        raise NotImplementedError


OBJECTIVES: dict[str, Objective] = {}


def register(*objectives: Objective) -> None:
    """Each objective under its name, in the order given (messages list them so)."""
    for objective in objectives:
        OBJECTIVES[objective.name] = objective


def objective_names() -> tuple[str, ...]:
    return tuple(OBJECTIVES)


def objective_named(name: Any, field: str = FIELD) -> Objective:
    """The objective a model block's `objective` names; one line if none is registered so."""
    if not isinstance(name, str) or name not in OBJECTIVES:
        raise ConfigurationError(f"{field}: expected one of {objective_names()}, got {name!r}")
    return OBJECTIVES[name]


def with_settings() -> list[Objective]:
    """The objectives with a settings block (each a model block's key)."""
    return [objective for objective in OBJECTIVES.values() if objective.settings is not None]
