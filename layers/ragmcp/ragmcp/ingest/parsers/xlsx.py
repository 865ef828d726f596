"""XLSX: sheet by sheet, each contiguous region of cells a table, each chart captioned with its data.

The sheets are streamed (openpyxl's read-only mode) over the cells the file holds, never over the
range it declares: a sheet with cells at A1 and XFD1048576 costs two cells, not 17 billion. The
cells with a value and those merged ranges cover are held to `max_cells`.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import openpyxl
from openpyxl.worksheet._reader import WorkSheetParser

from ragmcp.ingest.limits import Budget, current
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks
from ragmcp.ingest.parsers.charts import chart_blocks
from ragmcp.ingest.parsers.ooxml import Package, cell_text

_SPREADSHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_OFFICE_RELATIONSHIPS_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def parse(data: bytes) -> ParsedDocument:
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        charts = _charts(data)
        out = Blocks()
        cells = Budget("cells", "PARSE_MAX_CELLS", current().max_cells)
        for number, sheet in enumerate(workbook.worksheets, start=1):
            out.page, out.heading = number, None
            regions = _sheet_regions(sheet, cells)
            if regions or charts.get(sheet.title):
                out.add(sheet.title, "heading", level=1)
            for region in regions:
                out.table(region)
            for chart in charts.get(sheet.title, []):
                chart_blocks(chart, out)
        return out.document(workbook.properties.title, pages=len(workbook.worksheets), page_unit="sheet")
    finally:
        workbook.close()


def _present_cells(sheet: Any, budget: Budget) -> tuple[dict[tuple[int, int], str], list[Any]]:
    """The sheet's cells that hold a value, as the file lists them (no padding to the declared
    dimension), and its merged ranges (listed after the cells)."""
    workbook = sheet.parent
    values: dict[tuple[int, int], str] = {}
    with sheet._get_source() as source:
        parser = WorkSheetParser(
            source,
            sheet._shared_strings,
            data_only=workbook.data_only,
            epoch=workbook.epoch,
            date_formats=workbook._date_formats,
            timedelta_formats=workbook._timedelta_formats,
        )
        for row, cells in parser.parse():
            for cell in cells:
                if text := cell_text(cell["value"]).strip():
                    budget.spend(1)
                    values[row, cell["column"]] = text
    merged = list(parser.merged_cells.mergeCell) if parser.merged_cells else []
    return values, merged


def _sheet_regions(sheet: Any, budget: Budget) -> list[list[list[str]]]:
    """Each contiguous block of non-empty (or merged) cells as a grid of cell texts, top to bottom.

    A merged range's value is repeated down its rows (see `Blocks.table`).
    """
    values, merged_ranges = _present_cells(sheet, budget)
    occupied = set(values)
    for merged in merged_ranges:
        text = values.get((merged.min_row, merged.min_col))
        if text:
            budget.spend(merged.size["rows"] * merged.size["columns"])
            occupied.update(merged.cells)
            below = range(merged.min_row + 1, merged.max_row + 1)
            values.update(((row, merged.min_col), text) for row in below)
    grids = []
    for region in sorted(_connected(occupied), key=min):
        rows = range(min(r for r, _ in region), max(r for r, _ in region) + 1)
        cols = range(min(c for _, c in region), max(c for _, c in region) + 1)
        budget.spend(len(rows) * len(cols) - len(region))  # the empty cells the grid fills in
        grids.append([[values.get((r, c), "") if (r, c) in region else "" for c in cols] for r in rows])
    return grids


def _connected(cells: set[tuple[int, int]]) -> list[set[tuple[int, int]]]:
    """Group cells that touch, diagonals included."""
    remaining = set(cells)
    regions = []
    while remaining:
        stack = [remaining.pop()]
        region = set(stack)
        while stack:
            row, col = stack.pop()
            for neighbour in ((row + dr, col + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)):
                if neighbour in remaining:
                    remaining.remove(neighbour)
                    region.add(neighbour)
                    stack.append(neighbour)
        regions.append(region)
    return regions


def _charts(data: bytes) -> dict[str, list[Any]]:
    """Chart XML per sheet name, found through the workbook -> sheet -> drawing -> chart relationships."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        package = Package(archive)
        workbook = package.first_related("", "officeDocument")
        if workbook is None:
            return {}
        sheet_parts = package.related(workbook)
        charts: dict[str, list[Any]] = {}
        for sheet in package.xml(workbook).iter(f"{{{_SPREADSHEET_NS}}}sheet"):
            _, sheet_part = sheet_parts.get(sheet.get(f"{{{_OFFICE_RELATIONSHIPS_NS}}}id", ""), ("", ""))
            drawings = [target for kind, target in package.related(sheet_part).values() if kind == "drawing"]
            charts[sheet.get("name", "")] = [
                package.xml(target)
                for drawing in drawings
                for kind, target in package.related(drawing).values()
                if kind == "chart"
            ]
        return charts
