"""Reading a folder of text for `--bench-data` (pure Python, no torch: options validate with it).

`.txt` files are one document each; `.json` holds `{"text": ...}` or a list of them; `.jsonl`
holds one such object per line. A malformed line is reported as `file:line: problem`, skipped
and counted, never a crash; a folder with nothing usable is one clear error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

TEXT_SUFFIXES = (".txt", ".json", ".jsonl")
MAX_PROBLEMS_KEPT = 50  # the count is exact; the listed lines are the first ones


class TextDataError(ValueError):
    """The folder cannot feed a benchmark; the message is one line for the user."""


@dataclass
class TextCorpus:
    documents: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    malformed: int = 0
    problems: list[str] = field(default_factory=list)

    def report(self, where: str, problem: str) -> None:
        self.malformed += 1
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(f"{where}: {problem}")


def text_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)


def data_folder_problem(raw: str) -> str | None:
    """Why `raw` cannot be a data folder (None: it has text files), checked before any launch."""
    folder = Path(raw).expanduser()
    if not folder.exists():
        return f"{raw!r} does not exist"
    if not folder.is_dir():
        return f"{raw!r} is not a folder"
    files = text_files(folder)
    if not files:
        return f"{raw!r} has no {', '.join(TEXT_SUFFIXES)} files"
    if all(p.stat().st_size == 0 for p in files):
        return f"{raw!r} has only empty text files"
    return None


def _text_of(item: object) -> str | None:
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        return item["text"]
    return None


def _read_json(path: Path, corpus: TextCorpus) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        corpus.report(str(path), f"not UTF-8 ({exc.reason})")
        return
    except json.JSONDecodeError as exc:
        corpus.report(f"{path}:{exc.lineno}", f"invalid JSON ({exc.msg})")
        return
    items = data if isinstance(data, list) else [data]
    for index, item in enumerate(items):
        _add_document(corpus, f"{path}[{index}]", item)


def _add_document(corpus: TextCorpus, where: str, item) -> None:
    """Keep the item's text, or report it (by file and line or index) when it has none."""
    text = _text_of(item)
    if text is None:
        corpus.report(where, 'not an object with a string "text"')
    elif text:
        corpus.documents.append(text)


def _read_jsonl(path: Path, corpus: TextCorpus) -> None:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                corpus.report(f"{path}:{lineno}", f"not UTF-8 ({exc.reason})")
                continue
            except json.JSONDecodeError as exc:
                corpus.report(f"{path}:{lineno}", f"invalid JSON ({exc.msg})")
                continue
            _add_document(corpus, f"{path}:{lineno}", item)


def _read_txt(path: Path, corpus: TextCorpus) -> None:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = raw[: exc.start].count(b"\n") + 1
        corpus.report(f"{path}:{lineno}", f"not UTF-8 ({exc.reason}); file skipped")
        return
    if text.strip():
        corpus.documents.append(text)


def usable_text_problem(folder: str | Path) -> str | None:
    """Why the folder would give the ranks no document (None: it has one). Reads files only until
    the first usable document, so a large corpus is not read whole at collection."""
    problem = data_folder_problem(str(folder))
    if problem:
        return problem
    corpus = TextCorpus()
    readers = {".txt": _read_txt, ".json": _read_json, ".jsonl": _read_jsonl}
    for path in text_files(Path(folder).expanduser()):
        corpus.files.append(str(path))
        try:
            readers[path.suffix.lower()](path, corpus)
        except (OSError, RecursionError, ValueError) as exc:
            corpus.report(str(path), f"unreadable ({str(exc)[:60]})")
        if corpus.documents:
            return None
    return (
        f"{str(folder)!r} has no usable text: {len(corpus.files)} file(s), {corpus.malformed} malformed "
        f"line(s){', first: ' + corpus.problems[0] if corpus.problems else ''}"
    )


def read_text_folder(folder: str | Path) -> TextCorpus:
    problem = data_folder_problem(str(folder))
    if problem:
        raise TextDataError(problem)
    corpus = TextCorpus()
    readers = {".txt": _read_txt, ".json": _read_json, ".jsonl": _read_jsonl}
    for path in text_files(Path(folder).expanduser()):
        corpus.files.append(str(path))
        readers[path.suffix.lower()](path, corpus)
    if not corpus.documents:
        raise TextDataError(
            f"{str(folder)!r} has no usable text: {len(corpus.files)} file(s), "
            f"{corpus.malformed} malformed line(s), first: {corpus.problems[:1]}"
        )
    return corpus


def byte_tokens(text: str) -> list[int]:
    """Byte-level tokenizer for models without a local tokenizer: UTF-8 bytes are the ids."""
    return list(text.encode("utf-8"))


BYTE_EOS = 256  # separates documents when packing with the byte-level tokenizer


def pack(documents: list[list[int]], eos: int, length: int) -> list[list[int]]:
    """Concatenate token lists with `eos` between them and cut into rows of `length` tokens."""
    stream: list[int] = []
    for doc in documents:
        stream.extend(doc)
        stream.append(eos)
    return [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)]


def text_bytes(folder: str | Path) -> int:
    """The size of the text files a data folder feeds the ranks (each rank reads them all): what
    the host-memory estimate counts (analysis.host_memory); 0 for no folder or one that is gone."""
    if not folder:
        return 0
    try:
        return sum(p.stat().st_size for p in text_files(Path(folder).expanduser()))
    except OSError:
        return 0
