"""CJK text for the keyword index and the coverage of a question's words."""

from __future__ import annotations

from ragmcp.retrieval.coverage import content_words, coverage
from ragmcp.text import cjk_bigrams, identifiers, is_cjk, keyword_text


def test_cjk_runs_become_overlapping_character_pairs_across_single_spaces() -> None:
    assert cjk_bigrams("확진자는 9,661명") == ["확진", "진자", "자는", "명"]
    assert cjk_bigrams("국내 확 진자는") == ["국내", "내확", "확진", "진자", "자는"]
    assert cjk_bigrams("東京都に住む") == ["東京", "京都", "都に", "に住", "住む"]
    assert cjk_bigrams("Ducks eat grasses.") == []


def test_keyword_text_appends_the_pairs_and_leaves_other_text_alone() -> None:
    assert keyword_text("Ducks eat grasses.") == "Ducks eat grasses."
    assert keyword_text("北京是首都") == "北京是首都\n北京 京是 是首 首都"
    assert is_cjk("코로나-19") and not is_cjk("covid-19")


def test_a_name_joined_by_underscores_is_added_whole_once() -> None:
    text = "CREATE MASK HR_SCHEMA.MASK_TAX_ID_ON_EMPLOYEES FOR COLUMN TAX_ID; THEN TAX_ID; __init__, _x, max__len_"
    assert identifiers(text) == ["hrschema", "masktaxidonemployees", "taxid", "maxlen"]
    assert keyword_text("set max_connections to 10") == "set max_connections to 10\nmaxconnections"
    assert keyword_text("CUSTOMER_ID 확진자") == "CUSTOMER_ID 확진자\ncustomerid 확진 진자"
    assert identifiers("a well-known e.g. snake case, 3_000 and x_1") == ["3000", "x1"]


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


def test_a_korean_question_s_question_words_and_closing_predicate_are_not_content_words() -> None:
    """Issue 27: "대수의 법칙이란 무엇인가?" was refused for "too little coverage: the closest passages
    do not mention 법칙이란, 무엇인가" though the passage defines the law ("대수의 법칙은 ...")."""
    passage = "8) 대수의 법칙은 보험료 계산원리 중 하나로 이용되는데"
    assert coverage("대수의 법칙이란 무엇인가?", passage) == (1.0, ())
    assert content_words("감염병관리위원회 위원장은 누구로 바뀌었나?") == ["감염병관리위원회", "위원장은"]
    assert content_words("이 이슈와 논점은 언제 발행되었나?") == ["이슈와", "논점은"]


def test_a_word_glued_to_a_latin_word_or_a_number_is_cut_from_it() -> None:
    """ "SARS와" is "SARS" with a particle; "19의" is a number with one, "호의" one syllable with one."""
    assert content_words("SARS와 MERS의 U코드는 무엇인가?") == ["sars", "mers", "코드는"]
    assert content_words("코로나-19의 KCD 질병분류기호는 무엇인가?") == ["코로나", "kcd", "질병분류기호는"]
    assert content_words("이슈와 논점 제1695호의 발행처는 어디인가?") == ["이슈와", "논점", "1695", "발행처는"]
    passage = "기존의 “SARS(U04.9)”, “MERS(U19.9)”는 U코드로 분류되어"
    assert coverage("SARS와 MERS의 U코드는 무엇인가?", passage) == (1.0, ())


def test_chinese_and_japanese_questions_are_covered_without_their_question_words() -> None:
    assert coverage("大数法则是什么？", "大数法则是保险费计算原理之一。") == (1.0, ())
    assert coverage("大数の法則とは何ですか", "大数の法則は保険料の計算原理の一つです。") == (1.0, ())
    share, missing = coverage("大数の法則とは何ですか", "東京都に住む人は多い。")
    assert share == 0.0 and missing


def test_an_english_question_s_words_are_as_before() -> None:
    assert content_words("What do wild ducks eat?") == ["wild", "ducks", "eat"]
    assert content_words("How many COVID-19 cases were confirmed?") == ["covid", "cases", "confirmed"]
