"""Every tested Hugging Face causal LM family, sharded without naming its modules.

For each family's tiny random config (:mod:`tests.families`), with `modules_to_wrap` left out:
the engines wrap exactly the model's declared blocks; FairScale FSDP and FSDP2 on 2 processes
give DDP's losses step by step; FSDP2 in bf16 stays finite and near float32; the FSDP2
checkpoint, exported, loads with `from_pretrained` and scores what the sharded model scored.
All families train in one 2-process gloo group, started once.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tango.common import Lazy, Params
from tango.integrations.torch import Model, Optimizer, TrainingEngine

from catwalk_steps.engines.train_config import NodeAwareTrainConfig
from catwalk_steps.engines.wrapping import describe_blocks, select_modules
from catwalk_steps.kinds.collate import Collator
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.tasks.synthetic import SyntheticTask

from .distributed import run_distributed
from .families import FAMILIES, model_spec, save_llama_style_tokenizer

STEPS, PER_RANK = 3, 4  # 3 optimizer steps of 4 instances per rank (8 per step)
ENGINES = {
    "ddp": ("catwalk::torch", "fp32"),
    "fairscale": ("catwalk::fairscale", "fp32"),
    "fsdp2": ("catwalk::torch_fsdp", "fp32"),
    "fsdp2_bf16": ("catwalk::torch_fsdp", "bf16"),
}
EXPORTED = "fsdp2"  # the engine whose (sharded, DCP) checkpoint is exported


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine the second
    thread's spin-waits cost more than its work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, str]:
    llama_style = save_llama_style_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    return {"byte_level": "catwalk::byte_level", "llama_style": llama_style}


def instances(split: str, count: int) -> list:
    task = SyntheticTask(seed=5, num_keys=8, num_attributes=4, num_choices=3)
    task.sizes = {split: count}
    return task.load([split])[split]


@pytest.mark.parametrize("family", FAMILIES)
def test_automatic_wrapping_finds_the_familys_blocks(family, tokenizers):
    spec = {k: v for k, v in model_spec(family, tokenizers).items() if k != "type"}
    skeleton = RankClassifier(**spec, skeleton=True)
    blocks = select_modules(skeleton, None)
    _, block_class, _ = FAMILIES[family]
    assert describe_blocks(skeleton, blocks) == f"2 x {block_class}"
    assert [name.rsplit(".", 1)[-1] for name in blocks] == ["0", "1"]
    assert all(type(skeleton.get_submodule(name)).__name__ == block_class for name in blocks)


# --- Every family on every engine, in one process group --------------------------------------


def build_engine(family: str, kind: str, tokenizers: dict, rank: int, work_dir: Path):
    engine_type, precision = ENGINES[kind]
    config = NodeAwareTrainConfig(
        f"{family}-{kind}",
        work_dir,
        worker_id=rank,
        is_distributed=True,
        world_size=2,
        local_rank=rank,
        local_world_size=2,  # one thread each: threads of two ranks would fight for the cores
    )
    # modules_to_wrap left out: the model's own blocks.
    return TrainingEngine.by_name(engine_type)(
        config,
        Lazy(Model, Params(model_spec(family, tokenizers))),
        Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 3e-3})),
        precision=precision,
        max_grad_norm=1.0,
    )


def unit_classes(model: torch.nn.Module) -> list[str]:
    """The class of each inner FSDP unit (FairScale's or FSDP2's), the root left out."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel
    from fairscale.nn.misc import FlattenParamsWrapper
    from torch.distributed.fsdp import FSDPModule

    classes = []
    for name, module in model.named_modules():
        if name and isinstance(module, FullyShardedDataParallel):
            inner = module.module
            inner = inner.module if isinstance(inner, FlattenParamsWrapper) else inner
            classes.append(type(inner).__name__)
        elif name and isinstance(module, FSDPModule):
            classes.append(type(module).__name__.removeprefix("FSDP"))
    return classes


def train_and_score(engine, collate, rank: int) -> dict:
    train = instances("train", STEPS * 2 * PER_RANK)
    losses = []
    for step in range(STEPS):
        start = (2 * step + rank) * PER_RANK
        loss, _ = engine.forward_train(collate(train[start : start + PER_RANK]), 0, 1)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    engine.model.eval()
    scores = engine.forward_eval(collate(instances("validation", 6)))["scores"]
    return {"losses": losses, "scores": scores.tolist(), "units": unit_classes(engine.model)}


def save_checkpoint(engine, work_dir: Path) -> None:
    """A complete checkpoint through the training loop's own checkpointer."""
    from catwalk_steps.training.checkpointing import Checkpointer
    from catwalk_steps.training.job import TrainerState

    from .training import job

    training_job = job(work_dir)
    checkpointer = Checkpointer(training_job, training_job.schedule, engine, [])
    checkpointer.prepare()
    checkpointer.save(TrainerState(step=STEPS), validated=False)


