"""Preference pairs: rows read as text or in the Hugging Face chat forms, bad rows named by file
and line, the synthetic pairs, the kind's batches, stored form and metrics (their standard
errors from sums equal to those from the records), the `dpo` block's checks, and a LoRA run's
reference: the base with the adapter off, in the same model. (Through `tango run`:
tests/test_preference_bad_inputs.py; training: tests/test_dpo_demo.py.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds import Collator, kind_named
from catwalk_steps.metrics.stderr import mean_stderr
from catwalk_steps.metrics.sums import MeanSums
from catwalk_steps.objectives.dpo import DpoSettings
from catwalk_steps.scoring.preference import answer_logps
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.tokenization import load_tokenizer
from catwalk_steps.tasks import ModelTokenizer, Task
from catwalk_steps.tasks.base import TaskDataError
from catwalk_steps.tasks.preference import PreferenceInstance

from .conftest import TINY_GPT2

TINY = {"config": TINY_GPT2, "tokenizer": "catwalk::byte_level", "objective": "dpo"}

CHAT = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def chat_tokenizer() -> ModelTokenizer:
    tokenizer = copy.deepcopy(load_tokenizer("catwalk::byte_level"))
    tokenizer.chat_template = CHAT
    return ModelTokenizer(tokenizer, "byte_level_chat")


def files(tmp_path: Path, rows: list, **keys) -> Task:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    block = {"type": "catwalk::preference", "source": "files", "data_files": {"train": str(path)}}
    return Task.from_params({**block, **keys})


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_text_and_every_chat_form_read_as_the_prompt_rendered_and_each_answer_after_it(tmp_path):
    """TRL's forms: text; chat with an explicit prompt; conversations that hold their prompt
    (Anthropic HH); a prompt text beside them (UltraFeedback)."""
    rows = [
        {"prompt": "Q: 2+2?\nA:", "chosen": " 4", "rejected": " 5"},
        {"prompt": [user("hi")], "chosen": [assistant("hello")], "rejected": [assistant("go")]},
        {
            "chosen": [user("hi"), assistant("hello")],
            "rejected": [user("hi"), assistant("go")],
        },
        {"prompt": "hi", "chosen": [user("hi"), assistant("hello")], "rejected": [assistant("go")]},
    ]
    task = files(tmp_path, rows)
    loaded = task.load(["train"], chat_tokenizer())["train"]
    assert loaded[0] == PreferenceInstance("Q: 2+2?\nA:", " 4", " 5")
    chat = PreferenceInstance("<user>hi</user><assistant>", "hello</assistant>", "go</assistant>")
    assert loaded[1] == loaded[2] == loaded[3] == chat


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "p", "chosen": "a"}, ":2: field 'rejected' is missing"),
        ({"prompt": "p", "chosen": " a", "rejected": " a"}, ":2: 'chosen' and 'rejected' are the"),
        ({"prompt": "p", "chosen": [assistant("a")], "rejected": "b"}, ":2: field 'rejected' must"),
        ({"chosen": [assistant("a")], "rejected": [assistant("b")]}, ":2: field 'prompt' is mi"),
    ],
)
def test_a_bad_row_is_one_line_naming_its_file_and_line_when_the_task_is_built(
    tmp_path, row, message
):
    good = {"prompt": "p", "chosen": " a", "rejected": " b"}
    with pytest.raises(TaskDataError) as error:
        files(tmp_path, [good, row])
    assert f"{tmp_path / 'pairs.jsonl'}{message}" in str(error.value)


def test_a_prompt_longer_than_max_length_is_a_bad_row_once_the_tokenizer_is_known(tmp_path):
    rows = [{"prompt": "p", "chosen": " a", "rejected": " b"}]
    rows.append({"prompt": "x" * 40, "chosen": " a", "rejected": " b"})
    task = files(tmp_path, rows, max_length=16)
    with pytest.raises(TaskDataError) as error:
        task.check_tokenizer(ModelTokenizer(load_tokenizer("catwalk::byte_level"), "byte"))
    assert "pairs.jsonl:2: the prompt has 40 tokens, and max_length 16 leaves" in str(error.value)


def test_a_datasets_directory_of_splits_is_a_source(tmp_path):
    import datasets

    rows = {"prompt": ["p", "q"], "chosen": [" a", " c"], "rejected": [" b", " d"]}
    datasets.DatasetDict({"train_prefs": datasets.Dataset.from_dict(rows)}).save_to_disk(
        tmp_path / "prefs"
    )
    block = {"type": "catwalk::preference", "source": "datasets", "path": str(tmp_path / "prefs")}
    task = Task.from_params({**block, "split_names": {"train": "train_prefs"}})
    assert [i.chosen for i in task.load(["train"])["train"]] == [" a", " c"]


def test_synthetic_pairs_choose_the_generative_task_s_answer_and_reject_another():
    generative = Task.from_params({"type": "catwalk::synthetic_generative", "seed": 1})
    pairs = Task.from_params({"type": "catwalk::synthetic_preference", "seed": 1})
    instances = pairs.load(["validation"])["validation"]
    answers = {i.context: i.answer for i in generative.load(["validation"])["validation"]}
    assert all(answers[i.prompt] == i.chosen != i.rejected for i in instances)


def test_the_stored_form_keeps_the_reference_and_in_loop_stderr_equals_the_records():
    kind = kind_named("preference")
    instance = PreferenceInstance("p", " a", " b", reference=(-1.25, -3.5))
    assert kind.decode(json.loads(json.dumps(kind.encode(instance))), "x") == instance
    answers = [{"logps": [-1.0, -2.0], "rewards": [r, 0.1]} for r in (0.5, -0.2, 0.3)]
    result = kind.result([instance] * 3, answers, None)
    assert result["rewards/accuracies"] == pytest.approx(2 / 3)
    assert result["rewards/accuracies_stderr"] == pytest.approx(mean_stderr([1.0, 0.0, 1.0]))
    names = result["records"][0]["metrics"]
    values = {name: [r["metrics"][name] for r in result["records"]] for name in names}
    computed = kind.compute({**MeanSums().add(values, [1.0] * 3).sums, "loss": 0.0}, [instance])
    for name in result["records"][0]["metrics"]:
        assert computed[f"{name}_stderr"] == pytest.approx(result[f"{name}_stderr"])


@pytest.mark.parametrize(
    "given, message",
    [
        ({"beta": 0}, "model.dpo.beta: a number > 0, got 0"),
        (
            {"loss_type": "kto"},
            "model.dpo.loss_type: one of sigmoid, ipo, hinge, robust, got 'kto'",
        ),
        ({"label_smoothing": 0.5}, "model.dpo.label_smoothing: a number in [0, 0.5), got 0.5"),
        ({"temperature": 1}, "model.dpo.temperature: no such key"),
    ],
)
def test_the_dpo_block_is_checked(given, message):
    with pytest.raises(ConfigurationError) as error:
        DpoSettings.of(given)
    assert message in str(error.value)


def batch_of(model: RankClassifier, pairs: list[PreferenceInstance]) -> dict:
    collator = Collator("catwalk::byte_level", 64)
    return collator(pairs)


# adapter block, the weights moved (LoRA's B starts at 0), the weights that train
ADAPTERS = {
    "lora": ({"type": "lora", "r": 2, "target_modules": [".*c_attn", ".*c_fc"]}, "lora_B", "lora_"),
    "ia3": ({"type": "ia3", "target_modules": [".*c_attn", ".*c_fc"]}, "ia3_l", "ia3_l"),
}


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_with_an_adapter_the_reference_is_the_base_with_the_adapter_off(kind):
    """No reference given: the loss compares the adapted model with its own base; once the
    adapter has moved, the policy's log-probabilities differ and the base's stay."""
    adapter, moved, trained = ADAPTERS[kind]
    model = RankClassifier(**TINY, adapter=adapter)
    base = RankClassifier(**TINY)  # the same init seed
    pairs = [PreferenceInstance("Question: x?\nAnswer:", " yes\n", " no\n")] * 2
    batch = batch_of(model, pairs)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if moved in name:
                parameter.normal_()
    model.train()
    outputs = model(**batch)
    outputs["loss"].backward()
    with torch.no_grad():
        chosen, rejected, _, _ = answer_logps(base.lm, batch["preference"])
    reference = (outputs["logps/chosen"] - outputs["rewards/chosen"] / 0.1).detach()
    assert torch.allclose(reference, chosen, atol=1e-4)
    assert not torch.allclose(outputs["logps/chosen"], chosen, atol=1e-3)
    assert all(p.grad is None for n, p in model.named_parameters() if trained not in n)


def test_without_a_reference_or_adapter_training_says_so():
    model = RankClassifier(**TINY)
    batch = batch_of(model, [PreferenceInstance("Q:", " a", " b")])
    model.train()
    with pytest.raises(RuntimeError, match="no reference log-probabilities"):
        model(**batch)


def test_text_rows_need_the_model_s_tokenizer_only_to_count_against_max_length(tmp_path):
    rows = [{"prompt": "p", "chosen": " a", "rejected": " b"}]
    assert not files(tmp_path, rows).renders_chat  # load_task takes no tokenizer for it
    assert files(tmp_path, rows, max_length=16).renders_chat
    chat = [{"prompt": [user("hi")], "chosen": [assistant("a")], "rejected": [assistant("b")]}]
    assert files(tmp_path, chat).renders_chat
