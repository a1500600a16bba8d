"""Write the memory family's extractor-probe episodes (``comprl_gym/envs/memory/probe_episodes.json``).

Each of the probe's dungeons (:data:`comprl_gym.envs.memory.probe.PROBE_DUNGEONS`: 8 with the
stairs east and 8 west, from the held-out ``test_large`` pool) is played twice on
``comprl/Memory-Fork-v0`` by a scripted agent that walks one side, east then west: the walk
down the stairs' side wins, the other loses at its first step. So the set holds 16 won and 16
lost episodes, each side walked 16 times. Times are zeroed and episode ids fixed, so running
it again writes the same bytes (``--check`` says whether the committed file is that).

    python scripts/make_probe_episodes.py            # (re)write the file
    python scripts/make_probe_episodes.py --check    # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import comprl_gym  # noqa: F401  (registers the comprl/* ids)
from comprl_gym.envs.memory.probe import (
    PROBE_DUNGEONS,
    PROBE_ENV_ID,
    PROBE_ENV_KWARGS,
    PROBE_FILE,
    PROBE_SPLIT,
)
from comprl_gym.lessons.probe import walked_both_ways
from comprl_gym.utils import atomic_write_json

#: Fields of a trajectory that measure the machine, not the episode.
TIMINGS = ("wall_time_s", "gen_time_s", "env_time_s")


def make_probe_episodes() -> dict[str, Any]:
    """The probe file's content: the env, its arguments and every episode's record."""
    episodes = []
    for episode in walked_both_ways(PROBE_SPLIT, PROBE_DUNGEONS):
        side = episode.meta["walked"]
        episode.episode_id = f"probe-{episode.task_id}-{side}"
        episode.meta = {"walked": side}
        record = episode.to_dict()
        for key in TIMINGS:
            record[key] = 0.0
        for turn in record["turns"]:
            turn["gen_time_s"] = turn["env_time_s"] = 0.0
        episodes.append(record)
    return {
        "about": (
            "Extractor probe episodes of the memory family: each dungeon walked east once and "
            "west once by a scripted agent (one won, one lost). Written by "
            "scripts/make_probe_episodes.py; read by comprl_gym.lessons.probe."
        ),
        "env_id": PROBE_ENV_ID,
        "env_kwargs": PROBE_ENV_KWARGS,
        "episodes": episodes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file")
    args = parser.parse_args(argv)
    content = make_probe_episodes()
    if args.check:
        committed = json.loads(PROBE_FILE.read_text(encoding="utf-8"))
        same = committed == json.loads(json.dumps(content))
        print(f"{PROBE_FILE}: {'unchanged' if same else 'DIFFERS from a fresh generation'}")
        return 0 if same else 1
    atomic_write_json(PROBE_FILE, content)
    won = sum(e["won"] for e in content["episodes"])
    print(f"wrote {PROBE_FILE}: {len(content['episodes'])} episodes, {won} won")
    return 0


if __name__ == "__main__":
    sys.exit(main())
