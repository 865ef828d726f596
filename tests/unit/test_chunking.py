import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from semantic_text_splitter import TextSplitter

from ragmcp.adapters.local.onnx_embedder import load_tokenizer
from ragmcp.ingest.chunking import Chunker
from ragmcp.ingest.parsed import Block, ParsedDocument, body
from ragmcp.ingest.parsers import parse
from ragmcp.ingest.parsers.blocks import Blocks
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


def test_table_rows_are_never_cut_and_each_names_its_columns(chunker):
    out = Blocks()
    people = [[f"person{i} with a long name", f"city{i}", f"country{i}"] for i in range(30)]
    out.table([["name", "city", "country"], *people])
    drafts = chunker.chunk(out.document())
    assert len(drafts) > 2
    rows = [line for d in drafts for line in body(d.text).split("\n")]
    assert rows == [f"name: person{i} with a long name; city: city{i}; country: country{i}." for i in range(30)]


def test_a_chunk_opens_with_its_heading_path_and_the_headings_are_not_repeated(chunker):
    out = Blocks()
    out.add("Duck", "heading", level=1)
    out.add("Behaviour", "heading", level=2)
    out.add("Feeding", "heading", level=3)
    out.add(prose(20, "feeding"))
    out.add("Breeding", "heading", level=3)
    out.add(prose(2, "breeding"))
    drafts = chunker.chunk(out.document("Ducks of the world"))
    assert len(drafts) > 2
    assert all(d.text.startswith("§ Duck › Behaviour › ") for d in drafts)
    assert drafts[0].text.split("\n")[0] == "§ Duck › Behaviour › Feeding"
    assert "Feeding" not in body(drafts[0].text)
    assert drafts[1].text.startswith("§ Duck › Behaviour › Feeding\n")
    assert drafts[-1].text.startswith("§ Duck › Behaviour › Breeding\n")


def test_the_path_is_the_headings_only_and_a_passage_under_none_has_no_path_line(chunker):
    out = Blocks()
    out.add("Duck", "heading", level=1)
    out.add("Ducks are birds.")
    [draft] = chunker.chunk(out.document("Waterfowl of the world"))
    assert draft.text == "§ Duck\nDucks are birds."
    assert body(draft.text) == "Ducks are birds."
    note = Blocks()
    note.add("The heron nests in the reed beds.")
    assert [d.text for d in chunker.chunk(note.document())] == ["The heron nests in the reed beds."]


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


_WORDS = st.sampled_from(
    [
        "turbine",
        "gearboxes",
        "überprüfung",
        "naïve",
        "playing",
        "U.S.",
        "e.g.",
        "(n = 1,234;",
        "p < 0.001)",
        "—",
        "x" * 120,
    ]
    + ["风力发电机", "の", "Straße", "e\u0301t\u00e9", "##ing", "[UNK]", "COVID-19", "α-synuclein", "IL-6/STAT3", "."]
)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.lists(_WORDS, min_size=60, max_size=400), st.sampled_from([" ", "  ", "\n", ""]))
def test_a_split_paragraphs_pieces_are_the_tokenizer_splitters_with_the_counts_each_has_alone(chunker, words, space):
    """A long paragraph is cut by a splitter that sizes its candidates from the paragraph's one encoding: the
    same pieces as the splitter that encodes each candidate (text-splitter's own tokenizer sizer), and token
    counts equal to encoding each piece alone (what decides how pieces are packed into chunks)."""
    text = (space.join(words) + " " + prose(20, "gearboxes"))[: chunker.max_chars]  # one segment: no window cut
    pieces = chunker._pieces([Block(text)])
    assert len(pieces) > 1
    by_tokenizer = TextSplitter.from_huggingface_tokenizer(chunker._tokenizer, capacity=chunker.max_tokens, overlap=0)
    assert [(p.offset, p.text) for p in pieces] == by_tokenizer.chunk_indices(text)
    assert [p.tokens for p in pieces] == [chunker.count(p.text) for p in pieces]


