"""What `catwalk::evaluate` scores, before anything is loaded.

A model comes as a block (a config with random init, or pretrained weights by hub name or
path), as a step's result (`catwalk::train`, `catwalk::export_checkpoint`: a saved directory)
or, from Python, already built. Building the step graph reads at most a model's config (its
positions, for the checks); the weights are read when the step runs, as this process's one held
model (:mod:`catwalk_steps.workspace.held_model`), or by each worker when the step scores on
several devices.

A block is kept in the step's arguments as plain data (:func:`model_block`), so the step's
unique id is a hash of data, the same in every process that builds the graph.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango.common import Lazy, Params
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from ..checkpoints.base_identity import directory_digest
from ..checkpoints.weights import read_model_info
from ..components import check_keys, lazy_params, resolve_config
from ..file_digests import file_digests
from ..model_files import check_model_directory
from ..objectives import OBJECTIVE
from ..remote import is_hub_name
from ..scoring.causal_lm import causal_lm_config, unavailable_here
from ..scoring.rank_classifier import RankClassifier
from ..scoring.tokenization import load_tokenizer
from ..tasks.chat_templates import ChatTemplate
from ..workspace.held_model import HeldModel
from ..workspace.step_cache import held_by

RANK_CLASSIFIER = "catwalk::rank_classifier"


def model_block(value: Any) -> Any:
    """An evaluate step's `model` as it is kept: a model block as plain, normalised data (two
    blocks that build the same model are equal: defaults filled in, `init_seed` dropped for
    pretrained weights); a step, or a model built in Python, as it is."""
    if isinstance(value, Lazy):
        value = lazy_params(value)
    if not isinstance(value, (Mapping, Params)):
        return value
    params = value.as_dict(quiet=True) if isinstance(value, Params) else dict(value)
    constructor, arguments = resolve_config(params, Model, "evaluate.model")
    if not (isinstance(constructor, type) and issubclass(constructor, RankClassifier)):
        return params
    check_keys(constructor, arguments, "evaluate.model")
    ChatTemplate.of(arguments.get("chat_template"), "evaluate.model.chat_template")  # checked
    arguments.pop("skeleton", None)
    return {"type": RANK_CLASSIFIER, **RankClassifier.spec_of(**arguments)}


class ConfiguredModel:
    """A model block: built (random init) or read (pretrained) when the step runs, through
    `held` (the workspace's one held model; by default a holder of its own)."""

    def __init__(self, block: Mapping[str, Any], held: HeldModel | None = None):
        self.block = dict(block)
        self.key = det_hash(self.block)
        self.held = held if held is not None else HeldModel()

    def lazy(self) -> Lazy[Model]:
        return Lazy(Model, Params(json.loads(json.dumps(self.block))))

    def load(self) -> Model:
        return self.held.use(self.key, lambda: self.lazy().construct(), self.describe())

    def describe(self) -> str:
        if self.block.get("pretrained"):
            return str(self.block["pretrained"])
        config = self.block.get("config") or {}
        return f"{config.get('model_type', 'model')} from its config (random init)"

    def info(self) -> dict[str, Any]:
        """What a saved model's `catwalk_model.json` says; nothing for a block."""
        return {}

    def fingerprint(self) -> str | None:
        """The model's content, for an evaluation's records (:mod:`.journal`): the block (a
        config and seed build the same weights), with a local directory's files' SHA-256."""
        pretrained = self.block.get("pretrained")
        files = directory_digest(Path(str(pretrained))) if local_directory(pretrained) else None
        return det_hash({"block": self.block, "files": files})

    def content(self) -> dict[str, str] | None:
        """What a step's identity adds to the block: the content of its local directories
        (`pretrained`, and a `tokenizer` directory of its own), each one SHA-256 over its
        files, so weights replaced in place are another step. None for a hub name or a
        config: the block says it all (and the step's id stays what it was)."""
        found = local_content({key: self.block.get(key) for key in ("pretrained", "tokenizer")})
        template = template_content(self.block, "model.chat_template")
        return {**(found or {}), **template} or None

    def hf_config(self) -> Any:
        """Its Hugging Face config, without weights; None when it cannot be read here (a hub
        model without the network: the step's own load then says why)."""
        if self.block.get("type") != RANK_CLASSIFIER:
            return None
        return _hf_config(json.dumps(self.block, sort_keys=True))

    def tokenizer_name(self) -> str:
        return self.block.get("tokenizer") or self.block["pretrained"]

    def chat_template(self) -> ChatTemplate | None:
        """The block's `chat_template` (None: the tokenizer's own)."""
        return ChatTemplate.of(self.block.get("chat_template"), "evaluate.model.chat_template")

    def check_files(self) -> None:
        """A local directory's files as its readers need them (:mod:`catwalk_steps.model_files`):
        cheap, so checked when the step graph is built; a hub model is read when it runs."""
        pretrained = self.block.get("pretrained")
        if pretrained and not is_hub_name(pretrained):
            check_model_directory(pretrained, "evaluate.model.pretrained")


def local_directory(value: Any) -> bool:
    """Whether a model block's `pretrained` (or `tokenizer`, `init_from`) is a local
    directory, not a hub name."""
    return isinstance(value, str) and not is_hub_name(value) and Path(value).is_dir()


def local_content(directories: Mapping[str, Any]) -> dict[str, str] | None:
    """`{field: SHA-256 over the directory's files}` for each field naming a local directory
    (one named twice counted once), None when none does. Each file is hashed once while it is
    unchanged, whichever process builds the step graph (:mod:`catwalk_steps.file_digests`)."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for field, value in directories.items():
        if local_directory(value) and str(Path(value).resolve()) not in seen:
            seen.add(str(Path(value).resolve()))
            found[field] = directory_digest(Path(value))
    return found or None


def template_content(block: Mapping[str, Any], field: str) -> dict[str, str]:
    """A block's `chat_template` (at `field`) that names a file: `{field: its SHA-256}` (the
    block holds only the path; a template given as text is in the block itself)."""
    template = ChatTemplate.of(block.get("chat_template"), field)
    if template is None or template.file is None:
        return {}
    return {field: file_digests([Path(template.file).expanduser()])[0]}


@functools.lru_cache(maxsize=32)
def _hf_config(block_json: str) -> Any:
    """One read per model block and process: a suite's steps share their model's."""
    block = json.loads(block_json)
    try:
        tokenizer = None
        if block.get("pretrained") is None:
            tokenizer = load_tokenizer(block["tokenizer"], "model.tokenizer")
        return causal_lm_config(block.get("pretrained"), block.get("config"), tokenizer)
    except ConfigurationError as e:
        if unavailable_here(e, block.get("pretrained")):
            return None
        raise


class SavedModel:
    """A step's model result (a Hugging Face directory in the workspace), read when needed
    through the workspace's one held model."""

    def __init__(self, step: Any, workspace: Any):
        self.step, self.workspace = step, workspace
        self.key = step.unique_id
        self.held = held_by(workspace)

    def load(self) -> Model:
        cache = self.workspace.step_cache
        return self.held.use(self.key, lambda: cache[self.step], self.describe())

    def describe(self) -> str:
        return f"'{self.step.name}' ({self.directory()})"

    def directory(self) -> Path:
        return Path(self.workspace.step_cache.step_dir(self.step))

    def info(self) -> dict[str, Any]:
        """`catwalk_model.json`: objective, metric history, run card (no weights read)."""
        return read_model_info(self.directory())

    def fingerprint(self) -> str | None:
        """The saved directory's files by content (a step cleared and run again may save
        other weights under the same step id)."""
        return directory_digest(self.directory())

    def lazy(self) -> Lazy[Model]:
        """The model as each worker builds it: from the directory."""
        block = {
            "type": RANK_CLASSIFIER,
            "pretrained": str(self.directory()),
            "objective": self.info().get("objective", OBJECTIVE),
        }
        return Lazy(Model, Params(block))

    def hf_config(self) -> Any:
        return causal_lm_config(str(self.directory()), None)

    def tokenizer_name(self) -> str:
        return str(self.directory())

    def chat_template(self) -> ChatTemplate | None:
        """None: the saved tokenizer keeps the template it was trained with."""
        return None


