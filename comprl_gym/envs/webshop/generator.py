"""A generated WebShop catalog in exactly the official file schema (the offline default).

The official product files live on a drive many cannot reach, so the default catalog is made
here: products over the original's five categories (beauty, grocery, fashion, garden
furniture, electronics) with brands, titles, bullet points, descriptions, option groups,
attributes, prices and reviews, plus human-style instructions ("i am looking for ..."), each
written from one real product so buying that product with the named options scores 1.0.

Files written (the official names, so :func:`~comprl_gym.envs.webshop.catalog.load_catalog`
reads them like the real ones): ``items_shuffle_1000.json``, ``items_ins_v2_1000.json``,
``items_human_ins.json``, ``reviews.json``. Generation is deterministic (``random.Random``)
and takes well under a second; files are cached under
``cache_dir("webshop", f"catalog-v{CATALOG_VERSION}")``.

Example:
    >>> products, attributes, human, reviews = generate_catalog(num_products=50, seed=1)
    >>> len(products), products[0]["category"] in ("beauty", "grocery", "fashion", "garden",
    ...                                            "electronics")
    (50, True)
"""

from __future__ import annotations

import functools
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comprl_gym.utils import atomic_write_text, cache_dir

logger = logging.getLogger(__name__)

#: Bump when the generator's output changes: the cache folder is keyed by it.
CATALOG_VERSION = 1
DEFAULT_NUM_PRODUCTS = 1000
#: Products with a second human instruction: 1,000 products give 2,500 goals, enough for the
#: original split ranges (test 0-500, valid 500-1500, train 1500-).
INSTRUCTIONS_PER_PRODUCT = (2, 3)


@dataclass(frozen=True)
class ProductType:
    """One kind of product: how it is searched, filed, named, described and varied."""

    category: str
    query: str
    path: str
    nouns: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    details: tuple[str, ...]


#: The catalog's word lists and product types (package data). Editing it changes the catalog:
#: bump :data:`CATALOG_VERSION` with it.
TABLES_FILE = Path(__file__).with_name("catalog_tables.json")


def load_tables(path: Path = TABLES_FILE) -> dict[str, Any]:
    """The tables file, with each product type as a :class:`ProductType` (an option group
    given as a string names one of the file's ``option_pools``).

    Example:
        >>> tables = load_tables()
        >>> tables["product_types"][0].query, tables["product_types"][0].options[0][0]
        ('shampoo', 'scent')
    """
    tables = json.loads(path.read_text(encoding="utf-8"))
    pools = tables["option_pools"]
    tables["product_types"] = tuple(
        ProductType(
            category=kind["category"],
            query=kind["query"],
            path=kind["path"],
            nouns=tuple(kind["nouns"]),
            attributes=tuple(kind["attributes"]),
            options=tuple(
                (name, tuple(pools[values] if isinstance(values, str) else values))
                for name, values in kind["options"].items()
            ),
            price=tuple(kind["price"]),
            details=tuple(kind["details"]),
        )
        for kind in tables["product_types"]
    )
    return tables


_TABLES = load_tables()
PRODUCT_TYPES: tuple[ProductType, ...] = _TABLES["product_types"]
_BRAND_START = tuple(_TABLES["brand_starts"])
_BRAND_END = tuple(_TABLES["brand_ends"])
_TITLE_EXTRAS = tuple(_TABLES["title_extras"])
_REVIEW_TITLES = tuple(_TABLES["review_titles"])
_REVIEW_BODIES = tuple(_TABLES["review_bodies"])
_WHO = tuple(_TABLES["reviewers"])
_INSTRUCTIONS = tuple(_TABLES["instruction_templates"])

_ASIN_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


def _asin(rng: random.Random, used: set[str]) -> str:
    """A fresh 10-character ASIN-like id: ``B0`` and eight base-34 digits."""
    while True:
        number = rng.getrandbits(41) % (34**8)
        digits = []
        for _ in range(8):
            number, digit = divmod(number, 34)
            digits.append(_ASIN_ALPHABET[digit])
        asin = "B0" + "".join(digits)
        if asin not in used:
            used.add(asin)
            return asin


