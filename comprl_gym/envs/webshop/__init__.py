"""WebShop: a faithful text shopping environment (pages, actions and reward of the original).

Example:
    >>> from comprl_gym.envs.webshop import WebShopEnv
    >>> env = WebShopEnv(split="test")
    >>> obs, info = env.reset(seed=3)
    >>> info["env_family"], info["admissible_actions"]
    ('webshop', ['search[<query>]'])
"""

from comprl_gym.envs.webshop.env import WebShopConfig, WebShopEnv

__all__ = ["WebShopConfig", "WebShopEnv"]
