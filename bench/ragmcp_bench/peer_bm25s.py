"""bm25s (a stock BM25 on sparse matrices) as a peer of our keyword side, for `ragmcp eval` only.

The peer as issue 27 measured it: whole documents (title and text), Snowball English stemming
(PyStemmer), English stop words, k1 1.5, b 0.75, Lucene's idf, every query token counted (a word
given twice counts twice). `ranking` takes other units (our chunks, ranked by each document's best
chunk), stemmers and parameters, so that each difference between the peer and our keyword side
can be measured on its own. bm25s and PyStemmer are optional dependencies (the `bench` extra):
nothing that serves or tests ragmcp by default imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import bm25s
import numpy as np
import Stemmer


@dataclass(frozen=True, slots=True)
class Bm25sConfig:
    k1: float = 1.5
    b: float = 0.75
    stemmer: str | None = "english"
    """A PyStemmer algorithm: english (Snowball), porter (FTS5's), or None for no stemming."""
    stopwords: str | None = "en"
    distinct_query_terms: bool = False


PEER = Bm25sConfig()


def ranking(
    units: Sequence[tuple[str, str]], queries: Mapping[str, str], config: Bm25sConfig = PEER, depth: int = 100
) -> dict[str, list[str]]:
    """Each query's documents, best first, at most `depth`: units are (document key, text), a
    document ranked by its best unit; documents without a query term are left out."""
    stemmer = Stemmer.Stemmer(config.stemmer) if config.stemmer else None
    keys = [key for key, _ in units]
    retriever = bm25s.BM25(k1=config.k1, b=config.b)
    corpus = bm25s.tokenize(
        [text for _, text in units], stopwords=config.stopwords, stemmer=stemmer, show_progress=False
    )
    retriever.index(corpus, show_progress=False)
    tokenized = bm25s.tokenize(
        list(queries.values()), stopwords=config.stopwords, stemmer=stemmer, show_progress=False, return_ids=False
    )
    run: dict[str, list[str]] = {}
    for qid, tokens in zip(queries, tokenized, strict=True):
        known = [t for t in tokens if t in retriever.vocab_dict]
        if config.distinct_query_terms:
            known = list(dict.fromkeys(known))
        if not known:
            run[qid] = []
            continue
        scores = retriever.get_scores(known)
        order = np.argsort(-scores, kind="stable")
        found: dict[str, None] = {}
        for i in order:
            if scores[i] <= 0 or len(found) >= depth:
                break
            found.setdefault(keys[i], None)
        run[qid] = list(found)
    return run
