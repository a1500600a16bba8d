"""The extractor as the reference: what it reads, which trajectories, what it writes, and how
real episodes' outcomes become its samples' advantages (extract, refine and merge samples).

Real MiniHack episodes (expert and random agents) through the real experience wrapper report
the outcomes; the tiny random Qwen2 is the extractor model where any text will do. Where a
test needs a well-formed answer (a merge, a gated write), a scripted backend answers: no model
that runs here writes one reliably (see benchmarks/results/extractor_output.json).
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from conftest import ScriptedBackend

import comprl_gym  # noqa: F401
from comprl_gym.agents import RandomAgent, make_agent
from comprl_gym.agents.critique import parse_critique
from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory import lesson_stem
from comprl_gym.experience import ExperienceManager, default_embedder
from comprl_gym.lessons.formats import operations_messages
from comprl_gym.lessons.prompts import ROLE_AGENT, ROLE_ENVIRONMENT, ROLE_TOOL
from comprl_gym.llm.transformers_backend import TransformersBackend
from comprl_gym.rollouts import RolloutWorker
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.losses import CISPO
from comprl_gym.trainers.policy import PolicyOptimizer
from comprl_gym.wrappers import ExperienceAugmentedEnv

ROOM = "comprl/MiniHack-Room-5x5-v0"


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


@pytest.fixture(scope="module")
def tiny():
    optimizer = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=1e-3), loss=CISPO())
    backend = TransformersBackend(
        model_object=optimizer.model, tokenizer_object=optimizer.tokenizer
    )
    return optimizer, backend


class AskingExpert:
    """The expert, except that its first move is a search_and_ask question."""

    def __init__(self, env):
        self.expert = make_agent("expert", env)

    def reset(self, task, info):
        self.expert.reset(task, info)
        self.asked = False

    def act(self, observation, info):
        if not self.asked:
            self.asked = True
            return "search_and_ask[where is the staircase?]"
        return self.expert.act(observation, info)


def play(manager, agent_factory, seeds, refiner=None, max_steps=8, budget=0, env_id=ROOM):
    env = ExperienceAugmentedEnv(
        gym.make(env_id, max_steps=max_steps),
        manager,
        inject_top_k=2,
        search_budget=budget,
        refiner=refiner,
        report_outcomes=True,
    )
    worker = RolloutWorker([env], agent_factory=agent_factory)
    episodes = worker.run(seeds, meta=[{"with_experience": True, "group": 0} for _ in seeds])
    env.close()
    return episodes


def expert(env, seed):
    return make_agent("expert", env)


def random_agent(env, seed):
    return RandomAgent(seed=seed)


def test_operations_prompt_reads_each_action_then_the_observation_it_produced(tmp_path, embedder):
    manager = ExperienceManager(tmp_path / "s", embedder=embedder)
    [eid] = manager.add(
        ["<title>Stairs</title><content>walk toward '>'</content>"], env_family="minihack"
    )
    [episode] = play(manager, lambda env, seed: AskingExpert(env), [3], budget=1)
    assert episode.won and episode.experience_ids == [eid]
    settings = ExperienceSettings()
    extractor = ExperienceExtractor(ScriptedBackend([]), None, manager, settings)
    shown = extractor.shown_experiences(episode)
    system, user = (m["content"] for m in operations_messages(episode, shown))
    assert "add(new_memory" in system and "return()" in system and "drop" not in system
    assert user.startswith("Outcome:\nSUCCESS\n\nInteraction:\n")
    assert "**Memory Entry 1**\n<title>Stairs</title><content>walk toward '>'</content>" in user
    interaction = user.split("Interaction:\n")[1].split("\n\nPrevious Lessons:")[0]
    turns = episode.turns
    # Environment: the first observation (it states the task); then Agent action, Environment
    # (or Tool Environment after the search) answer ... ; the last action's answer is left out.
    assert episode.task in turns[0].observation
    expected = f"{ROLE_ENVIRONMENT}: {turns[0].observation}"
    for n, turn in enumerate(turns):
        expected += f"\n{ROLE_AGENT}: {turn.action}"
        if n + 1 < len(turns):
            role = ROLE_TOOL if n == 0 else ROLE_ENVIRONMENT
            expected += f"\n{role}: {turn.next_observation}"
    assert interaction == expected
    assert turns[0].action.startswith("search_and_ask[") and "Knowledge base answer" in interaction
    manager.close()


def test_distil_reads_every_with_experience_trajectory_and_never_the_other_half(tmp_path, embedder):
    manager = ExperienceManager(tmp_path / "s", embedder=embedder)
    episodes = play(manager, expert, [1, 2, 3])
    for e, with_exp in zip(episodes, (True, False, True)):
        e.meta["with_experience"] = with_exp
    add = '<answer>[{"function_name": "add", "parameters": {"new_memory": "<title>Stairs</title><content>Walk toward the staircase down.</content>"}}]</answer>'
    decline = '<think>nothing new</think><answer>[{"function_name": "return"}]</answer>'
    backend = ScriptedBackend([add, decline])
    extractor = ExperienceExtractor(backend, None, manager, ExperienceSettings())
    written = extractor.distill(episodes, actor_step=1)
    assert len(backend.prompts) == 2 and len(written) == 1  # two read, one declined
    assert extractor.counts.declined == 1 and [g.kind for g in extractor.pending] == ["extract"]
    # group mode: one per task group, the win first
    backend.answers = [decline]
    group = ExperienceExtractor(backend, None, manager, ExperienceSettings(distill="group"))
    assert group.distill(episodes, actor_step=1) == [] and len(backend.prompts) == 3
    # without_experience: the other half only, the one episode played without a lesson
    backend.answers = [decline]
    other = ExperienceExtractor(
        backend, None, manager, ExperienceSettings(distill="without_experience")
    )
    for n, e in enumerate(episodes):
        e.task += f" (episode {n})"
    assert other.distill(episodes, actor_step=1) == [] and len(backend.prompts) == 4
    assert "(episode 1)" in backend.prompts[-1][-1]["content"]
    manager.close()


def test_min_quality_gate_keeps_noise_out_of_the_store(tmp_path, embedder):
    manager = ExperienceManager(tmp_path / "s", embedder=embedder)
    [episode] = play(manager, expert, [4])
    answer = (
        '<answer>[{"function_name": "add", "parameters": {"new_memory": "<title>Stairs</title>'
        '<content>Walk toward the staircase down one step at a time.</content>"}}, '
        '{"function_name": "add", "parameters": {"new_memory": "<title>Applaught</title>'
        '<content>Applaught xqz blorf signature trick.</content>"}}]</answer>'
    )
    gated = ExperienceExtractor(
        ScriptedBackend([answer]), None, manager, ExperienceSettings(min_quality=1.0)
    )
    [eid] = gated.write(episode, actor_step=1)
    assert manager.get_one(eid).title == "Stairs" and gated.counts.rejected_lessons == 1
    ungated = ExperienceExtractor(ScriptedBackend([answer]), None, manager, ExperienceSettings())
    assert len(ungated.write(episode, actor_step=1)) == 2
    manager.close()


def test_r_of_real_episodes_reaches_the_extractor_advantage(tmp_path, embedder, tiny):
    """Tiny model writes (plain format); expert wins and random losses are reported by the
    wrapper; the batch's advantages are r - mean(r), worked by hand."""
    optimizer, backend = tiny
    settings = ExperienceSettings(extractor_format="plain", min_uses=1, extractor_batch_size=4)
    manager = ExperienceManager(tmp_path / "s", config=settings, embedder=embedder)
    extractor = ExperienceExtractor(
        backend, optimizer, manager, settings, max_new_tokens=16, output_format="plain"
    )
    [source] = play(manager, expert, [0])

    def write_one():
        for _ in range(10):  # a random model's first line is sometimes under 8 characters
            ids = extractor.write(source, actor_step=1)
            if ids:
                return ids
        raise AssertionError("the tiny extractor never wrote a lesson in 10 tries")

    [first] = write_one()
    wins = play(manager, expert, [10, 11])  # both shown `first` (the only entry), both won
    assert all(e.won and e.experience_ids == [first] for e in wins)
    [second] = write_one()
    losses = play(manager, random_agent, [20], max_steps=1)  # shown both, lost in one step
    assert not losses[0].won and sorted(losses[0].experience_ids) == sorted([first, second])
    # by hand: first used 3 times, 2 wins -> r = 1/3; second used once, lost -> r = -1
    # batch mean -1/3: A = 2/3 and -2/3
    ready = extractor.ready_samples(actor_step=2)
    assert [s.meta["ids"] for _, s in ready] == [[first], [second]]
    assert [s.meta["reward"] for _, s in ready] == pytest.approx([1 / 3, -1.0])
    assert [s.advantage for _, s in ready] == pytest.approx([2 / 3, -2 / 3])
    stats = extractor.train_step(actor_step=2)
    assert stats["samples"] == 2 and stats["samples_extract"] == 2 and extractor.updates == 1
    # the batch's log keeps both rules' r (no without-experience episode: paired r = outcome)
    log = extractor.batch_log
    assert [(r["ids"], r["stepped"]) for r in log] == [([first], True), ([second], True)]
    assert [r["r_batch"] for r in log] == pytest.approx([1 / 3, -1.0])
    assert [r["advantage"] for r in log] == pytest.approx([2 / 3, -2 / 3])
    # trained once: the entries' training counts are the store's; cooldown 1 step
    assert [e.training_count for e in manager.get([first, second])] == [1, 1]
    assert extractor.ready_samples(actor_step=2) == []
    manager.close()


