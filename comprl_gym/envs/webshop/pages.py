"""WebShop pages as the original text env sees them: visible text nodes and clickables.

The original renders Jinja templates to HTML, parses them with BeautifulSoup and joins the
visible text nodes: ``text`` mode with `` [SEP] ``, ``text_rich`` mode one node a line with
``[button] ... [button_]`` around buttons, option labels and product links (``[clicked button]``
for options already chosen and products already visited, and a leading
``You have clicked <option>.`` line per chosen option). Clickables are the buttons (lower-cased
text), the product links (lower-cased ASIN) and the option values, in that order.

This module builds the same node sequence directly from the page data, applying what the
template/parser pipeline does to a value: ``str()`` of it, no node for an empty string, a
whitespace-only string collapsed to ``"\\n"`` (dropped) or ``" "``.

Example:
    >>> page = search_page("i need a red shirt, and price lower than 40.00 dollars")
    >>> page.text()
    'WebShop [SEP] Instruction: [SEP] i need a red shirt, and price lower than 40.00 dollars [SEP] Search'
    >>> page.text_rich().splitlines()
    ['WebShop', 'Instruction: ', 'i need a red shirt, and price lower than 40.00 dollars', '[button] Search [button_]']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

NodeKind = Literal["text", "button", "label", "link"]
PageName = Literal["search", "results", "item", "sub", "done"]

END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
#: Sub-page buttons of the item page (``Attributes`` only with ``show_attrs``).
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
#: Results shown per page (the original's ``PRODUCT_WINDOW``).
PRODUCT_WINDOW = 10


@dataclass(frozen=True)
class Node:
    """One visible text node; ``value``/``group`` identify what a label or link selects."""

    text: str
    kind: NodeKind = "text"
    value: str = ""
    group: str = ""


@dataclass(frozen=True)
class Clickable:
    """What a click on a clickable name does: a button, a product link or an option."""

    kind: Literal["button", "link", "option"]
    target: str
    group: str = ""


@dataclass
class Page:
    """A rendered page: its nodes and what its URL would carry for ``text_rich`` mode."""

    name: PageName
    nodes: list[Node]
    has_search_bar: bool = False
    selected_options_json: str = ""
    visited_asins: frozenset[str] = field(default_factory=frozenset)

    def text(self) -> str:
        """``text`` mode: visible nodes, stripped, joined by `` [SEP] ``."""
        return " [SEP] ".join(n.text.strip() for n in self.nodes if n.text != "\n")

    def text_rich(self) -> str:
        """``text_rich`` mode: one node a line, clickables marked."""
        observation = ""
        for node in self.nodes:
            t = node.text
            if t == "\n":
                continue
            if node.kind == "button":
                line = f"[button] {t} [button_]"
            elif node.kind == "label":
                if f'"{t}"' in self.selected_options_json:
                    line = f"  [clicked button] {t} [clicked button_]"
                    observation = f"You have clicked {t}.\n" + observation
                else:
                    line = f"  [button] {t} [button_]"
            elif node.kind == "link":
                if t in self.visited_asins:
                    line = f"\n[clicked button] {t} [clicked button_]"
                else:
                    line = f"\n[button] {t} [button_]"
            else:
                line = t
            observation += line + "\n"
        return observation

    def clickables(self) -> dict[str, Clickable]:
        """Clickable name -> what it does: buttons, then product links, then option values."""
        table: dict[str, Clickable] = {}
        for node in self.nodes:
            if node.kind == "button":
                table[node.value.lower()] = Clickable("button", node.value)
        for node in self.nodes:
            if node.kind == "link":
                table[node.value.lower()] = Clickable("link", node.value)
        for node in self.nodes:
            if node.kind == "label":
                table[node.value] = Clickable("option", node.value, node.group)
        return table


def _text(value: Any) -> list[Node]:
    """The node a template's ``{{ value }}`` alone in an element yields (maybe none)."""
    return _node(str(value), "text")


def _node(text: str, kind: NodeKind, value: str = "", group: str = "") -> list[Node]:
    if text == "":
        return []
    if not text.strip():
        # html parsers keep a whitespace-only string as one newline or one space.
        text = "\n" if "\n" in text else " "
    return [Node(text, kind, value or text, group)]


