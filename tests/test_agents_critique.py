"""The actor's critique of retrieved experiences (reference
``memory_integration_mixin.py::actor_critic`` / ``_parse_actor_critic_response``).

The parser cases are worked by hand from the reference's rules. The episode tests play real
MiniHack episodes through the real experience wrapper with the tiny random actor model; the
critique's answer comes from the scripted backend (the tiny model never writes a decision),
and what the actor was fed is read back from the token ids it was prompted with.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from conftest import ScriptedBackend

import comprl_gym  # noqa: F401
from comprl_gym.agents.critique import ExperienceCritic, parse_critique
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig, shared_backend
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.experience import ExperienceManager, default_embedder
from comprl_gym.rollouts import RolloutConfig, RolloutWorker
from comprl_gym.wrappers import ExperienceAugmentedEnv

ROOM = "comprl/MiniHack-Room-5x5-v0"
LESSON = "<title>Stairs</title><content>Walk straight toward the staircase down.</content>"
REFINED = "In this room the stairs are east: step east until you stand on them."


def answer(name: str, **parameters: str) -> str:
    params = ", ".join(f'"{k}": "{v}"' for k, v in parameters.items())
    return f'<answer>{{"function_name": "{name}", "parameters": {{{params}}}}}</answer>'


@pytest.mark.parametrize(
    ("reply", "decision", "score", "shown"),
    [
        (answer("accept"), "accept", 1.0, ["A", "B"]),
        (answer("reject"), "reject", -1.0, []),
        (answer("refine", refined_knowledge="C"), "refine", 0.5, ["C"]),
        # the LAST <answer> decides, whatever came before it
        (f"<think>{answer('reject')}?</think>{answer('accept')}", "accept", 1.0, ["A", "B"]),
        (f"{answer('accept')} on second thought {answer('reject')}", "reject", -1.0, []),
        # a bad last answer is unparsed even after a good one (only the last is read)
        (f"{answer('accept')}<answer>{{'function_name': 'accept'}}</answer>", "unparsed", None, []),
        # refine without text, or with blanks only
        (answer("refine"), "unparsed", None, []),
        (answer("refine", refined_knowledge="   "), "unparsed", None, []),
        # no tags, an unknown operation, parameters that are no object, a JSON list
        ('{"function_name": "accept"}', "unparsed", None, []),
        (answer("upvote"), "unparsed", None, []),
        ('<answer>{"function_name": "accept", "parameters": []}</answer>', "unparsed", None, []),
        ('<answer>[{"function_name": "accept"}]</answer>', "unparsed", None, []),
        # parameters may be left out
        ('<answer>\n{"function_name": "reject"}\n</answer>', "reject", -1.0, []),
    ],
)
def test_parse_critique_by_hand(reply, decision, score, shown):
    critique = parse_critique(reply, ["A", "B"])
    assert (critique.decision, critique.score, critique.experiences) == (decision, score, shown)


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


def play_with_critique(tmp_path, embedder, replies, critic=True, seeds=(0,)):
    """Real episodes of MiniHack Room with one stored lesson; the tiny actor plays, the
    critique's answers are ``replies``. Returns the episodes, the decoded step-0 prompts, the
    critic's backend and the manager."""
    manager = ExperienceManager(tmp_path / "s", embedder=embedder)
    [eid] = manager.add([LESSON], env_family="minihack")
    env = ExperienceAugmentedEnv(
        gym.make(ROOM, max_steps=2),
        manager,
        inject_top_k=1,
        search_budget=0,
        experiences_in_observation=False,
    )
    backend = shared_backend("hf:tiny")
    scripted = ScriptedBackend(list(replies))
    agent = LLMAgent(
        backend,
        LLMAgentConfig(
            temperature=1.0, max_tokens=4, seed=0, prompt=PromptConfig(conversation="multi_turn")
        ),
        critic=ExperienceCritic(scripted, max_tokens=64) if critic else None,
    )
    worker = RolloutWorker([env], agent=agent, config=RolloutConfig(max_turns=4))
    episodes = worker.run(list(seeds))
    env.close()
    prompts = [backend.tokenizer.decode(e.turns[0].prompt_token_ids) for e in episodes]
    return episodes, prompts, scripted, manager, eid


def test_reject_takes_the_experience_out_of_the_actors_prompt(tmp_path, embedder):
    [episode], [prompt], scripted, manager, eid = play_with_critique(
        tmp_path, embedder, [answer("reject")]
    )
    # the critique saw the task as the actor will, the lesson and the actor's history
    [[system, user]] = [[m["content"] for m in chat] for chat in scripted.prompts]
    assert '"refined_knowledge"' in system and "<answer>" in system
    assert episode.task in user and "1. " + manager.get_one(eid).text in user
    assert "Average score on similar tasks: 0.00" in user and "Trajectories so far: 0" in user
    assert "Lessons learned" not in user  # the task prompt is shown without the lesson
    assert "Walk straight toward" not in prompt and "Lessons learned" not in prompt
    assert episode.critique["decision"] == "reject" and episode.critique["score"] == -1.0
    assert episode.critique["ids"] == [eid] and episode.experience_ids == [eid]
    # the use is still reported (the extractor rewrites its outcome from the critique)
    assert manager.get_one(eid).uses == 1
    manager.close()


def test_accept_keeps_it_and_refine_replaces_it(tmp_path, embedder):
    episodes, prompts, scripted, manager, _ = play_with_critique(
        tmp_path,
        embedder,
        [answer("accept"), answer("refine", refined_knowledge=REFINED)],
        seeds=(0, 1),
    )
    assert [e.critique["decision"] for e in episodes] == ["accept", "refine"]
    assert "Lessons learned" in prompts[0] and "Walk straight toward the staircase" in prompts[0]
    assert REFINED in prompts[1] and "Walk straight toward" not in prompts[1]
    assert len(scripted.prompts) == 2  # one critique per episode, none at later steps
    manager.close()


def test_an_unreadable_critique_drops_the_experience(tmp_path, embedder):
    [episode], [prompt], _, manager, _ = play_with_critique(
        tmp_path, embedder, ["I think it is fine."]
    )
    assert episode.critique["decision"] == "unparsed" and episode.critique["score"] is None
    assert "Walk straight toward" not in prompt
    manager.close()


def test_without_a_critic_the_experience_reaches_the_prompt_unjudged(tmp_path, embedder):
    [episode], [prompt], scripted, manager, _ = play_with_critique(
        tmp_path, embedder, [], critic=False
    )
    assert scripted.prompts == [] and episode.critique is None
    assert "Walk straight toward the staircase" in prompt
    manager.close()
