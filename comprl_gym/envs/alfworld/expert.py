"""The ALFWorld expert: an exact policy with privileged access to the game state.

Two modes, both reading the unwrapped :class:`~comprl_gym.envs.alfworld.env.ALFWorldEnv`:

* ``"oracle"`` (default): a goal-directed policy over the engine's PDDL facts and the task's
  parameters (``traj_data["pddl_params"]``): fetch an object of the target type (opening
  what is closed), clean/heat/cool it at the sink basin/microwave/fridge when the task asks,
  then put it in a receptacle of the target type (twice for pick-two), or carry it to a desk
  lamp and switch the lamp on. Every command it returns is one of the engine's admissible
  commands, chosen by action name and arguments, so its wording is the engine's own. It
  decides from the current state at every step, so it recovers if someone else acted. A step
  costs microseconds, where the planner can need tens of seconds on pick-two games.
* ``"planner"``: the walkthrough of Fast Downward (what alfworld's ``AlfredExpert`` gives with
  ``expert_type="planner"``), replanned whenever the game left the plan.

alfworld's handcoded expert is not used: it explores instead of reading the state and loses
pick-two games within ALFWorld's step limits.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.envs.alfworld.expert import ALFWorldExpert
    >>> env = gym.make("comprl/ALFWorld-v0", split="valid_unseen")
    >>> obs, info = env.reset(seed=0)                                    # doctest: +SKIP
    >>> expert = ALFWorldExpert(env); expert.reset(info["task"], info)  # doctest: +SKIP
    >>> while not info["won"]:                                          # doctest: +SKIP
    ...     obs, reward, terminated, truncated, info = env.step(expert.act(obs, info))
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from comprl_gym.core import ConfigurationError

_APPLIANCE = {
    "pick_clean_then_place_in_recep": ("sinkbasintype", "cleanobject", "isclean"),
    "pick_heat_then_place_in_recep": ("microwavetype", "heatobject", "ishot"),
    "pick_cool_then_place_in_recep": ("fridgetype", "coolobject", "iscool"),
}


class _Facts:
    """The engine's current facts, indexed the ways the policy asks."""

    def __init__(self, facts: Any):
        self.by_name: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        for fact in facts:
            self.by_name[fact.name].append(tuple(v.name for v in fact.arguments))
        self.unary = {
            (name, args[0])
            for name, rows in self.by_name.items()
            for args in rows
            if len(args) == 1
        }
        self.type_of = {a[0]: a[1] for a in self.by_name["objecttype"]}
        self.type_of.update({a[0]: a[1] for a in self.by_name["receptacletype"]})
        self.recep_at = {a[0]: a[1] for a in self.by_name["receptacleatlocation"]}
        self.inside = {a[0]: a[1] for a in self.by_name["inreceptacle"]}
        self.held = [a[1] for a in self.by_name["holds"]]
        self.agent_at = next((a[1] for a in self.by_name["atlocation"]), None)

    def has(self, name: str, arg: str) -> bool:
        return (name, arg) in self.unary

    def of_type(self, type_name: str) -> list[str]:
        return sorted(o for o, t in self.type_of.items() if t == type_name)


