"""Issue 27 (chunking): a PDF's headings found by their layout (a short line in bold, italic or a
larger font than the body, on its own line) and its code found by a fixed-pitch font (one block,
its lines kept), on hand-made PDFs with the standard fonts."""

from __future__ import annotations

from ragmcp.ingest.parsers import parse
from ragmcp.ingest.parsers.pdf import parse as parse_pdf
from tests.pdfs import pdf_of_contents

_FONTS = {"body": "Helvetica", "bold": "Helvetica-Bold", "italic": "Helvetica-Oblique", "mono": "Courier"}

PROSE = [
    "Mallards are dabbling ducks that feed mostly at the surface of shallow",
    "water and rarely dive; they are found on ponds and lakes across the",
    "northern hemisphere, in parks and in wild wetlands alike, all year.",
]


def styled_pdf(pages: list[list[tuple[str, float, str]]]) -> bytes:
    """A PDF with one text line per (style, size, text) entry, 1.3 times the size apart; the styles
    are `_FONTS`' keys."""
    names = list(_FONTS)
    contents = []
    for lines in pages:
        ops, y = [], 740.0
        for style, size, text in lines:
            ops.append(f"BT /F{names.index(style) + 1} {size} Tf 72 {y:.1f} Td ({text}) Tj ET")
            y -= 1.3 * size
        contents.append("\n".join(ops))
    return pdf_of_contents(contents, fonts=list(_FONTS.values()))


def body(*lines: str) -> list[tuple[str, float, str]]:
    return [("body", 10.0, line) for line in lines]


def test_a_larger_or_bold_line_of_its_own_is_a_heading_that_starts_a_section() -> None:
    """The IBM Redpaper's "Authors" (bold, larger) inside its "Preface": a heading, the text after it
    under it, and the prose before it not run on into it."""
    page = [("bold", 16.0, "Preface"), *body(*PROSE), ("bold", 16.0, "Authors"), *body(*PROSE[:2], "Jim wrote it.")]
    document = parse_pdf(styled_pdf([page]), None)
    headings = [(b.text, b.level) for b in document.blocks if b.kind == "heading"]
    assert headings == [("Preface", 1), ("Authors", 1)]
    after = document.blocks[-1]
    assert after.kind == "text" and after.path == ("Authors",) and after.text.endswith("Jim wrote it.")
    assert document.blocks[1].text.endswith("all year.") and "Authors" not in document.blocks[1].text


def test_a_bold_or_italic_line_at_body_size_is_a_heading_below_a_larger_one() -> None:
    """The aviation handbook's "Boots Self-Locking Nut" (italic, body size) after a long body line."""
    page = [
        ("bold", 14.0, "Self-Locking Nuts"),
        *body(*PROSE),
        ("italic", 10.0, "Boots Self-Locking Nut"),
        *body("The Boots self-locking nut is of one piece, all-metal construction designed"),
        ("bold", 10.0, "Stainless Steel Nut"),
        *body("The stainless steel self-locking nut may be spun on and off by hand."),
    ]
    document = parse(styled_pdf([page]), "nuts.pdf")[0]
    headings = [(b.text, b.level) for b in document.blocks if b.kind == "heading"]
    assert headings == [("Self-Locking Nuts", 1), ("Boots Self-Locking Nut", 2), ("Stainless Steel Nut", 2)]
    boots = next(b for b in document.blocks if b.text.startswith("The Boots"))
    assert boots.path == ("Self-Locking Nuts", "Boots Self-Locking Nut")


def test_bold_words_inside_a_sentence_and_a_bold_sentence_are_not_headings() -> None:
    page = [
        *body(*PROSE),
        ("bold", 10.0, "Note: a bold sentence that ends the way sentences end."),
        *body("A last line of prose."),
    ]
    document = parse(styled_pdf([page]), "notes.pdf")[0]
    assert [b for b in document.blocks if b.kind == "heading"] == []


def test_fixed_pitch_lines_are_one_code_block_that_keeps_its_lines() -> None:
    """The Redpaper's column mask: a CASE statement in a fixed-pitch font is one code block, line
    by line, not joined into the prose around it nor split into paragraphs at its short lines."""
    code = [
        "RETURN",
        "CASE",
        "WHEN VERIFY_GROUP_FOR_USER ( SESSION_USER , 'HR', 'EMP' ) = 1",
        "THEN DATE_OF_BIRTH",
        "ELSE NULL",
        "END",
        "ENABLE ;",
    ]
    page = [
        *body(*PROSE[:2], "To mask the column, run this statement:"),
        *[("mono", 10.0, line) for line in code],
        *body("The other column to mask is the TAX_ID."),
    ]
    document = parse(styled_pdf([page]), "mask.pdf")[0]
    kinds = [(b.kind, b.text) for b in document.blocks]
    assert kinds == [
        ("text", " ".join([*PROSE[:2], "To mask the column, run this statement:"])),
        ("code", "\n".join(code).replace("'", "\N{RIGHT SINGLE QUOTATION MARK}")),  # StandardEncoding's quote
        ("text", "The other column to mask is the TAX_ID."),
    ]


def test_a_pdf_in_one_font_reads_as_before() -> None:
    """Plain PDFs (one font, one size, a typewriter's fixed pitch too) have no layout headings and
    no code."""
    document = parse(styled_pdf([body(*PROSE, "Short line", *PROSE)]), "plain.pdf")[0]
    assert {b.kind for b in document.blocks} == {"text"}
    typed = [("mono", 10.0, line) for line in [*PROSE, "Short line", *PROSE]]
    document = parse(styled_pdf([typed]), "typed.pdf")[0]
    assert {b.kind for b in document.blocks} == {"text"}


def test_a_numbered_caption_in_another_font_is_a_paragraph_that_goes_with_its_code() -> None:
    """The Redpaper's "Example 3-9 Creating a mask on the TAX_ID column" (italic) ran on into the
    sentence before it; alone, it opens the chunk of the statement it names."""
    from ragmcp.adapters.local.onnx_embedder import load_tokenizer
    from ragmcp.ingest.chunking import Chunker

    code = ["CREATE MASK HR_SCHEMA.MASK_TAX_ID_ON_EMPLOYEES", "ON HR_SCHEMA.EMPLOYEES AS EMPLOYEES"]
    code += [f"WHEN VERIFY_GROUP_FOR_USER ( SESSION_USER , GROUP_{i} ) = 1 THEN TAX_ID_{i}" for i in range(6)]
    page = [
        *body(*PROSE, *PROSE),
        *body("sees the entire TAX_ID as masked. To implement this column mask, run the SQL statement"),
        ("italic", 10.0, "Example 3-9 Creating a mask on the TAX_ID column"),
        *[("mono", 10.0, line) for line in code],
    ]
    document = parse(styled_pdf([page]), "mask.pdf")[0]
    assert [b.kind for b in document.blocks][-2:] == ["text", "code"]
    assert document.blocks[-2].text == "Example 3-9 Creating a mask on the TAX_ID column"
    chunks = Chunker(load_tokenizer(), max_tokens=128, overlap=16).chunk(document)
    [holding] = [c for c in chunks if "MASK_TAX_ID_ON_EMPLOYEES" in c.text]
    assert holding.text.startswith("Example 3-9 Creating a mask on the TAX_ID column\nCREATE MASK")
