"""Unit tests for ragmcp.ingest.parsers, on small files the tests build themselves."""

from __future__ import annotations

import io
import re
from datetime import date
from pathlib import Path

import docx
import openpyxl
import pytest
from lxml import etree
from openpyxl.chart import BarChart, Reference
from pptx import Presentation
from pptx.chart.data import CategoryChartData
from pptx.enum.chart import XL_CHART_TYPE
from pptx.oxml.ns import qn as pptx_qn
from pptx.util import Inches
from pypdf import PdfReader, PdfWriter

from ragmcp.domain.errors import ParseFailure
from ragmcp.ingest import ocr
from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.parsers import NO_TEXT, NO_TEXT_NO_OCR, SUPPORTED_TYPES, file_type, parse
from ragmcp.ingest.parsers import pdf as pdf_parser
from ragmcp.ingest.parsers.blocks import Blocks
from ragmcp.ingest.parsers.charts import chart_blocks
from tests.pdfs import pdf_of_contents

# ---------------------------------------------------------------- builders


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A minimal born-digital PDF: one Helvetica text line per entry, 14pt apart."""
    contents = [
        "BT /F1 12 Tf 72 720 Td " + " ".join(f"({line}) Tj 0 -14 Td" for line in lines) + " ET" for lines in pages
    ]
    return pdf_of_contents(contents, title)


def ruled_table_page(rows: list[list[str]], before: str, after: str) -> str:
    """A page's content: a line of text, a table ruled on every cell edge (150pt columns, 20pt rows)
    and another line of text under it."""
    left, top, width, height = 72, 650, 150, 20
    right, bottom = left + width * len(rows[0]), top - height * len(rows)
    rules = [f"{left} {top - height * i} m {right} {top - height * i} l S" for i in range(len(rows) + 1)]
    rules += [f"{left + width * i} {top} m {left + width * i} {bottom} l S" for i in range(len(rows[0]) + 1)]
    cells = [
        f"BT /F1 10 Tf {left + width * col + 4} {top - height * (row + 1) + 6} Td ({cell}) Tj ET"
        for row, cells in enumerate(rows)
        for col, cell in enumerate(cells)
    ]
    text = [f"BT /F1 12 Tf 72 700 Td ({before}) Tj ET", f"BT /F1 12 Tf 72 {bottom - 40} Td ({after}) Tj ET"]
    return " ".join([text[0], "1 w", *rules, *cells, text[1]])


def encrypt_pdf(data: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("Field Guide", style="Title")
    document.add_heading("Introduction", level=1)
    document.add_paragraph("Ducks   are\twaterfowl.")
    document.add_paragraph("First step", style="List Number")
    document.add_paragraph("Second step", style="List Number")
    document.add_paragraph("A bullet point", style="List Bullet")
    document.add_heading("Diet", level=2)
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Food", "Amount", "Note"], ["Leaves", "3", "fresh"], ["Seeds", "4", "dry"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(1, 1).merge(table.cell(1, 2)).text = "3 handfuls"
    table.cell(1, 0).merge(table.cell(2, 0)).text = "Plants"
    document.add_paragraph("After the table.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_pptx() -> bytes:
    presentation = Presentation()
    cover = presentation.slides.add_slide(presentation.slide_layouts[0])
    cover.shapes.title.text = "Quarterly Review"
    cover.placeholders[1].text = "Prepared by the pond team"

    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Numbers"
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(1.5), Inches(4), Inches(1.5)).table
    for r, row in enumerate([["Region", "Sales"], ["North", "10"], ["South", "12"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(5), Inches(1), Inches(2), Inches(1)).text_frame.text = "Grouped remark"
    steps = slide.shapes.add_textbox(Inches(5), Inches(3), Inches(2), Inches(1)).text_frame
    steps.text = "Count ducks"
    steps.add_paragraph().text = "Feed ducks"
    for paragraph in steps.paragraphs:
        properties = paragraph._p.get_or_add_pPr()
        etree.SubElement(properties, pptx_qn("a:buAutoNum"), type="arabicPeriod")
    chart_data = CategoryChartData()
    chart_data.categories = ["Q1", "Q2"]
    chart_data.add_series("Revenue", (10, 20.5))
    chart = slide.shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(4), Inches(4), Inches(3), chart_data
    ).chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Revenue by quarter"
    slide.notes_slide.notes_text_frame.text = "Mention the weather."
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def make_xlsx() -> bytes:
    workbook = openpyxl.Workbook()
    sales = workbook.active
    sales.title = "Sales"
    sales["B2"] = "Quarterly sales"
    rows = [["Region", "Units", "Price", "Group"], ["North", 3.0, 2.5, "Fruit"], ["South", 4, 1234567.891, None]]
    for r, row in enumerate(rows, start=4):
        for c, value in enumerate(row, start=2):
            sales.cell(row=r, column=c, value=value)
    sales.merge_cells("E5:E6")
    chart = BarChart()
    chart.title = "Units by region"
    chart.add_data(Reference(sales, min_col=3, min_row=4, max_row=6), titles_from_data=True)
    sales.add_chart(chart, "H2")
    workbook.create_sheet("Empty")
    other = workbook.create_sheet("Other")
    other.append(["Day", "Open"])
    other.append([date(2024, 5, 1), True])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def texts(document: ParsedDocument) -> list[str]:
    return [block.text for block in document.blocks]


def block(document: ParsedDocument, text: str) -> Block:
    return next(b for b in document.blocks if b.text == text)


def failure(data: bytes, file_name: str, **kwargs: str) -> str:
    with pytest.raises(ParseFailure) as caught:
        parse(data, file_name, **kwargs)
    return caught.value.message


# ---------------------------------------------------------------- dispatch and failures


@pytest.mark.parametrize(
    ("name", "expected"),
    [("report.PDF", "pdf"), ("a/b/notes.markdown", "markdown"), ("C:\\docs\\deck.Pptx", "pptx"),
     ("archive.tar.gz", "gz"), ("dir.v2/README", ""), (".bashrc", "")],
)
def test_file_type_is_the_lower_case_extension(name: str, expected: str) -> None:
    assert file_type(name) == expected


def test_supported_types() -> None:
    assert {"pdf", "docx", "pptx", "xlsx", "html", "htm", "md", "markdown", "txt", "csv", "jsonl"} == SUPPORTED_TYPES


def test_unsupported_extension_is_rejected() -> None:
    assert failure(b"data", "notes.xyz") == "unsupported file type: .xyz"
    assert failure(b"data", "README") == "unsupported file type: no extension"


@pytest.mark.parametrize("kind", sorted(SUPPORTED_TYPES))
def test_zero_bytes_is_an_empty_file(kind: str) -> None:
    assert failure(b"", f"file.{kind}") == "empty file"


@pytest.mark.parametrize("kind", sorted(SUPPORTED_TYPES))
def test_garbage_bytes_never_escape_as_library_errors(kind: str) -> None:
    garbage = bytes(range(256)) * 8 + b"PK\x03\x04%PDF-1.7\x00{not json"
    try:
        documents = parse(garbage, f"garbage.{kind}")
    except ParseFailure as exc:
        assert exc.message and "\n" not in exc.message and len(exc.message) <= 200
    else:
        assert all(isinstance(d, ParsedDocument) for d in documents)


def test_truncated_office_file_is_corrupt() -> None:
    message = failure(make_docx()[:2000], "broken.docx")
    assert message.startswith("corrupt or unreadable docx: ")
    assert "\n" not in message and len(message) <= 200


# ---------------------------------------------------------------- PDF


def test_pdf_blocks_carry_page_numbers_and_metadata_title() -> None:
    data = make_pdf([["Ducks on page one."], ["Geese on page two."]], title="Bird Notes")
    [document] = parse(data, "birds.pdf")
    assert document.title == "Bird Notes"
    assert (document.pages, document.page_unit) == (2, "page")
    assert [(b.text, b.page) for b in document.blocks] == [("Ducks on page one.", 1), ("Geese on page two.", 2)]


def test_pdf_rebuilds_paragraphs_and_joins_hyphenated_words() -> None:
    page = [
        "Mallards are dabbling ducks that feed mostly at the surface",
        "of shallow water and rarely dive; they are found on ponds and",
        "lakes across the northern hemisphere, in parks and in wild wet-",
        "lands alike.",
        "Teal are small dabbling ducks with bright green wing patches",
        "that show in flight over the reeds.",
    ]
    [document] = parse(make_pdf([page]), "ducks.pdf")
    assert document.title == "Mallards are dabbling ducks that feed mostly at the surface"
    assert texts(document) == [
        "Mallards are dabbling ducks that feed mostly at the surface of shallow water and rarely dive; they are "
        "found on ponds and lakes across the northern hemisphere, in parks and in wild wetlands alike.",
        "Teal are small dabbling ducks with bright green wing patches that show in flight over the reeds.",
    ]


def test_pdf_running_headers_footers_and_page_numbers_are_left_out() -> None:
    """The issue's DB2 answer quoted "4 Row and Column Access Control Support in IBM DB2 for i":
    a line repeated at the top of pages with its page number is a running header, not text."""
    def body(duck: str) -> list[str]:
        return [
            f"{duck} are dabbling ducks that feed mostly at the surface of shallow water and rarely",
            f"dive; {duck.lower()} are found on ponds and lakes across the northern hemisphere in parks.",
        ]

    ducks = ["Mallards", "Teals", "Pintails", "Wigeons"]
    pages = [
        [f"{n} Field Guide to Ducks of the World", *body(d), f"Page {n} of 4", str(n)]
        for n, d in zip((2, 4, 6), ducks, strict=False)
    ]
    pages.append(["Chapter 1. Dabbling ducks 7", *body(ducks[3]), "A last line that appears once on a page."])
    [document] = parse(make_pdf(pages), "guide.pdf")
    text = "\n".join(texts(document))
    assert "Field Guide" not in text and "Page 2 of 4" not in text
    assert not any(t.isdigit() for t in texts(document))
    assert all(f"{d} are dabbling ducks" in text for d in ducks)
    assert "A last line that appears once on a page." in text


def test_a_pdf_page_that_is_only_its_repeated_line_keeps_it() -> None:
    """A header or footer frames a page's text: a line repeated on every page that is all a page
    holds is that page's text (the hostile many-pages PDF read as 'no extractable text')."""
    pages = [["A page among very many pages."]] * 3
    [document] = parse(make_pdf(pages), "few.pdf")
    assert "\n".join(texts(document)).count("A page among very many pages.") == 3


