"""A task's instances as a step result stores them (`catwalk::load_task`,
`catwalk::reference_logprobs`): each split one Arrow file in its kind's columns
(:mod:`catwalk_steps.kinds.storing`), and `splits.json` naming each file with its SHA-256, its
number of rows, its kind and its fingerprint, beside the result's metadata. `splits.json` is
sealed by `digests.json` (:mod:`catwalk_steps.sealed`); each Arrow file is checked against the
digest `splits.json` holds when the result is read (hashed once while the file is unchanged,
never read whole into memory: :func:`~catwalk_steps.arrow_tables.open_table`). A damaged file
is one line naming it, never a number.

Reading a result maps its files and decodes no row (:class:`~catwalk_steps.kinds.stored.
StoredSplit`). A result stored before splits were Arrow files (`instances.json`, one JSON file of
every instance) reads back as it did, whole, and the first one a process reads is said in one
line.

A split a task streams (`streaming: true`) is stored as what identifies its stream, never its
rows: its entry in `splits.json` is `{"stream": ...}`
(:class:`~catwalk_steps.tasks.streamed.StreamedSplit`), read back as the stream training reads.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from tango.common import DatasetDict

from ..files import write_json_atomic
from ..kinds import kind_of_record
from ..kinds.stored import stored_split
from ..kinds.storing import StreamedSplits, write_split
from ..sealed import read_checked, write_digests
from ..tasks.streamed import StreamedSplit, is_streamed

RECORD = "splits.json"
LEGACY = "instances.json"  # the stored form before splits were Arrow files (format 001)
VERSION = 1
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}")

logger = logging.getLogger(__name__)
_said_legacy: list[Path] = []


def split_file(name: str, index: int) -> str:
    """The file a split is stored in: its name where that is a plain file name."""
    plain = PLAIN_NAME.fullmatch(name) and not name.endswith(".json")
    return f"{name}.arrow" if plain else f"split{index}.arrow"


def write_instances(artifact: Any, directory: Path) -> None:
    """`artifact`'s splits (a DatasetDict of sequences, or :class:`StreamedSplits` as a task
    reads them) each written as it comes, then their record, sealed; on failure nothing of
    it is left."""
    splits = artifact if isinstance(artifact, StreamedSplits) else iter(artifact.splits.items())
    record: dict[str, Any] = {}
    written: list[Path] = []
    try:
        for index, (name, instances) in enumerate(splits):
            if is_streamed(instances):  # no rows: what identifies them
                record[name] = {"stream": instances.record()}
                continue
            path = directory / split_file(name, index)
            written.append(path)
            record[name] = write_split(path, name, instances)
            logger.info("Split %s: %d instances", name, record[name]["rows"])
        payload = {"version": VERSION, "metadata": dict(artifact.metadata), "splits": record}
        write_json_atomic(directory / RECORD, payload)
        write_digests(directory, [RECORD])
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def read_instances(directory: Path) -> DatasetDict:
    """The stored splits, each file mapped and checked (see the module); an older result's
    `instances.json`, read whole."""
    if not (directory / RECORD).is_file() and (directory / LEGACY).is_file():
        return read_legacy(directory)
    payload = json.loads(read_checked(directory / RECORD))
    try:
        splits: dict[str, Any] = {
            name: streamed(e) if "stream" in e else stored_split(directory, name, e)
            for name, e in payload["splits"].items()
        }
        metadata = dict(payload["metadata"])
    except (KeyError, TypeError, AttributeError) as e:  # (a KeyError: "not cached" to Tango)
        raise ValueError(f"{directory / RECORD}: not the record of stored splits ({e!r})") from None
    for split in splits.values():
        if not is_streamed(split):  # each file checked now: a damaged one is one line
            split.reader()
    return DatasetDict(splits=splits, metadata=metadata)


def read_legacy(directory: Path) -> DatasetDict:
    """A result of the JSON form: every instance decoded by its kind, as before."""
    if not _said_legacy:
        _said_legacy.append(directory)
        logger.warning(
            "%s: stored before task results were Arrow files: read whole, as before (said once); "
            "clear it with `catwalk-clear-step %s` to store it again as Arrow, mapped when read",
            directory / LEGACY,
            directory,
        )
    payload = json.loads(read_checked(directory / LEGACY))
    try:
        splits: dict[str, Any] = {
            name: streamed(rows)
            if isinstance(rows, dict)
            else [kind_of_record(row).decode(row, LEGACY) for row in rows]
            for name, rows in payload["splits"].items()
        }
    except KeyError as e:  # (a KeyError would say "not cached" to Tango's cache)
        raise ValueError(f"{LEGACY}: a stored instance has no {e}") from None
    return DatasetDict(splits=splits, metadata=payload["metadata"])



def streamed(entry: dict[str, Any]) -> StreamedSplit:
    """A streamed split's entry (`{"stream": ...}`), as training reads it."""
    return StreamedSplit.of_record(entry["stream"])