class BuiltModel:
    """A model built in Python and handed to the step (tests, notebooks)."""

    def __init__(self, model: Model):
        self.model = model
        self.key = f"built:{id(model)}"

    def load(self) -> Model:
        return self.model

    def describe(self) -> str:
        return type(self.model).__name__

    def info(self) -> dict[str, Any]:
        return {
            "metrics_history": getattr(self.model, "metrics_history", None),
            "run_card": getattr(self.model, "run_card", None),
        }

    def fingerprint(self) -> str | None:
        """None: a model built in Python has no content to key records by (none are kept)."""
        return None

    def lazy(self) -> Lazy[Model]:
        raise ConfigurationError(
            "evaluate.model: a model built in Python is scored in this process only; give a "
            "model block (or a step's result) to score on several devices"
        )

    def hf_config(self) -> Any:
        return getattr(getattr(self.model, "lm", None), "config", None)

    def tokenizer_name(self) -> str:
        classifier: Any = self.model  # a rank classifier (scored with its tokenizer)
        return classifier.tokenizer.name_or_path

    def chat_template(self) -> ChatTemplate | None:
        spec = getattr(self.model, "spec", None) or {}
        return ChatTemplate.of(spec.get("chat_template"), "model.chat_template")


ModelSource = ConfiguredModel | SavedModel | BuiltModel


def model_source(model: Any, held: HeldModel | None = None) -> ModelSource:
    """The source of an evaluate step's `model` as the step receives it when it runs; a block
    is loaded through `held` (the workspace's, :func:`held_by`)."""
    if isinstance(model, (ConfiguredModel, SavedModel, BuiltModel)):
        return model
    if isinstance(model, Mapping):
        return ConfiguredModel(model, held)
    if isinstance(model, Model):
        return BuiltModel(model)
    raise ConfigurationError(
        f"evaluate.model: expected a catwalk::rank_classifier block or a step's model, got "
        f"{type(model).__name__}"
    )


def configured_model_of(step_or_block: Any) -> ConfiguredModel | None:
    """At graph build: the block a model comes from, when it can be known without running
    anything (a block, or a `catwalk::train` step's model block); else None."""
    from tango import Step

    if isinstance(step_or_block, Step):
        step_or_block = step_or_block.kwargs.get("model")
        if not isinstance(step_or_block, Lazy):
            return None
        step_or_block = model_block(step_or_block)
    if isinstance(step_or_block, Mapping):
        return ConfiguredModel(step_or_block)
    return None