def test_a_ruled_pdf_table_reads_as_rows_named_by_their_header_in_its_place() -> None:
    rows = [["Food", "Calories per portion"], ["Berries", "150"], ["Grain", "200"]]
    data = pdf_of_contents([ruled_table_page(rows, before="Table 1 Energy in food", after="The end of the page.")])
    [document] = parse(data, "food.pdf")
    blocks = document.blocks
    assert [(b.kind, b.text) for b in blocks] == [
        ("heading", "Table 1 Energy in food"),
        ("table_row", "Food: Berries; Calories per portion: 150."),
        ("table_row", "Food: Grain; Calories per portion: 200."),
        ("text", "The end of the page."),
    ]
    assert blocks[1].path == ("Table 1 Energy in food",)
    assert blocks[1].header == ("Food", "Calories per portion")
    assert blocks[3].path == ()


def test_a_pdf_table_header_of_two_rows_names_each_column_by_both() -> None:
    rows = [["Model", "TEDs", ""], ["", "simple", "all"], ["OTSL", "0.965", "0.955"], ["HTML", "0.969", "0.955"]]
    [document] = parse(pdf_of_contents([ruled_table_page(rows, before="Results", after="Done.")]), "teds.pdf")
    assert [b.text for b in document.blocks if b.kind == "table_row"] == [
        "Model: OTSL; TEDs simple: 0.965; TEDs all: 0.955.",
        "Model: HTML; TEDs simple: 0.969; TEDs all: 0.955.",
    ]


