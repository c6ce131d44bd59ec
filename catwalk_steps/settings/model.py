"""A model block (`model`) read once from its config without building it: which constructor
its `type` names, and its keys (the skeleton built from them, once per process:
:mod:`catwalk_steps.engines.skeleton`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tango.integrations.torch import Model

from ..components import lazy_config
from ..tasks.chat_templates import ChatTemplate

INIT_SEED = 0  # `init_seed`'s default: a random init's seed, and an adapter's


@dataclass(frozen=True)
class ModelSettings:
    """A model block: `{type: 'catwalk::rank_classifier', pretrained | config, tokenizer, ...}`
    (the rank classifier's keys: its docstring)."""

    constructor: Any  # the class (or factory) its `type` names
    # Every key as given, `type` left out (`pretrained`, `config`, `objective`, `adapter`, ...).
    params: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    key: str = "model"  # where the block is in the config

    @classmethod
    def of(cls, lazy: Any, key: str = "model") -> ModelSettings:
        constructor, params = lazy_config(lazy, Model, key)
        return cls(constructor=constructor, params=params, key=key)

    @classmethod
    def read(cls, model: Any) -> ModelSettings:
        """A model block (a `Lazy`, or a built model: its class), or its settings read already."""
        return model if isinstance(model, ModelSettings) else cls.of(model)

    @property
    def chat_template(self) -> ChatTemplate | None:
        """`chat_template`, read (its file's text) and checked; None when left out."""
        return ChatTemplate.of(self.params.get("chat_template"), f"{self.key}.chat_template")

    @property
    def params_json(self) -> str:
        """The keys as one string: what identifies the block's skeleton in this process."""
        return json.dumps(self.params, sort_keys=True, default=str)