class ALFWorldExpert:
    """Plays ALFWorld games to a win; takes the env (wrapped or not) as its only argument.

    Args:
        env: a ``comprl/ALFWorld-*`` env; the expert reads ``env.unwrapped``.
        mode: ``"oracle"`` (default, exact and fast) or ``"planner"`` (Fast Downward).
    """

    def __init__(self, env: Any, mode: str = "oracle"):
        if mode not in ("oracle", "planner"):
            raise ConfigurationError(f"mode must be 'oracle' or 'planner', got {mode!r}")
        self.env = env
        self.mode = mode
        self._plan: list[str] = []
        self._expected_step = -1

    def reset(self, task: str, info: dict[str, Any]) -> None:
        self._plan = []
        self._expected_step = -1

    def act(self, observation: str, info: dict[str, Any]) -> str:
        base = self.env.unwrapped
        if self.mode == "planner":
            return self._planner_action(base, info)
        return self._oracle_action(base)

    # ---- planner ------------------------------------------------------------------------------
    def _planner_action(self, base: Any, info: dict[str, Any]) -> str:
        step = info.get("step", 0)
        if (
            not self._plan
            or step != self._expected_step
            or self._plan[0] not in base.admissible_actions()
        ):
            self._plan = base.planner_walkthrough()
        self._expected_step = step + 1
        return self._plan.pop(0) if self._plan else "look"

    # ---- oracle -------------------------------------------------------------------------------
    def _oracle_action(self, base: Any) -> str:
        state = base.engine_state
        facts = _Facts(base.engine.unwrapped._pddl_state.facts)
        actions = list(zip(state["_valid_actions"], state["_valid_commands"]))
        params = base.traj_data["pddl_params"]
        task_type = base.traj_data["task_type"]
        obj_type = params["object_target"].lower() + "type"
        recep_type = params["parent_target"].lower() + "type"

        def command(name: str, **args: str) -> str | None:
            for action, text in actions:
                if action.name != name:
                    continue
                mapping = {ph.name: var.name for ph, var in action.mapping.items()}
                if all(mapping.get(k) == v for k, v in args.items()):
                    return text
            return None

        def reach(receptacle: str) -> str | None:
            """A command towards using ``receptacle``: go there, or open it; None if ready."""
            if facts.agent_at != facts.recep_at.get(receptacle):
                return command("gotolocation", r=receptacle)
            if facts.has("openable", receptacle) and not facts.has("opened", receptacle):
                return command("openobject", r=receptacle)
            return None

        def fetch(candidates: list[str]) -> str | None:
            # prefer an object where the agent stands, then the first by name
            reachable = [o for o in candidates if o in facts.inside]
            reachable.sort(key=lambda o: (facts.recep_at.get(facts.inside[o]) != facts.agent_at, o))
            for obj in reachable:
                receptacle = facts.inside[obj]
                return reach(receptacle) or command("pickupobject", o=obj, r=receptacle)
            return None

        held = facts.held[0] if facts.held else None
        if task_type == "look_at_obj_in_light":
            toggle_type = params["toggle_target"].lower() + "type"
            if held is None or facts.type_of.get(held) != obj_type:
                if held is not None:
                    return self._drop(facts, command, held)
                return fetch(facts.of_type(obj_type)) or "look"
            lamps = [o for o in facts.of_type(toggle_type) if o in facts.inside]
            lamps.sort(key=lambda o: (facts.recep_at.get(facts.inside[o]) != facts.agent_at, o))
            for lamp in lamps:
                receptacle = facts.inside[lamp]
                if facts.agent_at != facts.recep_at.get(receptacle):
                    return command("gotolocation", r=receptacle) or "look"
                return command("toggleobject", o=lamp) or "look"
            return "look"

        targets = facts.of_type(recep_type)
        placed = [o for o in facts.of_type(obj_type) if facts.inside.get(o) in targets]
        appliance = _APPLIANCE.get(task_type)
        if appliance is not None:  # only a changed object counts as placed
            placed = [o for o in placed if facts.has(appliance[2], o)]
        if task_type == "pick_two_obj_and_place" and placed:
            # both objects must share one receptacle: the one already holding the most
            counts = defaultdict(int)
            for obj in placed:
                counts[facts.inside[obj]] += 1
            chosen = max(sorted(counts), key=lambda r: counts[r])
            targets = [chosen]
            placed = [o for o in placed if facts.inside[o] == chosen]
        if held is not None and facts.type_of.get(held) == obj_type:
            if appliance is not None and not facts.has(appliance[2], held):
                kind, verb, _ = appliance
                for receptacle in facts.of_type(kind):
                    if facts.agent_at != facts.recep_at.get(receptacle):
                        return command("gotolocation", r=receptacle) or "look"
                    return command(verb, o=held, r=receptacle) or "look"
            targets.sort(key=lambda r: (facts.recep_at.get(r) != facts.agent_at, r))
            for receptacle in targets:
                step = reach(receptacle) or command("putobject", o=held, r=receptacle)
                if step:
                    return step
            return "look"
        if held is not None:
            return self._drop(facts, command, held)
        candidates = [o for o in facts.of_type(obj_type) if o not in placed]
        return fetch(candidates) or "look"

    @staticmethod
    def _drop(facts: _Facts, command: Any, held: str) -> str:
        """Put down an object the task does not need, here if possible."""
        for receptacle in sorted(
            facts.recep_at, key=lambda r: (facts.recep_at[r] != facts.agent_at, r)
        ):
            text = command("putobject", o=held, r=receptacle)
            if text:
                return text
            if facts.agent_at != facts.recep_at[receptacle]:
                return command("gotolocation", r=receptacle) or "look"
        return "look"
