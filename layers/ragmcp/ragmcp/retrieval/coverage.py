"""How much of a question's wording a text holds: the share of its content words (no function
words, no words that only frame a question such as "stand for" or "called", nothing shorter than
three letters) found in the text. Accents are folded (dūce/duce) and words are cut to a crude stem
(a common ending dropped, then the first five letters; a stem of four letters or more matches a longer
one it begins: duck/ducks, feed/feeding, serve/served). A word in a script written without
spaces between words or with endings attached (Chinese, Japanese, Korean: "확진자는") is held
when its first character pair is in the text (`text.cjk_bigrams`), and at least half of its pairs
for a word of more than three pairs, so a particle or an ending does not count as a missing word.
What cannot be measured that way is left out of a CJK question's words: a word glued to a Latin
word or a number is cut from it ("SARS와" -> "SARS", "19의" -> nothing), a one-character word
with its particle ("호의"), the question words (무엇, 어디, 누구, 언제, 什么, 哪, 何, どこ...),
a Korean question's closing predicate ("바뀌었나") and a Japanese or Chinese question's
ending ("ですか", "吗"), which no passage shares. An absolute signal in 0..1, used beside the
cosine by the relevance floor and by the answers' confidence gate."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from ragmcp.text import cjk_bigrams, is_cjk, script_parts

_WORD = re.compile(r"\w+", re.UNICODE)
_ASCII_SPACES = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else 32 for c in range(256))
"""A bytes.translate table that blanks every byte but ASCII's word characters: the words of an ASCII
text are then its split(), as _WORD finds them, at a third of the regex's cost."""
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

_CJK_QUESTION_WORDS = (
    "무엇 어디 누구 누가 언제 어떻 어떤 어느 얼마 몇 왜 이유 의미 대해 대한 관해 관한"
    " 什么 甚麼 哪 谁 誰 何 怎么 怎樣 怎样 为什么 為什麼 多少 几 幾 吗 嗎 どこ いつ どう どの どれ なぜ いくつ いくら"
    " ですか ますか でしょうか"
).split()
"""CJK words that ask or frame a question (what, where, who, when, how, which, why, reason, meaning,
about; Chinese and Japanese question endings): a word beginning with one is no content word, and
one inside a run of Chinese or Japanese (written without spaces) cuts it."""
_KOREAN_PARTICLES = frozenset("의는은이가을를와과로에도만")
_QUESTION_ENDINGS = frozenset("나가까니냐요")
"""The last syllable of a Korean question's closing predicate (a word of its own: Korean is written
with spaces)."""


