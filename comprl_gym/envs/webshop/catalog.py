"""Load WebShop product files and build goals, as the original's ``load_products``/``get_goals``.

Official files (``items_shuffle_1000.json`` or ``items_shuffle.json``, ``items_ins_v2_1000.json``
or ``items_ins_v2.json``, ``items_human_ins.json``, optionally ``reviews.json``) are read from a
folder; :func:`load_catalog` turns them into the records the pages and the reward use:

* ``Title``, ``Description``, ``BulletPoints``, ``Price`` (the price tag), ``pricing`` (floats),
  ``options`` (``{name: [values]}``, lower-cased, ``/`` written `` | ``), ``Attributes``
  (``['DUMMY_ATTR']`` when the attribute file has none), ``Reviews``, ``Rating``,
  ``MainImage``, ``query`` (lower-cased), ``category``, ``product_category``, ``name``;
* product prices: the single price, or a draw between the two ends of a price range;
* goals from the human instructions (``human_goals=True``, the text env's usual setting) or from
  the synthetic instruction of each product times every option combination, each with a price
  bound drawn from the next four multiples of ten above the price; then shuffled with seed 233.

The original draws prices and bounds from the unseeded global ``random``; here both come from a
``random.Random(seed)`` so the same files always give the same goals.

Example:
    >>> from comprl_gym.envs.webshop.generator import generated_data_dir
    >>> catalog = load_catalog(generated_data_dir())
    >>> len(catalog.products) >= 1000 and len(catalog.goals) >= 500
    True
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError, DataError

logger = logging.getLogger(__name__)

#: Price bounds goals draw from (the original's ``PRICE_RANGE``).
PRICE_RANGE: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
#: Seed of the goal shuffle (the original's ``random.seed(233)``).
GOAL_SHUFFLE_SEED = 233
#: Keys ``clean_product_keys`` drops from each record.
_DROPPED_KEYS = (
    "product_information", "brand", "brand_url", "list_price", "availability_quantity",
    "availability_status", "total_reviews", "total_answered_questions", "seller_id",
    "seller_name", "fulfilled_by_amazon", "fast_track_message", "aplus_present",
    "small_description_old",
)  # fmt: skip
_REQUIRED_KEYS = ("asin", "name", "full_description", "small_description", "category", "query")


@dataclass
class CatalogFiles:
    """Where one catalog's files are (``human`` and ``reviews`` are optional)."""

    products: Path
    attributes: Path
    human: Path | None = None
    reviews: Path | None = None

    @classmethod
    def in_folder(cls, folder: str | os.PathLike[str], full: bool = False) -> CatalogFiles:
        """Find the official file names in ``folder`` (the 1,000-product files unless ``full``)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise DataError(folder, "is not a folder", "set data_dir or WEBSHOP_DATA to the folder")
        suffix = "" if full else "_1000"
        products = folder / f"items_shuffle{suffix}.json"
        attributes = folder / f"items_ins_v2{suffix}.json"
        for path in (products, attributes):
            if not path.is_file():
                raise DataError(
                    path,
                    "missing",
                    "WebShop needs items_shuffle[_1000].json and items_ins_v2[_1000].json",
                )
        human = folder / "items_human_ins.json"
        reviews = folder / "reviews.json"
        return cls(
            products,
            attributes,
            human if human.is_file() else None,
            reviews if reviews.is_file() else None,
        )


@dataclass
class Catalog:
    """Products, prices and goals of one WebShop catalog."""

    products: list[dict[str, Any]]
    by_asin: dict[str, dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    attribute_to_asins: dict[str, set[str]] = field(default_factory=dict)
    source: str = ""


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"is not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    except OSError as exc:
        raise DataError(path, f"cannot be read ({exc.strerror})") from exc


def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """``"$12.99 - $15.99"`` -> ``([12.99, 15.99], "$12.99 to $15.99")`` (original rules)."""
    if not pricing:
        return [100.0], "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in pricing.split("$")[1:]]
    if not values:
        raise ValueError(f"no price in {pricing!r}")
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _product_record(
    raw: Mapping[str, Any],
    attributes: Mapping[str, Any],
    human: Mapping[str, Any] | None,
    reviews: Mapping[str, Any],
    human_goals: bool,
) -> dict[str, Any]:
    product = {k: v for k, v in raw.items() if k not in _DROPPED_KEYS}
    asin = product["asin"]
    product["Title"] = product["name"]
    product["Description"] = product["full_description"]
    review_entry = reviews.get(asin, {})
    product["Reviews"] = [
        {
            "title": r.get("title", ""),
            "score": r["score"] if "score" in r else r.get("stars", 0),
            "body": r.get("body", r.get("review", "")),
        }
        for r in review_entry.get("reviews", [])
    ]
    product["Rating"] = review_entry.get("average_rating", "N.A.")
    bullets = product["small_description"]
    product["BulletPoints"] = bullets if isinstance(bullets, list) else [bullets]
    product["pricing"], product["Price"] = parse_pricing(product.get("pricing"))

    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    for option_name, contents in (product.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            option_to_image[value] = content.get("image")
        options[option_name.lower()] = values
    product["options"] = options
    product["option_to_image"] = option_to_image

    entry = attributes.get(asin, {})
    product["Attributes"] = list(entry["attributes"]) if "attributes" in entry else ["DUMMY_ATTR"]
    if human_goals:
        if human is not None and asin in human:
            product["instructions"] = human[asin]
    else:
        product["instruction_text"] = entry.get("instruction")
        product["instruction_attributes"] = entry.get("instruction_attributes")
    images = product.get("images") or [""]
    product["MainImage"] = images[0]
    product["query"] = product["query"].lower().strip()
    product.setdefault("product_category", "")
    return product


def load_catalog(
    source: str | os.PathLike[str] | CatalogFiles,
    *,
    full: bool = False,
    human_goals: bool = True,
    num_products: int | None = None,
    seed: int = 0,
) -> Catalog:
    """Load products and goals from official-format files (a folder or :class:`CatalogFiles`).

    Args:
        source: a folder with the official file names, or explicit :class:`CatalogFiles`.
        full: in a folder, use ``items_shuffle.json``/``items_ins_v2.json`` (all products).
        human_goals: goals from the human instructions (else the synthetic ones).
        num_products: keep only the first ``num_products`` records (the original's option).
        seed: seed of the price draws of ranged prices and of the goals' price bounds.

    Raises:
        DataError: a file is missing, not JSON, or a record lacks a field; the message names
            the file and the record.
    """
    files = source if isinstance(source, CatalogFiles) else CatalogFiles.in_folder(source, full)
    raw_products = _read_json(files.products)
    if not isinstance(raw_products, list):
        raise DataError(files.products, "must hold a JSON list of product records")
    attributes = _read_json(files.attributes)
    if not isinstance(attributes, dict):
        raise DataError(files.attributes, "must hold a JSON object {asin: {attributes: [...]}}")
    human = _read_json(files.human) if files.human else None
    if human_goals and human is None:
        raise DataError(
            files.products.parent / "items_human_ins.json",
            "missing",
            "human goals need it; pass human_goals=False for synthetic goals",
        )
    if human is not None and not isinstance(human, dict):
        raise DataError(files.human, "must hold a JSON object {asin: [instructions]}")
    reviews: dict[str, Any] = {}
    if files.reviews:
        review_list = _read_json(files.reviews)
        if not isinstance(review_list, list):
            raise DataError(files.reviews, "must hold a JSON list of {asin, reviews} records")
        reviews = {r["asin"]: r for r in review_list if isinstance(r, dict) and "asin" in r}

    if num_products is not None:
        raw_products = raw_products[:num_products]
    seen: set[str] = set()
    products: list[dict[str, Any]] = []
    for index, raw in enumerate(raw_products):
        where = f"record {index}"
        if not isinstance(raw, dict):
            raise DataError(files.products, f"{where} is not a JSON object")
        missing = [k for k in _REQUIRED_KEYS if k not in raw]
        if missing:
            asin = raw.get("asin", "?")
            raise DataError(files.products, f"{where} (asin {asin}) lacks {', '.join(missing)}")
        asin = raw["asin"]
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        try:
            products.append(_product_record(raw, attributes, human, reviews, human_goals))
        except (KeyError, TypeError, AttributeError, ValueError, InvalidOperation) as exc:
            raise DataError(files.products, f"{where} (asin {asin}) is malformed: {exc!r}") from exc

    attribute_to_asins: dict[str, set[str]] = defaultdict(set)
    for product in products:
        for attribute in product["Attributes"]:
            attribute_to_asins[attribute].add(product["asin"])
    rng = random.Random(seed)
    prices = product_prices(products, rng)
    try:
        goals = (
            human_goal_list(products, prices, rng)
            if human_goals
            else synthetic_goals(products, prices, rng)
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataError(files.human or files.attributes, f"malformed instruction: {exc!r}") from exc
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    logger.info(
        "WebShop catalog %s: %d products, %d goals", files.products, len(products), len(goals)
    )
    return Catalog(
        products=products,
        by_asin={p["asin"]: p for p in products},
        prices=prices,
        goals=goals,
        attribute_to_asins=dict(attribute_to_asins),
        source=str(files.products),
    )


def product_prices(products: list[dict[str, Any]], rng: random.Random) -> dict[str, float]:
    """The price each product sells at: its price, or a uniform draw inside its range."""
    prices = {}
    for product in products:
        pricing = product["pricing"]
        if not pricing:
            prices[product["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[product["asin"]] = pricing[0]
        else:
            prices[product["asin"]] = rng.uniform(*pricing[:2])
    return prices


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """A price bound above ``price`` and its instruction suffix (the original's rule)."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) >= 2:
        _, upper = sorted(rng.sample(candidates, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000, ""


def human_goal_list(
    products: list[dict[str, Any]], prices: dict[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """One goal per human instruction that names at least one attribute."""
    goals = []
    for item in products:
        asin = item["asin"]
        for instruction in item.get("instructions", []):
            attributes = instruction["instruction_attributes"]
            if len(attributes) == 0:
                continue
            upper, price_text = price_bound(prices[asin], rng)
            goals.append(
                {
                    "asin": asin,
                    "category": item["category"],
                    "query": item["query"],
                    "name": item["name"],
                    "product_category": item["product_category"],
                    "instruction_text": instruction["instruction"].strip(".") + price_text,
                    "attributes": list(attributes),
                    "price_upper": upper,
                    "goal_options": list(instruction["instruction_options"]),
                    "weight": 1,
                }
            )
    return goals


def synthetic_goals(
    products: list[dict[str, Any]], prices: dict[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """One goal per product instruction and option combination (the synthetic goal set)."""
    goals = []
    attribute_counts: dict[str, int] = defaultdict(int)
    for product in products:
        if product.get("instruction_text") is None:
            continue
        attributes = product["instruction_attributes"]
        if not attributes:
            continue
        upper, price_text = price_bound(prices[product["asin"]], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                    "attributes": list(attributes),
                    "price_upper": upper,
                    "goal_options": goal_options,
                }
            )
            for attribute in attributes:
                attribute_counts[attribute] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(
            goal["attributes"]
        )
    return goals


#: The original's goal index ranges (``baseline_models/env.py``): test, eval, train.
SPLIT_RANGES: dict[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "valid": (500, 1500),
    "train": (1500, None),
}


def split_indices(split: str, n_goals: int) -> range:
    """Goal indices of ``split``; all goals when there are too few for the original ranges.

    Example:
        >>> split_indices("valid", 2500), split_indices("test", 40)
        (range(500, 1500), range(0, 40))
    """
    if split not in SPLIT_RANGES:
        raise ConfigurationError(f"split must be one of {sorted(SPLIT_RANGES)}, got {split!r}")
    if n_goals <= SPLIT_RANGES["train"][0]:
        # The original also uses every goal for every split on its small product subsets.
        return range(n_goals)
    start, stop = SPLIT_RANGES[split]
    return range(start, n_goals if stop is None else min(stop, n_goals))
