"""A checkpoint's callback state goes to the callback that saved it: `resume_from` a run that had
other callbacks (a tracker more or less) used to hand one callback another's state by position
(`KeyError: 'history'`)."""

from __future__ import annotations

import pytest

from catwalk_steps.checkpoints.layout import checkpoint_dir
from catwalk_steps.checkpoints.weights import checkpoint_history
from catwalk_steps.launch.launcher import run_training
from catwalk_steps.training.callback_states import callback_keys, restore_states, saved_states

from .training import history, job, kill_at


class Kept:
    def __init__(self, value=None):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


class Other(Kept):
    pass


def test_each_callback_takes_its_own_state_whatever_the_order():
    saved = saved_states([Other("o"), Kept("a"), Kept("b")])
    assert list(saved) == [callback_keys([Other()])[0], *callback_keys([Kept(), Kept()])]
    resumed = [Kept(), Kept(), Kept()]
    restore_states(resumed, saved)
    assert [c.value for c in resumed] == ["a", "b", None]  # a third Kept starts fresh


def test_an_older_checkpoint_is_read_by_position_when_the_count_agrees():
    resumed = [Kept(), Other()]
    restore_states(resumed, [{"value": 1}, {"value": 2}])
    assert [c.value for c in resumed] == [1, 2]
    fresh = [Kept()]
    restore_states(fresh, [{"value": 1}, {"value": 2}])
    assert fresh[0].value is None


@pytest.mark.slow
def test_resume_from_a_run_with_other_callbacks(tmp_path):
    first = job(
        tmp_path / "first",
        device_count=1,
        keep_checkpoints=True,
        callbacks=[kill_at(99, 1, tmp_path / "faults")],  # never kills: a callback more
    )
    run_training(first)
    # The model a step returns carries its checkpoint's history, found among the states by key.
    assert checkpoint_history(checkpoint_dir(first.work_dir, 8)) == history(first.work_dir)
    resumed = job(
        tmp_path / "resumed", device_count=1, resume_from=checkpoint_dir(first.work_dir, 4)
    )
    run_training(resumed)
    logged = [entry["step"] for entry in history(resumed.work_dir)["train"]]
    assert logged == list(range(1, 9))  # steps 1-4 from the checkpoint, 5-8 trained
