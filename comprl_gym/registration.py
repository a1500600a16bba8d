"""Every ``comprl/*`` gymnasium id, gathered from the env families' specs.

``import comprl_gym`` registers them; gymnasium 1.2 no longer loads plugin entry points, so the
import is required before ``gym.make("comprl/...")``. Entry points are strings, so an id whose
family needs an optional package costs nothing until it is made. The ids themselves live in
each family's :class:`~comprl_gym.families.FamilySpec`; :data:`ENV_TABLE` is their union.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> "comprl/ALFWorld-v0" in gym.registry
    True
    >>> comprl_gym.registration.ENV_TABLE["comprl/WebShop-v0"].family
    'webshop'
"""

from __future__ import annotations

from collections.abc import Iterable

import gymnasium as gym

from comprl_gym.core import ConfigurationError
from comprl_gym.families import EnvEntry, FamilySpec, add_family_module, family_specs

#: Every id of every listed family, in the families' order. Updated in place by
#: :func:`add_family`, so a reference taken earlier stays current.
ENV_TABLE: dict[str, EnvEntry] = {}

#: The gymnasium client of a served env (``comprl-gym serve``). Not a family id: it plays
#: whichever id the server serves, so it is registered beside :data:`ENV_TABLE`, not in it.
REMOTE_ENV_ID = "comprl/Remote-v0"


def _collect() -> None:
    for spec in family_specs().values():
        for entry in spec.entries:
            owner = ENV_TABLE.setdefault(entry.env_id, entry)
            if owner.family != entry.family:
                raise ConfigurationError(
                    f"{entry.env_id} is claimed by the families {owner.family!r} and "
                    f"{entry.family!r}"
                )


def register_envs() -> None:
    """Register every id of :data:`ENV_TABLE` with gymnasium (idempotent)."""
    _collect()
    for entry in ENV_TABLE.values():
        if entry.env_id in gym.registry:
            continue
        gym.register(
            id=entry.env_id,
            entry_point=entry.entry_point,
            kwargs=dict(entry.kwargs),
            disable_env_checker=False,
        )
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_ENV_ID, entry_point="comprl_gym.serving.client:RemoteEnv")


def add_family(module_name: str) -> FamilySpec:
    """Add a family from another package (a module exporting ``SPEC``) and register its ids.

    This is the one line that lists a family kept outside ``comprl_gym/envs/``; built-in
    families are listed in :data:`comprl_gym.families.FAMILY_MODULES`.
    """
    spec = add_family_module(module_name)
    register_envs()
    return spec


def families_of(env_ids: Iterable[str]) -> list[str]:
    """The families of ``env_ids``, each once, in the order the ids first name them; ids of no
    known family (a served env, say) are left out.

    Example:
        >>> families_of(["comprl/Memory-Fork-v0", "comprl/WebShop-v0", "comprl/Memory-Landmark-v0"])
        ['memory', 'webshop']
    """
    return list(dict.fromkeys(ENV_TABLE[i].family for i in env_ids if i in ENV_TABLE))


def markdown_table() -> str:
    """The README's environment table."""
    lines = ["| id | family | what it is |", "| --- | --- | --- |"]
    for entry in ENV_TABLE.values():
        lines.append(f"| `{entry.env_id}` | {entry.family} | {entry.description} |")
    return "\n".join(lines)


_collect()
