"""What a rank classifier computes for a batch of multiple-choice instances: each choice's
summed continuation log-probability (from packed rows when the model takes them), the loss its
objective gives them (:mod:`catwalk_steps.objectives`) and the choice metrics. A mixin of
:class:`.rank_classifier.RankClassifier`, which holds the LM and the settings these methods
read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..objectives import ChoiceScores, Objective
from .logprobs import choice_metrics, continuation_log_probs
from .shared_context import log_fallback, packed_scores


class ChoiceScoring:
    """Scores and losses over a causal LM (`lm`), for :class:`.rank_classifier.RankClassifier`."""

    lm: Any  # the Hugging Face causal LM
    objective: Objective  # the model's training objective
    training: bool  # torch's flag
    supports_logits_to_keep: bool  # the LM's forward takes `logits_to_keep`
    packing_unsupported: str | None  # why the LM cannot take packed rows; None: it can
    fallback_logged: bool

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

    def shares_contexts(self) -> bool:
        """Whether choices are scored against their context computed once (packed rows, see
        :mod:`~catwalk_steps.scoring.shared_context`); says once, in the log, why not."""
        if self.packing_unsupported and not self.fallback_logged:
            log_fallback(self.lm, self.packing_unsupported)
            self.fallback_logged = True
        return self.packing_unsupported is None

    def score_packed(self, packed: Mapping[str, torch.Tensor], num_sequences: int) -> torch.Tensor:
        """Each sequence's summed continuation log-probability from packed rows (float32)."""
        return packed_scores(self.lm, packed, num_sequences)

    def every_choice_scores(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        logits_from: int,
        packed: Mapping[str, torch.Tensor] | None,
    ) -> torch.Tensor:
        """Every sequence's score: from the packed rows when the model takes them."""
        if packed is not None and self.shares_contexts():
            return self.score_packed(packed, input_ids.size(0))
        return self.score_sequences(input_ids, attention_mask, continuation_mask, logits_from)

    def choice_outputs(
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
        packed: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, Any]:
        """Loss and metrics for a batch of instances, each with all its choices. Sequence `s` is
        choice `choice_index[s]` of instance `instance_index[s]`. Training with an objective
        that does not score every choice (`lm`) runs the right choices only (the others are not
        in its loss); otherwise every choice is scored, from the `packed` rows when the model
        takes them: one forward of the LM on every rank, whatever the batch holds (a kind's
        metrics are computed from its `scores` after the forward: :mod:`catwalk_steps.kinds`)."""
        # Sharded engines may cast floating inputs to the compute dtype; counting stays float32.
        weights = weights.float()
        right = choice_index == labels[instance_index]
        right_instances = instance_index[right]
        if self.training and not self.objective.scores_every_choice:
            right_scores = self.score_sequences(
                input_ids[right], attention_mask[right], continuation_mask[right], logits_from
            )
            only_right = ChoiceScores(
                right_scores, continuation_mask[right], right_instances, labels, weights
            )
            return {"loss": self.objective.choice_loss(only_right)}
        num_choices = num_choices or int(choice_index.max()) + 1
        sequence_scores = self.every_choice_scores(
            input_ids, attention_mask, continuation_mask, logits_from, packed
        )
        where, shape = (instance_index, choice_index), (labels.size(0), num_choices)
        scores = sequence_scores.new_full(shape, float("-inf")).index_put(where, sequence_scores)
        chars = torch.ones_like(scores).index_put(where, choice_chars.to(scores.dtype))
        with torch.no_grad():
            counts = choice_metrics(scores.detach(), labels, chars, weights)
        right_scores = sequence_scores[right]
        every = ChoiceScores(
            right_scores, continuation_mask[right], right_instances, labels, weights, scores
        )
        loss = self.objective.choice_loss(every)
        count = counts["count"].clamp(min=1.0)
        outputs: dict[str, Any] = {
            "loss": loss,
            "scores": scores.detach(),
            "acc": counts["correct"] / count,
            "acc_norm": counts["correct_norm"] / count,
            **counts,
        }
        return outputs
