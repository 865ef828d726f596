"""Text normalisation shared by indexing and querying, whatever scores the keywords.

Chinese and Japanese are written without spaces between words, and Korean attaches particles and
endings to its words ("확진자는" is "확진자" + "는"), so a word-based keyword index finds a CJK word
only where it is written exactly as asked. `keyword_text` adds, after each run of CJK characters,
its overlapping character pairs ("확진자는" -> "확진 진자 자는"): a query and a passage that share a
word share its pairs, whatever is attached to it. The same function is applied to the text that is
indexed and to the query, so any keyword scorer (FTS5 and BM25 in the embedded index, OpenSearch
with its `cjk` analyzer, which makes the same pairs) matches them alike. Text without CJK
characters or names in code (below) is returned unchanged.

A name in code joined by underscores ("CUSTOMER_TAX_ID") is cut by FTS5's unicode61 tokenizer into
its parts, so a question naming the column matched a passage that only uses the words "customer",
"tax" and "id" as well as the code that holds the name. `keyword_text` also appends each such name
whole, its parts run together ("customertaxid"), so the code holding it scores the name's rarity as
well; OpenSearch's standard tokenizer keeps the name as one word already.
"""

from __future__ import annotations

import re

_CJK_CHARS = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
)
_CJK = re.compile(f"[{_CJK_CHARS}]")
_WORD_CHAR = re.compile(r"[^\W_]")
_SCRIPT_PART = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+(?:[ \\t]+[{_CJK_CHARS}]+)*")
"""CJK characters in a row, across single spaces (a PDF's line breaks split Korean words at random)."""
_IDENTIFIER = re.compile(r"(?<![^\W_])[^\W_]+(?:_+[^\W_]+)+(?![^\W_])")
"""Letters and digits joined by underscores: a name in code ("MASK_TAX_ID_ON_EMPLOYEES")."""


def is_cjk(text: str) -> bool:
    """Whether the text has a CJK character."""
    return _CJK.search(text) is not None


def cjk_share(text: str) -> float:
    """The share of the text's letters and digits that are CJK characters (0 when it has none)."""
    chars = _WORD_CHAR.findall(text)
    return len(_CJK.findall(text)) / len(chars) if chars else 0.0


def script_parts(word: str) -> list[str]:
    """A word cut where it changes between CJK and other characters: "SARS와" -> "SARS", "와";
    "제1695호의" -> "제", "1695", "호의" (Korean attaches particles to Latin words and numbers too)."""
    return _SCRIPT_PART.findall(word) if is_cjk(word) else [word]


def cjk_bigrams(text: str) -> list[str]:
    """The overlapping character pairs of each CJK run in the text (spaces inside a run left out);
    a run of one character is itself."""
    pairs: list[str] = []
    for run in _CJK_RUN.findall(text):
        chars = "".join(run.split())
        pairs += [chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)]
    return pairs


def identifiers(text: str) -> list[str]:
    """Each distinct identifier joined by underscores in the text ("CUSTOMER_TAX_ID", "max_connections"),
    as one word: its parts lower-cased and run together ("customertaxid"), in order of first use."""
    if "_" not in text:  # most text: no regular expression run
        return []
    joined = ("".join(p for p in word.lower().split("_") if p) for word in _IDENTIFIER.findall(text))
    return list(dict.fromkeys(joined))


def keyword_text(text: str) -> str:
    """The text as the keyword index reads it: unchanged, with each name joined by underscores
    whole (`identifiers`) and the CJK character pairs appended."""
    extra = identifiers(text) + cjk_bigrams(text)
    return f"{text}\n{' '.join(extra)}" if extra else text
