"""Credit the extractor can learn from: who used a lesson, what it earned, when it is used up.

The reward tables are worked by hand below; the episodes are Trajectory records (credit reads
only who was in which group and half, what each read and whether it won), the store is the
real one, and the draw of lessons per episode goes through the real wrappers and retrieval.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest
from conftest import ScriptedBackend

import comprl_gym  # noqa: F401
from comprl_gym.core import ConfigurationError
from comprl_gym.experience import ExperienceConfig, ExperienceManager, default_embedder
from comprl_gym.lessons.memories import CasesMemory, ExemplarMemory
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
from comprl_gym.trainers.credit import REJECTED_REWARD
from comprl_gym.trainers.extractor import ExperienceExtractor, ExtractorGeneration
from comprl_gym.trainers.losses import CISPO
from comprl_gym.trainers.policy import PolicyOptimizer
from comprl_gym.wrappers import ExperienceAugmentedEnv


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


@pytest.fixture
def store(tmp_path, embedder):
    manager = ExperienceManager(
        tmp_path / "store", config=ExperienceConfig(diversify=False), embedder=embedder
    )
    yield manager
    manager.close()


def episode(group, with_experience, won, shown=(), critique=None, error=None):
    return Trajectory(
        "comprl/Memory-Fork-v0",
        f"g{group}",
        "memory",
        "0",
        "a task",
        0,
        won=won,
        experience_ids=list(shown),
        critique=critique,
        error=error,
        meta={"group": group, "with_experience": with_experience},
    )


def generation(ids, step=1):
    return ExtractorGeneration([1, 2], [3, 4], None, list(ids), step)


def settings(**overrides):
    return ExperienceSettings(min_uses=1, train_cooldown_steps=0, diversify=False, **overrides)


def test_the_reference_and_the_paired_rule_on_a_hand_worked_table(tmp_path, embedder):
    rules = {}
    for rule in ("batch", "paired"):
        store = ExperienceManager(tmp_path / rule, embedder=embedder)
        a, b = store.add(["lesson A about the west branch", "lesson B about the east branch"])
        episodes = [
            # group 0: with-half read A (won), A and B (lost); without-half won 1 of 2 (mean 0)
            episode(0, True, True, [a]),
            episode(0, True, False, [a, b]),
            episode(0, False, True),
            episode(0, False, False),
            # group 1: with-half read B twice and won both; without-half lost both (mean -1)
            episode(1, True, True, [b]),
            episode(1, True, True, [b]),
            episode(1, False, False),
            episode(1, False, False),
        ]
        extractor = ExperienceExtractor(None, None, store, settings(extractor_baseline=rule))
        assert extractor.credit_uses(episodes) == 5  # A twice, B three times
        extractor.pending = [generation([a]), generation([b]), generation([a, b])]
        rules[rule] = extractor.ready_samples(actor_step=5)
        store.close()
    # Reference: r = (2 wins - uses) / uses over the uses of what a generation wrote.
    # A: uses 2, wins 1 -> 0. B: uses 3, wins 2 -> 1/3. A+B: uses 5, wins 3 -> 1/5.
    batch_r = [s.meta["reward"] for _, s in rules["batch"]]
    assert batch_r == pytest.approx([0.0, 1 / 3, 0.2])
    mean = (0 + 1 / 3 + 0.2) / 3
    assert [s.advantage for _, s in rules["batch"]] == pytest.approx([r - mean for r in batch_r])
    # Paired: A's uses 1 - 0 = 1 and -1 - 0 = -1 (mean 0); B's -1 - 0, 1 + 1, 1 + 1 (mean 1);
    # A+B: (0 + 3) / 5. The advantage is r itself.
    paired_r = [s.meta["reward"] for _, s in rules["paired"]]
    assert paired_r == pytest.approx([0.0, 1.0, 0.6])
    assert [s.advantage for _, s in rules["paired"]] == pytest.approx(paired_r)


def test_the_choice_rule_centres_r_among_the_lessons_that_gave_the_same_answer(store):
    # Four stem lessons: two answered "east" (token 7), two "west" (token 8). East's lessons
    # earned +1 and -1/3, west's -1 and -1: by hand, east's mean is 1/3 and west's -1, so the
    # advantages are +2/3, -2/3, 0, 0; the batch rule would centre on the mean of all four
    # (-1/3) and push both west lessons down, the same side twice.
    e1, e2, w1, w2 = store.add([f"lesson {i}" for i in range(4)])
    extractor = ExperienceExtractor(
        None, None, store, settings(extractor_format="stem", extractor_baseline="choice")
    )
    extractor.credit_uses(
        [
            episode(0, True, True, [e1]),
            episode(1, True, True, [e2]),
            episode(1, True, False, [e2]),
            episode(1, True, False, [e2]),
            episode(2, True, False, [w1]),
            episode(3, True, False, [w2]),
        ]
    )
    extractor.pending = [
        ExtractorGeneration([1, 2], [answer], None, [lesson], 1)
        for answer, lesson in ((7, e1), (7, e2), (8, w1), (8, w2))
    ]
    ready = extractor.ready_samples(actor_step=5)
    assert [s.meta["reward"] for _, s in ready] == pytest.approx([1.0, -1 / 3, -1.0, -1.0])
    assert [s.advantage for _, s in ready] == pytest.approx([2 / 3, -2 / 3, 0.0, 0.0])


def test_the_choice_rule_is_refused_for_free_written_lessons():
    with pytest.raises(ConfigurationError, match="extractor_format: stem"):
        ExperienceSettings(extractor_format="plain", extractor_baseline="choice")


def test_the_context_rule_compares_only_lessons_written_about_the_same_episode(store):
    # Two episodes (prompts [1, 2] and [5, 6]), two lessons each. About the first, one lesson
    # earned +1 and one -1: advantages +1 and -1 by hand. About the second both earned -1:
    # nothing to compare, 0 and 0, though the batch's mean (-1/2) would push both down.
    a1, a2, b1, b2 = store.add([f"lesson {i}" for i in range(4)])
    extractor = ExperienceExtractor(
        None,
        None,
        store,
        settings(extractor_baseline="context", extractor_samples=2, extractor_batch_size=4),
    )
    extractor.credit_uses(
        [
            episode(0, True, True, [a1]),
            episode(1, True, False, [a2]),
            episode(2, True, False, [b1]),
            episode(3, True, False, [b2]),
        ]
    )
    extractor.pending = [
        ExtractorGeneration(prompt, [7], None, [lesson], 1)
        for prompt, lesson in (([1, 2], a1), ([1, 2], a2), ([5, 6], b1), ([5, 6], b2))
    ]
    ready = extractor.ready_samples(actor_step=5)
    assert [s.meta["reward"] for _, s in ready] == pytest.approx([1.0, -1.0, -1.0, -1.0])
    assert [s.advantage for _, s in ready] == pytest.approx([1.0, -1.0, 0.0, 0.0])
    # Positive only: the lesson that did worse than its episode's mean teaches nothing.
    extractor.settings = dataclasses.replace(extractor.settings, extractor_positive_only=True)
    ready = extractor.ready_samples(actor_step=5)
    assert [s.advantage for _, s in ready] == pytest.approx([1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("samples, batch", [(1, 8), (3, 8)])
def test_the_context_rule_needs_several_lessons_per_episode_in_whole_batches(samples, batch):
    with pytest.raises(ConfigurationError, match="extractor_samples"):
        ExperienceSettings(
            extractor_baseline="context", extractor_samples=samples, extractor_batch_size=batch
        )


def test_a_dropped_or_unread_lesson_gets_no_use(store):
    a, b, c = store.add(["lesson A about walls", "lesson B about doors", "lesson C about keys"])
    extractor = ExperienceExtractor(None, None, store, settings())
    unparsed = {"decision": "unparsed", "score": None, "ids": [b]}
    uses = extractor.credit_uses(
        [
            episode(0, True, True, [a, b], critique=unparsed),  # B left the prompt: not a use
            episode(0, False, True, [c]),  # the without-half reads nothing (ids or not)
            episode(0, True, False, [c], error="env lost"),  # cut short: no outcome
        ]
    )
    assert uses == 1
    tallies = {e.id: (e.uses, e.wins) for e in store.get([a, b, c])}
    assert tallies == {a: (1, 1), b: (0, 0), c: (0, 0)}


def test_a_batch_without_signal_uses_nothing_up(store):
    a, b = store.add(["lesson A about the west branch", "lesson B about the east branch"])
    store.report_outcome([a], won=False)
    store.report_outcome([b], won=False)
    optimizer = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=1e-2), loss=CISPO())
    extractor = ExperienceExtractor(None, optimizer, store, settings())
    extractor.pending = [generation([a]), generation([b])]
    before = {k: v.clone() for k, v in optimizer.model.state_dict().items()}
    stats = extractor.train_step(actor_step=5)
    # Both r = -1: advantages 0, no step, nothing used up, no training count in the store.
    assert stats["samples"] == 0 and extractor.updates == 0
    assert [g.times_trained for g in extractor.pending] == [0, 0]
    assert [g.times_skipped for g in extractor.pending] == [1, 1]
    assert [e.training_count for e in store.get([a, b])] == [0, 0]
    assert all((v == optimizer.model.state_dict()[k]).all() for k, v in before.items())
    store.report_outcome([a], won=True)
    store.report_outcome([a], won=True)  # A: 2 wins of 3 -> r 1/3; B: -1
    stats = extractor.train_step(actor_step=6)
    assert stats["samples"] == 2 and extractor.updates == 1
    assert [g.times_trained for g in extractor.pending] == [1, 1]


@pytest.mark.parametrize("window", ["since_trained", "since_written"])
def test_the_credit_window_is_the_references_by_default(store, window):
    # The reference pops a generation's credit buffer when it trains on it: a later training
    # reads only the uses after. ``since_written`` reads every use since the lesson was written.
    defaults = ExperienceSettings()
    assert (defaults.credit_window, defaults.max_train_count) == ("since_trained", 0)
    assert (defaults.train_weight_power, defaults.train_cooldown_steps) == (0.0, 0)
    a, b = store.add(["lesson A about the west branch", "lesson B about the east branch"])
    optimizer = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=1e-2), loss=CISPO())
    extractor = ExperienceExtractor(None, optimizer, store, settings(credit_window=window))
    extractor.pending = [generation([a]), generation([b])]
    for won in (True, True, False):
        store.report_outcome([a], won=won)  # A: 2 of 3 -> r = 1/3
    store.report_outcome([b], won=False)  # B: r = -1
    assert extractor.train_step(actor_step=5)["reward_mean"] == pytest.approx((1 / 3 - 1) / 2)
    store.report_outcome([a], won=False)  # one more use each: A lost, B won
    store.report_outcome([b], won=True)
    [r_a, r_b] = [extractor.reward_of(g) for g in extractor.pending]
    if window == "since_trained":
        assert (r_a, r_b) == (-1.0, 1.0)  # the one use since the training
    else:
        assert (r_a, r_b) == (pytest.approx(0.0), 0.0)  # A: 2 of 4 -> 0; B: 1 of 2 -> 0
    extractor.train_step(actor_step=6)
    if window == "since_trained":
        # trained again on the new use; with nothing new since, neither is ready
        assert [g.times_trained for g in extractor.pending] == [2, 2]
        assert extractor.reward_batch(actor_step=7) == []
    # a generation whose lessons left the store can never be credited again: dropped
    store.delete([b])
    store.report_outcome([a], won=True)
    extractor.train_step(actor_step=8)
    assert [g.written_ids for g in extractor.pending] == [[a]]


def test_an_answer_that_wrote_nothing_trains_as_a_failure(store):
    episodes = [episode(0, True, True)]
    rejecting = ExperienceExtractor(
        ScriptedBackend(["ok"]), None, store, settings(extractor_format="plain")
    )
    assert rejecting.distill(episodes, actor_step=1) == []  # "ok" is no lesson (< 8 chars)
    [rejected] = rejecting.pending
    assert (rejected.kind, rejected.reward) == ("rejected", REJECTED_REWARD)
    assert rejecting.reward_of(rejected) == REJECTED_REWARD
    reference = ExperienceExtractor(
        ScriptedBackend(["ok"]),
        None,
        store,
        settings(extractor_format="plain", train_on_rejected=False),
    )
    reference.distill(episodes, actor_step=1)
    assert reference.pending == []


def test_the_memories_store_a_cases_actions_without_a_model(store):
    """Worked by hand: the exemplar memory keeps the won episode only, the cases memory the
    lost one too; each lesson is the task and the moves in order, titled with the outcome."""
    won = episode(0, True, True)
    won.task = "You are in the Vault of Marrow."
    won.turns = [type("T", (), {"action": "west"})(), type("T", (), {"action": " west "})()]
    lost = episode(0, True, False)
    lost.turns = [type("T", (), {"action": "east"})()]
    silent = episode(0, True, True)  # no action: nothing to keep
    exemplar = ExemplarMemory()
    assert [exemplar.learn(e, store, actor_step=4) for e in (won, lost, silent)][1:] == [[], []]
    cases = CasesMemory()
    [_, lost_id] = [i for e in (won, lost) for i in cases.learn(e, store)]
    entries = {(e.title, e.content) for e in store.experiences()}
    assert entries == {
        (
            "memory: won",
            "Task: You are in the Vault of Marrow.\nActions that won it, in order: west, west.",
        ),
        ("memory: lost", "Task: a task\nActions that lost it, in order: east."),
    }
    assert len(store) == 3  # the won episode twice (once per memory), the lost one once
    assert exemplar.state_dict() == {"episodes": 3, "declined": 2}
    assert cases.state_dict() == {"episodes": 2, "declined": 0}
    assert ExemplarMemory(keep_losses=True).learn(lost, store) != []
    assert store.get_one(lost_id).title == "memory: lost"


def shown_ids(store, seed: int, **injection) -> list[int]:
    """The ids a `test` memory hall reset with ``seed`` is shown: one lesson (``inject_top_k``
    1) from ``store``, chosen as ``injection`` (the wrapper's keyword arguments) says."""
    env = ExperienceAugmentedEnv(
        gym.make("comprl/Memory-Fork-v0", split="test"),
        store,
        inject_top_k=1,
        search_budget=0,
        report_outcomes=False,
        **injection,
    )
    _, info = env.reset(seed=seed)
    env.close()
    return info["experience_ids"]


def test_the_episodes_of_a_group_read_different_lessons(store):
    store.add(
        [f"In this hall try the branch number {i} first." for i in range(8)], env_family="memory"
    )

    def shown(sample_from, salt):
        return shown_ids(store, 3, sample_from=sample_from, sample_salt=salt)[0]

    slots = range(8)  # a group of 8 episodes (the with-experience half of K=16)
    top = {shown(0, slot) for slot in slots}
    drawn = [shown(8, slot) for slot in slots]
    assert len(top) == 1  # one query, one top lesson for the whole group
    # A draw per episode: the group reads different lessons (8 draws of 1 in 8 show ~5).
    assert len(set(drawn)) >= 4
    assert drawn == [shown(8, slot) for slot in slots]  # and a replay draws the same


def test_a_group_reads_every_lesson_about_its_own_task_in_turn(store):
    from comprl_gym.experience.records import Provenance

    hall = gym.make("comprl/Memory-Fork-v0", split="test")
    own, other, unseen = (hall.reset(seed=s)[1]["task_id"] for s in (3, 4, 5))
    hall.close()
    assert len({own, other, unseen}) == 3
    texts = [f"In this hall try the branch number {i} first." for i in range(4)]
    mine = store.add(texts, Provenance(task_ids=(own,)), env_family="memory")
    # The same words about another hall: as near to the query, never to be shown.
    store.add(texts * 3, Provenance(task_ids=(other,)), env_family="memory")

    def shown(salt, seed=3, order="rotate", same_task=True):
        return shown_ids(
            store, seed, sample_from=4, sample_salt=salt, inject_order=order,
            same_task_only=same_task,
        )  # fmt: skip

    # Four consecutive slots (one group's with-lesson half) read the four lessons once each,
    # and so does the next group's half.
    assert sorted(i for slot in range(4) for i in shown(slot)) == sorted(mine)
    assert sorted(i for slot in range(4, 8) for i in shown(slot)) == sorted(mine)
    assert shown(0, seed=5) == []  # a first visit: nothing was written about this hall
    unrestricted = {i for slot in range(8) for i in shown(slot, same_task=False)}
    assert not unrestricted <= set(mine)  # without the restriction other halls' lessons show
    with pytest.raises(ConfigurationError, match="order must be"):
        shown(0, order="cycle")


def test_distill_per_group_keeps_the_first_episodes_of_each_group():
    from comprl_gym.trainers.extractor import distilled_episodes

    runs = [
        Trajectory(str(i), "e", "f", "0", "t", i, won=i in (1, 5),
                   meta={"with_experience": i % 4 >= 2, "group": i // 4})
        for i in range(12)
    ]  # fmt: skip
    settings = ExperienceSettings(distill="without_experience", distill_per_group=1)
    assert [e.episode_id for e in distilled_episodes(runs, settings)] == ["0", "4", "8"]
    # Balanced: group 0 (0 lost, 1 won) gives its win (a tie picks a win), group 1 (4 lost,
    # 5 won) a loss (wins lead), group 2 (8, 9 lost) a loss though losses lead: no group is
    # left out to balance the rest.
    balanced = dataclasses.replace(settings, distill_balance="outcome")
    assert [e.episode_id for e in distilled_episodes(runs, balanced)] == ["1", "4", "8"]
    two = dataclasses.replace(balanced, distill_per_group=2)
    assert [e.episode_id for e in distilled_episodes(runs, two)] == ["0", "1", "4", "5", "8", "9"]
    with pytest.raises(ConfigurationError, match="distill_per_group"):
        ExperienceSettings(distill_per_group=-1)


def test_the_agreed_rule_credits_only_the_shown_lessons_the_actions_agreed_with(tmp_path, embedder):
    from comprl_gym.rollouts import Turn
    from comprl_gym.trainers.credit import credit_uses

    store = ExperienceManager(tmp_path / "s", embedder=embedder)
    west, east, other = store.add(
        ["the stairs are down the west branch", "the stairs are down the east branch", "wait"]
    )
    lost = episode(0, True, False, [west, east, other])
    lost.turns = [Turn(step=0, observation="", action="west")]
    won = episode(0, True, True, [east, west])
    won.turns = [Turn(step=0, observation="", action="east"), Turn(1, "", "east")]
    ignored = episode(0, True, True, [other])  # its actions name nothing the lesson says
    ignored.turns = [Turn(step=0, observation="", action="north")]
    # Shown: every lesson shown is charged; agreed: only the one each episode walked.
    assert credit_uses([lost, won, ignored], store, rule="agreed") == 2
    tallies = {e.id: (e.uses, e.wins) for e in store.get([west, east, other])}
    assert tallies == {west: (1, 0), east: (1, 1), other: (0, 0)}
    assert credit_uses([lost, won, ignored], store) == 6  # the rule of old, beside it
    with pytest.raises(ValueError, match="unknown use rule"):
        credit_uses([lost], store, rule="followed")
    store.close()
