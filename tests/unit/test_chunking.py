import pytest

from ragmcp.adapters.local.onnx_embedder import load_tokenizer
from ragmcp.ingest.chunking import Chunker
from ragmcp.ingest.parsed import Block, ParsedDocument
from ragmcp.ingest.summaries import headline, sentences, summary


@pytest.fixture(scope="module")
def chunker():
    return Chunker(load_tokenizer(), max_tokens=64, overlap=16)


def prose(n: int, topic: str) -> str:
    return " ".join(f"Sentence {i} talks about {topic} in some detail." for i in range(n))


def test_every_chunk_fits_the_token_budget_and_text_is_kept(chunker):
    doc = ParsedDocument(blocks=[Block(prose(40, "turbines"), page=1)])
    drafts = chunker.chunk(doc)
    assert len(drafts) > 3
    assert all(chunker.count(d.text) <= 64 + 16 for d in drafts)
    for i in range(40):
        assert any(f"Sentence {i} talks" in d.text for d in drafts)


def test_chunks_overlap_by_trailing_sentences(chunker):
    blocks = [Block(f"Paragraph {i}. " + prose(3, f"topic{i}"), page=1) for i in range(6)]
    drafts = chunker.chunk(ParsedDocument(blocks=blocks))
    assert len(drafts) >= 2
    first_tail = sentences(drafts[0].text)[-1]
    assert drafts[1].text.startswith(first_tail)


def test_table_rows_are_never_cut_and_header_is_repeated(chunker):
    header = "| name | city | country |"
    rows = [f"| person{i} with a long name | city{i} | country{i} |" for i in range(30)]
    blocks = [Block(header, "table_row", header=header)]
    blocks += [Block(r, "table_row", header=header) for r in rows]
    drafts = chunker.chunk(ParsedDocument(blocks=blocks))
    assert len(drafts) > 2
    for d in drafts:
        lines = d.text.split("\n")
        assert lines[0] == header
        assert all(line == header or line in rows for line in lines)
    assert sum(d.text.count("| person") for d in drafts) == 30


def test_a_chunk_spanning_pages_records_both(chunker):
    blocks = [Block("End of page one.", page=1), Block("Start of page two.", page=2)]
    [draft] = chunker.chunk(ParsedDocument(blocks=blocks))
    assert (draft.page_start, draft.page_end) == (1, 2)


def test_top_level_heading_starts_a_chunk_and_names_it(chunker):
    blocks = [
        Block("Introduction", "heading", level=1),
        Block("We introduce the system.", heading="Introduction"),
        Block("Results and their meaning for the fleet", "heading", level=2),
        Block("The results were good. Engines ran longer.", heading="Results and their meaning for the fleet"),
    ]
    drafts = chunker.chunk(ParsedDocument(blocks=blocks))
    assert [d.headline for d in drafts] == ["Introduction", "Results and their meaning for the fleet"]
    assert drafts[1].text.startswith("Results and their meaning")


def test_character_span_points_into_the_document_text(chunker):
    doc = ParsedDocument(blocks=[Block("Alpha paragraph here."), Block("Beta paragraph there.")])
    [draft] = chunker.chunk(doc)
    assert doc.text[draft.char_start : draft.char_end] == "Alpha paragraph here.\nBeta paragraph there."


def test_headline_is_at_most_ten_words():
    assert headline("whatever", "A heading with far more than ten words in it, surely too long") == (
        "A heading with far more than ten words in it,"
    )
    assert headline("First sentence is here. Second one.", None) == "First sentence is here"
    assert len(headline(prose(5, "x"), None).split()) <= 10


def test_summary_has_one_to_three_sentences():
    text = prose(8, "maintenance of jet engines")
    result = summary(text)
    assert 1 <= len(sentences(result)) <= 3
    assert summary("Just one sentence") == "Just one sentence"
    assert summary("") == ""
