"""A Hugging Face causal LM read from a hub name or a local directory, or built from a config.

A local directory is checked whole first (:mod:`..model_files`), and no code from a model's
files is ever run: transformers is told `trust_remote_code=False` everywhere, so a model that
needs its own code fails in one line instead of asking on the terminal (with `None`,
transformers prompts "Do you wish to run the custom code?" and waits for an answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from ..model_files import check_model_directory, needs_remote_code
from ..remote import files_only, is_hub_name

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

NO_REMOTE_CODE = {"trust_remote_code": False}


def causal_lm_config(
    pretrained: str | None, config: Mapping[str, Any] | None, tokenizer: Any = None
) -> PretrainedConfig:
    """The Hugging Face config of the LM, read without any weights: `pretrained`'s
    (`config.json`, its directory checked whole), or built from the `config` dict. A config
    that leaves out the vocabulary size or special token ids takes them from `tokenizer`."""
    from transformers import AutoConfig

    if pretrained is not None:
        cached = checked_source(pretrained, weights=False)
        try:
            return AutoConfig.from_pretrained(pretrained, local_files_only=cached, **NO_REMOTE_CODE)
        except (OSError, ValueError) as e:
            raise cannot_load(pretrained, e) from None
    config = dict(config or {})
    if tokenizer is not None:
        config.setdefault("vocab_size", len(tokenizer))
        for field in ("bos_token_id", "eos_token_id", "pad_token_id"):
            config.setdefault(field, getattr(tokenizer, field))
    if "model_type" not in config:
        raise ConfigurationError("model.config: missing field 'model_type' (e.g. \"gpt2\")")
    try:
        return AutoConfig.for_model(config.pop("model_type"), **config)
    except (ValueError, KeyError) as e:
        raise ConfigurationError(f"model.config: {e}") from None


def checked_source(pretrained: str, weights: bool = True, field: str = "model.pretrained") -> bool:
    """Whether `pretrained` must be read from the local cache (:func:`~..remote.files_only`);
    a local directory is checked whole first (its config alone, without `weights`)."""
    if not is_hub_name(pretrained):
        check_model_directory(pretrained, field, weights)
    return files_only(pretrained, field)


def cannot_load(
    pretrained: str, error: BaseException, field: str = "model.pretrained"
) -> ConfigurationError:
    if "trust_remote_code" in str(error):
        return needs_remote_code(pretrained, field)
    return ConfigurationError(f"{field} '{pretrained}': cannot load it ({first_line(error)})")


def build_causal_lm(
    pretrained: str | None,
    config: Mapping[str, Any] | None,
    init_seed: int,
    tokenizer: Any = None,
    skeleton: bool = False,
) -> PreTrainedModel:
    """Loads a causal LM by hub name / path, or builds one from a config dict with random init.

    The caller (:class:`~.rank_classifier.RankClassifier`) checks that exactly one is given.
    With `skeleton`, the model is built on the meta device: its structure without any weights
    (a sharded engine then materialises only its own shard).
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    if pretrained is not None and not skeleton:
        cached = checked_source(pretrained)
        try:
            return AutoModelForCausalLM.from_pretrained(
                pretrained, dtype=torch.float32, local_files_only=cached, **NO_REMOTE_CODE
            )
        except (OSError, ValueError, SafetensorError) as e:
            raise cannot_load(pretrained, e) from None
    hf_config = causal_lm_config(pretrained, config, tokenizer)
    if skeleton:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    # Same weights on every rank and in every process, whatever the global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)


def modeling_module(block: Mapping[str, Any]) -> str | None:
    """The transformers module of a model block's family (`transformers.models.gpt2.
    modeling_gpt2`), for the server training workers fork from to import once (each worker
    imported it itself: 0.2-0.4 s of CPU apiece): from `config.model_type`, or a local
    `pretrained` directory's `config.json`; None when neither says, or the type is not one
    transformers ships (data names a module only from transformers' own table)."""
    import json
    from pathlib import Path

    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING_NAMES,
        model_type_to_module_name,
    )

    config, pretrained = block.get("config"), block.get("pretrained")
    model_type = config.get("model_type") if isinstance(config, Mapping) else None
    if model_type is None and isinstance(pretrained, str) and not is_hub_name(pretrained):
        try:
            model_type = json.loads(Path(pretrained, "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            return None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        return None
    name = model_type_to_module_name(model_type)
    return f"transformers.models.{name}.modeling_{name}"


def unavailable_here(error: ConfigurationError, pretrained: str | None) -> bool:
    """A hub model that cannot be read on this machine now (no hub, or not there): a check at
    graph build leaves it to the step's own load, which says why if the step runs. A local
    directory is never left: what is wrong with it is known now."""
    from ..remote import HubUnreachable

    if isinstance(error, HubUnreachable):
        return True
    hub = pretrained is not None and is_hub_name(pretrained)
    return hub and "cannot load it" in str(error)
