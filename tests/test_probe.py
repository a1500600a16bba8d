"""The extractor probe: committed episodes, scripted rules against hand counts, a real extractor
through it, the ``probe`` command and the probe logged during training."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_provenance import memory_run_config, train

from comprl_gym.cli import main
from comprl_gym.envs.memory import SPLITS, dungeon, oracle_lesson
from comprl_gym.envs.memory.probe import PROBE_DUNGEONS, probe_episodes
from comprl_gym.lessons.probe import (
    PROBE_VERDICTS,
    ProbeReport,
    ScriptedRule,
    can_probe,
    load_probe_episodes,
    run_probe,
)
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
from comprl_gym.trainers.probing import ExtractorWriter, probed_families
from comprl_gym.trainers.run import build_extractor


@pytest.fixture(scope="module")
def episodes() -> list[Trajectory]:
    return load_probe_episodes("memory")


def test_committed_episodes_cover_both_sides_and_both_outcomes_on_held_out_dungeons(episodes):
    assert can_probe("memory") and not can_probe("minihack")
    assert len(episodes) == 32 and len(PROBE_DUNGEONS) == 16
    by_task: dict[str, list[Trajectory]] = {}
    for episode in episodes:
        by_task.setdefault(episode.task_id, []).append(episode)
    assert len(by_task) == 16
    for task_id, pair in by_task.items():
        truth = dungeon(task_id)
        assert truth.index in SPLITS["test_large"]  # never a training dungeon
        assert sorted(e.meta["walked"] for e in pair) == ["east", "west"]
        for e in pair:
            # the generator's hidden side decides the outcome: walking it wins, in 2 steps
            assert e.won == (e.meta["walked"] == truth.side)
            assert e.turns[0].action == e.meta["walked"]
            assert e.steps == (2 if e.won else 1)
    assert sorted(dungeon(t).side for t in by_task) == ["east"] * 8 + ["west"] * 8
    # the file is Trajectory records: they read back into what they were written from
    assert [e.to_dict() for e in episodes] == probe_episodes()


@pytest.mark.slow
def test_the_committed_file_is_what_its_generator_writes():
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_probe_episodes.py"
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0


def test_the_outcome_aware_rule_is_right_after_every_win_and_every_loss(episodes):
    report = run_probe(ScriptedRule.outcome_aware(), episodes)
    for won in (True, False):
        rate = report.right_rate(won)
        assert (rate.mean, rate.n) == (1.0, 16)
        # Wilson's lower bound at 16/16: n / (n + z^2) = 16 / (16 + 1.96^2)
        assert rate.low == pytest.approx(16 / (16 + 1.959964**2), abs=1e-6)
    assert report.count("right") == 32
    # its lesson after a loss names the side not walked, in the oracle's words
    lost = next(v for v in report.verdicts if not v.won)
    assert lost.lessons[0].endswith(oracle_lesson(lost.task_id))


def test_constant_and_walked_side_rules_score_the_hand_counted_fractions(episodes):
    # 8 probe dungeons hide the stairs east: "always east" is right on both episodes of those
    # (8 of 16 wins, 8 of 16 losses) and wrong on the 16 episodes of the other 8.
    east = run_probe(ScriptedRule.always("east"), episodes)
    assert (east.count("right", True), east.count("right", False)) == (8, 8)
    assert east.right_rate(True).mean == east.right_rate(False).mean == 0.5
    assert east.count("wrong") == 16
    # naming the side walked is right after each of the 16 wins and after none of the losses
    walked = run_probe(ScriptedRule.walked_side(), episodes)
    assert (walked.right_rate(True).mean, walked.right_rate(False).mean) == (1.0, 0.0)
    metrics = walked.metrics()
    assert metrics["probe/right_after_won"] == 1.0 and metrics["probe/right_after_lost"] == 0.0
    assert metrics["probe/wrong"] == 16 and metrics["probe/nothing_written"] == 0


class FixedTexts:
    """Writes, for the i-th episode it is given, the i-th of ``texts`` (None: nothing)."""

    def __init__(self, texts):
        self.texts = list(texts)

    def write(self, episode, actor_step, *, into):
        text = self.texts.pop(0)
        if text is None:
            return []
        return into.add([{"title": "t", "description": "", "content": text}])


def test_each_kind_of_lesson_gets_its_verdict(episodes):
    first = episodes[:6]
    name = dungeon(first[0].task_id).name
    other = oracle_lesson(PROBE_DUNGEONS[-1])  # another dungeon's (right) lesson
    writer = FixedTexts(
        [
            None,
            f"In {name} the stairs are east or west.",
            "Dark halls fork; keep going.",
            other,
            f"{other} Also: in {name} walk east.",  # judged by the dungeon it names first
            oracle_lesson(first[5].task_id),
        ]
    )
    report = run_probe(writer, first)
    verdicts = [v.verdict for v in report.verdicts]
    assert verdicts == ["nothing", "both", "neither", "other_task", "other_task", "right"]
    assert set(verdicts) <= set(PROBE_VERDICTS)
    assert report.metrics()["probe/both_sides"] == 1
    assert report.metrics()["probe/no_side"] == 1
    assert report.to_dict()["counts"]["other_task"] == 2


def test_a_real_extractor_runs_through_the_probe_and_keeps_its_training_state(episodes):
    extractor = build_extractor(
        ModelSettings(model="tiny", max_new_tokens=8), ExperienceSettings(extractor_format="stem")
    )
    before = (list(extractor.pending), extractor.generations, extractor.counts.to_dict())
    report = run_probe(ExtractorWriter(extractor, "tiny"), episodes)
    assert len(report.verdicts) == 32
    assert all(v.verdict in PROBE_VERDICTS for v in report.verdicts)
    # a stem extractor always names one side of the episode's own dungeon
    assert report.count("right") + report.count("wrong") == 32
    assert (list(extractor.pending), extractor.generations, extractor.counts.to_dict()) == before
    # the same extractor, probed again, writes the same lessons (the probe drew nothing)
    again = run_probe(ExtractorWriter(extractor, "tiny"), episodes[:8])
    assert [v.lessons for v in again.verdicts] == [v.lessons for v in report.verdicts[:8]]


def test_each_probe_episode_draws_from_its_own_seed_the_same_at_every_probe(episodes):
    """Two probe episodes never share one random draw (a shared seed made the whole probe one
    coin flip at a high temperature), and an episode draws the same at the next probe."""
    extractor = build_extractor(
        ModelSettings(model="tiny", max_new_tokens=8, temperature=1.5),
        ExperienceSettings(extractor_format="stem"),
    )
    generate = extractor.backend.generate
    seeds: list[int] = []

    def recording(prompts, params):
        if params.temperature > 0:  # the sample, not the choices' greedy read-outs
            seeds.append(params.seed)
        return generate(prompts, params)

    extractor.backend.generate = recording
    run_probe(ExtractorWriter(extractor), episodes)
    first = list(seeds)
    assert len(first) == 32 and len(set(first)) == 32
    seeds.clear()
    extractor.generations += 5  # training moved the counter on: the probe's draws stay put
    run_probe(ExtractorWriter(extractor), episodes)
    assert seeds == first


def test_the_probe_reads_the_models_own_choice_probabilities(episodes):
    """P(right) and the greedy verdict are those of a forward pass of the extractor's model at
    the position where it samples its side, restricted to the two sides (an independent read
    of the same weights, not through the backend)."""
    import torch

    from comprl_gym.families import family_spec
    from comprl_gym.lessons.formats import stem_prompt

    extractor = build_extractor(
        ModelSettings(model="tiny", max_new_tokens=8), ExperienceSettings(extractor_format="stem")
    )
    report = run_probe(ExtractorWriter(extractor), episodes[:6])
    model, tokenizer = extractor.optimizer.model, extractor.optimizer.tokenizer
    for episode, verdict in zip(episodes[:6], report.verdicts):
        stem = family_spec("memory").stem_for(episode.task_id)
        prompt, firsts = stem_prompt(extractor.backend, extractor.format.messages(episode), stem)
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            logits = model(**ids).logits[0, -1, firsts].double()
        probs = torch.softmax(logits, -1).tolist()
        right = 0 if stem.choices[0].strip().startswith(stairs_side(episode)) else 1
        assert verdict.p_right == pytest.approx(probs[right], abs=1e-5)
        assert verdict.greedy == ("right" if probs[right] > 0.5 else "wrong")
    metrics = report.metrics()
    assert metrics["probe/p_right_after_won"] is not None
    assert 0.0 <= metrics["probe/greedy_right_after_lost"] <= 1.0


def stairs_side(episode: Trajectory) -> str:
    """The side of the stairs: the one walked if the episode was won, else the other."""
    walked = episode.turns[0].action
    return walked if episode.won else {"east": "west", "west": "east"}[walked]


def test_scripted_rules_are_their_own_greedy_choice(episodes):
    report = run_probe(ScriptedRule.outcome_aware(), episodes)
    assert report.greedy_rate(True).mean == report.greedy_rate(False).mean == 1.0
    assert report.mean_p_right(False).mean == 1.0
    walked = run_probe(ScriptedRule.walked_side(), episodes)
    assert walked.mean_p_right(True).mean == 1.0 and walked.mean_p_right(False).mean == 0.0


def test_probe_command_prints_the_table_and_writes_every_lesson(tmp_path, capsys):
    out = tmp_path / "probe.json"
    assert main(["probe", "--extractor", "tiny", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| extractor tiny (stem) |" in printed
    assert "| scripted outcome-aware rule | 1.00 [0.81, 1.00] (16/16) |" in printed
    saved = json.loads(out.read_text())
    rows = saved["families"]["memory"]
    assert [r["name"] for r in rows] == ["extractor tiny (stem)", "scripted outcome-aware rule"]
    assert all(len(r["verdicts"]) == 32 for r in rows)
    assert saved["sources"]["extractor"]["weight_files"]["model.safetensors"]
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    assert "P(right | won)" in capsys.readouterr().out


def test_probe_command_refuses_nothing_to_probe(capsys):
    assert main(["probe"]) == 2
    assert "--run DIR, --extractor MODEL or --config FILE" in capsys.readouterr().err


@pytest.mark.slow
def test_probe_config_probes_the_extractor_a_run_starts_from_its_init_weights(tmp_path, capsys):
    """A writer taught to name west everywhere (the ladder's supervised learner, its weights
    saved) is what ``--config`` probes once the config's ``extractor.init_weights`` names it:
    its greedy lesson is right exactly on the probe episodes whose stairs are west (the
    dungeons' own truth), where the untrained model, which names east, is right on the others."""
    from comprl_gym.trainers.ladder import Rung, climb

    west = Rung("west", "always the west branch", lambda e: "west")
    weights = tmp_path / "writer.pt"
    taught = climb(
        west, "supervised", ModelSettings(model="tiny", lr=5e-2),
        ExperienceSettings(extractor_format="stem"), max_updates=10, eval_every=5,
        batch_size=8, save_weights=weights,
    )  # fmt: skip
    assert taught.solved_at is not None

    def greedy_right_where_stairs(init_weights: str) -> list[str]:
        config = tmp_path / "config.yaml"
        config.write_text(
            "env_ids: [comprl/Memory-Fork-v0]\nalgorithm: complementary\n"
            f"extractor: {{model: tiny, init_weights: '{init_weights}'}}\n"
            "experience: {extractor_format: stem}\n"
        )
        out = tmp_path / "probe.json"
        assert main(["probe", "--config", str(config), "--out", str(out)]) == 0
        saved = json.loads(out.read_text())
        [report, _rule] = saved["families"]["memory"]
        assert report["name"] == f"extractor of {config}"
        sources = saved["sources"]["config"]
        assert sources["init_weights_sha256"] == (taught.weights_sha256 if init_weights else None)
        return [dungeon(v["task_id"]).side for v in report["verdicts"] if v["greedy"] == "right"]

    # 16 probe dungeons, 8 with the stairs west, each walked both ways: 16 episodes each side
    assert greedy_right_where_stairs(str(weights)) == ["west"] * 16
    assert greedy_right_where_stairs("") == ["east"] * 16
    capsys.readouterr()


@pytest.mark.slow
def test_training_logs_the_probe_and_the_run_probes_its_saved_extractor(tmp_path, capsys):
    assert probed_families(["comprl/MiniHack-Room-5x5-v0", "comprl/Memory-Fork-v0"]) == ["memory"]
    train(memory_run_config(tmp_path, "complementary", iterations=2, probe_every=1))
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        assert 0.0 <= line["probe/right_after_won"] <= 1.0
        assert 0.0 <= line["probe/right_after_lost"] <= 1.0
        assert line["probe/episodes_won"] == line["probe/episodes_lost"] == 16
        counted = sum(line[f"probe/{k}"] for k in ("right_won", "right_lost", "wrong"))
        others = ("both_sides", "no_side", "other_task", "nothing_written")
        assert counted + sum(line[f"probe/{k}"] for k in others) == 32
    # the probe changed nothing in the run: the same run unprobed logs the same values
    train(memory_run_config(tmp_path / "unprobed", "complementary", iterations=2))
    unprobed = (tmp_path / "unprobed" / "run" / "metrics.jsonl").read_text().splitlines()

    def computed(line: dict) -> dict:
        """What an iteration computed: not the probe, the clock, waits or speeds."""
        skip = ("probe/", "wait")
        return {
            k: v
            for k, v in line.items()
            if k != "time" and not k.endswith("_s") and not any(w in k for w in skip)
        }

    assert [computed(x) for x in lines] == [computed(json.loads(x)) for x in unprobed]
    # the saved run's trained extractor through the command, beside its frozen one
    assert main(["probe", "--run", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "| trained extractor (step 2) |" in printed and "| frozen extractor (tiny) |" in printed


def test_probe_every_must_not_be_negative():
    from comprl_gym.core import ConfigurationError

    with pytest.raises(ConfigurationError, match="probe_every"):
        ExperienceSettings(probe_every=-1)
    assert ProbeReport("empty").metrics()["probe/right_after_won"] is None
