"""Cached files written with their SHA-256 and checked when read (catwalk_steps/sealed.py), in
process; through the real commands: tests/test_evaluation_records.py (records edited or
deleted), test_evaluation_resume.py (an edited chunk of answers), test_dpo_training.py (an
edited reference log-probability)."""

from __future__ import annotations

import json
import logging

import pytest

from catwalk_steps import sealed
from catwalk_steps.sealed import AlteredFileError, sealed_record, unsealed_record
from catwalk_steps.workspace.formats import EvaluationFormat

RESULT = {"acc": 0.5, "n": 2, "records": [{"doc": 0, "metrics": {"acc": 1.0}}] * 2}


def test_a_result_written_before_digests_reads_as_before_and_is_said_once(
    tmp_path, monkeypatch, caplog
):
    """An older workspace's results (no `digests.json`) are read as they were, one line for
    the first of them."""
    monkeypatch.setattr(sealed, "_said_unchecked", [])
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        EvaluationFormat().write(RESULT, tmp_path / name)
        (tmp_path / name / sealed.DIGESTS).unlink()
    with caplog.at_level(logging.WARNING):
        read = [EvaluationFormat().read(tmp_path / name) for name in ("one", "two")]
    assert read == [RESULT, RESULT]
    said = [r.getMessage() for r in caplog.records if "read unchecked" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{tmp_path / 'one'}: written before")


def test_a_result_reads_back_and_a_changed_digests_file_is_refused(tmp_path):
    EvaluationFormat().write(RESULT, tmp_path)
    assert EvaluationFormat().read(tmp_path) == RESULT
    (tmp_path / sealed.DIGESTS).write_text(json.dumps({"sha256": ["data.json"]}))
    with pytest.raises(AlteredFileError, match="digests.json: not the digests written with"):
        EvaluationFormat().read(tmp_path)


def test_a_record_reads_back_as_written_and_an_edit_is_refused():
    record = sealed_record({"answers": [[-1.5, -2.25]], "chunk": 0})
    assert unsealed_record(json.loads(json.dumps(record))) == {
        "answers": [[-1.5, -2.25]],
        "chunk": 0,
    }
    record["answers"][0][0] = 0.0
    with pytest.raises(AlteredFileError, match="changed since it was written"):
        unsealed_record(record)
    with pytest.raises(AlteredFileError, match="carries no SHA-256"):
        unsealed_record({"answers": []})
