"""Tango's log records as JSON.

`tango run` listens on 127.0.0.1 for the log records of its worker processes and `--parallelism`
children (`LogRecordSocketReceiver` in tango/common/logging.py, ai2-tango 1.3.2) and unpickles
whatever arrives there: any local user could run code as the user of the run. Here the receiver
reads length-prefixed JSON objects of plain values instead (anything else is dropped, unread),
and Tango's senders (the `SocketHandler` that `initialize_worker_logging` installs) write them:
nothing that reaches that port is unpickled.

Whose records: any local user can connect to a port on 127.0.0.1. The receiver makes a key when
it starts (:func:`_receiver_with_key`) and puts it in the environment (`CATWALK_LOG_KEY`), which
the run's workers and `--parallelism` children inherit as they inherit Tango's
`TANGO_LOGGING_PORT` (a process's environment is readable by its own user only, unlike its
command line); every record a sender writes carries it, and a connection whose record does not
is closed, nothing printed. What arrives is printed with its control characters escaped
(:func:`escaped`): a record's text cannot move the terminal's cursor or colour what follows.

Applied when Tango's logging module is imported (:mod:`catwalk_startup`), so the receiver is
patched before it exists.
"""

from __future__ import annotations

import hmac
import json
import logging
import logging.handlers
import os
import re
import secrets
import struct
import types
from typing import Any

from .patching import patch

PATCH = "log records as JSON"
MAX_RECORD_BYTES = 1 << 20  # a longer record is not one of ours: the connection is closed
PLAIN = (str, int, float, bool, type(None))
KEY_ENV = "CATWALK_LOG_KEY"  # the receiver's key, inherited by its senders
KEY_FIELD = "catwalk_log_key"  # the record field that carries it
# C0 controls but newline and tab, DEL, and C1 controls (0x9b is a one-character CSI).
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def record_bytes(record: logging.LogRecord) -> bytes:
    """A record as its sender's `SocketHandler.makePickle` would send it, in JSON: the message
    formatted, the traceback as text, the other plain attributes. Objects are left out: what
    they do does not cross processes, and a receiver would use their text in their place
    (Tango's `log_exception` attaches a rich highlighter, which the terminal handler calls: its
    text there made every step failure of a `--parallelism` child unprintable)."""
    fields = dict(record.__dict__)
    fields["msg"] = record.getMessage()
    fields["args"] = None
    if record.exc_info and not record.exc_text:
        fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
    fields["exc_info"] = None
    plain = {k: v for k, v in fields.items() if isinstance(v, PLAIN)}
    plain[KEY_FIELD] = os.environ.get(KEY_ENV, "")
    data = json.dumps(plain).encode()
    return struct.pack(">L", len(data)) + data


def _make_json(handler: logging.handlers.SocketHandler, record: logging.LogRecord) -> bytes:
    return record_bytes(record)


def plain_record(data: bytes) -> dict[str, Any] | None:
    """The record's attributes, or None for anything that is not a JSON object of plain values."""
    try:
        fields = json.loads(data)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, PLAIN) for k, v in fields.items()):
        return None
    return fields


def escaped(text: str) -> str:
    """`text` with its control characters written out (`\\x1b[31m`), newlines and tabs kept."""
    return CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def from_our_sender(server: Any, fields: dict[str, Any]) -> bool:
    """Whether the record carries the key of the receiver it reached (and drops it)."""
    key = fields.pop(KEY_FIELD, None)
    expected = getattr(server, "catwalk_log_key", None)
    if not isinstance(key, str) or expected is None:
        return False
    return hmac.compare_digest(key.encode(), expected.encode())


def _receive(connection: Any, size: int) -> bytes | None:
    chunks, received = [], 0
    while received < size:
        chunk = connection.recv(size - received)
        if not chunk:
            return None
        chunks.append(chunk)
        received += len(chunk)
    return b"".join(chunks)


def handle_connection(self: Any) -> None:
    """Replaces `LogRecordStreamHandler.handle`: length-prefixed JSON records, each logged as
    Tango would; a frame that is not one ends the connection unread."""
    while True:
        header = _receive(self.connection, 4)
        if header is None:
            return
        size = struct.unpack(">L", header)[0]
        if size > MAX_RECORD_BYTES:
            return
        data = _receive(self.connection, size)
        fields = plain_record(data) if data is not None else None
        if fields is None or not from_our_sender(self.server, fields):
            return
        fields = {k: escaped(v) if isinstance(v, str) else v for k, v in fields.items()}
        self.handleLogRecord(logging.makeLogRecord(fields))


def _refuse(self: Any, data: bytes) -> None:
    raise ValueError("log records are JSON here; nothing is unpickled")


def _receiver_with_key(original: Any) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        """Tango's receiver, with a key of its own that its senders inherit (see the module);
        made before the receiver's thread starts, so no record is read without one."""
        original(self, *args, **kwargs)
        self.catwalk_log_key = secrets.token_hex(16)
        os.environ[KEY_ENV] = self.catwalk_log_key

    return __init__


def patch_tango_logging(module: types.ModuleType) -> None:
    """Makes Tango's receiver read JSON records from its own senders only, and the senders set
    up so far write them (those set up later: :func:`senders_write_json`, after each
    `_initialize_logging`). Once."""
    patch(module, "LogRecordStreamHandler.handle", PATCH, lambda _: handle_connection)
    patch(module, "LogRecordStreamHandler.unPickle", PATCH, lambda _: _refuse)
    patch(module, "LogRecordSocketReceiver.__init__", PATCH, _receiver_with_key)
    senders_write_json(module)


def senders_write_json(module: types.ModuleType) -> None:
    """Every `SocketHandler` on Tango's loggers sends JSON instead of a pickle."""
    loggers = [logging.getLogger(), module.cli_logger, logging.getLogger("tqdm")]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.handlers.SocketHandler):
                handler.makePickle = types.MethodType(_make_json, handler)  # type: ignore[method-assign]