def test_the_stem_format_opens_the_reply_with_the_familys_stem_and_trains_only_the_choice(
    tmp_path, embedder, tiny
):
    """On real memory episodes the reply starts with the family's stem, which is part of the
    sample's prompt: the completion CISPO trains is one token, the first of the side it chose,
    and the lesson is the oracle's sentence with that side. Even the tiny random model, whose
    free text is noise, writes only the two sentences. A family without a stem (MiniHack) gets
    a clear error naming it, and a backend that takes no raw prompt another."""
    optimizer, backend = tiny
    settings = ExperienceSettings(extractor_format="stem")
    manager = ExperienceManager(tmp_path / "s", config=settings, embedder=embedder)
    extractor = ExperienceExtractor(backend, optimizer, manager, settings, temperature=1.0)
    episodes = play(manager, expert, [3, 4, 5, 6], max_steps=5, env_id="comprl/Memory-Fork-v0")
    tokenizer = optimizer.tokenizer
    for episode in episodes:
        [written] = extractor.write(episode, actor_step=1)
        sample = extractor.pending[-1]
        stem = lesson_stem(episode.task_id)
        assert tokenizer.decode(sample.prompt_token_ids).endswith(stem.opening)
        [token] = sample.completion_token_ids
        lesson = manager.get_one(written).content
        side = tokenizer.decode([token]).strip()
        assert side in ("east", "west")
        assert lesson == f"{stem.opening} {side} branch." and sample.written_ids == [written]
    assert extractor.counts.written == 4 and extractor.counts.malformed == 0

    [room_episode] = play(manager, expert, [4])
    scripted = ExperienceExtractor(
        ScriptedBackend(["Walk to the stairs."]), None, manager, settings
    )
    with pytest.raises(ConfigurationError, match="family 'minihack' has none"):
        scripted.write(room_episode, actor_step=1)  # refused, not written as a plain sentence
    with pytest.raises(ConfigurationError, match="raw prompts"):
        scripted.write(episodes[0], actor_step=1)
    manager.close()


