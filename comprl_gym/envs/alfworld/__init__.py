"""ALFWorld on alfworld's own TextWorld engine: official json_2.1.1 games or generated ones.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/ALFWorld-v0")  # generated games unless $ALFWORLD_DATA is set
"""

from comprl_gym.envs.alfworld.data import SPLITS, TASK_TYPES
from comprl_gym.families import EnvEntry, FamilySpec, lazy_exports

_ENTRY_POINT = "comprl_gym.envs.alfworld:ALFWorldEnv"

#: ALFWorld task types: id suffix -> ALFRED task_type.
ID_TASK_TYPES: dict[str, str] = dict(
    zip(
        (
            "PickAndPlace",
            "LookAtObjInLight",
            "PickCleanThenPlace",
            "PickHeatThenPlace",
            "PickCoolThenPlace",
            "PickTwoObjAndPlace",
        ),
        TASK_TYPES,
        strict=True,
    )
)

SPEC = FamilySpec(
    name="alfworld",
    label="ALFWorld",
    entries=(
        EnvEntry(
            "comprl/ALFWorld-v0",
            _ENTRY_POINT,
            "ALFWorld household tasks, all six types (official json_2.1.1 or generated games)",
            {},
        ),
        *(
            EnvEntry(
                f"comprl/ALFWorld-{suffix}-v0",
                _ENTRY_POINT,
                f"ALFWorld, {task_type.replace('_', ' ')} tasks only",
                {"task_types": (task_type,)},
            )
            for suffix, task_type in ID_TASK_TYPES.items()
        ),
    ),
    expert="comprl_gym.envs.alfworld.expert:ALFWorldExpert",
    action_grammar=(
        "You are a household robot in a text world (ALFWorld). An action is one command such as "
        "'go to countertop 1', 'open fridge 1', 'take apple 1 from countertop 1', "
        "'put apple 1 in/on fridge 1', 'heat egg 1 with microwave 1', 'cool ... with fridge 1', "
        "'clean ... with sinkbasin 1', 'use desklamp 1', 'examine ...', 'look', 'inventory'. "
        "Use the exact object names you see (with their numbers)."
    ),
    extractor_focus=(
        "You are a household-task archivist for ALFWorld (text kitchens, bedrooms, bathrooms). "
        "Extract reusable procedures: where objects are usually found, the order of "
        "take / open / clean / heat / cool / use / put, checking receptacles systematically, "
        "and avoiding repeated failed actions."
    ),
    suite_content="comprl_gym.envs.alfworld.benchmarking:suite_content",
    suite_engines=("alfworld", "textworld"),
    missing_data="comprl_gym.envs.alfworld.benchmarking:missing_data",
    # ALFRED's unseen scenes: the out-of-distribution pool the paper reports
    held_out_split="valid_unseen",
    training_split="train",
)

# The env loads textworld and Fast Downward: import it on first use.
__getattr__ = lazy_exports(__name__, {"ALFWorldEnv": "comprl_gym.envs.alfworld.env"})

__all__ = ["ID_TASK_TYPES", "SPEC", "SPLITS", "TASK_TYPES", "ALFWorldEnv"]
