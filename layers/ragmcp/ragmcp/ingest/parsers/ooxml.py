"""Office Open XML pieces the DOCX, PPTX and XLSX parsers share: XPath with the usual prefixes, a
reader of a package's relationships, list numbers as Office shows them, cell values as shown."""

from __future__ import annotations

import functools
import io
import posixpath
import zipfile
from datetime import date, datetime, time
from typing import Any

from lxml import etree

from ragmcp.ingest.limits import current, over

_NAMESPACES = {
    "w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "c": "http://schemas.openxmlformats.org/drawingml/2006/chart",
    "p": "http://schemas.openxmlformats.org/presentationml/2006/main",
}
_PACKAGE_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


@functools.cache
def _compiled_xpath(path: str) -> etree.XPath:
    return etree.XPath(path, namespaces=_NAMESPACES)


def xpath(element: Any, path: str) -> Any:
    """Evaluate an XPath on an Office Open XML element with the usual w, a, c and p prefixes."""
    return _compiled_xpath(path)(element)


def check_package(data: bytes, *, count_tags: bool) -> None:
    """Refuse a package whose parts inflate past `max_inflated_bytes` together, before any is read,
    and (`count_tags`: DOCX and PPTX, whose libraries build every part's whole tree) one whose XML
    parts hold more than `max_tags` tags, counted while inflating them. The sizes are the zip
    directory's; Python's zipfile never yields more than a member's declared size (a member that
    inflates further fails its CRC check), so they bound what a parser can get."""
    limits = current()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        inflated = sum(member.file_size for member in members)
        if inflated > limits.max_inflated_bytes:
            raise over(f"parts inflating to {inflated} bytes", "PARSE_MAX_INFLATED_BYTES", limits.max_inflated_bytes)
        tags = 0
        for member in members if count_tags else ():
            if not member.filename.endswith((".xml", ".rels")):
                continue
            with archive.open(member) as part:
                while block := part.read(1 << 20):
                    tags += block.count(b"<")
                    if tags > limits.max_tags:
                        raise over(f"more than {limits.max_tags} tags", "PARSE_MAX_TAGS", limits.max_tags)


class Package:
    """Just enough of an Open Packaging (zip of XML parts) reader to follow relationships."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self._archive = archive
        self._names = set(archive.namelist())

    def xml(self, part: str) -> Any:
        return etree.fromstring(self._archive.read(part))

    def related(self, part: str) -> dict[str, tuple[str, str]]:
        """Relationship id -> (type name such as "chart", target part) for the internal targets of `part`."""
        folder, name = posixpath.split(part)
        rels = posixpath.join(folder, "_rels", f"{name}.rels")
        if rels not in self._names:
            return {}
        return {
            rel.get("Id", ""): (
                rel.get("Type", "").rsplit("/", 1)[-1],
                _part_name(folder, rel.get("Target", "")),
            )
            for rel in self.xml(rels).iter(_PACKAGE_RELATIONSHIP)
            if rel.get("TargetMode") != "External"
        }

    def first_related(self, part: str, kind: str) -> str | None:
        return next((target for rel_kind, target in self.related(part).values() if rel_kind == kind), None)


def _part_name(folder: str, target: str) -> str:
    """The zip member a relationship target points to (targets are relative to the source part's folder)."""
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(folder, target))


def format_number(value: int, number_format: str) -> str:
    """A list number in one of Word's formats ("decimal", "lowerLetter", "upperRoman", ...)."""
    if value < 1:
        return str(value)
    if number_format in ("lowerLetter", "upperLetter"):
        letters = chr(ord("a") + (value - 1) % 26) * ((value - 1) // 26 + 1)
        return letters.upper() if number_format == "upperLetter" else letters
    if number_format in ("lowerRoman", "upperRoman"):
        roman = _roman(value)
        return roman.lower() if number_format == "lowerRoman" else roman
    return str(value)


def _roman(value: int) -> str:
    numerals = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))
    result = []
    for amount, numeral in numerals:
        count, value = divmod(value, amount)
        result.append(numeral * count)
    return "".join(result)


def cell_text(value: object) -> str:
    """A cell value the way a spreadsheet shows it in General format (1.0 -> "1")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else format(value, ".15g")
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(sep=" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    return str(value)
