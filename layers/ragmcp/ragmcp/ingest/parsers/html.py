"""HTML: the page's main content (boilerplate such as navigation, scripts and forms left out) as
headings, paragraphs, list items, code, table rows and fields (a label beside its value). A
figure's caption is read at the end of its section, so the section's text comes first."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag

from ragmcp.ingest.limits import current, over
from ragmcp.ingest.parsed import ParsedDocument
from ragmcp.ingest.parsers.blocks import Blocks, to_int

_DROPPED = (
    "script, style, noscript, template, iframe, svg, nav, footer, aside, form, button, select, textarea, "
    "[hidden], [role=navigation], [role=search], a[hreflang], "
    ".navbox, .vertical-navbox, .mw-editsection, .mw-jump-link"
)
_ROOTS = ("main", "[role=main]", "article", "#content", "#mw-content-text")
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_TEXT_BLOCKS = frozenset({
    "address", "article", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "header", "hgroup", "hr", "li", "main", "ol", "p", "section",
    "summary", "ul",
})
_BLOCK_LEVEL = _TEXT_BLOCKS | _HEADINGS | {"pre", "table"}
_FIGURE_CLASSES = frozenset({"thumb", "gallery", "gallerybox"})
"""MediaWiki's figure boxes before <figure>: their captions wait for the end of the section too."""
_LABEL_CLASS = re.compile(r"(?:^|[-_])(?:label|key)(?:$|[-_])", re.IGNORECASE)


def parse(data: bytes) -> ParsedDocument:
    check_tags(data)
    soup = BeautifulSoup(data, "lxml")
    out = Blocks()
    _content(_root(soup), out)
    page_title = soup.title.get_text() if soup.title else ""
    return out.document(page_title)


def check_tags(data: bytes) -> None:
    """Refuse markup with more than `max_tags` tags (counted as "<") before a tree is built of it."""
    limit = current().max_tags
    if (tags := data.count(b"<")) > limit:
        raise over(f"{tags} tags", "PARSE_MAX_TAGS", limit)


def fragment_blocks(markup: str, out: Blocks) -> None:
    """Add the blocks of a piece of HTML inside another document (Markdown's raw HTML)."""
    soup = BeautifulSoup(markup, "lxml")
    _content(soup.body or soup, out)


def _root(soup: BeautifulSoup) -> Tag:
    """The main content element if the page marks exactly one, else the body."""
    for selector in _ROOTS:
        found = soup.select(selector)
        if len(found) == 1:
            return found[0]
    return soup.body or soup


def _content(root: Tag, out: Blocks) -> None:
    """Add the blocks under `root`, boilerplate removed first."""
    for element in root.select(_DROPPED):
        if not element.decomposed:
            element.decompose()
    for header in root.find_all("header"):
        if not header.decomposed and header.find_parent(["main", "article"]) is None:
            header.decompose()
    text = _HtmlText(out)
    text.walk(root)
    text.figures()


class _HtmlText:
    """Walks an HTML tree, turning block elements into blocks and gathering inline text."""

    def __init__(self, out: Blocks) -> None:
        self._out = out
        self._inline: list[str] = []
        self._figures: list[Tag] = []
        """The figures of the open section, read (their captions) where the section ends."""

    def walk(self, node: Tag) -> None:
        """Emit everything under `node`, ending with the text gathered so far."""
        self._children(node)
        self._flush()

    def _children(self, node: Tag) -> None:
        label, value = _field(node) or (None, None)
        for child in node.children:
            if child is label:
                continue
            if child is value and label is not None:
                self._flush()
                self._out.table([[label.get_text(" ").strip().rstrip(":")], [child.get_text(" ")]])
            elif isinstance(child, Tag):
                self._element(child)
            elif type(child) is NavigableString:
                self._inline.append(str(child))

    def _element(self, tag: Tag) -> None:
        name = tag.name
        if name in _HEADINGS:
            self._flush()
            self.figures()
            self._out.add(tag.get_text(" "), "heading", level=int(name[1]))
        elif name == "figure" or _FIGURE_CLASSES.intersection(map(str, tag.get_attribute_list("class"))):
            self._flush()
            self._figures.append(tag)
        elif name == "pre":
            self._flush()
            self._out.add(tag.get_text(), "code")
        elif name == "table":
            self._flush()
            self._table(tag)
        elif name == "br":
            self._inline.append(" ")
        elif name in _TEXT_BLOCKS:
            self._flush()
            self._inline.append(_list_number(tag))
            self.walk(tag)
        else:
            self._children(tag)

    def figures(self) -> None:
        """Read the open section's figures (their captions), which waited for its end: a caption
        opening a section's chunk would be what an embedding of it sees first."""
        while self._figures:
            self.walk(self._figures.pop(0))

    def _flush(self) -> None:
        self._out.add("".join(self._inline))
        self._inline.clear()

    def _table(self, table: Tag) -> None:
        if table.caption:
            self._out.add(table.caption.get_text(" "))
        rows = [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]
        grid = []
        for tr in rows:
            cells: list[str] = []
            for cell in tr.find_all(["th", "td"], recursive=False):
                cells.append(cell.get_text(" "))
                cells.extend([""] * (to_int(str(cell.get("colspan", "")), 1) - 1))
            grid.append(cells)
        self._out.table(grid, has_header=bool(rows) and _is_header_row(rows[0]))


def _field(node: Tag) -> tuple[Tag, Tag] | None:
    """A form's field: the element's only inline content is a label (a <label>, or an element whose
    class names it a label or key, as "field-label") and the element after it, its value."""
    inline = [c for c in node.children if isinstance(c, Tag) and c.name not in _BLOCK_LEVEL]
    loose = any(type(c) is NavigableString and c.strip() for c in node.children)
    if loose or len(inline) != 2 or not _is_label(inline[0]):
        return None
    return inline[0], inline[1]


def _is_label(tag: Tag) -> bool:
    classes = tag.get_attribute_list("class")
    return tag.name == "label" or any(_LABEL_CLASS.search(str(c)) for c in classes if c)


def _is_header_row(tr: Tag) -> bool:
    cells = tr.find_all(["th", "td"], recursive=False)
    return tr.find_parent("thead") is not None or all(cell.name == "th" for cell in cells)


def _list_number(tag: Tag) -> str:
    """"3. " for the third item of an ordered list, "" for anything else."""
    parent = tag.parent
    if tag.name != "li" or parent is None or parent.name != "ol":
        return ""
    start = to_int(str(parent.get("start", "")), 1)
    return f"{start + len(tag.find_previous_siblings('li'))}. "
