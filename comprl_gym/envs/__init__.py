"""Environment families: one folder each, exporting a :class:`~comprl_gym.families.FamilySpec`.

Adding a family is one new folder plus one line in :data:`comprl_gym.families.FAMILY_MODULES`:
registration, prompts, the expert agent and the leaderboard read the spec (see
:mod:`comprl_gym.families`). The list lives there, not here, so that the families layer does
not import the envs package that builds on it.
"""
