"""`catwalk::reference_logprobs`: the reference model's log-probability of every preference
pair's answers, computed once and cached as data (the pairs stored as a task's splits are, an
Arrow file per split, each pair with its `reference`), for DPO training to read instead of
running a second model.

The result depends on the reference model, the data, the tokenizer and `max_length` only: a
sweep over `beta`, learning rate or seed trains every cell on the one cached result. It is
scored as `catwalk::evaluate` scores (one device, or `device_count` workers each scoring a
share, an `engine` sharding a model too large for one), resumable from its records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tango import Step
from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model, TrainingEngine

from ..checks.preference import check_same_tokenizer
from ..checks.start_warnings import cut_warnings
from ..checks.streaming import check_not_streamed
from ..checks.training import loaded_task
from ..evaluation import (
    EvaluationSettings,
    configured_model_of,
    evaluation_scores,
    model_block,
    model_source,
)
from ..kinds import kind_of, kind_of_task
from ..objectives import OBJECTIVE, with_settings
from ..scoring.choices import max_length_of, max_positions
from ..scoring.tokenization import load_tokenizer
from ..settings import EVALUATION_DEFAULTS as DEFAULTS
from ..workspace.formats import InstancesFormat
from ..workspace.step_cache import held_by
from .evaluate import Evaluate, loaded_splits, said_when_stopped, with_model_content

BATCH_SIZE = 16  # answers per forward (8 pairs), as evaluate's batch_size counts sequences


def reference_block(model: Any) -> Any:
    """A model block as the reference's identity: its answers do not depend on how it would
    be trained (`objective`, an objective's settings block: `dpo`), so the policy's own block
    names the same reference."""
    block = model_block(model)
    if isinstance(block, dict):
        trained = {objective.name for objective in with_settings()}
        block = {k: v for k, v in block.items() if k not in trained} | {"objective": OBJECTIVE}
    return block


def check_fits(config: Any, max_length: int | None) -> None:
    """A `max_length` longer than the reference's positions would score tokens past them."""
    positions = max_positions(config)
    if max_length is not None and positions is not None and max_length > positions:
        raise ConfigurationError(
            f"reference_logprobs.max_length: {max_length} tokens, but the model has {positions} "
            f"positions; use max_length <= {positions} (the policy's loader's, which must fit "
            "the same positions)"
        )


def warn_cuts(source: Any, max_length: int | None, splits: Mapping[str, Any], log: Any) -> None:
    """Pairs that do not fit in the length they are scored in (the model's positions when
    `max_length` is left out) are cut as training cuts them: say how many, per split."""
    config = source.hf_config()
    check_fits(config, max_length)
    tokenizer = load_tokenizer(source.tokenizer_name(), "reference_logprobs.model.tokenizer")
    length = max_length or max_length_of(config, tokenizer)
    for name, instances in splits.items():
        for warning in cut_warnings(
            instances, tokenizer, length, name, "reference_logprobs.max_length"
        ):
            log.warning(warning)


def check_splits(splits: list[str] | None, loaded: list[str] | None) -> None:
    for name in splits or []:
        if loaded is not None and name not in loaded:
            raise ConfigurationError(
                f"reference_logprobs.splits: '{name}' is not in the dataset (splits: "
                f"{', '.join(loaded)})"
            )


@Step.register("catwalk::reference_logprobs")
class ReferenceLogprobs(Evaluate):
    """Each preference pair's answers scored by the reference model (see the module).

    :param model: the reference: a model block, or a step's model (`lib.ref('sft')`).
    :param dataset_dict: a `catwalk::load_task` step of a preference task.
    :param tokenizer: the policy's tokenizer: the reference's must be the same.
    :param max_length: the policy's loader's `max_length` (answers are cut as training cuts them).
    :param splits: the splits scored (default: all of them).

    `batch_size`, `precision`, `device`, `device_count`, `engine` and `model_content` are
    `catwalk::evaluate`'s.
    """

    # 002: a pair longer than max_length keeps its answers whole and its prompt's end (TRL's
    # keep_end); 001 cut the answers, to one token each behind a long prompt (issue 55).
    VERSION = "002"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = InstancesFormat()
    SKIP_DEFAULT_ARGUMENTS: dict[str, Any] = {"model_content": None}  # (evaluate's)
    METADATA = {"artifact_kind": "data"}
    SCORES_REFERENCE = True  # what a `catwalk::train` step with objective 'dpo' reads

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        if "model" in kwargs:
            kwargs = {**kwargs, "model": reference_block(kwargs["model"])}
        configured = configured_model_of(kwargs.get("model"))
        if configured is not None:
            check_same_tokenizer(
                configured.tokenizer_name(), kwargs.get("tokenizer"), "reference_logprobs.model"
            )
            check_fits(configured.hf_config(), kwargs.get("max_length"))
        task = loaded_task(kwargs.get("dataset_dict"))
        if task is not None:  # known now: the data's kind and splits
            kind_of_task(task).with_references([], [])
            check_splits(kwargs.get("splits"), loaded_splits(kwargs.get("dataset_dict")))
            scored = kwargs.get("splits") or loaded_splits(kwargs.get("dataset_dict")) or []
            why = "a reference scores every pair of a split ahead of training"
            check_not_streamed(task, scored, "reference_logprobs.splits", why)
        return with_model_content(kwargs)

    def run(  # type: ignore[override]
        self,
        model: Lazy[Model],  # by the time `run` is called, a block (data) or a SavedModel
        dataset_dict: DatasetDict,
        tokenizer: str | None = None,
        max_length: int | None = None,
        splits: list[str] | None = None,
        batch_size: int = BATCH_SIZE,
        precision: str = DEFAULTS["precision"],
        device: str | None = DEFAULTS["device"],
        device_count: int = DEFAULTS["device_count"],
        engine: Lazy[TrainingEngine] | None = DEFAULTS["engine"],
        model_content: dict[str, str] | None = None,  # the step's identity only (evaluate's)
    ) -> DatasetDict:
        source = model_source(model, held_by(self.workspace))
        check_same_tokenizer(source.tokenizer_name(), tokenizer, "reference_logprobs.model")
        names = list(splits or dataset_dict.keys())
        check_splits(names, list(dataset_dict.keys()))
        instances = [i for name in names for i in dataset_dict[name]]
        kind = kind_of(instances)
        kind.with_references([], [])  # one line, before any forward, for other data than pairs
        warn_cuts(source, max_length, {name: dataset_dict[name] for name in names}, self.logger)
        settings = EvaluationSettings(
            batch_size, max_length, precision, device, device_count, engine
        )
        with said_when_stopped("reference scoring"):  # one line, as a stopped evaluation's
            answers, _ = evaluation_scores(source, instances, settings, self, self.logger)
        scored, start = kind.with_references(instances, answers), 0
        result = {}
        for name in names:
            result[name] = scored[start : start + len(dataset_dict[name])]
            start += len(result[name])
        self.logger.info("Reference log-probabilities of %d pairs", len(instances))
        return DatasetDict(splits=result, metadata={**dataset_dict.metadata})