def test_a_ruled_box_of_mostly_empty_cells_is_not_a_table() -> None:
    rows = [["Start", "", ""], ["", "", ""], ["", "", "End"]]
    [document] = parse(pdf_of_contents([ruled_table_page(rows, before="A diagram", after="Below it.")]), "flow.pdf")
    assert [b.kind for b in document.blocks] == ["text"] * len(document.blocks)
    assert re.search(r"A diagram.*Start.*End.*Below it", " ".join(b.text for b in document.blocks))


def test_pdf_tables_are_searched_on_the_first_table_pages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf_parser, "TABLE_PAGES", 1)
    page = ruled_table_page([["Food", "Calories"], ["Berries", "150"]], before="Energy", after="Done.")
    [document] = parse(pdf_of_contents([page, page]), "two.pdf")
    assert [b.text for b in document.blocks if b.kind == "table_row"] == ["Food: Berries; Calories: 150."]
    assert [b.page for b in document.blocks if "Berries" in b.text] == [1, 2]
    assert not any(b.kind == "table_row" for b in document.blocks if b.page == 2)


def test_pdf_numbered_section_headings_start_sections_and_contents_lines_do_not() -> None:
    """Issue 27 (heading questions): a numbered heading on a line of its own ("2.1.6 Change Function
    Usage CL command") is a heading, so its passage carries it; a table of contents line (dot leaders,
    a page number) and a numbered sentence are not."""
    page = [
        "2.1.5 Granting authority . . . . . . . . . . 9",
        "2.1.6 Change Function Usage CL command",
        "The following CL commands can be used to work with, display, or change function usage IDs",
        "in the system, and the one below grants authorization to administer row access control.",
        "2.1.7 The view lists every function usage ID and the users allowed to use it.",
    ]
    [document] = parse(make_pdf([page]), "redbook.pdf")
    headings = [(b.text, b.level) for b in document.blocks if b.kind == "heading"]
    assert headings == [("2.1.6 Change Function Usage CL command", 1)]
    following = next(b for b in document.blocks if b.text.startswith("The following CL commands"))
    assert following.path == ("2.1.6 Change Function Usage CL command",)