def test_a_refinement_is_a_sample_with_the_asking_trajectorys_outcome(tmp_path, embedder, tiny):
    optimizer, backend = tiny
    settings = ExperienceSettings(min_uses=1, extractor_batch_size=4)
    manager = ExperienceManager(tmp_path / "s", config=settings, embedder=embedder)
    manager.add(["<title>Stairs</title><content>walk toward '>'</content>"], env_family="minihack")
    extractor = ExperienceExtractor(backend, optimizer, manager, settings, max_new_tokens=12)
    asked = play(manager, lambda env, seed: AskingExpert(env), [5], extractor.refine, budget=1)
    lost = play(
        manager,
        lambda env, seed: type("AskThenWait", (AskingExpert,), {})(env),
        [6],
        extractor.refine,
        max_steps=1,
        budget=1,
    )
    assert asked[0].won and not lost[0].won
    refinements = [g for g in extractor.pending if g.kind == "refine"]
    assert len(refinements) == 2 and all(g.reward is None for g in refinements)
    # an answer nobody asked for in these episodes (e.g. given during evaluation)
    extractor.refine("unrelated?", manager.experiences(), {})
    assert extractor.credit_refinements(asked + lost, actor_step=3) == 2
    assert [g.reward for g in refinements] == [1.0, -1.0]
    ready = extractor.ready_samples(actor_step=3)
    assert [s.meta["kind"] for _, s in ready] == ["refine", "refine"]
    assert [s.advantage for _, s in ready] == [1.0, -1.0]  # mean 0
    extractor.train_step(actor_step=3)
    assert not [g for g in extractor.pending if g.reward is not None]  # trained once, gone
    extractor.credit_refinements([], actor_step=4)  # the unmatched one ages out
    assert extractor.pending == []
    manager.close()