def _fold(text: str) -> str:
    """Lowercase, without accents (composed again, so a Hangul syllable stays one character)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    marks = {ord(c): None for c in set(_NON_ASCII.findall(decomposed)) if unicodedata.combining(c)}
    return unicodedata.normalize("NFC", decomposed.translate(marks) if marks else decomposed)


_CJK_QUESTION_STARTS = tuple(_fold(w) for w in _CJK_QUESTION_WORDS)
"""The question words as folded text has them (folding drops the kana's voicing marks: です -> てす)."""
_CJK_QUESTION_CUT = re.compile("|".join(sorted(_CJK_QUESTION_STARTS, key=len, reverse=True)))


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
    folded = _fold(text)
    if folded.isascii():  # no CJK word to cut out or measure by its pairs
        return tuple(dict.fromkeys(w for w in _WORD.findall(folded) if len(w) > 2 and w not in _FUNCTION_WORDS))
    words = [part for word in _WORD.findall(folded) for part in script_parts(word)]
    if words and is_cjk(words[-1]) and words[-1][-1] in _QUESTION_ENDINGS:
        words.pop()  # the question's closing predicate
    wanted = (
        w
        for word in words
        for w in (_cjk_words(word) if is_cjk(word) else [word] if len(word) > 2 else [])
        if w not in _FUNCTION_WORDS
    )
    return tuple(dict.fromkeys(wanted))


def _cjk_words(word: str) -> list[str]:
    """The content words of a run of CJK characters: none when it begins with a question word, else
    its pieces between question words, each from two characters on, and not one character with
    its particle."""
    if word.startswith(_CJK_QUESTION_STARTS):
        return []
    return [w for w in _CJK_QUESTION_CUT.split(word) if len(w) > 2 or (len(w) == 2 and w[1] not in _KOREAN_PARTICLES)]


def _cjk_held(word: str, pairs: frozenset[str]) -> bool:
    """The word's first pair (its stem: Korean and Japanese attach endings after it) is in the text,
    and at least half of its pairs when it has more than three."""
    wanted = cjk_bigrams(word)
    return wanted[0] in pairs and (len(wanted) <= 3 or sum(p in pairs for p in wanted) * 2 >= len(wanted))


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
        words = set(_WORD.findall(folded))
        if not folded.isascii():
            words = {part for word in words for part in script_parts(word)}
        stems = frozenset(map(_stem, words))
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


@dataclass(frozen=True, slots=True)
class Questions:
    """Several questions' content words, made once to measure the best coverage of any of them in
    each of many texts (a search's phrases against each of its hits): the shares TextStems.coverage
    gives, with less made for each text. Of a text's words, only those whose first three letters
    begin one of the questions' stems are cut to stems: a stem keeps its word's first three letters,
    and a stem matches another only when they share them (equal, or one the other's first four)."""

    questions: tuple[tuple[tuple[str, str | None], ...], ...]
    """Each question's content words, each with its stem (None: a CJK word, held by its pairs)."""
    starts: frozenset[str]
    """The first three letters of every stem wanted."""
    ascii_starts: frozenset[bytes]
    """Those in ASCII, as bytes: an ASCII text's words are looked at as bytes, and only the words that
    begin with one are decoded and cut to stems."""
    cjk: bool
    """Whether a CJK word is wanted (the text's pairs are made only then)."""
    stems: frozenset[str]
    """Every stem wanted: one the text's vocabulary holds is held (`_holds`' first way)."""
    longer: dict[str, frozenset[str]]
    """The wanted stems longer than four letters, by their first four: held when the text has that stem."""

    @classmethod
    def of(cls, questions: Iterable[str]) -> Questions:
        wanted = tuple(
            tuple(
                (word, _stem(word) if word.isascii() or not is_cjk(word) else None) for word in _content_words(question)
            )
            for question in questions
        )
        starts = frozenset(stem[:3] for words in wanted for _, stem in words if stem is not None)
        cjk = any(stem is None for words in wanted for _, stem in words)
        stems = frozenset(stem for words in wanted for _, stem in words if stem is not None)
        longer: dict[str, set[str]] = {}
        for stem in stems:
            if len(stem) > _SHORT:
                longer.setdefault(stem[:_SHORT], set()).add(stem)
        ascii_starts = frozenset(start.encode() for start in starts if start.isascii())
        return cls(wanted, starts, ascii_starts, cjk, stems, {k: frozenset(v) for k, v in longer.items()})

    def best_coverage(self, text: str) -> float:
        """The best share of any question's content words the text holds (1.0 for a question with none)."""
        folded = _fold(text)
        if folded.isascii():
            ascii_starts = self.ascii_starts
            tokens = set(folded.encode().translate(_ASCII_SPACES).split())
            stems = frozenset(_stem(token.decode()) for token in tokens if token[:3] in ascii_starts)
        else:
            starts = self.starts
            words = set(_WORD.findall(folded))
            if is_cjk(folded):  # else no word changes script: each is its one part
                words = {part for word in words for part in script_parts(word)}
            stems = frozenset(_stem(word) for word in words if word[:3] in starts)
        # `_holds` of every wanted stem at once, by set operations: in the vocabulary, or four letters it begins with
        # a stem of the text.
        held = self.stems & (stems | {t[:_SHORT] for t in stems})
        for start in stems & self.longer.keys():
            held |= self.longer[start]
        pairs = frozenset(cjk_bigrams(folded)) if self.cjk and not folded.isascii() else frozenset()
        shares = []
        for wanted in self.questions:
            missing = sum(not _cjk_held(word, pairs) if stem is None else stem not in held for word, stem in wanted)
            shares.append((1.0 - missing / len(wanted)) if wanted else 1.0)
        return max(shares)
