"""How much of a question's wording a text holds: the share of its content words (no function
words, no words that only frame a question such as "stand for" or "called", nothing shorter than
three letters) found in the text. Accents are folded (dūce/duce) and words are cut to a crude stem
(a common ending dropped, then the first five letters; a stem of four letters or more matches a longer
one it begins: duck/ducks, feed/feeding, serve/served). A word in a script written without
spaces between words or with endings attached (Chinese, Japanese, Korean: "확진자는") is held
when its first character pair and at least half of its pairs are in the text (`text.cjk_bigrams`), so a particle
or an ending does not count as a missing word. An absolute signal in 0..1, used beside the
cosine by the relevance floor and by the answers' confidence gate."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from ragmcp.text import cjk_bigrams, is_cjk

_WORD = re.compile(r"\w+", re.UNICODE)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_PREFIX = 5
_ENDINGS = ("ing", "ed", "s")
_SHORT = 4
"""Stems this long match a longer stem they begin (serv/serve, hunt/hunte)."""
_FUNCTION_WORDS = frozenset(
    "a an and are as at be by can could did do does for from had has have how in into is it its many much of on or"
    " rather should than that the their them then there they this to was were what when where which who whom whose"
    " why will with would about above after against all among any before below between both during each few more"
    " most other over same some such through under until very while"
    # words that frame a question rather than name its topic
    " call called describe does explain find give info information kind know let list made make mean meaning means"
    " name named please show stand stands summarise summarize tell type use used year years"
    # words that point at a part of the document rather than at its topic
    " chapter cover covered covers heading part say said says section sections written".split()
)


def _fold(text: str) -> str:
    """Lowercase, without accents (composed again, so a Hangul syllable stays one character)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    marks = {ord(c): None for c in set(_NON_ASCII.findall(decomposed)) if unicodedata.combining(c)}
    return unicodedata.normalize("NFC", decomposed.translate(marks) if marks else decomposed)


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """A common ending (ing, ed, s) off, then the first five letters: hunts/hunt, feeding/feed."""
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)][:_PREFIX]
    return word[:_PREFIX]


def _holds(stem: str, stems: frozenset[str], vocabulary: frozenset[str]) -> bool:
    """The text has the stem, a stem it begins (serv: serve), or a stem of four letters it begins."""
    return stem in vocabulary or (len(stem) > _SHORT and stem[:_SHORT] in stems)


def content_words(text: str) -> list[str]:
    """The words that carry a question's meaning, lowercased and without accents, each once, in
    order; a CJK word counts from two characters on."""
    return list(_content_words(text))


@lru_cache(maxsize=64)
def _content_words(text: str) -> tuple[str, ...]:
    """content_words, kept for the phrases of the searches running now (each phrase is measured
    against each of a search's hits)."""
    words = _WORD.findall(_fold(text))
    wanted = (w for w in words if (len(w) > 1 if is_cjk(w) else len(w) > 2) and w not in _FUNCTION_WORDS)
    return tuple(dict.fromkeys(wanted))


def _cjk_held(word: str, pairs: frozenset[str]) -> bool:
    """The word's first pair (its stem: Korean and Japanese attach endings after it) and at least
    half of its pairs are in the text."""
    wanted = cjk_bigrams(word)
    return wanted[0] in pairs and sum(p in pairs for p in wanted) * 2 >= len(wanted)


@dataclass(frozen=True, slots=True)
class TextStems:
    """A text's word stems, made once to measure several questions' coverage of it."""

    stems: frozenset[str]
    vocabulary: frozenset[str]
    pairs: frozenset[str] = frozenset()
    """The text's CJK character pairs."""

    @classmethod
    def of(cls, text: str) -> TextStems:
        folded = _fold(text)
        stems = frozenset(map(_stem, set(_WORD.findall(folded))))
        pairs = frozenset() if folded.isascii() else frozenset(cjk_bigrams(folded))
        return cls(stems, stems | {t[:_SHORT] for t in stems}, pairs)

    def holds(self, word: str) -> bool:
        if is_cjk(word):
            return _cjk_held(word, self.pairs)
        return _holds(_stem(word), self.stems, self.vocabulary)

    def coverage(self, question: str) -> tuple[float, tuple[str, ...]]:
        """The share of the question's content words the text holds (1.0 when it has none), and
        the words it lacks."""
        wanted = _content_words(question)
        missing = tuple(w for w in wanted if not self.holds(w))
        return (1.0 - len(missing) / len(wanted)) if wanted else 1.0, missing


def coverage(question: str, text: str) -> tuple[float, tuple[str, ...]]:
    """The share of the question's content words the text holds (1.0 when it has none), and the
    words it lacks."""
    return TextStems.of(text).coverage(question)
