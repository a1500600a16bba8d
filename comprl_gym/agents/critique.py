"""The actor's critique of the experiences retrieved for its next episode.

Before an episode that was given experiences, the actor itself (same model, same sampling
settings as its actions) judges them: ``reject`` drops them from its prompt, ``accept`` keeps
them, ``refine`` replaces them by its own rewrite for this episode. The decision's score later
sets the extractor's reward for the generation that wrote them (see
:func:`comprl_gym.trainers.credit.critiqued_outcome`). The critique's tokens are never
trained: the actor trains on its episode only.

Reference: ``roll/pipeline/agentic/env_manager/memory_integration_mixin.py``
(``hook_on_episode_start``, ``actor_critic``, ``_parse_actor_critic_response``): the last
``<answer>`` holds a JSON object ``{"function_name": ..., "parameters": {...}}``; reject scores
-1, accept 1, refine (with non-empty ``refined_knowledge``) 0.5; anything else (no tags, bad
JSON, an unknown name, a refine without text) drops the experiences and scores ``None``.

Example:
    >>> parse_critique('<answer>{"function_name": "reject"}</answer>', ["Go east."])
    Critique(decision='reject', score=-1.0, experiences=[], ids=[], reply='')
    >>> c = parse_critique('<answer>{"function_name": "refine", "parameters": '
    ...     '{"refined_knowledge": "Go east, then down."}}</answer>', ["Go east."])
    >>> c.decision, c.score, c.experiences
    ('refine', 0.5, ['Go east, then down.'])
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from comprl_gym.agents.prompts import build_critique_messages
from comprl_gym.experience.tags import last_tag
from comprl_gym.llm.base import LLMBackend, SamplingParams

#: The critic score of each decision (reference ``_parse_actor_critic_response``).
CRITIC_SCORES = {"reject": -1.0, "accept": 1.0, "refine": 0.5}
#: Every decision a critique can end in (``unparsed``: no readable decision).
DECISIONS = ("accept", "reject", "refine", "unparsed")


@dataclass
class Critique:
    """One critique: the decision, its score, what the actor is shown instead.

    Attributes:
        decision: ``accept``, ``reject``, ``refine`` or ``unparsed``.
        score: the critic score (1, -1, 0.5), ``None`` when unparsed.
        experiences: the experience texts the actor's prompt carries after the critique.
        ids: the ids of the experiences that were critiqued (the injected ones).
        reply: the actor's raw reply (kept for reading; not trained).
    """

    decision: str
    score: float | None
    experiences: list[str]
    ids: list[Any] = field(default_factory=list)
    reply: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_critique(reply: str, experiences: Sequence[str]) -> Critique:
    """Read the actor's decision from the LAST ``<answer>...</answer>`` of ``reply``.

    Example:
        >>> parse_critique("<answer>{bad json}</answer>", ["Go east."]).decision
        'unparsed'
        >>> parse_critique('<answer>{"function_name": "accept"}</answer>', ["Go east."]).experiences
        ['Go east.']
    """
    unparsed = Critique("unparsed", None, [])
    answer = last_tag(reply, "answer")
    if answer is None:
        return unparsed
    try:
        decision = json.loads(answer)
    except json.JSONDecodeError:
        return unparsed
    if not isinstance(decision, dict):
        return unparsed
    name = decision.get("function_name", "")
    parameters = decision.get("parameters", {})
    if not isinstance(parameters, dict) or name not in CRITIC_SCORES:
        return unparsed
    if name == "accept":
        return Critique(name, CRITIC_SCORES[name], list(experiences))
    if name == "reject":
        return Critique(name, CRITIC_SCORES[name], [])
    refined = parameters.get("refined_knowledge", "")
    if not isinstance(refined, str) or not refined.strip():
        return unparsed
    return Critique(name, CRITIC_SCORES[name], [refined.strip()])


#: ``performance(env_family) -> (average score, trajectories)`` of the actor so far.
Performance = Callable[[str], tuple[float, int]]


def no_performance(family: str) -> tuple[float, int]:
    """No history yet (reference: an unknown tag reads as average 0 over 0 trajectories)."""
    return 0.0, 0


class ExperienceCritic:
    """Asks a model to critique each episode's retrieved experiences, in one batched call.

    Args:
        backend: the actor's own backend (a test may give a scripted one).
        max_tokens: the longest critique reply (the actor's action budget is too short for a
            reasoned JSON decision).
        performance: the actor's running average score per env family (reference
            ``record_actor_performance`` / ``get_tag_performance``).
    """

    def __init__(
        self, backend: LLMBackend, max_tokens: int = 256, performance: Performance | None = None
    ):
        self.backend = backend
        self.max_tokens = max_tokens
        self.performance = performance or no_performance

    def critique(
        self,
        requests: Sequence[tuple[str, str, Sequence[dict[str, Any]]]],
        params: SamplingParams,
    ) -> list[Critique]:
        """One critique per ``(family, task_prompt, experiences)`` request, where
        ``experiences`` are ``info["experiences"]`` items (``{"id": ..., "text": ...}``).

        ``params`` are the actor's sampling settings; only ``max_tokens`` and the stop strings
        (an action's stop would end the reply early) are the critic's own.
        """
        if not requests:
            return []
        conversations = []
        for family, task_prompt, experiences in requests:
            avg_score, trajectories = self.performance(family)
            texts = [str(e.get("text", "")) for e in experiences]
            conversations.append(
                build_critique_messages(task_prompt, texts, avg_score, trajectories)
            )
        params = replace(params, max_tokens=self.max_tokens, stop=())
        generations = self.backend.chat(conversations, params)
        out = []
        for (_, _, experiences), generation in zip(requests, generations):
            critique = parse_critique(
                generation.text, [str(e.get("text", "")) for e in experiences]
            )
            critique.ids = [e.get("id") for e in experiences]
            critique.reply = generation.text
            out.append(critique)
        return out
