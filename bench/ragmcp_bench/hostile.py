"""Hostile files for the parsers and the chunker (issue 29), generated here, never committed.

Each function returns a file's bytes; the sizes are parameters, so the tests make small ones that
still cross a limit and `ragmcp bench hostile` the issue's own (a sheet declaring 17 billion cells,
a DOCX inflating to 200 MB, a 49 MB one-line HTML page, 1M rows, 1M columns, 200 scanned pages,
5,000 pages, 1 MB of random bytes). `write_folder` lays out a mixed folder of them among ordinary
files that must still be indexed.
"""

from __future__ import annotations

import io
import itertools
import random
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>{overrides}</Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{items}</Relationships>'
)
_REL = (
    '<Relationship Id="{id}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/{kind}"'
    ' Target="{target}"/>'
)
_SHEET_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_WORD_MAIN = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _package(parts: dict[str, str | Iterable[str]]) -> bytes:
    """A zip of XML parts; a part given as an iterable of strings is streamed in (no copy of its whole)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, content in parts.items():
            with archive.open(name, "w", force_zip64=True) as member:
                for piece in [content] if isinstance(content, str) else content:
                    member.write(piece.encode())
    return buffer.getvalue()


def _xlsx(sheet_xml: Iterable[str]) -> bytes:
    overrides = (
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
    )
    workbook = (
        f'<workbook xmlns="{_SHEET_MAIN}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    return _package({
        "[Content_Types].xml": _CONTENT_TYPES.format(overrides=overrides),
        "_rels/.rels": _RELS.format(items=_REL.format(id="rId1", kind="officeDocument", target="xl/workbook.xml")),
        "xl/workbook.xml": workbook,
        "xl/_rels/workbook.xml.rels": _RELS.format(
            items=_REL.format(id="rId1", kind="worksheet", target="worksheets/sheet1.xml")
        ),
        "xl/worksheets/sheet1.xml": sheet_xml,
    })


def sparse_xlsx() -> bytes:
    """A sheet with cells at A1 and XFD1048576 only: it declares 17 billion cells and holds two."""
    return _xlsx([
        f'<worksheet xmlns="{_SHEET_MAIN}"><dimension ref="A1:XFD1048576"/><sheetData>'
        '<row r="1"><c r="A1" t="inlineStr"><is><t>first corner</t></is></c></row>'
        '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>last corner</t></is></c></row>'
        "</sheetData></worksheet>"
    ])


def rows_xlsx(rows: int) -> bytes:
    """A sheet of `rows` rows of two cells (a number and a short text)."""

    def sheet() -> Iterable[str]:
        yield f'<worksheet xmlns="{_SHEET_MAIN}"><dimension ref="A1:B{rows}"/><sheetData>'
        for start in range(1, rows + 1, 10_000):
            yield "".join(
                f'<row r="{r}"><c r="A{r}"><v>{r}</v></c><c r="B{r}" t="inlineStr"><is><t>row {r}</t></is></c></row>'
                for r in range(start, min(start + 10_000, rows + 1))
            )
        yield "</sheetData></worksheet>"

    return _xlsx(sheet())


def _docx(body: Iterable[str]) -> bytes:
    overrides = (
        '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'wordprocessingml.document.main+xml"/>'
    )
    return _package({
        "[Content_Types].xml": _CONTENT_TYPES.format(overrides=overrides),
        "_rels/.rels": _RELS.format(items=_REL.format(id="rId1", kind="officeDocument", target="word/document.xml")),
        "word/document.xml": itertools.chain(
            [f'<w:document xmlns:w="{_WORD_MAIN}"><w:body>'], body, ["</w:body></w:document>"]
        ),
    })


def _repeated(piece: str, count: int) -> Iterable[str]:
    for start in range(0, count, 1000):
        yield piece * min(1000, count - start)


def inflating_docx(inflated_bytes: int) -> bytes:
    """A DOCX whose document part inflates to about `inflated_bytes` of paragraphs (a few hundred KB zipped)."""
    paragraph = f"<w:p><w:r><w:t>{'The same paragraph again and again. ' * 20}</w:t></w:r></w:p>"
    return _docx(_repeated(paragraph, max(1, inflated_bytes // len(paragraph))))


def empty_paragraphs_docx(paragraphs: int) -> bytes:
    """A DOCX of `paragraphs` empty paragraphs: 30 KB zipped for 3M of them, which python-docx reads
    at about 0.2 ms each (over 10 minutes)."""
    return _docx(_repeated("<w:p/>", paragraphs))


def one_line_html(size: int) -> bytes:
    """An HTML page of about `size` bytes on one line: a paragraph of short spans."""
    head = b"<html><head><title>One line</title></head><body><p>"
    span = b"<span>word</span> "
    return head + span * max(1, (size - len(head)) // len(span)) + b"</p></body></html>"


def columns_csv(columns: int) -> bytes:
    """A CSV with a header of `columns` fields and one row."""
    header = ",".join(["id", *(f"c{i}" for i in range(1, columns))])
    return f"{header}\n{','.join(['1', *['x'] * (columns - 1)])}\n".encode()


def no_space_text(chars: int) -> bytes:
    """`chars` letters without a space or line break (a blob as text)."""
    return (b"abcdefghijklmnopqrstuvwxyz" * (chars // 26 + 1))[:chars]


def cjk_text(chars: int) -> bytes:
    """`chars` characters of Japanese: no spaces, sentences ended by 。."""
    sentence = "日本語の文章には単語の間に空白がありません。"
    return (sentence * (chars // len(sentence) + 1))[:chars].encode()


def random_bytes(size: int, seed: int = 29) -> bytes:
    return random.Random(seed).randbytes(size)


def _pdf(pages: int, content: bytes, resources: str, extra: list[bytes]) -> bytes:
    """A PDF of `pages` pages that all draw the same content stream with the same resources; `extra`
    are the objects the resources name, numbered from 4."""
    first_page = 4 + len(extra)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (first_page + i) for i in range(pages))
        + b"] /Count %d >>" % pages,
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        *extra,
        *[
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R /Resources "
            + resources.encode() + b" >>"
        ] * pages,
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def many_pages_pdf(pages: int) -> bytes:
    """A PDF of `pages` pages of one line of text each."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    content = b"BT /F1 12 Tf 72 720 Td (A page among very many pages.) Tj ET"
    return _pdf(pages, content, "<< /Font << /F1 4 0 R >> >>", [font])


