"""Headlines (at most 10 words) and segment summaries (1-3 sentences), extractive."""

from __future__ import annotations

import re
from collections import Counter

HEADLINE_WORDS = 10
SUMMARY_SENTENCES = 3
SUMMARY_CHARS = 320

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
_MARKUP = re.compile(r"^[#>*\-\s|]+|[|*`]+")
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with".split()
)


def sentences(text: str) -> list[str]:
    parts = (_MARKUP.sub(" ", s) for s in _SENTENCE_END.split(text))
    return [" ".join(p.split()) for p in parts if _WORD.search(p)]


def clip_words(text: str, limit: int) -> str:
    words = text.split()
    return " ".join(words[:limit]) if len(words) > limit else " ".join(words)


def headline(text: str, heading: str | None) -> str:
    """The nearest heading, else the first sentence; never more than ten words."""
    source = heading if heading and _WORD.search(heading) else next(iter(sentences(text)), "")
    return clip_words(source.rstrip(" .:;"), HEADLINE_WORDS)


def summary(text: str) -> str:
    """Up to three sentences that best carry the chunk's vocabulary, in their original order."""
    found = sentences(text)
    if not found:
        return ""
    bags = [[w.lower() for w in _WORD.findall(s) if w.lower() not in _STOPWORDS] for s in found]
    weight = Counter(w for bag in bags for w in set(bag))

    def centrality(i: int) -> float:
        bag = bags[i]
        return sum(weight[w] for w in bag) / (len(bag) + 4) - 0.05 * i

    chosen = sorted(sorted(range(len(found)), key=centrality, reverse=True)[:SUMMARY_SENTENCES])
    picked: list[str] = []
    for i in chosen:
        if picked and len(" ".join(picked)) + len(found[i]) > SUMMARY_CHARS:
            break
        picked.append(found[i])
    result = " ".join(picked)
    if len(result) > SUMMARY_CHARS:
        result = result[:SUMMARY_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return result