def test_a_table_s_caption_line_is_in_the_path_of_its_rows_only(chunker):
    out = Blocks()
    out.add("Duck", "heading", level=1)
    out.add("Ducks eat plants and small animals, as the table below shows for a year.")
    out.add("Table 2 Food per season")
    out.table([["Season", "Food"], ["Winter", "seeds"], ["Summer", "insects"]])
    out.add("After the table.")
    out.add("This sentence before a table is long enough and ends in a full stop, so it is not a caption.")
    out.table([["Season", "Grams"], ["Winter", "120"]])
    rows = [b for b in out.items if b.kind == "table_row"]
    assert [r.path for r in rows] == [("Duck", "Table 2 Food per season")] * 2 + [("Duck",)]
    assert block_path(out, "After the table.") == ("Duck",)
    drafts = chunker.chunk(out.document())
    [table] = [d.text for d in drafts if "Winter; Food: seeds" in d.text]
    assert table.split("\n")[0] == "§ Duck › Table 2 Food per season"
    assert "Table 2 Food per season" not in body(table)
    assert "After the table." not in table


def block_path(out: Blocks, text: str) -> tuple[str, ...]:
    return next(b.path for b in out.items if b.text == text)


def test_the_uniform_table_s_rows_stand_under_its_caption(chunker, shared_documents):
    [document] = parse((shared_documents / "source" / "word_tables.docx").read_bytes(), "word_tables.docx")
    [uniform] = [d.text for d in chunker.chunk(document) if "Header 0.1: Cell 2.1;" in d.text]
    assert uniform.split("\n")[0] == "§ Test with tables › A uniform table"
    assert "horizontal spans" not in uniform


def test_a_form_field_s_number_marker_is_not_its_caption():
    out = Blocks()
    out.add("Receipt", "heading", level=1)
    out.add("3")
    out.table([["Server"], ["Quack Quackling"]])
    assert [(b.kind, b.path) for b in out.items[1:]] == [("text", ("Receipt",)), ("table_row", ("Receipt",))]


def test_text_after_a_table_captioned_mid_chunk_stays_in_that_chunk(chunker):
    out = Blocks()
    out.add("Let's swim!", "heading", level=1)
    out.add("Let's eat", "heading", level=2)
    out.add("I like to eat leaves")
    out.add("Here are some things a duck could eat:")
    out.table([["Food", "Calories"], ["Leaves", "50"]])
    out.add("And a list at the end:")
    [draft] = chunker.chunk(out.document())
    assert draft.text.split("\n")[0] == "§ Let's swim! › Let's eat"
    assert draft.text.endswith("Food: Leaves; Calories: 50.\nAnd a list at the end:")


def test_a_heading_of_any_level_starts_a_chunk_so_its_path_names_all_its_text(chunker):
    """Issue 27 (heading questions): a short third-level section ("Heraldry") ran on in the chunk of
    the section before it, under that section's path, so a question naming it found no chunk
    whose path named it. A table's caption line below the second level still continues its chunk
    (test_text_after_a_table_captioned_mid_chunk_stays_in_that_chunk)."""
    out = Blocks()
    out.add("Duck", "heading", level=1)
    out.add("Relationship with humans", "heading", level=2)
    out.add("Domestication", "heading", level=3)
    out.add("Ducks are farmed for their meat, eggs, and feathers.")
    out.add("Heraldry", "heading", level=3)
    out.add("Ducks appear on the coat of arms of several towns.")
    drafts = chunker.chunk(out.document())
    assert [d.text for d in drafts] == [
        "§ Duck › Relationship with humans › Domestication\nDucks are farmed for their meat, eggs, and feathers.",
        "§ Duck › Relationship with humans › Heraldry\nDucks appear on the coat of arms of several towns.",
    ]