def test_pdf_contents_lines_lose_their_dot_leaders_and_page_numbers() -> None:
    """Issue 27: a table of contents line ("1.2 Current state of IBM i security. . . . 2") was
    quoted as an answer. Its entries stay searchable, without the runs of dots and the page numbers,
    as one paragraph that is no heading; an ellipsis in prose stays."""
    page = [
        "Contents",
        "Notices . . . . . . . . . . . . . . . vii Trademarks . . . . . . . . . . . viii Preface . . . . . xi",
        "1.1 Security fundamentals. . . . . . . . . . . . . . . . . . . . . . 2",
        "1.2 Current state of IBM i security......................... 2",
        "1.3.1 Existing row and column control . . . . . . . . . . . . . . . 4",
        "Chapter 2. Roles and separation of duties . . . . . . . . . . . . 7",
        "Ducks wait... and then they feed at the surface of the shallow water in the evening.",
    ]
    [document] = parse(make_pdf([page]), "redbook.pdf")
    text = "\n".join(texts(document))
    assert not re.search(r"(?:\.\s*){4}", text)
    assert not any(b.kind == "heading" for b in document.blocks)
    contents = next(b.text for b in document.blocks if "Security fundamentals" in b.text)
    assert contents == (
        "Notices; Trademarks; Preface; 1.1 Security fundamentals; 1.2 Current state of IBM i security; "
        "1.3.1 Existing row and column control; Chapter 2. Roles and separation of duties."
    )
    assert "Ducks wait... and then they feed" in text
    assert not re.search(r"\b(?:vii|viii|xi)\b|security; 2|control; 4", text)


def test_a_blank_pdf_has_no_text() -> None:
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    assert failure(buffer.getvalue(), "blank.pdf") == NO_TEXT


def scanned_after_text(shared_documents: Path) -> bytes:
    """Page 1 born-digital, page 2 the image-only ocr_test.pdf."""
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(make_pdf([["Mallards dabble at the surface."]]))))
    writer.append(PdfReader(shared_documents / "source" / "ocr_test.pdf"))
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def test_an_image_only_pdf_without_ocr_says_so(shared_documents: Path) -> None:
    data = (shared_documents / "source" / "ocr_test.pdf").read_bytes()
    assert failure(data, "ocr_test.pdf") == NO_TEXT_NO_OCR


@pytest.mark.slow  # OCR of a scanned page: ~4 s
def test_scanned_pages_are_read_by_ocr_keeping_their_page(shared_documents: Path) -> None:
    [document] = parse(scanned_after_text(shared_documents), "mixed.pdf", ocr=ocr.PageOcr())
    assert document.ocr_pages == (2,)
    assert [(b.text, b.page) for b in document.blocks] == [
        ("Mallards dabble at the surface.", 1),
        ("Docling bundles PDF document conversion to JSON and Markdown in an easy self contained package", 2),
    ]


def test_without_ocr_a_scanned_page_is_skipped_and_the_rest_kept(shared_documents: Path) -> None:
    [document] = parse(scanned_after_text(shared_documents), "mixed.pdf")
    assert document.ocr_pages == ()
    assert [(b.text, b.page) for b in document.blocks] == [("Mallards dabble at the surface.", 1)]


def test_ocr_boxes_become_lines_top_to_bottom_and_left_to_right() -> None:
    def box(x: float, y: float, text: str) -> list:
        return [[[x, y], [x + 50, y], [x + 50, y + 20], [x, y + 20]], text, 0.9]

    detections = [box(200, 102, "world"), box(10, 140, "second"), box(10, 100, "hello"), box(120, 141, "line")]
    assert ocr.lines(detections) == ["hello world", "second line"]


def test_font_encodings_are_mapped_not_left_as_glyph_names(shared_documents: Path) -> None:
    """redp5110's fonts name their glyphs /gNN; PDFium maps them through the fonts' ToUnicode."""
    [document] = parse((shared_documents / "source" / "redp5110_sampled.pdf").read_bytes(), "redp5110.pdf")
    text = document.text
    assert not re.search(r"/g\d+", text)
    assert "Row and Column Access Control Support in IBM DB2 for i" in text
    assert "row permissions" in text.lower()
    assert {b.page for b in document.blocks} == set(range(1, 19)) - {17}  # page 17 is blank


