"""What a lazy component (an engine, optimizer, loader or model given in jsonnet) will be built
from, read from its config without building it: for checks before any work, and for the few
decisions that depend on a component's type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tango.common import Lazy, Registrable
from tango.common.exceptions import ConfigurationError

from catwalk_startup.one_line import closest

from .errors import accepted_keys


def resolve_config(
    config: Mapping[str, Any], base: type[Registrable], key: str
) -> tuple[Any, dict[str, Any]]:
    """The class (or factory) a config dict names with `type` (else `base`'s default), and its
    other keys. An unknown type is a configuration error naming `key`."""
    params = dict(config)
    name = params.pop("type", getattr(base, "default_implementation", None))
    if name is None:
        return base, params
    try:
        constructor = base.resolve_class_name(name)[0]
    except ConfigurationError as e:
        raise ConfigurationError(f"{key}.type: {e}") from None
    return constructor, params


def lazy_params(lazy: Lazy) -> dict[str, Any]:
    """A `Lazy` component's config (with its `type`), without resolving anything.

    Private: Tango 1.3.2's `Lazy` keeps its config in `_params`; this is the one place that
    reads it.
    """
    return lazy._params.as_dict(quiet=True)


def model_params(model: Any) -> dict[str, Any]:
    """A model block's config as given (:func:`lazy_params` of a `Lazy`, a mapping's copy: a
    block built in Python); empty for a model built already, or none."""
    if isinstance(model, Lazy):
        return lazy_params(model)
    return dict(model) if isinstance(model, Mapping) else {}


def lazy_config(lazy: Any, base: type[Registrable], key: str) -> tuple[Any, dict[str, Any]]:
    """:func:`resolve_config` of a `Lazy` component; an object already built is its class."""
    if not isinstance(lazy, Lazy):
        return type(lazy), {}
    return resolve_config(lazy_params(lazy), base, key)


def registered_name(base: type[Registrable], constructor: Any) -> str | None:
    """The name under which `constructor` is registered as a `base`."""
    for name in base.list_available():
        if base.resolve_class_name(name)[0] is constructor:
            return name
    return None


# Keys a Tango component receives from the code that builds it (the training loop; an engine
# from its own constructor; a trained model from the step that trained it) rather than from the
# config.
SUPPLIED = {
    "training_engine": {"train_config", "model", "inner_modules", "own_keys"},
    "model": {"metrics_history", "run_card"},
    "optimizer": {"params"},
    "lr_scheduler": {"optimizer"},
    "train_dataloader": {"dataset"},
    "validation_dataloader": {"dataset"},
}


def check_keys(constructor: Any, params: Mapping[str, Any], key: str) -> None:
    """Every key in the config is one the constructor takes, or one the loop supplies."""
    accepted = accepted_keys(constructor)
    if accepted is None:
        return
    accepted -= SUPPLIED.get(key.split(".")[-1], set())
    for name in params:
        if name not in accepted:
            close = closest(name, sorted(accepted))
            hint = f"did you mean '{close}'? " if close else ""
            kind = getattr(constructor, "__name__", str(constructor))
            raise ConfigurationError(
                f"{key}.{name}: {kind} has no such key; {hint}(it takes "
                f"{', '.join(sorted(accepted))})"
            )