@functools.lru_cache(maxsize=8192)
def _title_case(text: str) -> str:
    return " ".join(
        w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in text.split()
    )


def _product(
    kind: ProductType, rng: random.Random, used: set[str], index: int
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], float]:
    """One product record (official schema), its attribute entry, reviews and rating."""
    asin = _asin(rng, used)
    brand = rng.choice(_BRAND_START) + rng.choice(_BRAND_END)
    attributes = rng.sample(kind.attributes, rng.randint(2, min(5, len(kind.attributes))))
    noun = rng.choice(kind.nouns)
    lead, rest = attributes[0], attributes[1:]
    extra = rng.choice(_TITLE_EXTRAS)
    title = f"{brand} {extra} {_title_case(lead)} {noun}"
    if rest:
        title += f", {_title_case(rest[0])}"
    detail = rng.choice(kind.details)
    title += f" - {_title_case(detail)}"

    groups = {}
    n_groups = rng.randint(1, len(kind.options)) if kind.options else 0
    for name, pool in kind.options[:n_groups]:
        groups[name] = rng.sample(pool, rng.randint(2, min(6, len(pool))))
    customization = {
        name.capitalize(): [
            {"value": v, "image": f"https://images.example.invalid/{asin}/{name}-{i}.jpg"}
            for i, v in enumerate(values)
        ]
        for name, values in groups.items()
    }

    low, high = kind.price
    price = (
        round(rng.uniform(low, high), 2) - 0.01 if high > 10 else round(rng.uniform(low, high), 2)
    )
    price = round(max(price, 0.99), 2)
    if "size" in groups and rng.random() < 0.2:
        pricing = f"${price:.2f} - ${price * rng.uniform(1.2, 1.8):.2f}"
    else:
        pricing = f"${price:.2f}"

    bullets = [
        f"{_title_case(a)}: {brand} {noun.lower()} is {a}, {rng.choice(kind.details)}."
        for a in attributes
    ]
    bullets.append(f"What you get: {noun.lower()} by {brand}, backed by a 30 day return policy.")
    rng.shuffle(bullets)
    description = (
        f"{brand} {noun.lower()} is made for people who want {', '.join(attributes[:-1]) or lead}"
        f"{' and ' + attributes[-1] if len(attributes) > 1 else ''}. {detail.capitalize()}, "
        f"{rng.choice(kind.details)}. "
        + (
            f"Available in {len(next(iter(groups.values())))} {next(iter(groups))} options. "
            if groups
            else ""
        )
        + f"A great choice of {kind.query} for everyday use."
    )
    reviews = []
    for _ in range(rng.randint(0, 4)):
        option_value = rng.choice(next(iter(groups.values()))) if groups else "standard"
        body = rng.choice(_REVIEW_BODIES).format(
            attr=rng.choice(attributes),
            detail=rng.choice(kind.details).capitalize(),
            who=rng.choice(_WHO),
            query=kind.query,
            option=option_value,
        )
        reviews.append(
            {
                "title": rng.choice(_REVIEW_TITLES),
                "stars": rng.choice((5, 5, 4, 4, 3, 2, 1)),
                "review": body,
            }
        )
    rating = round(sum(r["stars"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    record = {
        "name": title,
        "product_information": {"ASIN": asin, "Manufacturer": brand},
        "brand": f"Brand: {brand}",
        "brand_url": "",
        "full_description": description,
        "pricing": pricing,
        "list_price": "",
        "availability_quantity": rng.randint(1, 40),
        "availability_status": "In Stock.",
        "images": [f"https://images.example.invalid/{asin}/main.jpg"],
        "product_category": kind.path,
        "average_rating": rating if reviews else "",
        "small_description": bullets,
        "total_reviews": str(len(reviews)) if reviews else "",
        "total_answered_questions": "",
        "customization_options": customization or "",
        "seller_id": "",
        "seller_name": f"{brand} Official",
        "fulfilled_by_amazon": "",
        "fast_track_message": "",
        "aplus_present": "",
        "asin": asin,
        "category": kind.category,
        "query": kind.query,
        "page": 1 + index // 20,
        "small_description_old": "About this item " + " ".join(bullets),
    }
    return record, {"attributes": attributes, "groups": groups}, reviews, rating


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _option_phrase(name: str, value: str, rng: random.Random) -> str:
    if name == "color":
        return rng.choice((f"in {value}", f"in {value} color", f"the {value} one"))
    if name == "size":
        return rng.choice((f"in size {value}", f"in {value}", f"the {value} size"))
    return rng.choice((f"with {name} {value}", f"in {value} {name}", f"the {value} {name}"))


def _instruction(
    record: dict[str, Any], meta: dict[str, Any], rng: random.Random
) -> dict[str, Any]:
    attributes = meta["attributes"]
    chosen = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
    options = []
    phrases = []
    for name, values in meta["groups"].items():
        if rng.random() < 0.85:
            value = rng.choice(values)
            options.append((name, value))
            phrases.append(_option_phrase(name, value, rng))
    opts = ""
    if phrases:
        opts = rng.choice((", ", " ", ". pick ", ", and ")) + _join(phrases)
    text = rng.choice(_INSTRUCTIONS).format(
        attrs=_join(chosen),
        query=record["query"],
        opts=opts,
        be="are" if record["query"].endswith("s") else "is",
    )
    return {
        "asin": record["asin"],
        "instruction": text,
        "attributes": list(attributes),
        "options": [f"{n}: {v}" for n, v in options] or [""],
        "instruction_attributes": chosen,
        "instruction_options": [v for _, v in options],
        "assignment_id": f"GEN{rng.getrandbits(48):012X}",
        "worker_id": "GENERATED",
    }


def generate_catalog(
    num_products: int = DEFAULT_NUM_PRODUCTS,
    seed: int = CATALOG_VERSION,
    with_instructions: bool = True,
) -> tuple[
    list[dict[str, Any]], dict[str, Any], dict[str, list[dict[str, Any]]], list[dict[str, Any]]
]:
    """Products, attribute file, human instruction file and reviews, in the official schemas.

    Product types take turns so every category is equally represented; the product list is
    then shuffled (the official ``items_shuffle`` is shuffled too).
    """
    rng = random.Random(seed)
    used: set[str] = set()
    products, attributes, human, reviews = [], {}, {}, []
    for index in range(num_products):
        kind = PRODUCT_TYPES[index % len(PRODUCT_TYPES)]
        record, meta, product_reviews, rating = _product(kind, rng, used, index)
        asin = record["asin"]
        products.append(record)
        chosen = rng.sample(meta["attributes"], min(3, len(meta["attributes"])))
        attributes[asin] = {
            "attributes": meta["attributes"],
            "instruction": f"Find me {', '.join(chosen)} {kind.query}",
            "instruction_attributes": chosen,
        }
        if product_reviews:
            reviews.append({"asin": asin, "reviews": product_reviews, "average_rating": rating})
        if with_instructions:
            count = rng.choice(INSTRUCTIONS_PER_PRODUCT)
            human[asin] = [_instruction(record, meta, rng) for _ in range(count)]
    rng.shuffle(products)
    return products, attributes, human, reviews


def generated_data_dir(num_products: int = DEFAULT_NUM_PRODUCTS) -> Path:
    """The cached folder holding the generated catalog's files (written on first use)."""
    folder = cache_dir("webshop", f"catalog-v{CATALOG_VERSION}", f"n{num_products}")
    marker = folder / "COMPLETE"
    if marker.is_file():
        return folder
    logger.info("generating the WebShop catalog (%d products) in %s", num_products, folder)
    products, attributes, human, reviews = generate_catalog(num_products)
    atomic_write_text(folder / "items_shuffle_1000.json", json.dumps(products))
    atomic_write_text(folder / "items_ins_v2_1000.json", json.dumps(attributes))
    atomic_write_text(folder / "items_human_ins.json", json.dumps(human))
    atomic_write_text(folder / "reviews.json", json.dumps(reviews))
    atomic_write_text(marker, json.dumps({"version": CATALOG_VERSION, "products": num_products}))
    return folder