def test_password_protected_pdf_is_refused() -> None:
    assert failure(encrypt_pdf(make_pdf([["Secret ducks."]]), "secret"), "locked.pdf") == "encrypted PDF"


def test_pdf_encrypted_with_an_empty_user_password_is_read() -> None:
    [document] = parse(encrypt_pdf(make_pdf([["Open ducks."]]), ""), "restricted.pdf")
    assert texts(document) == ["Open ducks."]


def test_corrupt_pdf_reports_a_short_reason() -> None:
    message = failure(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", "broken.pdf")
    assert message.startswith("corrupt or unreadable pdf: ")
    assert "\n" not in message and len(message) <= 200


# ---------------------------------------------------------------- DOCX


def test_docx_headings_keep_their_level_and_label_following_blocks() -> None:
    [document] = parse(make_docx(), "guide.docx")
    assert document.title == "Field Guide"
    assert (block(document, "Field Guide").kind, block(document, "Field Guide").level) == ("heading", 1)
    intro = block(document, "Introduction")
    assert (intro.kind, intro.level) == ("heading", 1)
    diet = block(document, "Diet")
    assert (diet.kind, diet.level) == ("heading", 2)
    assert block(document, "Ducks are waterfowl.").heading == "Introduction"
    assert block(document, "After the table.").heading == "Diet"
    assert all(b.page is None for b in document.blocks)
    assert document.pages is None


def test_docx_lists_show_their_numbers() -> None:
    [document] = parse(make_docx(), "guide.docx")
    assert "1. First step" in texts(document)
    assert "2. Second step" in texts(document)
    assert "A bullet point" in texts(document)


def test_docx_tables_are_rows_with_a_header_in_document_order() -> None:
    [document] = parse(make_docx(), "guide.docx")
    body = texts(document)
    first = "Food: Plants; Amount: 3 handfuls."
    assert body.index("Diet") < body.index(first) < body.index("After the table.")
    rows = [b for b in document.blocks if b.kind == "table_row"]
    assert [b.text for b in rows] == [first, "Food: Plants; Amount: 4; Note: dry."]
    assert all(b.heading == "Diet" for b in rows)


# ---------------------------------------------------------------- PPTX


def test_pptx_slides_are_pages_with_title_headings() -> None:
    [document] = parse(make_pptx(), "review.pptx")
    assert document.title == "Quarterly Review"
    assert (document.pages, document.page_unit) == (2, "slide")
    cover = block(document, "Quarterly Review")
    assert (cover.kind, cover.level, cover.page) == ("heading", 1, 1)
    assert block(document, "Prepared by the pond team").page == 1
    numbers = block(document, "Numbers")
    assert (numbers.kind, numbers.page) == ("heading", 2)
    assert all(b.path[0] == "Numbers" for b in document.blocks if b.page == 2)
    assert block(document, "Q1; Revenue: 10.").path == ("Numbers", "Revenue by quarter (bar chart)")
    assert block(document, "Mention the weather.").path == ("Numbers",)


def test_pptx_tables_groups_numbering_charts_and_notes() -> None:
    [document] = parse(make_pptx(), "review.pptx")
    body = texts(document)
    assert block(document, "Region: North; Sales: 10.").kind == "table_row"
    assert "| Region | Sales |" not in body
    assert "Grouped remark" in body
    assert [t for t in body if t.endswith("ducks") and t[0].isdigit()] == ["1. Count ducks", "2. Feed ducks"]
    assert "Revenue by quarter (bar chart)" in body
    assert block(document, "Q2; Revenue: 20.5.").kind == "table_row"
    assert body[-1] == "Mention the weather."


# ---------------------------------------------------------------- XLSX


def test_xlsx_sheets_are_pages_and_regions_are_tables() -> None:
    [document] = parse(make_xlsx(), "sales.xlsx")
    assert (document.pages, document.page_unit) == (3, "sheet")
    sheet = block(document, "Sales")
    assert (sheet.kind, sheet.page) == ("heading", 1)
    title = block(document, "Quarterly sales")
    assert (title.kind, title.path, title.page) == ("heading", ("Sales", "Quarterly sales"), 1)
    assert block(document, "Region: North; Units: 3; Price: 2.5; Group: Fruit.").path == ("Sales", "Quarterly sales")
    assert "| Region | Units | Price | Group |" not in texts(document)
    assert block(document, "Region: North; Units: 3; Price: 2.5; Group: Fruit.").kind == "table_row"
    assert block(document, "Region: South; Units: 4; Price: 1234567.891; Group: Fruit.").kind == "table_row"
    assert "Empty" not in texts(document)
    assert block(document, "Day: 2024-05-01; Open: TRUE.").page == 3
    assert block(document, "Day: 2024-05-01; Open: TRUE.").heading == "Other"


def test_xlsx_charts_are_captioned() -> None:
    [document] = parse(make_xlsx(), "sales.xlsx")
    caption = block(document, "Units by region (bar chart)")
    assert (caption.page, caption.heading) == (1, "Sales")


def _title(text: str) -> str:
    return f"<c:title><c:tx><c:rich><a:p><a:r><a:t>{text}</a:t></a:r></a:p></c:rich></c:tx></c:title>"


def _points(values: list[str]) -> str:
    return "".join(f'<c:pt idx="{i}"><c:v>{v}</c:v></c:pt>' for i, v in enumerate(values))


LINE_CHART = (
    '<c:chartSpace xmlns:c="http://schemas.openxmlformats.org/drawingml/2006/chart"'
    ' xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">'
    f"<c:chart>{_title('Sightings')}<c:plotArea><c:lineChart><c:ser>"
    f"<c:tx><c:strRef><c:strCache>{_points(['Teal'])}</c:strCache></c:strRef></c:tx>"
    f"<c:cat><c:numRef><c:numCache>{_points(['2019', '2020'])}</c:numCache></c:numRef></c:cat>"
    f"<c:val><c:numRef><c:numCache>{_points(['4', '7'])}</c:numCache></c:numRef></c:val>"
    '</c:ser><c:axId val="11"/><c:axId val="22"/></c:lineChart>'
    f'<c:catAx><c:axId val="11"/>{_title("Year")}</c:catAx><c:valAx><c:axId val="22"/>{_title("Birds")}</c:valAx>'
    "</c:plotArea></c:chart></c:chartSpace>"
)


def test_a_chart_s_rows_name_their_category_by_the_category_axis_title() -> None:
    """A chart's cached data reads as sentences: each point's category named by the category (or
    x) axis' title as a column is by its header ("Year: 2019; Teal: 4."); without an axis title
    the category stands alone ("2019; Teal: 4.")."""
    out = Blocks()
    chart_blocks(etree.fromstring(LINE_CHART), out)
    assert [b.text for b in out.items] == ["Sightings (line chart)", "Year: 2019; Teal: 4.", "Year: 2020; Teal: 7."]
    untitled = Blocks()
    chart_blocks(etree.fromstring(re.sub(r"<c:catAx>.*</c:catAx>", "", LINE_CHART, flags=re.S)), untitled)
    assert [b.text for b in untitled.items][1:] == ["2019; Teal: 4.", "2020; Teal: 7."]


# ---------------------------------------------------------------- HTML

PAGE = b"""<!doctype html><html><head><title>Pond Guide</title><style>p {color: red}</style>
<script>var tracking = 1;</script></head><body>
<header>Site banner</header><nav>Home About</nav>
<main>
  <h1>Ducks <span class="mw-editsection">[edit]</span></h1>
  <p>Ducks are <b>water</b>birds that   quack.</p>
  <div role="navigation">Jump around</div>
  <ul><li>Mallard<ul><li>Drake</li></ul></li><li>Teal</li></ul>
  <ol><li>Watch</li><li>Count</li></ol>
  <h2>Sizes</h2>
  <table><tr><th>Species</th><th>Length</th></tr>
         <tr><td colspan="2">Mallard (merged)</td></tr>
         <tr><td>Teal</td><td>35 cm</td></tr></table>
  <pre>def quack():
    return "quack"</pre>
  <div class="navbox">Navbox junk</div>
  <form>Search the pond</form><aside>Related links</aside><noscript>Enable JS</noscript>
</main>
<footer>Copyright</footer></body></html>"""


def test_html_keeps_content_and_drops_boilerplate() -> None:
    [document] = parse(PAGE, "pond.html")
    body = "\n".join(texts(document))
    for dropped in ("tracking", "color", "Site banner", "Home About", "Jump around", "[edit]", "Navbox junk",
                    "Search the pond", "Related links", "Enable JS", "Copyright"):
        assert dropped not in body
    assert document.title == "Pond Guide"
    assert "Ducks are waterbirds that quack." in texts(document)


def test_html_structure_becomes_headings_lists_tables_and_code() -> None:
    [document] = parse(PAGE, "pond.htm")
    assert (block(document, "Ducks").kind, block(document, "Ducks").level) == ("heading", 1)
    assert (block(document, "Sizes").kind, block(document, "Sizes").level) == ("heading", 2)
    assert [t for t in texts(document) if t in {"Mallard", "Drake", "Teal", "1. Watch", "2. Count"}] == [
        "Mallard", "Drake", "Teal", "1. Watch", "2. Count",
    ]
    assert block(document, "Species: Mallard (merged).").kind == "table_row"
    assert block(document, "Species: Teal; Length: 35 cm.").heading == "Sizes"
    assert block(document, "Species: Teal; Length: 35 cm.").path == ("Ducks", "Sizes")
    code = next(b for b in document.blocks if b.kind == "code")
    assert code.text == 'def quack():\n    return "quack"'


def test_html_form_fields_read_as_label_and_value() -> None:
    """A form's field (a label element, or one whose class names it a label, beside its value) is
    one row named by its label, as a table cell is by its column: the answer can quote it whole."""
    page = b"""<html><body><h1>Receipt</h1>
    <div class="field"><div class="field-marker">3</div>
      <span class="field-label">Server</span> <span class="field-value">Quack Quackling</span></div>
    <p><label for="d">Dining Type</label><output id="d">Celebration</output></p>
    <p><b>Bold</b> <i>words</i> are not a field.</p>
    <p><span>Two</span> <span>spans</span></p></body></html>"""
    [document] = parse(page, "receipt.html")
    assert texts(document) == [
        "Receipt", "3", "Server: Quack Quackling.", "Dining Type: Celebration.", "Bold words are not a field.",
        "Two spans",
    ]
    assert block(document, "Server: Quack Quackling.").kind == "table_row"
    assert block(document, "Server: Quack Quackling.").header == ("Server",)


def test_html_without_main_uses_the_body() -> None:
    [document] = parse(b"<html><body><header>Banner</header><h1>Hello</h1><p>World</p></body></html>", "a.html")
    assert texts(document) == ["Hello", "World"]
    assert document.title == "Hello"


# ---------------------------------------------------------------- Markdown and text

MARKDOWN = """# Pond Notes

Some *emphasis*, **strong** words, a [link](https://example.com/a_(b)) and `inline_code`.

## Section Two

- first item
- second item
continued here

1. numbered

```python
def quack():
    return 1
```

| Name | Size |
|------|-----:|
| Teal | 35 |

Setext Heading
--------------

Final paragraph with snake_case_name.
"""


def test_markdown_headings_code_tables_and_readable_text() -> None:
    [document] = parse(MARKDOWN.encode(), "notes.md")
    assert document.title == "Pond Notes"
    assert [(b.text, b.level) for b in document.blocks if b.kind == "heading"] == [
        ("Pond Notes", 1), ("Section Two", 2), ("Setext Heading", 2),
    ]
    assert "Some emphasis, strong words, a link and inline_code." in texts(document)
    assert "first item" in texts(document)
    assert "second item continued here" in texts(document)
    assert "1. numbered" in texts(document)
    code = next(b for b in document.blocks if b.kind == "code")
    assert code.text == "def quack():\n    return 1"
    assert block(document, "Name: Teal; Size: 35.").kind == "table_row"
    assert block(document, "Final paragraph with snake_case_name.").heading == "Setext Heading"


COMMONMARK = """Intro with `<doc_id>` in code, AT&amp;T, a [reference link][ref] and ~~struck~~ text.

[ref]: https://example.com/ref "Reference"

> Quoted paragraph
> over two lines.

    indented code

3) third
4) fourth

- [x] done task
- [ ] open task

<!-- a comment nobody reads -->

<table><tr><th>Duck</th><th>Call</th></tr><tr><td>Mallard</td><td>quack</td></tr></table>

<script>tracking()</script>
"""


def test_markdown_is_read_as_commonmark() -> None:
    [document] = parse(COMMONMARK.encode(), "notes.md")
    assert texts(document) == [
        "Intro with <doc_id> in code, AT&T, a reference link and struck text.",
        "Quoted paragraph over two lines.",
        "indented code",
        "3) third",
        "4) fourth",
        "done task",
        "open task",
        "Duck: Mallard; Call: quack.",
    ]
    assert block(document, "indented code").kind == "code"


def test_markdown_extension_alias() -> None:
    [document] = parse(b"Title\n=====\n\nBody", "notes.markdown")
    assert [(b.kind, b.text) for b in document.blocks] == [("heading", "Title"), ("text", "Body")]


def test_text_paragraphs_split_on_blank_lines_and_whitespace_is_normalised() -> None:
    data = "First  paragraph\nwraps\there.\r\n\r\n \n\nSecond\u00a0paragraph.\n\n\n".encode()
    [document] = parse(data, "notes.txt")
    assert texts(document) == ["First paragraph wraps here.", "Second paragraph."]
    assert document.title == "First paragraph wraps here."


def test_text_decodes_bom_and_latin_1() -> None:
    assert texts(parse("\ufeffcaf\u00e9".encode(), "a.txt")[0]) == ["caf\u00e9"]
    assert texts(parse("caf\u00e9".encode("latin-1"), "b.txt")[0]) == ["caf\u00e9"]


def test_whitespace_only_text_has_nothing_to_index() -> None:
    assert failure(b" \n\t\n", "blank.txt") == "no extractable text"


# ---------------------------------------------------------------- CSV and JSONL


def test_csv_rows_become_documents_keyed_by_primary_key() -> None:
    documents = parse(b"id,title,price\n1,Apple,0.5\n2,Pear,\n", "fruit.csv")
    assert [d.pk for d in documents] == ["1", "2"]
    assert documents[0].row == {"id": "1", "title": "Apple", "price": "0.5"}
    assert documents[0].title == "Apple"
    assert texts(documents[0]) == ["id: 1\ntitle: Apple\nprice: 0.5"]
    assert texts(documents[1]) == ["id: 2\ntitle: Pear"]


def test_csv_sniffs_the_dialect_and_honours_the_pk_column() -> None:
    documents = parse("\ufeffsku;name\nA-1;Widget\nA-2;Gadget\n".encode(), "items.csv", pk_column="sku")
    assert [(d.pk, d.title) for d in documents] == [("A-1", "Widget"), ("A-2", "Gadget")]


def test_csv_title_falls_back_to_the_primary_key() -> None:
    [document] = parse(b"id,size\n7,large\n", "sizes.csv")
    assert document.title == "7"


def test_csv_missing_primary_key_column() -> None:
    assert failure(b"sku,name\nA,Widget\n", "items.csv") == "primary-key column 'id' missing in row 1"


def test_csv_duplicate_primary_key() -> None:
    assert failure(b"id,name\n1,a\n2,b\n1,c\n", "items.csv") == "duplicate primary key '1' in row 3"


def test_csv_without_data_rows() -> None:
    assert failure(b"id,name\n", "items.csv") == "no data rows"


def test_jsonl_rows_become_documents() -> None:
    data = b'{"id": 1, "name": "Mallard", "tags": ["duck", "wild"]}\n\n{"id": 2, "note": null}\n'
    documents = parse(data, "birds.jsonl")
    assert [(d.pk, d.title) for d in documents] == [("1", "Mallard"), ("2", "2")]
    assert documents[0].row == {"id": 1, "name": "Mallard", "tags": ["duck", "wild"]}
    assert texts(documents[0]) == ['id: 1\nname: Mallard\ntags: ["duck", "wild"]']
    assert texts(documents[1]) == ["id: 2"]


def test_text_columns_make_a_rows_text_from_those_values_alone_in_order() -> None:
    data = b'{"_id": "7", "text": "Ducks dabble.", "title": "Mallards", "year": 2001}\n{"_id": "8", "year": 2}\n'
    documents = parse(data, "corpus.jsonl", pk_column="_id", text_columns=("title", "text"))
    assert texts(documents[0]) == ["Mallards\nDucks dabble."]
    assert documents[0].row == {"_id": "7", "text": "Ducks dabble.", "title": "Mallards", "year": 2001}
    assert texts(documents[1]) == [""]
    csv_rows = parse(b"id,name,note\n1,Widget,blue\n", "items.csv", text_columns=("note",))
    assert texts(csv_rows[0]) == ["blue"]


def test_jsonl_invalid_line() -> None:
    assert failure(b'{"id": 1}\n{"id": 2,\n', "rows.jsonl") == "invalid JSON on line 2"


def test_jsonl_line_that_is_not_an_object() -> None:
    assert failure(b'{"id": 1}\n[1, 2]\n', "rows.jsonl") == "line 2 is not a JSON object"


def test_jsonl_missing_and_duplicate_primary_keys() -> None:
    assert failure(b'{"id": 1}\n{"name": "x"}\n', "rows.jsonl") == "primary-key column 'id' missing in row 2"
    assert failure(b'{"id": 1}\n{"id": 1}\n', "rows.jsonl") == "duplicate primary key '1' in row 2"
    assert [d.pk for d in parse(b'{"key": "a"}\n', "rows.jsonl", pk_column="key")] == ["a"]
