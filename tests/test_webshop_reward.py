"""The WebShop reward, branch by branch, on hand-worked cases (formula of goal.py, master)."""

from __future__ import annotations

import pytest

from comprl_gym.envs.webshop import reward as R


def product(**overrides):
    base = {
        "name": "Leather Wallet",
        "Title": "Leather Wallet",
        "query": "wallets",
        "product_category": "Clothing › Men › Accessories › Wallets",
        "Attributes": ["genuine leather", "rfid blocking"],
        "BulletPoints": ["slim design", "holds 8 cards"],
        "Description": "A slim wallet with a coin pocket.",
    }
    base.update(overrides)
    return base


def goal(**overrides):
    base = {
        "name": "Leather Wallet",
        "query": "wallets",
        "product_category": "Clothing › Men › Accessories › Wallets",
        "attributes": ["genuine leather"],
        "goal_options": [],
        "price_upper": 40.0,
    }
    base.update(overrides)
    return base


# ---- fuzzy matching and colour normalisation ----------------------------------------------------
def test_token_set_ratio_replicates_thefuzz():
    # one token set inside the other -> 100; processing drops case and punctuation
    assert R.token_set_ratio("long-lasting", "Long Lasting") == 100
    # "long lasting" vs "long lasing": 2*11/(12+11) = 95.65 -> 96
    assert R.token_set_ratio("long lasting", "long lasing") == 96
    # "machine wash" vs "hand wash": best of 4/16, 8/13, 14/21 -> 66.7 -> 67
    assert R.token_set_ratio("machine wash", "hand wash") == 67
    # tuples are compared through str(): ('color', 'black') -> "color black"
    assert R.token_set_ratio("black", ("color", "black")) == 100
    assert R.token_set_ratio(None, "x") == 0


def test_normalize_color_first_colour_in_list_order():
    assert R.normalize_color("navy blue") == "blue"  # 'blue' precedes 'navy' in the list
    assert R.normalize_color("light grey heather") == "grey"
    assert R.normalize_color("x-large") == "x-large"
    assert R.normalize_color(("color", "black")) == "black"  # tuple: membership test
    assert R.normalize_color(("color", "jet black")) == ("color", "jet black")


# ---- attributes ------------------------------------------------------------------------------------
def test_attribute_fuzzy_match_above_85():
    r_att, n = R.get_attribute_reward(product(), goal(attributes=["genuine lether"]))
    assert (r_att, n) == (1.0, 1)


def test_attribute_substring_of_title_bullets_description():
    for attrs in (["leather wallet"], ["slim design"], ["coin pocket"]):
        assert R.get_attribute_reward(product(Attributes=[]), goal(attributes=attrs)) == (1.0, 1)


def test_attribute_no_match_and_partial():
    g = goal(attributes=["genuine leather", "water resistant", "hand wash"])
    r_att, n = R.get_attribute_reward(product(Attributes=["machine wash"]), g)
    # 'genuine leather' only through... nothing: not in title ('leather wallet'), not fuzzy
    assert n == 0 and r_att == 0.0
    r_att, n = R.get_attribute_reward(product(), g)
    assert n == 1 and r_att == pytest.approx(1 / 3)


def test_goal_without_attributes_does_not_divide_by_zero():
    total, parts = R.get_reward(product(), goal(attributes=[]), price=10.0, options={})
    assert parts["r_att"] is None
    assert total == 1.0  # (0 + 0 + 1) / (0 + 0 + 1) * r_type 1.0


# ---- options ---------------------------------------------------------------------------------------
def test_options_colour_normalised_then_fuzzy():
    # purchased 'navy blue' -> 'blue'; goal 'royal blue' -> 'blue' (royal comes later in the list)
    assert R.get_option_reward(["navy blue"], ["royal blue"]) == (1.0, 1)
    assert R.get_option_reward(["small", "black"], ["large"]) == (0.0, 0)
    # the original's quirk, kept: "x-large" -> tokens {x, large} contain {large}
    assert R.get_option_reward(["x-large"], ["large"]) == (1.0, 1)
    assert R.get_option_reward(["32w x 30l"], ["32w x 30l", "black"]) == (0.5, 1)
    assert R.get_option_reward(["red"], []) == (None, 0)


