"""The embedded default tasks: generated from a seed, learnable from scratch, no download; one
multiple choice, one generative (the same questions, answered in words)."""

from __future__ import annotations

import random
from collections.abc import Mapping

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .answers import AnswerScoring
from .base import ModelTokenizer, MultipleChoiceInstance, Task, TaskDataError, TaskInstance
from .generation import GenerationInstance, answer_text
from .generative import WHITESPACE
from .preference import PreferenceInstance


@Task.register("catwalk::synthetic")
class SyntheticTask(Task):
    """A multiple-choice task generated from a seed, learnable from scratch by a tiny model.

    The seed draws `num_keys` made-up words and gives each a hidden attribute word. A question asks
    for a key's attribute; the distractors are other attributes. Training and validation ask about
    the same keys with other distractors and other orders, so a model that learns the mapping
    generalises while chance stays at 1 / `num_choices`.
    """

    def __init__(
        self,
        seed: int = 0,
        num_keys: int = 24,
        num_attributes: int = 8,
        num_choices: int = 4,
        sizes: Mapping[str, int] | None = None,
    ):
        whole(num_keys, "task.num_keys")
        whole(num_attributes, "task.num_attributes")
        if not 2 <= num_choices <= num_attributes:
            raise ConfigurationError(
                f"task.num_choices: must be between 2 and num_attributes ({num_attributes}), "
                f"got {num_choices}"
            )
        if num_keys + num_attributes > MAX_WORDS:
            raise ConfigurationError(
                f"task.num_keys + task.num_attributes: at most {MAX_WORDS} distinct made-up "
                f"words exist, got {num_keys} + {num_attributes}"
            )
        for split, size in (sizes or {}).items():
            whole(size, f"task.sizes.{split}", minimum=0)
        self.seed = seed
        self.num_keys = num_keys
        self.num_attributes = num_attributes
        self.num_choices = num_choices
        self.sizes = dict(sizes or {"train": 2048, "validation": 256})
        rng = random.Random(seed)
        words = _made_up_words(rng, num_keys + num_attributes)
        self.keys = words[:num_keys]
        self.attributes = words[num_keys:]
        self.answer = {key: rng.randrange(num_attributes) for key in self.keys}

    def describe(self, split: str) -> str:
        return f"synthetic task (seed {self.seed})"

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        if split not in self.sizes:
            raise TaskDataError(
                f"synthetic task: unknown split '{split}' (known: {', '.join(sorted(self.sizes))})"
            )
        rng = random.Random(f"{self.seed}/{split}")  # str seeds are hashed deterministically
        return [self._instance(rng) for _ in range(self.sizes[split])]

    def question(self, key: str) -> str:
        return f"Question: What goes with {key}?\nAnswer:"

    def _instance(self, rng: random.Random) -> TaskInstance:
        key = rng.choice(self.keys)
        right = self.answer[key]
        wrong = rng.sample(
            [a for a in range(self.num_attributes) if a != right], self.num_choices - 1
        )
        options = [right, *wrong]
        rng.shuffle(options)
        return MultipleChoiceInstance(
            context=self.question(key),
            choices=tuple(" " + self.attributes[a] for a in options),
            label=options.index(right),
        )


@Task.register("catwalk::synthetic_generative")
class SyntheticGenerativeTask(SyntheticTask):
    """The synthetic task's questions answered in words: the model writes the key's attribute,
    then a newline (the stop sequence), as a QA task is answered; exact match after the
    answer's whitespace is removed (NQ-Open's filter). Generated from the same seed as
    `catwalk::synthetic` with the same keys, words and attributes: a tiny model learns it from
    scratch, chance is 0; every split asks about the same keys, so validation tells whether the
    mapping was learned and whether the model stops where generation cuts.

    :param max_gen_toks: the most tokens generated per answer (an attribute is 4 characters).
    """

    kind = "generative"
    until = ("\n",)

    def __init__(
        self,
        seed: int = 0,
        num_keys: int = 24,
        num_attributes: int = 8,
        sizes: Mapping[str, int] | None = None,
        max_gen_toks: int = 8,
    ):
        super().__init__(seed, num_keys, num_attributes, num_choices=2, sizes=sizes)
        whole(max_gen_toks, "task.max_gen_toks")
        self.max_gen_toks = max_gen_toks
        self.scoring = AnswerScoring.of(WHITESPACE, [{"metric": "exact_match"}], "synthetic task")

    @property
    def name(self) -> str:
        return "synthetic_generative"

    def describe(self, split: str) -> str:
        return f"synthetic generative task (seed {self.seed})"

    def _instance(self, rng: random.Random) -> GenerationInstance:
        key = rng.choice(self.keys)
        target = self.attributes[self.answer[key]]
        return GenerationInstance(
            context=self.question(key),
            targets=(target,),
            until=self.until,
            max_gen_toks=self.max_gen_toks,
            scoring=self.scoring,
            answer=answer_text(target, " ", self.until),
        )


CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
MAX_WORDS = (len(CONSONANTS) * len(VOWELS)) ** 2  # two consonant-vowel syllables


def _made_up_words(rng: random.Random, count: int) -> list[str]:
    """`count` distinct two-syllable words; `count` must not exceed :data:`MAX_WORDS`."""
    consonants, vowels = CONSONANTS, VOWELS
    words: dict[str, None] = {}  # insertion-ordered set
    while len(words) < count:
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(2))
        words.setdefault(word)
    return list(words)


@Task.register("catwalk::synthetic_preference")
class SyntheticPreferenceTask(SyntheticTask):
    """The synthetic questions as preference pairs: the key's attribute chosen, another one
    rejected, each written as `catwalk::synthetic_generative` answers it (the word, then a
    newline). The same seed gives the same keys and attributes as the generative task, so a
    model trained on that one starts DPO from knowing the mapping; from scratch, DPO learns it.

    :param seed: draws the task (the same keys and answers as `catwalk::synthetic_generative`'s
        for the same seed).
    :param num_keys: keys (entities) in the task.
    :param num_attributes: attributes per key.
    :param sizes: pairs per split (default `{train: 2048, validation: 256}`).
    """

    kind = "preference"

    def __init__(
        self,
        seed: int = 0,
        num_keys: int = 24,
        num_attributes: int = 8,
        sizes: Mapping[str, int] | None = None,
    ):
        super().__init__(seed, num_keys, num_attributes, num_choices=2, sizes=sizes)

    @property
    def name(self) -> str:
        return "synthetic_preference"

    def describe(self, split: str) -> str:
        return f"synthetic preference task (seed {self.seed})"

    def _instance(self, rng: random.Random) -> PreferenceInstance:  # type: ignore[override]
        key = rng.choice(self.keys)
        right = self.answer[key]
        wrong = rng.choice([a for a in range(self.num_attributes) if a != right])
        answer = lambda a: answer_text(self.attributes[a], " ", SyntheticGenerativeTask.until)  # noqa: E731
        return PreferenceInstance(self.question(key), str(answer(right)), str(answer(wrong)))
