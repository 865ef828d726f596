"""Issue 27 (chunking): a code block stays whole, with the prose that introduces it; a too large
one is cut between its lines; a figure's caption does not open its section's chunk."""

from __future__ import annotations

import pytest

from ragmcp.adapters.local.onnx_embedder import load_tokenizer
from ragmcp.ingest.chunking import Chunker
from ragmcp.ingest.parsed import body
from ragmcp.ingest.parsers import parse
from ragmcp.ingest.parsers.blocks import Blocks


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker(load_tokenizer(), max_tokens=96, overlap=16)


def prose(n: int, topic: str) -> str:
    return " ".join(f"Sentence {i} talks about {topic} in some detail." for i in range(n))


CASE = "\n".join(
    [
        "RETURN",
        "CASE",
        "  WHEN VERIFY_GROUP_FOR_USER ( SESSION_USER , 'HR', 'EMP' ) = 1",
        "    THEN EMPLOYEES . DATE_OF_BIRTH",
        "  ELSE NULL",
        "END",
        "ENABLE ;",
    ]
)


def test_a_code_block_that_fits_is_kept_whole_with_the_prose_that_introduces_it(chunker: Chunker) -> None:
    out = Blocks()
    out.add("Masks", "heading", level=1)
    out.add(prose(6, "masks"))
    out.add("To mask the date of birth, run this statement:")
    out.add(CASE, "code")
    out.add(prose(2, "the tax number"))
    drafts = chunker.chunk(out.document())
    [holding] = [d for d in drafts if "RETURN\nCASE" in d.text]
    assert "To mask the date of birth, run this statement:\nRETURN\nCASE" in holding.text
    assert holding.text.count("ENABLE ;") == 1 and CASE.split("\n", 2)[2] in holding.text
    assert sum("To mask the date of birth" in d.text for d in drafts) == 1


def test_a_code_block_over_the_chunk_size_is_cut_between_its_lines(chunker: Chunker) -> None:
    lines = [f"    total_{i} = compute_value(alpha_{i}, beta_{i}, gamma_{i})" for i in range(40)]
    out = Blocks()
    out.add("Listing", "heading", level=1)
    out.add("The program below sums the values:")
    out.add("\n".join(lines), "code")
    drafts = chunker.chunk(out.document())
    code_lines = [line for d in drafts for line in body(d.text).split("\n") if "compute_value" in line]
    assert len(drafts) > 2
    assert [line.strip() for line in code_lines] == [line.strip() for line in lines]


def test_a_figure_s_caption_does_not_open_its_section_s_chunk(chunker: Chunker) -> None:
    """The duck article's "Feeding": two figures before its first paragraph; their captions go to
    the section's end, so its chunk opens with the section's prose."""
    page = (
        "<html><body><h1>Duck</h1><h2>Feeding</h2>"
        "<figure><img src='a.jpg' alt='bill'><figcaption>Pecten along the bill</figcaption></figure>"
        "<figure><video></video><figcaption>Mallard duckling preening</figcaption></figure>"
        "<p>Ducks eat food sources such as grasses, aquatic plants, fish and insects.</p>"
        "<p>Dabbling ducks feed on the surface of water.</p>"
        "<h2>Breeding</h2><p>Ducks nest on the ground.</p></body></html>"
    )
    [document] = parse(page.encode(), "duck.html")
    texts = [b.text for b in document.blocks]
    assert texts == [
        "Duck",
        "Feeding",
        "Ducks eat food sources such as grasses, aquatic plants, fish and insects.",
        "Dabbling ducks feed on the surface of water.",
        "Pecten along the bill",
        "Mallard duckling preening",
        "Breeding",
        "Ducks nest on the ground.",
    ]
    feeding = chunker.chunk(document)[0]
    assert body(feeding.text).startswith("Ducks eat food sources")
    assert feeding.text.startswith("§ Duck › Feeding\n") and "Mallard duckling preening" in feeding.text


def test_a_chunk_with_its_heading_path_line_fits_the_token_budget(chunker: Chunker) -> None:
    """The embedding model reads a chunk's first `max_tokens` tokens: the path line counts, so the
    passage's last sentences are not cut off from the vector side."""
    out = Blocks()
    out.add("Row and Column Access Control Support in IBM DB2 for i", "heading", level=1)
    out.add("Separation of duties and the security administrator function", "heading", level=2)
    for i in range(12):
        out.add(f"Paragraph {i} says that the security officer grants function usage number {i}.")
    drafts = chunker.chunk(out.document())
    assert len(drafts) > 2
    assert all(d.text.startswith("§ Row and Column") for d in drafts)
    assert max(chunker.count(d.text) for d in drafts) <= chunker.max_tokens
    assert all(any(f"function usage number {i}." in d.text for d in drafts) for i in range(12))


def test_docx_paragraphs_in_a_code_font_or_style_are_one_code_block() -> None:
    """A DOCX's SQL statement, one paragraph a line in Courier New (or a code style), reads as one
    code block that keeps its lines, between the prose around it."""
    import io

    import docx

    document = docx.Document()
    document.add_paragraph("To mask the date of birth, run this statement:")
    lines = ["RETURN", "CASE", "  WHEN SESSION_USER = 'HR' THEN DATE_OF_BIRTH", "  ELSE NULL", "END"]
    for line in lines:
        document.add_paragraph().add_run(line).font.name = "Courier New"
    document.add_paragraph("The other column to mask is the tax number.")
    plain = document.styles.add_style("Plain Code", 1)
    plain.font.name = "Consolas"
    document.add_paragraph("SELECT * FROM EMPLOYEES;", style="Plain Code")
    data = io.BytesIO()
    document.save(data)
    [parsed] = parse(data.getvalue(), "mask.docx")
    assert [(b.kind, b.text) for b in parsed.blocks] == [
        ("text", "To mask the date of birth, run this statement:"),
        ("code", "\n".join(lines)),
        ("text", "The other column to mask is the tax number."),
        ("code", "SELECT * FROM EMPLOYEES;"),
    ]


def test_a_paragraph_that_does_not_introduce_the_code_stays_in_its_chunk(chunker: Chunker) -> None:
    """A list's last item before a page's footnotes (set in a code font) is not their introduction:
    moved, it opened a chunk of its own under the section's path, which outranked the section's
    first passage (v3-heading-15). It stays; the next chunk repeats it only as the usual overlap."""
    out = Blocks()
    out.add("Securing data", "heading", level=1)
    out.add(prose(7, "data breaches"))
    out.add("DB2 for i security controls")
    out.add(CASE, "code")
    drafts = chunker.chunk(out.document())
    assert drafts[0].text.endswith("\nDB2 for i security controls")
