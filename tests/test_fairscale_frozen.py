"""FairScale FSDP with frozen units (an adapter run's base): what FairScale 0.4.13 leaves
undone for parameters that do not train (catwalk_steps/engines/fairscale_frozen.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from catwalk_steps.adapters.registry import is_adapter_weight


@pytest.mark.slow
@pytest.mark.distributed
def test_fairscale_checkpoints_an_adapter_between_validations_and_resumes_from_there(tmp_path):
    """A checkpoint after training steps with no validation since the last (the frozen base's
    units still hold their parameters whole: FairScale failed, "0 vs. 1"), resumed from, ends
    where the run that went on does, byte for byte."""
    from catwalk_steps.checkpoints.layout import checkpoint_dir
    from catwalk_steps.launch.launcher import run_training

    from .training import engine, job, model_spec, weights

    def lora_job(work: Path, **kwargs):
        spec = {**model_spec(), "adapter": {"type": "lora", "r": 4}}
        optimizer = {"type": "torch::AdamW", "lr": 1e-2}
        return job(
            work,
            engine_block=engine("catwalk::fairscale", optimizer=optimizer),
            model=spec,
            **kwargs,
        )

    settings = {"train_steps": 4, "checkpoint_every": 2, "validate_every": 4}
    whole = lora_job(tmp_path / "whole", keep_checkpoints=True, **settings)
    run_training(whole)
    resumed = lora_job(
        tmp_path / "resumed", resume_from=checkpoint_dir(whole.work_dir, 2), **settings
    )
    run_training(resumed)
    final, expected = weights(resumed.work_dir), weights(whole.work_dir)
    assert final.keys() == expected.keys() and all(is_adapter_weight(n) for n in final)
    for name, value in expected.items():
        assert torch.equal(final[name], value), name
