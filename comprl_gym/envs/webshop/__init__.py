"""WebShop: a faithful text shopping environment (pages, actions and reward of the original).

Example:
    >>> from comprl_gym.envs.webshop import WebShopEnv
    >>> env = WebShopEnv(split="test")
    >>> obs, info = env.reset(seed=3)
    >>> info["env_family"], info["admissible_actions"]
    ('webshop', ['search[<query>]'])
"""

from comprl_gym.envs.webshop import benchmarking
from comprl_gym.families import EnvEntry, FamilySpec, ValidationProfile, lazy_exports

SPEC = FamilySpec(
    name="webshop",
    label="WebShop",
    entries=(
        EnvEntry(
            "comprl/WebShop-v0",
            "comprl_gym.envs.webshop:WebShopEnv",
            "WebShop text shopping: search, pick a product and options, buy",
            {},
        ),
    ),
    expert="comprl_gym.envs.webshop.expert:WebShopExpert",
    action_grammar=(
        "You shop on a text website (WebShop). An action is search[keywords] on the search page, "
        "or click[X] where X is a button, a product id or an option shown on the page, e.g. "
        "click[b07xyz1234], click[large], click[buy now]. Clicking 'buy now' ends the episode: "
        "buy the product that best matches the instruction, with the right options and price."
    ),
    extractor_focus=(
        "You are a shopping-strategy archivist for WebShop (search, results pages, product "
        "options, buy). Extract reusable tactics: writing search queries from the instruction's "
        "attributes, judging results by title and price limit, selecting every required option "
        "before buying, and when to go back to search."
    ),
    suite_content="comprl_gym.envs.webshop.benchmarking:suite_content",
    suite_engines=("bm25s", "spacy"),
    validation=ValidationProfile(solution_texts=benchmarking.solution_texts),
    # the original's goal ranges: test 0..499, valid 500..1499, train the rest
    held_out_split="test",
    training_split="train",
)

# The env loads the catalog, bm25s and spaCy: import it on first use.
__getattr__ = lazy_exports(
    __name__,
    {"WebShopConfig": "comprl_gym.envs.webshop.env", "WebShopEnv": "comprl_gym.envs.webshop.env"},
)

__all__ = ["SPEC", "WebShopConfig", "WebShopEnv"]
