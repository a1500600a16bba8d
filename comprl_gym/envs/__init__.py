"""Environment families: one folder each, exporting a :class:`~comprl_gym.families.FamilySpec`.

Adding a family is one new folder plus one line here: registration, prompts, the expert agent
and the leaderboard read the spec (see :mod:`comprl_gym.families`).
"""

#: The built-in family packages, in the order ids, prompts and leaderboard columns list them.
FAMILY_MODULES: tuple[str, ...] = (
    "comprl_gym.envs.minihack",
    "comprl_gym.envs.alfworld",
    "comprl_gym.envs.webshop",
    "comprl_gym.envs.swebench",
    "comprl_gym.envs.memory",
)
