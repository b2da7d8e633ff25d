"""The --bench-data folder reader: formats, malformed lines with file:line, clear folder errors."""

from __future__ import annotations

import json

import pytest

from fsdp_bench.plan.case import CaseError
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.plan.text_data import TextDataError, data_folder_problem, pack, read_text_folder


def test_reads_txt_json_and_jsonl_and_reports_bad_lines(tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "b.json").write_text(json.dumps([{"text": "one"}, {"text": "two"}, {"nope": 1}]))
    (tmp_path / "c.jsonl").write_text('{"text": "x"}\n{broken\n\n{"text": 3}\n{"text": "y"}\n')
    (tmp_path / "d.json").write_text('{"text": "fine",\n  oops}')
    (tmp_path / "e.txt").write_bytes(b"ok line\n\xff\xfe bad bytes")
    (tmp_path / "ignored.csv").write_text("text\nnot read")
    corpus = read_text_folder(tmp_path)
    assert corpus.documents == ["hello world", "one", "two", "x", "y"]
    assert corpus.malformed == 5
    assert any(p.startswith(f"{tmp_path / 'c.jsonl'}:2: invalid JSON") for p in corpus.problems)
    assert any(p.startswith(f"{tmp_path / 'c.jsonl'}:4: not an object") for p in corpus.problems)
    assert any(p.startswith(f"{tmp_path / 'b.json'}[2]") for p in corpus.problems)
    assert any(p.startswith(f"{tmp_path / 'd.json'}:2: invalid JSON") for p in corpus.problems)
    assert any(p.startswith(f"{tmp_path / 'e.txt'}:2: not UTF-8") for p in corpus.problems)
    assert len(corpus.files) == 5


def test_missing_empty_and_unusable_folders_are_clear_errors(tmp_path):
    assert "does not exist" in data_folder_problem(str(tmp_path / "missing"))
    assert "has no .txt, .json, .jsonl files" in data_folder_problem(str(tmp_path))
    (tmp_path / "empty.txt").write_text("")
    assert "only empty text files" in data_folder_problem(str(tmp_path))
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    with pytest.raises(TextDataError, match="no usable text: 2 file"):
        read_text_folder(tmp_path)


def test_option_errors_name_the_option(tmp_path):
    with pytest.raises(CaseError, match="^--bench-data: .* does not exist"):
        parse_sweep({"data": str(tmp_path / "nope")})
    with pytest.raises(CaseError, match="^--bench-data: .* has no"):
        parse_sweep({"data": str(tmp_path)})
    with pytest.raises(CaseError, match="needs a language model"):
        (tmp_path / "a.txt").write_text("text")
        parse_sweep({"data": str(tmp_path), "model": "linear_tiny"})


def test_pack_cuts_rows_with_eos_between_documents():
    rows = pack([[1, 2], [3, 4, 5]], eos=9, length=3)
    assert rows == [[1, 2, 9], [3, 4, 5]]  # the trailing eos does not fill a row and is dropped


def test_sample_data_ships_with_the_package():
    from pathlib import Path

    import fsdp_bench

    corpus = read_text_folder(Path(fsdp_bench.__file__).parent / "sample_data")
    assert corpus.malformed == 0 and len(corpus.documents) >= 5
