"""CJK text for the keyword index and the coverage of a question's words."""

from __future__ import annotations

from ragmcp.retrieval.coverage import coverage
from ragmcp.text import cjk_bigrams, is_cjk, keyword_text


def test_cjk_runs_become_overlapping_character_pairs_across_single_spaces() -> None:
    assert cjk_bigrams("확진자는 9,661명") == ["확진", "진자", "자는", "명"]
    assert cjk_bigrams("국내 확 진자는") == ["국내", "내확", "확진", "진자", "자는"]
    assert cjk_bigrams("東京都に住む") == ["東京", "京都", "都に", "に住", "住む"]
    assert cjk_bigrams("Ducks eat grasses.") == []


def test_keyword_text_appends_the_pairs_and_leaves_other_text_alone() -> None:
    assert keyword_text("Ducks eat grasses.") == "Ducks eat grasses."
    assert keyword_text("北京是首都") == "北京是首都\n北京 京是 是首 首都"
    assert is_cjk("코로나-19") and not is_cjk("covid-19")


def test_a_korean_word_with_its_particle_is_covered_by_the_word_without_it() -> None:
    text = "2020.3.30. 0시 기준 현재 국내 확 진자는 9,661명, 사망자는 158명으로 나타났다."
    share, missing = coverage("국내 확진자는?", text)
    assert share == 1.0 and missing == ()
    share, missing = coverage("국내 확진자는 몇 명인가? 백신 접종률은?", text)
    assert 0 < share < 1 and "백신" in missing


def test_opensearch_searches_the_cjk_pairs_field_only_for_a_cjk_word() -> None:
    from ragmcp.adapters.aws.opensearch import SIMILARITY, fts_body, mappings, query_words
    from ragmcp.domain.models import Principal, SearchFilter

    cjk = {"cjk": {"type": "text", "analyzer": "cjk", "similarity": SIMILARITY}}
    assert mappings("m", 4)["properties"]["text"]["fields"] == cjk

    def fields(query: str) -> dict[str, list[str]]:
        weighted = [(w, 1.0) for w in query_words(keyword_text(query))]
        body = fts_body(Principal(tenant="t"), weighted, SearchFilter(), 5)
        return {m["multi_match"]["query"]: m["multi_match"]["fields"] for m in body["query"]["bool"]["should"]}

    korean = fields("확진자는 몇 명인가?")
    assert "text.cjk" in korean["확진"] and "text.cjk" in korean["진자"]
    assert all("text.cjk" not in f for f in fields("How many ducks?").values())
