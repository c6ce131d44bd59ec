"""Arrow tables as the package stores data: written in batches, read by mapping, each file
checked against the SHA-256 written with it before a row is read."""

from __future__ import annotations

import pickle

import psutil
import pyarrow as pa
import pytest

from catwalk_steps.arrow_tables import open_table, write_table
from catwalk_steps.sealed import AlteredFileError

SCHEMA = pa.schema([("text", pa.string()), ("ids", pa.list_(pa.int32()))])


def batches(count: int, size: int = 1000):
    for start in range(0, count, size):
        rows = range(start, min(count, start + size))
        yield {"text": [f"row {i}" for i in rows], "ids": [[i, i + 1] for i in rows]}


def test_a_table_written_in_batches_reads_back_mapped(tmp_path):
    path = tmp_path / "rows.arrow"
    digest = write_table(path, SCHEMA, batches(2500))
    table = open_table(path, digest, SCHEMA)
    assert table.num_rows == 2500
    assert table.slice(1234, 1).to_pylist() == [{"text": "row 1234", "ids": [1234, 1235]}]
    assert not list(tmp_path.glob(".*.tmp"))  # written under another name, then renamed


def test_a_million_rows_open_without_reading_them(tmp_path):
    """Opening maps the file: the process grows by far less than the table holds."""
    path = tmp_path / "rows.arrow"
    digest = write_table(path, SCHEMA, batches(1_000_000, 100_000))
    before = psutil.Process().memory_info().rss
    table = open_table(path, digest, SCHEMA)
    grown_mib = (psutil.Process().memory_info().rss - before) / 2**20
    assert table.num_rows == 1_000_000
    assert table.nbytes > 20 * 2**20 and grown_mib < 5, (table.nbytes, grown_mib)


@pytest.mark.parametrize("damage", ["edited", "cut", "pickle", "gone"])
def test_a_damaged_table_is_one_line_naming_it(tmp_path, damage):
    path = tmp_path / "rows.arrow"
    digest = write_table(path, SCHEMA, batches(100))
    data = path.read_bytes()
    if damage == "edited":
        path.write_bytes(data.replace(b"row 12", b"row 99"))
    elif damage == "cut":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "pickle":
        path.write_bytes(pickle.dumps({"ids": [1]}))
    else:
        path.unlink()
    with pytest.raises(AlteredFileError) as raised:
        open_table(path, digest, SCHEMA)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)
    if damage != "gone":  # unchecked (a file just written): Arrow's own reading refuses it
        if damage == "edited":
            return  # (the same bytes' length: only its digest tells)
        with pytest.raises(AlteredFileError, match="not an Arrow table"):
            open_table(path, None, SCHEMA)


def test_a_table_of_other_columns_is_refused(tmp_path):
    path = tmp_path / "rows.arrow"
    other = pa.schema([("text", pa.string())])
    digest = write_table(path, other, [{"text": ["a"]}])
    with pytest.raises(AlteredFileError, match=r"its columns are \['text'\]"):
        open_table(path, digest, SCHEMA)
