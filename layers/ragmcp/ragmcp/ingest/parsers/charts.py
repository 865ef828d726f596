"""DrawingML charts (in PPTX slides and XLSX drawings) as a caption and a table of their cached data."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lxml import etree

from ragmcp.ingest.parsers.blocks import Blocks, clean, to_int
from ragmcp.ingest.parsers.ooxml import cell_text, xpath


def chart_blocks(chart_space: Any, out: Blocks) -> None:
    """A caption (title and chart type), then the cached data: a row per category, a column per
    series, the categories' column named by the category (or x) axis' title when it has one."""
    plots = xpath(chart_space, "c:chart/c:plotArea/*[c:ser]")
    kinds = " and ".join(dict.fromkeys(_chart_kind(plot) for plot in plots))
    caption = f"{kinds} chart" if kinds else ""
    title = clean(" ".join(xpath(chart_space, "c:chart/c:title//a:t/text()")))
    out.add(f"{title} ({caption})" if title and caption else title or caption.capitalize())
    for plot in plots:
        series = xpath(plot, "c:ser")
        names = [xpath(one, "string(c:tx//c:v)") for one in series]
        values = [_chart_points(one, "c:val|c:yVal", _number_text) for one in series]
        categories = _chart_points(series[0], "c:cat|c:xVal", str)
        indexes = sorted(set(categories).union(*values))
        rows = [[categories.get(i, ""), *(v.get(i, "") for v in values)] for i in indexes]
        out.table([[_category_axis_title(chart_space, plot), *names], *rows])


def _category_axis_title(chart_space: Any, plot: Any) -> str:
    """The title of a plot's first axis (its categories, or a scatter chart's x values), or ""."""
    first = xpath(plot, "string(c:axId/@val)")
    axes = xpath(chart_space, "c:chart/c:plotArea/*[not(c:ser)][c:axId]")
    axis = next((a for a in axes if first and xpath(a, "string(c:axId/@val)") == first), None)
    return "" if axis is None else clean(" ".join(xpath(axis, "c:title//a:t/text()")))


def _chart_kind(plot: Any) -> str:
    """"bar 3d" for a <c:bar3DChart>, "line" for a <c:lineChart>."""
    name = etree.QName(plot).localname.removesuffix("Chart")
    return re.sub(r"(?<=[a-z])(?=[A-Z0-9])", " ", name).lower()


def _chart_points(series: Any, path: str, render: Callable[[str], str]) -> dict[int, str]:
    """Point index -> cached value of a series' categories or values."""
    points = xpath(series, f"({path})//c:pt")
    return {to_int(pt.get("idx"), 0): render(xpath(pt, "string(c:v)")) for pt in points}


def _number_text(text: str) -> str:
    try:
        return cell_text(float(text))
    except ValueError:
        return text
