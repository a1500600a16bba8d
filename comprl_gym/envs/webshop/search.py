"""BM25 product search over the fields the original indexes (bm25s).

The original builds one Lucene document per product whose ``contents`` is
``" ".join([Title, Description, BulletPoints[0], option_text]).lower()`` with
``option_text = ", and ".join(f"{name}: {', '.join(values)}")`` and searches it with pyserini's
BM25 (k1=0.9, b=0.4, English analyzer: stop words removed, Porter stemming), returning at most
50 hits. Here the same documents are indexed with bm25s (Lucene's BM25 variant, the same k1 and
b, English stop words, the Snowball English stemmer from PyStemmer when installed). As in
Lucene, only documents sharing a term with the query are hits; ties keep catalog order.

Example:
    >>> products = [{"asin": "A1", "Title": "Red Shirt", "Description": "cotton",
    ...              "BulletPoints": ["soft"], "options": {"size": ["small", "large"]}},
    ...             {"asin": "A2", "Title": "Blue Mug", "Description": "ceramic",
    ...              "BulletPoints": [""], "options": {}}]
    >>> SearchEngine(products).search("red shirts")
    ['A1']
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from comprl_gym.core import require

logger = logging.getLogger(__name__)

#: Hits a search returns (the original's ``SEARCH_RETURN_N``).
SEARCH_RETURN_N = 50
#: pyserini's ``LuceneSearcher`` BM25 defaults.
BM25_K1 = 0.9
BM25_B = 0.4
#: Lucene's StandardTokenizer keeps one-character tokens ("3 pack"), unlike bm25s's default.
_TOKEN_PATTERN = r"(?u)\b\w+\b"


def document_text(product: dict[str, Any]) -> str:
    """The text the original indexes for one product (``convert_product_file_format.py``)."""
    option_texts = [
        f"{name}: {', '.join(values)}" for name, values in product.get("options", {}).items()
    ]
    bullets = product.get("BulletPoints") or [""]
    return " ".join(
        [product["Title"], product["Description"], bullets[0], ", and ".join(option_texts)]
    ).lower()


def _stemmer() -> Any:
    try:
        import Stemmer

        return Stemmer.Stemmer("english")
    except ImportError:  # pragma: no cover - PyStemmer is a declared dependency
        logger.warning("PyStemmer is not installed: WebShop search runs without stemming")
        return None


class SearchEngine:
    """A BM25 index over a product list; :meth:`search` returns ASINs best first."""

    def __init__(self, products: Sequence[dict[str, Any]], k1: float = BM25_K1, b: float = BM25_B):
        bm25s = require("bm25s", "WebShop search")
        self.asins = [p["asin"] for p in products]
        self._tokenizer = bm25s.tokenization.Tokenizer(
            splitter=_TOKEN_PATTERN, stopwords="en", stemmer=_stemmer()
        )
        corpus_ids = self._tokenizer.tokenize(
            [document_text(p) for p in products], show_progress=False, return_as="ids"
        )
        vocab = self._tokenizer.get_vocab_dict()
        self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._retriever.index(
            bm25s.tokenization.Tokenized(ids=corpus_ids, vocab=vocab), show_progress=False
        )
        self._vocab_size = len(vocab)

    def query_ids(self, query: str) -> list[int]:
        """Index term ids of ``query``'s tokens (unknown words dropped)."""
        ids = self._tokenizer.tokenize(
            [query.lower()], update_vocab=False, show_progress=False, return_as="ids"
        )[0]
        return [int(i) for i in ids if 0 <= int(i) < self._vocab_size]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every product for ``query`` (zeros when no term is known)."""
        ids = self.query_ids(query)
        if not ids:
            return np.zeros(len(self.asins), dtype=np.float32)
        return np.asarray(self._retriever.get_scores(ids), dtype=np.float32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the ``k`` best products sharing a term with ``query``, best first."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        top = hits[np.argpartition(-scores[hits], k - 1)[:k]] if hits.size > k else hits
        # Best score first; equal scores in catalog order (Lucene breaks ties by doc id).
        order = np.lexsort((top, -scores[top]))
        return [self.asins[i] for i in top[order]]