def _button(label: str) -> list[Node]:
    return [Node(label, "button", label)]


def _header(instruction: str) -> list[Node]:
    return [Node("Instruction:"), *_text(instruction), *_button(BACK_TO_SEARCH)]


def search_page(instruction: str) -> Page:
    """The start page: the instruction and a search box."""
    nodes = [Node("WebShop"), Node("Instruction: "), *_text(instruction), *_button("Search")]
    return Page("search", nodes, has_search_bar=True)


def results_page(
    instruction: str,
    products: list[dict[str, Any]],
    page: int,
    total: int,
    visited_asins: frozenset[str] = frozenset(),
) -> Page:
    """One page of search results (``products`` are that page's products)."""
    nodes = _header(instruction)
    nodes += _text(f"Page {page} (Total results: {total})")
    if page > 1:
        nodes += _button(PREV_PAGE)
    nodes += _button(NEXT_PAGE)
    for product in products:
        nodes += _node(str(product["asin"]), "link", str(product["asin"]))
        nodes += _text(product["Title"])
        nodes += _text(product["Price"])
    return Page("results", nodes, visited_asins=visited_asins)


def item_page(
    instruction: str, product: dict[str, Any], options: dict[str, str], show_attrs: bool = False
) -> Page:
    """A product page: option groups, title, price, rating, sub-page buttons, ``Buy Now``."""
    nodes = [*_header(instruction), *_button(PREV_PAGE)]
    for name, values in product["options"].items():
        nodes += _text(name)
        for value in values:
            nodes += _node(str(value), "label", str(value), name)
    nodes += _text(product["Title"])
    nodes += _text(f"Price: {product['Price']}")
    nodes += _text(f"Rating: {product['Rating']}")
    for sub in SUB_PAGES:
        if sub != "Attributes" or show_attrs:
            nodes += _button(sub)
    nodes += _button(END_BUTTON)
    # The item page URL carries json.dumps(options); text_rich tests '"value"' against it.
    return Page("item", nodes, selected_options_json=json.dumps(options))


def sub_page(instruction: str, product: dict[str, Any], sub: str) -> Page:
    """The ``Description``, ``Features``, ``Reviews`` or ``Attributes`` page of a product."""
    nodes = [*_header(instruction), *_button(PREV_PAGE)]
    if sub == "Description":
        nodes += _text(product["Description"])
    elif sub == "Features":
        for bullet in product["BulletPoints"]:
            nodes += _text(f" {bullet}")
    elif sub == "Reviews":
        for review in product["Reviews"]:
            nodes += _text(f'"{review["title"]}"')
            nodes += _text(review["score"])
            nodes += _text(review["body"])
    elif sub == "Attributes":
        for attribute in product["Attributes"]:
            nodes += _text(f" {attribute}")
        nodes += _text(product["category"])
        nodes += _text(product["query"])
        nodes += _text(product["product_category"])
    else:
        raise ValueError(f"unknown sub page {sub!r}")
    return Page("sub", nodes)


def _tojson(value: Any) -> str:
    """Jinja's ``tojson`` filter: sorted keys, HTML-sensitive characters escaped."""
    text = json.dumps(value, sort_keys=True)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(char, escape)
    return text


def done_page(reward: float, asin: str, options: dict[str, str]) -> Page:
    """The page after ``Buy Now`` as the text env renders it (its hidden panel included)."""
    nodes = [
        Node("Thank you for shopping with us!"),
        Node("Your code: "),
        Node("None"),
        Node(" (Paste it in your MTurk interface.)"),
        Node("Purchased"),
        Node("asin"),
        *_text(asin),
        Node("options"),
        *_text(_tojson(options)),
    ]
    for label in ("attrs", "category", "query", "product category"):
        nodes += [Node(label), Node("None")]
    nodes += [Node("Target")]
    nodes += [
        Node(label)
        for label in ("asin", "options", "attrs", "price upper", "instuction text", "category",
                      "product category", "query")
    ]  # fmt: skip
    nodes += [Node("Goal "), Node("None"), Node("Reward"), Node("Your score (min 0.0, max 1.0)")]
    nodes += _text(reward)
    nodes += [Node("Reward Details "), Node("None")]
    return Page("done", nodes)
