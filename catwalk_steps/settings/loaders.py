"""A data loader block (`train_dataloader`, `validation_dataloader`) and its `collate_fn`, read
once from its config without building it: the graph-build checks, the warnings when training
starts and the in-loop tasks' encoding all read this object; its rules:
:meth:`LoaderSettings.check`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator, DataLoader

from ..components import check_keys, lazy_config, resolve_config
from ..errors import whole

MAX_LENGTH = 256  # `collate_fn.max_length`'s default: tokens per (context, choice) row


@dataclass(frozen=True)
class LoaderSettings:
    """A data loader block: its keys as given, and its collate function's."""

    key: str  # where the block is in the config: `train_dataloader`, `validation_dataloader`
    loader_class: Any  # the class its `type` names (Tango's `DataLoader` when left out)
    # Every key of the loader as given, `type` left out (`batch_size`, `shuffle`, ...).
    params: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Every key of its `collate_fn` as given (`tokenizer`, `max_length`); {} when left out.
    collate: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    packing: bool = False  # `collate_fn.packing`: generative training examples packed into rows

    @classmethod
    def of(cls, lazy: Any, key: str) -> LoaderSettings:
        loader, params = lazy_config(lazy, DataLoader, key)
        collate = dict(params.get("collate_fn") or {})
        packing = collate.get("packing", False)
        if not isinstance(packing, bool):
            raise ConfigurationError(f"{key}.collate_fn.packing: true or false, got {packing!r}")
        return cls(key=key, loader_class=loader, params=params, collate=collate, packing=packing)

    @property
    def tokenizer(self) -> str | None:
        """`collate_fn.tokenizer`: a hub name or a local path; None when left out."""
        return self.collate.get("tokenizer")

    @property
    def max_length(self) -> int:
        """`collate_fn.max_length`: the longest row in tokens (the context cut from the left)."""
        return self.collate.get("max_length", MAX_LENGTH)

    def collate_key(self, name: str) -> str:
        """The config key of the collate function's `name`, for messages."""
        return f"{self.key}.collate_fn.{name}"

    def check(self) -> dict[str, Any]:
        """The loader's type and keys, its batch size, and its collate function's type and keys
        (a `max_length` of at least 2 tokens); the collate function's keys as given."""
        check_keys(self.loader_class, self.params, self.key)
        whole(self.params.get("batch_size", 1), f"{self.key}.batch_size")
        collate = self.params.get("collate_fn")
        if collate is None:
            return {}
        field = f"{self.key}.collate_fn"
        collator, collate_params = resolve_config(collate, DataCollator, field)
        check_keys(collator, collate_params, field)
        if "max_length" in collate_params:
            whole(collate_params["max_length"], self.collate_key("max_length"), minimum=2)
        return collate_params