def scanned_pdf(pages: int) -> bytes:
    """A PDF of `pages` pages that are one image each (no text layer): every page needs OCR."""
    width, height = 400, 100
    stripes = bytes([255] * 40 + [0, 255] * 160 + [255] * 40)
    pixels = zlib.compress(b"".join(stripes if y % 10 < 5 else bytes([255] * width) for y in range(height)))
    image = (
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8"
        b" /Filter /FlateDecode /Length %d >>\nstream\n" % (width, height, len(pixels)) + pixels + b"\nendstream"
    )
    content = b"q 400 0 0 100 100 600 cm /Im1 Do Q"
    return _pdf(pages, content, "<< /XObject << /Im1 4 0 R >> >>", [image])


@dataclass(frozen=True)
class Hostile:
    name: str
    make: Callable[[], bytes]
    what: str


def issue_files() -> list[Hostile]:
    """The issue's hostile files at the issue's sizes."""
    return [
        Hostile("sparse.xlsx", sparse_xlsx, "cells at A1 and XFD1048576"),
        Hostile("inflating.docx", lambda: inflating_docx(200 * 1024 * 1024), "a DOCX inflating to 200 MB"),
        Hostile("empty-paragraphs.docx", lambda: empty_paragraphs_docx(3_000_000), "3M empty paragraphs in 30 KB"),
        Hostile("one-line.html", lambda: one_line_html(49 * 1024 * 1024), "49 MB of HTML on one line"),
        Hostile("million-rows.xlsx", lambda: rows_xlsx(1_000_000), "an XLSX of 1M rows"),
        Hostile("million-columns.csv", lambda: columns_csv(1_000_000), "a CSV of 1M columns"),
        Hostile("scanned.pdf", lambda: scanned_pdf(200), "200 image-only pages"),
        Hostile("many-pages.pdf", lambda: many_pages_pdf(5000), "5,000 pages"),
        Hostile("blob.txt", lambda: no_space_text(40_000_000), "40M characters without whitespace"),
        Hostile("blob-small.txt", lambda: no_space_text(2_000_000), "2M characters without whitespace"),
        Hostile("japanese.txt", lambda: cjk_text(200_000), "200k characters of Japanese"),
        Hostile("random.md", lambda: random_bytes(1024 * 1024), "1 MB of random bytes named .md"),
    ]


ORDINARY = {
    "turbines.md": "# Wind turbines\n\nA wind turbine turns the kinetic energy of wind into electricity.\n",
    "pumps.txt": "Heat pumps move heat from a cold place to a warm one using a refrigerant cycle.\n",
    "staff.csv": "id,name,role\n1,Ada,engineer\n2,Grace,admiral\n",
}
"""Ordinary files of the mixed folder: each must be indexed whatever its neighbours are."""


def write_folder(folder: Path, files: list[Hostile] | None = None) -> list[str]:
    """Write the hostile files (the issue's by default) and the ordinary ones into `folder`; their names."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in files if files is not None else issue_files():
        (folder / item.name).write_bytes(item.make())
    for name, text in ORDINARY.items():
        (folder / name).write_text(text)
    return sorted(p.name for p in folder.iterdir())
