"""A report page as a list of blocks, and the two renderers: markdown (report.md, renders on
GitHub) and HTML (report.html, best values in colour). A section is written once, as blocks; how
each block looks in each format is decided here, once."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

_MD_ESCAPES = {
    "\\": "\\\\",
    "|": "\\|",
    "`": "\\`",
    "*": "\\*",
    "[": "\\[",
    "]": "\\]",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
    "\n": " ",
    "\r": " ",
}


def md_text(text: object) -> str:
    """Text from a result file as inert markdown: no links, code, HTML or emphasis (`_` inside
    words is plain text in CommonMark, so case ids stay readable)."""
    return "".join(_MD_ESCAPES.get(ch, ch) for ch in str(text))


@dataclass(frozen=True)
class Rich:
    """Text with markup, given in both formats (a link or inline code reads differently in each)."""

    md: str
    html: str


def plain(text: object) -> Rich:
    return Rich(md_text(text), html.escape(str(text)))


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: Rich
    note: bool = False  # grey in HTML: how to read what follows


@dataclass(frozen=True)
class Bullets:
    items: tuple[Rich, ...]
    note: bool = False


@dataclass(frozen=True)
class Cell:
    text: str
    left: bool = False  # text column (left-aligned in HTML)
    best: bool = False  # bold in markdown, green in HTML
    strong: bool = False  # bold in markdown (a status that is not ok)
    flagged: bool = False  # "**!**" in markdown, red with "!" in HTML


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    bad: bool = False  # a case that did not finish: a red row in HTML


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    md_header_line: str | None = None  # the markdown header row when it differs (a blank one: "| | |")


@dataclass(frozen=True)
class Image:
    title: str
    src: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)


# --- markdown -------------------------------------------------------------------------------------


def _md_cell(cell: Cell) -> str:
    text = md_text(cell.text)
    if cell.strong and text:
        text = f"**{text}**"
    if cell.best and text:
        text = f"**{text}**"
    return text + (" **!**" if cell.flagged else "")


def _md_block(block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Paragraph):
        return [block.text.md, ""]
    if isinstance(block, Bullets):
        return [f"- {item.md}" for item in block.items] + [""]
    if isinstance(block, Table):
        header = block.md_header_line or "| " + " | ".join(block.header) + " |"
        out = [header, "|" + "---|" * len(block.header)]
        return out + ["| " + " | ".join(_md_cell(c) for c in row.cells) + " |" for row in block.rows] + [""]
    if isinstance(block, Image):
        return [f"![{block.title}]({block.src})", ""]
    raise TypeError(f"no markdown for {type(block).__name__}")


def render_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for block in doc.blocks:
        out += _md_block(block)
    return "\n".join(out)


# --- HTML -----------------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0}th,td{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f3f3f3;position:sticky;top:0}td.t{text-align:left}td.best{background:#c8f0c8;font-weight:bold}
tr.bad td{background:#fde8e8}td.flag{background:#fde8e8;font-weight:bold}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#666}li{margin:0.2em 0}"""


def _html_cell(cell: Cell) -> str:
    classes = " ".join(c for c, on in (("t", cell.left), ("best", cell.best), ("flag", cell.flagged)) if on)
    text = html.escape(cell.text) + (" !" if cell.flagged else "")
    if not classes:
        return f"<td>{text}</td>"
    return f"<td class={classes}>{text}</td>" if " " not in classes else f"<td class='{classes}'>{text}</td>"


def _html_block(block) -> list[str]:
    e = html.escape
    if isinstance(block, Heading):
        return [f"<h{block.level}>{e(block.text)}</h{block.level}>"]
    if isinstance(block, Paragraph):
        return [f"<p{' class=note' if block.note else ''}>{block.text.html}</p>"]
    if isinstance(block, Bullets):
        return [f"<ul{' class=note' if block.note else ''}>", *(f"<li>{i.html}</li>" for i in block.items), "</ul>"]
    if isinstance(block, Table):
        out = ["<table>"]
        if any(block.header):  # a key-value table has no header row
            out.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in block.header) + "</tr>")
        out += [
            f"<tr{' class=bad' if row.bad else ''}>" + "".join(_html_cell(c) for c in row.cells) + "</tr>"
            for row in block.rows
        ]
        return out + ["</table>"]
    if isinstance(block, Image):
        return [f"<img src='{e(block.src)}' alt='{e(block.title)}'>"]
    raise TypeError(f"no HTML for {type(block).__name__}")


def render_html(doc: Document) -> str:
    e = html.escape
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(doc.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(doc.title)}</h1>",
    ]
    for block in doc.blocks:
        out += _html_block(block)
    out.append("</body></html>")
    return "\n".join(out)
