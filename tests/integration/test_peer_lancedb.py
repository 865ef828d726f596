"""The LanceDB bench peer: built from real embeddings, its hybrid search finds chunks by words and
by meaning, takes any text safely, and reopens. Skipped without the optional `bench` extra."""

from __future__ import annotations

import pytest

pytest.importorskip("lancedb")

from ragmcp.bootstrap import build_services
from ragmcp.settings import Settings
from ragmcp_bench.peer_lancedb import LanceDBPeer, PeerChunk

TOPICS = [
    "The mallard is a dabbling duck that feeds on seeds, insects and aquatic plants.",
    "A volcano erupts when magma rises through the crust and escapes as lava and ash.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen in leaves.",
    "The violin has four strings tuned in fifths and is played with a bow.",
    "Sourdough bread rises thanks to wild yeast and lactic acid bacteria in the starter.",
    "Glaciers carve U-shaped valleys as they slowly move downhill under their own weight.",
    "A compiler translates source code written in a high-level language into machine code.",
    "Chess openings such as the Sicilian Defence shape the middle game.",
    "Honeybees communicate the location of flowers to the hive with a waggle dance.",
    "The Roman aqueducts carried water into cities over long distances using gravity.",
]
UNIQUE = "The Zorblax quarterly ledger reconciles invoices from the Quillfeather warehouse."
SEMANTIC = "Cardiologists treat heart attacks by reopening blocked coronary arteries with a stent."


@pytest.fixture(scope="module")
def embed(tmp_path_factory):
    services = build_services(Settings(data_dir=tmp_path_factory.mktemp("data")))
    return services.embedder.embed


@pytest.fixture(scope="module")
def built(tmp_path_factory, embed):
    texts = [f"{topic} Note {n} of the series." for n in range(5) for topic in TOPICS[:-1]]
    texts += [TOPICS[-1], UNIQUE, SEMANTIC]
    keys = [f"doc-{i // 2}" for i in range(len(texts))]
    vectors = embed(texts)
    chunks = [PeerChunk(f"c{i}", keys[i], text, vectors[i]) for i, text in enumerate(texts)]
    folder = tmp_path_factory.mktemp("lancedb")
    peer = LanceDBPeer.build(folder, chunks, batch=16)
    return folder, peer, {c.text: (c.chunk_id, c.doc_key) for c in chunks}


def test_builds_every_chunk_and_reopens(built):
    folder, peer, by_text = built
    assert len(by_text) == 48
    assert peer.count() == 48
    assert LanceDBPeer.open(folder).count() == peer.count()


def test_words_found_in_one_chunk_rank_it_first(built, embed):
    _, peer, by_text = built
    phrases = ["Zorblax Quillfeather ledger"]
    assert peer.search(phrases, embed(phrases))[0] == by_text[UNIQUE]


def test_meaning_without_shared_words_is_found_by_vectors(built, embed):
    _, peer, by_text = built
    phrases = ["cardiac surgeon fixes clogged vessel"]
    assert not set(phrases[0].split()) & set(SEMANTIC.lower().replace(".", "").split())
    assert by_text[SEMANTIC] in peer.search(phrases, embed(phrases), top_k=3)


def test_several_phrases_fuse_into_top_k(built, embed):
    _, peer, by_text = built
    phrases = ["Zorblax Quillfeather ledger", "cardiac surgeon fixes clogged vessel", "aqueducts"]
    found = peer.search(phrases, embed(phrases), top_k=5, fts_k=5, vec_k=5)
    assert len(found) == 5 == len(set(found))
    assert {by_text[UNIQUE], by_text[SEMANTIC], by_text[TOPICS[-1]]} <= set(found)


@pytest.mark.parametrize(
    "phrase",
    ['"unbalanced quote', "title:duck AND (volcano OR NOT", "a* ~2 ^3 -lava +bread", "()", "", "NOT"],
)
def test_query_syntax_characters_are_plain_text(built, embed, phrase):
    _, peer, _ = built
    assert isinstance(peer.search([phrase], embed([phrase])), list)