def units_of_a_model_block_that_wraps(rank: int, work_dir: Path) -> list[str]:
    """The model block wraps GPT-2's blocks itself (`catwalk::with_wrapped_modules`); the
    engine's `modules_to_wrap` is left out: FairScale must not wrap them a second time."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP

    config = NodeAwareTrainConfig(
        "model-block", work_dir, worker_id=rank, is_distributed=True, world_size=2
    )
    model = {
        "type": "catwalk::with_wrapped_modules",
        "model": model_spec("gpt2", {"byte_level": "catwalk::byte_level"}),
        "modules_to_wrap": [r"transformer\.h\.[0-9]+"],
        "fsdp_config": {},
    }
    engine = TrainingEngine.by_name("catwalk::fairscale")(
        config,
        Lazy(Model, Params(model)),
        Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 3e-3})),
        cpu_threads=1,
    )
    collate = Collator("catwalk::byte_level", 48)
    train_and_score(engine, collate, rank)  # it trains
    return [name for name, m in engine.model.named_modules() if isinstance(m, FSDP)]


def every_family(rank, world_size, port, tokenizers, work_dir):
    torch.set_num_threads(1)
    results: dict = {"model_block": units_of_a_model_block_that_wraps(rank, Path(work_dir))}
    for family in FAMILIES:
        collate = Collator(model_spec(family, tokenizers)["tokenizer"], 48)
        for kind in ENGINES:
            directory = Path(work_dir) / family / kind
            engine = build_engine(family, kind, tokenizers, rank, directory)
            results[family, kind] = train_and_score(engine, collate, rank)
            if kind == EXPORTED:
                save_checkpoint(engine, directory)
    return results


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizers) -> tuple[list[dict], Path]:
    work_dir = tmp_path_factory.mktemp("families")
    return run_distributed(every_family, work_dir, tokenizers, str(work_dir)), work_dir


def flat(rows: list[list[float]]) -> list[float]:
    return [value for row in rows for value in row]


@pytest.mark.distributed
@pytest.mark.parametrize("family", FAMILIES)
def test_sharded_engines_wrap_the_blocks_and_give_ddps_losses(trained, family):
    ranks, _ = trained
    _, block_class, _ = FAMILIES[family]
    for rank in ranks:
        ddp = rank[family, "ddp"]["losses"]
        assert len(ddp) == STEPS and len(set(ddp)) == STEPS  # it trains: the loss moves
        assert rank[family, "ddp"]["units"] == []
        for kind in ("fairscale", "fsdp2"):
            assert rank[family, kind]["units"] == [block_class] * 2, kind
            assert rank[family, kind]["losses"] == pytest.approx(ddp, rel=1e-4), kind
            assert flat(rank[family, kind]["scores"]) == pytest.approx(
                flat(rank[family, "ddp"]["scores"]), rel=1e-4, abs=1e-4
            ), kind


@pytest.mark.distributed
@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_stays_finite_and_near_float32(trained, family):
    for rank in trained[0]:
        bf16 = rank[family, "fsdp2_bf16"]
        assert all(math.isfinite(loss) for loss in bf16["losses"])
        assert all(math.isfinite(score) for score in flat(bf16["scores"]))
        assert bf16["losses"] == pytest.approx(rank[family, "fsdp2"]["losses"], rel=0.05)


@pytest.mark.distributed
def test_blocks_a_model_block_wrapped_are_not_wrapped_again(trained):
    inner = "_fsdp_wrapped_module._fpw_module"
    for rank in trained[0]:
        assert rank["model_block"] == [
            "",
            f"{inner}.lm.transformer.h.0",
            f"{inner}.lm.transformer.h.1",
        ]


def reference_scores(directory: Path) -> list[list[float]]:
    """Scores from `from_pretrained` alone: one unpadded sequence at a time, float64 sums."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    batch = Collator(str(directory), 48)(instances("validation", 6))
    scores = [[float("-inf")] * 3 for _ in range(6)]
    for s, ids in enumerate(batch["input_ids"]):
        length = int(batch["attention_mask"][s].sum())
        with torch.no_grad():
            log_probs = model(ids[None, :length]).logits[0].double().log_softmax(-1)
        positions = batch["continuation_mask"][s].nonzero().flatten().tolist()
        score = sum(float(log_probs[p - 1, ids[p]]) for p in positions)
        scores[int(batch["instance_index"][s])][int(batch["choice_index"][s])] = score
    return scores


@pytest.mark.distributed
@pytest.mark.parametrize("family", FAMILIES)
def test_exported_checkpoint_loads_with_from_pretrained_and_scores_the_same(
    trained, family, tokenizers, tmp_path
):
    from transformers import AutoTokenizer

    from catwalk_steps.commands.export import export_checkpoint
    from catwalk_steps.scoring.tokenization import load_tokenizer

    ranks, work_dir = trained
    exported = export_checkpoint(work_dir / family / EXPORTED, tmp_path / "hf")
    # The tokenizer travels with the weights, special tokens (a Llama-style BOS) included.
    original = load_tokenizer(model_spec(family, tokenizers)["tokenizer"])
    text = "Question: What is the capital of France?\nAnswer: Paris"
    assert AutoTokenizer.from_pretrained(exported)(text) == original(text)
    expected = ranks[0][family, EXPORTED]["scores"]
    assert flat(reference_scores(exported)) == pytest.approx(flat(expected), rel=1e-4, abs=1e-4)
