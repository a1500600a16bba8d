"""Memory tasks (``comprl/Memory-*``): the information that wins is only in experience.

256 named dungeons, each a dark MiniHack hall that forks at the start; the staircase down is
at the end of one branch, out of sight, on a side fixed per dungeon and drawn at random
across dungeons. The task text names the dungeon, never the side, and the other branch is a
dead end whose first cell ends the episode, so a policy without memory wins at most half the time,
and a lesson from an earlier visit ("In the Vault of Marrow the staircase down is at the end
of the west branch.") makes every visit winnable. See :mod:`.dungeons` for the generator, the
task pools and the lesson helpers, :mod:`.env` for the env, :mod:`.expert` for the oracle.

* ``comprl/Memory-Fork-v0`` (recall): the sides look alike; only memory of the dungeon helps.
* ``comprl/Memory-Landmark-v0`` (rule): a fountain, altar, sink or grave beside the start
  always marks the stairs' side; a lesson stating the rule transfers to unseen dungeons.

Both take ``split="train"`` (dungeons 0-191, the default), ``split="test"`` (192-255, held
out), ``split="test_large"`` (256-511, held out) or ``split="sealed"`` (512-767, reserved for
issue 44's one final, pre-registered table: see :func:`.dungeons.pool`): disjoint pools,
whatever the seed or ``task_id`` option.

This is its own family, not part of ``minihack``, though the env is a
:class:`~comprl_gym.envs.minihack.env.MiniHackTextEnv`: its expert is an oracle of the hidden
side (MiniHack's explorer would guess), its lessons live in their own part of the experience
store, and its extractor is told to record dungeon names and branches.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/Memory-Fork-v0")
    >>> obs, info = env.reset(seed=0)
    >>> info["task"].startswith("You are in " + dungeon(info["task_id"]).name)
    True
    >>> oracle_lesson(info["task_id"]).startswith("In " + dungeon(info["task_id"]).name)
    True
    >>> env.close()
"""

from comprl_gym.envs.memory import benchmarking
from comprl_gym.envs.memory.dungeons import (
    BRANCH_LENGTH,
    DUNGEON_NAMES,
    SIDES,
    SPLITS,
    VARIANTS,
    Dungeon,
    default_max_steps,
    dungeon,
    inverted_lesson,
    inverted_rule_lesson,
    lesson_stem,
    oracle_lesson,
    other_side,
    placebo_lesson,
    placebo_rule_lesson,
    pool,
    rule_lesson,
)
from comprl_gym.envs.memory.judge import FIXED_LESSONS, fixed_lessons, judge_lesson, named_choice
from comprl_gym.envs.memory.lessons import lesson_text, neighbour, reading_examples
from comprl_gym.envs.memory.memories import STREAM_MEMORIES, coin_side, stream_memory
from comprl_gym.envs.memory.probe import probe_episodes
from comprl_gym.families import EnvEntry, FamilySpec, ValidationProfile, lazy_exports
from comprl_gym.lessons.core import FamilyLessons

_ENTRY_POINT = "comprl_gym.envs.memory:MemoryTextEnv"

SPEC = FamilySpec(
    name="memory",
    label="Memory",
    entries=(
        EnvEntry(
            "comprl/Memory-Fork-v0",
            _ENTRY_POINT,
            "a named dark fork; the stairs' side is fixed per dungeon and never shown "
            "(recall: only a lesson from an earlier visit tells it)",
            {"variant": "fork"},
        ),
        EnvEntry(
            "comprl/Memory-Landmark-v0",
            _ENTRY_POINT,
            "a named dark fork; a landmark beside the start marks the stairs' side "
            "(a rule that transfers to unseen dungeons)",
            {"variant": "landmark"},
        ),
    ),
    expert="comprl_gym.envs.memory.expert:MemoryExpert",
    action_grammar=(
        "You play MiniHack, a small NetHack dungeon, through text. You see the cells around "
        "you described in words. An action is a direction to move (north, east, south, west, "
        "north-east, south-east, south-west, north-west). The hall is dark and splits into two "
        "branches; reach the staircase down ('>') at the end of one of them to win. The other "
        "branch is a dead end: stepping into it loses at once."
    ),
    extractor_focus=(
        "You are the cartographer of named MiniHack dungeons. Each dungeon is a dark hall that "
        "splits into an east and a west branch; the staircase down is at the end of one branch, "
        "the same branch on every visit, and cannot be seen from the start. Record, naming the "
        "dungeon, which branch held the stairs (or which branch was walked in vain), and any "
        "sign next to the start, such as a fountain, altar, sink or grave, that tells the "
        "branches apart."
    ),
    lessons=FamilyLessons(
        judge=judge_lesson,
        named_choice=named_choice,
        stem=lesson_stem,
        fixed=FIXED_LESSONS,
        memories=STREAM_MEMORIES,
        reading_examples=reading_examples,
        probe_episodes=probe_episodes,
    ),
    suite_content="comprl_gym.envs.memory.benchmarking:suite_content",
    suite_engines=("minihack", "nle"),
    validation=ValidationProfile(solution_texts=benchmarking.solution_texts),
    # test: the 64 development dungeons (test_large and sealed are the larger held-out pools)
    held_out_split="test",
    training_split="train",
)

# The env imports nle: load it on first use so listing the family stays light.
__getattr__ = lazy_exports(__name__, {"MemoryTextEnv": "comprl_gym.envs.memory.env"})

__all__ = [
    "BRANCH_LENGTH",
    "DUNGEON_NAMES",
    "SIDES",
    "SPEC",
    "SPLITS",
    "STREAM_MEMORIES",
    "VARIANTS",
    "Dungeon",
    "MemoryTextEnv",
    "coin_side",
    "default_max_steps",
    "dungeon",
    "fixed_lessons",
    "inverted_lesson",
    "inverted_rule_lesson",
    "judge_lesson",
    "lesson_stem",
    "lesson_text",
    "neighbour",
    "oracle_lesson",
    "other_side",
    "placebo_lesson",
    "placebo_rule_lesson",
    "pool",
    "rule_lesson",
    "stream_memory",
]