def test_a_merge_output_is_a_sample_scored_by_the_trajectories_that_later_use_it(
    tmp_path, embedder
):
    settings = ExperienceSettings(min_uses=1, merge_interval_steps=1)
    manager = ExperienceManager(tmp_path / "s", config=settings, embedder=embedder)
    a, b = manager.add(
        [
            "<title>Stairs</title><content>Walk toward the staircase down.</content>",
            "<title>Stairs again</title><content>The staircase down is the goal.</content>",
        ],
        env_family="minihack",
    )
    manager.report_outcome([a, b], won=False)  # inherited by the merged entry: not its reward
    merged = (
        "<think>same lesson</think><answer><<<KNOWLEDGE_ITEM>>>\n<title>Stairs</title>\n"
        "<content>Walk toward the staircase down, one step at a time.</content>\n"
        "<<<END_ITEM>>></answer>"
    )
    extractor = ExperienceExtractor(ScriptedBackend([merged]), None, manager, settings)
    report = extractor.maybe_merge(actor_step=5)
    [(new_id, sources)] = report.merged.items()
    assert sorted(sources) == [a, b] and manager.get_one(new_id).uses == 2  # inherited
    [sample] = extractor.pending
    assert (sample.kind, sample.written_ids, sample.baseline) == ("merge", [new_id], (2, 0))
    assert extractor.ready_samples(actor_step=6) == []  # no use since the merge yet
    wins = play(manager, expert, [30])
    assert wins[0].won and wins[0].experience_ids == [new_id]
    [(_, ready)] = extractor.ready_samples(actor_step=6)
    assert ready.meta["reward"] == 1.0  # the later win only, not the inherited losses
    manager.close()


def test_the_actors_critique_sets_the_extractors_reward_for_that_use(tmp_path, embedder):
    """Reference ``add_memory_metadata_to_rollout``: a critiqued use counts the critic score
    when below 1 (reject -1), else episode score + 1 (accept); unparsed keeps +1/-1.
    Real episodes report the plain outcomes; each gets the critique record the actor's
    critic makes of its reply (tests/test_agents_critique.py plays that part)."""
    settings = ExperienceSettings(min_uses=1, extractor_batch_size=4)
    manager = ExperienceManager(tmp_path / "s", config=settings, embedder=embedder)
    [source] = play(manager, expert, [0])
    add = (
        '<answer>[{"function_name": "add", "parameters": {"new_memory": '
        '"<title>Stairs</title><content>Walk toward the staircase down.</content>"}}]</answer>'
    )
    extractor = ExperienceExtractor(ScriptedBackend([add]), None, manager, settings)
    [eid] = extractor.write(source, actor_step=1)

    def critiqued(episodes, reply):
        for episode in episodes:
            critique = parse_critique(reply, ["the lesson"])
            critique.ids = [eid]
            episode.critique = critique.to_dict()
        assert extractor.credit_critiques(episodes) == (0 if "?" in reply else len(episodes))
        [(_, sample)] = extractor.ready_samples(actor_step=2)
        return sample.meta["reward"]

    reject = '<answer>{"function_name": "reject"}</answer>'
    accept = '<answer>{"function_name": "accept"}</answer>'
    won = play(manager, expert, [10])
    assert won[0].won and won[0].score == 1.0 and won[0].experience_ids == [eid]
    assert critiqued(won, reject) == -1.0  # plain: +1
    won = play(manager, expert, [11])
    assert critiqued(won, accept) == pytest.approx((-1 + (1 + 1)) / 2)  # accept: score 1 + 1
    lost = play(manager, random_agent, [20], max_steps=1)
    assert not lost[0].won and lost[0].score == 0.0
    assert critiqued(lost, accept) == pytest.approx((-1 + 2 + (0 + 1)) / 3)  # 0 + 1
    lost = play(manager, random_agent, [21], max_steps=1)
    assert critiqued(lost, "<answer>accept?</answer>") == pytest.approx((-1 + 2 + 1 - 1) / 4)
    assert manager.get_one(eid).uses == 4 and manager.get_one(eid).wins == 2
    # unparsed: the extractor is not shown the dropped lesson (reference clears the uids)
    assert extractor.shown_experiences(lost[0]) == []
    assert [e.id for e in extractor.shown_experiences(won[0])] == [eid]
    manager.close()


def test_a_long_interaction_keeps_the_goal_and_the_end_and_says_what_it_left_out():
    from types import SimpleNamespace

    from comprl_gym.lessons.prompts import format_interaction

    turns = [
        SimpleNamespace(observation=f"o{i}", action=f"a{i}", text="", next_observation=f"o{i + 1}")
        for i in range(50)
    ]
    text = format_interaction("reach the stairs", turns, max_chars=200)
    lines = text.splitlines()
    assert lines[:2] == ["Environment: reach the stairs", "o0"]
    assert lines[-1] == "Agent: a49" and lines[-2] == "Environment: o49"
    left_out = int(lines[2].split()[1])
    # 1 opening + 50 actions + 49 answers = 100 messages; those kept plus those left out
    assert lines[2] == f"[... {left_out} messages left out ...]"
    assert left_out + (len(lines) - 3) == 99 and len(text) <= 200 + 40
