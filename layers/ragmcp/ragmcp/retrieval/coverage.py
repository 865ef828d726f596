"""How much of a question's wording a text holds: the share of its content words (no function
words, nothing shorter than three letters) found in the text, words sharing their first five
letters counting as one (a crude stemmer: feed/feeding, duck/ducks). An absolute signal in 0..1,
used beside the cosine by the relevance floor and by the answers' confidence gate."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
_PREFIX = 5
_FUNCTION_WORDS = frozenset(
    "a an and are as at be by can could did do does for from had has have how in into is it its many much of on or"
    " rather should than that the their them then there they this to was were what when where which who whom whose"
    " why will with would".split()
)


def content_words(text: str) -> list[str]:
    """The words that carry a question's meaning, lowercased, each once, in order."""
    words = (w.lower() for w in _WORD.findall(text))
    return list(dict.fromkeys(w for w in words if len(w) > 2 and w not in _FUNCTION_WORDS))


def coverage(question: str, text: str) -> tuple[float, tuple[str, ...]]:
    """The share of the question's content words the text holds (1.0 when it has none), and the
    words it lacks."""
    wanted = content_words(question)
    words = {w.lower() for w in _WORD.findall(text)}
    vocabulary = words | {w[:_PREFIX] for w in words if len(w) >= _PREFIX}
    missing = tuple(w for w in wanted if w not in vocabulary and not (len(w) >= _PREFIX and w[:_PREFIX] in vocabulary))
    return (1.0 - len(missing) / len(wanted)) if wanted else 1.0, missing