def test_dict_goal_options_compare_name_value_pairs():
    goal_options = R.goal_option_items({"color": "black", "size": "x-large"})
    assert goal_options == [("color", "black"), ("size", "x-large")]
    # ('color','black') -> 'black' matches; ('size','x-large') -> "size x large" vs "x large": 100
    assert R.get_option_reward(["black", "x-large"], goal_options) == (1.0, 2)
    assert R.get_option_reward(["white", "small"], goal_options) == (0.0, 0)


# ---- type reward -----------------------------------------------------------------------------------
def test_type_reward_all_nouns_shared_is_one():
    parts = R.get_type_reward(product(), goal())
    assert parts == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0}


def test_type_reward_no_shared_noun_is_zero():
    parts = R.get_type_reward(product(name="Stainless Steel Water Bottle"), goal())
    assert parts["title_score"] == 0.0 and parts["r_type"] == 0.0


def test_type_reward_below_one_tenth_is_point_one():
    # 11 goal nouns, one shared: 1/11 < 0.1
    many = "table, chair, lamp, desk, sofa, rug, shelf, bed, mirror, clock, vase"
    parts = R.get_type_reward(product(name="lamp"), goal(name=many))
    assert parts["title_score"] == pytest.approx(1 / 11)
    assert parts["r_type"] == 0.1


def test_type_reward_half_without_query_or_category_match():
    five = "table, chair, lamp, desk, sofa"  # 1/5 = 0.2 is not > 0.2
    other = {"query": "lamps", "product_category": "Home › Lighting"}
    parts = R.get_type_reward(product(name="lamp", **other), goal(name=five))
    assert parts["title_score"] == pytest.approx(0.2)
    assert (parts["query_match"], parts["category_match"], parts["r_type"]) == (False, False, 0.5)
    # the same overlap with the same query is a full type match
    assert R.get_type_reward(product(name="lamp"), goal(name=five))["r_type"] == 1.0
    # or with two shared category levels
    same_path = {"query": "lamps", "product_category": "Clothing › Men › Other"}
    assert R.get_type_reward(product(name="lamp", **same_path), goal(name=five))["r_type"] == 1.0


def test_type_reward_goal_name_without_nouns_scores_point_two():
    parts = R.get_type_reward(
        product(query="other"), goal(name="very quickly", product_category="X")
    )
    assert parts["title_score"] == 0.2 and parts["r_type"] == 0.5


# ---- the whole formula -----------------------------------------------------------------------------
def test_full_formula_term_by_term():
    g = goal(
        attributes=["genuine leather", "rfid blocking", "water resistant"],
        goal_options=["black", "large"],
        price_upper=30.0,
    )
    # attrs 2/3, options: black matches (jet black -> black), large vs small no; price 35 > 30
    total, parts = R.get_reward(
        product(), g, price=35.0, options={"color": "jet black", "size": "small"}
    )
    assert total == pytest.approx((2 + 1 + 0) / (3 + 2 + 1))
    assert parts["r_att"] == pytest.approx(2 / 3) and parts["r_option"] == 0.5
    assert parts["r_price"] is False and parts["w_price"] == pytest.approx(1 / 6)
    # r_type scales the total: a product of another type with the same facts scores 0.5x
    half = product(name="lamp", query="lamps", product_category="Home › Lighting")
    g_half = dict(g, name="table, chair, lamp, desk, sofa")
    total_half, parts_half = R.get_reward(half, g_half, price=20.0, options={"c": "black"})
    assert parts_half["r_type"] == 0.5
    assert total_half == pytest.approx(0.5 * (2 + 1 + 1) / 6)


def test_exact_product_and_options_score_one():
    g = goal(attributes=["rfid blocking"], goal_options=["brown"], price_upper=30.0)
    total, _ = R.get_reward(product(), g, price=29.99, options={"color": "brown"})
    assert total == 1.0
