"""The extractor-learning benchmark's reading of a probe (``benchmarks/extractor_learning/
run.py``), worked by hand on probe reports as ``comprl-gym probe --out`` writes them, on the
probe's 8 dungeons with the stairs east and 8 west, each walked both ways: 16 won and 16 lost."""

from __future__ import annotations

import gzip

import pytest
from conftest import REPO_ROOT

from benchmarks.extractor_learning import run as bench
from comprl_gym.envs.memory import dungeon
from comprl_gym.envs.memory.probe import PROBE_DUNGEONS
from comprl_gym.families import family_spec
from comprl_gym.lessons.probe import ProbeReport, ProbeVerdict

#: The probe's own dungeons: 8 with the stairs east, 8 west.
DUNGEONS = [dungeon(i) for i in PROBE_DUNGEONS]


def report(name: str, names, greedy=None) -> dict:
    """A probe report (the real ProbeReport, judged by the family's judge) whose writer names
    ``names(walked, won)`` for every episode, and whose most probable side is ``greedy(walked,
    won)`` when given (a stem extractor's)."""
    out = ProbeReport(name)
    for d in DUNGEONS:
        for walked in ("east", "west"):
            won = walked == d.side
            lesson = (
                f"In {d.name} the staircase down is at the end of the {names(walked, won)} branch."
            )
            verdict = family_spec("memory").judge(lesson).verdict
            likeliest = None
            if greedy is not None:
                likeliest = "right" if greedy(walked, won) == d.side else "wrong"
            out.verdicts.append(
                ProbeVerdict(
                    f"{d.index}-{walked}", d.task_id("fork"), won, walked, verdict, (lesson,),
                    p_right=None if greedy is None else float(likeliest == "right"),
                    greedy=likeliest,
                )
            )  # fmt: skip
    return out.to_dict()


def other(side: str) -> str:
    return "west" if side == "east" else "east"


def rule_side(walked: str, won: bool) -> str:
    return walked if won else other(walked)


RULE = report("rule", rule_side)
COPY = report("frozen", lambda walked, won: walked)  # copies the walked side
WEST = report("constant", lambda walked, won: "west")


def test_a_named_side_is_read_back_from_the_judges_verdict():
    # the first probe dungeon has its stairs east: the rule names east after either walk
    assert DUNGEONS[0].side == "east"
    assert [bench.named_side(v) for v in RULE["verdicts"][:2]] == ["east", "east"]
    assert [v["verdict"] for v in WEST["verdicts"][:2]] == ["wrong", "wrong"]  # an east dungeon
    assert bench.named_side({**WEST["verdicts"][0], "verdict": "neither"}) == "none"


def test_cells_count_the_named_side_per_walk_and_outcome():
    cells = bench.cells(WEST["verdicts"])
    assert cells == {
        "walked east, lost": {"east": 0, "west": 8, "none": 0},
        "walked east, won": {"east": 0, "west": 8, "none": 0},
        "walked west, lost": {"east": 0, "west": 8, "none": 0},
        "walked west, won": {"east": 0, "west": 8, "none": 0},
    }


def test_the_rule_meets_the_bar_and_a_constant_side_does_not():
    learnt = bench.probe_summary([RULE, COPY, RULE])
    assert learnt["trained"]["counts"] == {"right_won": 16, "won": 16, "right_lost": 16, "lost": 16}
    # against a writer that copies the walked side: equal after a win, +1 after every loss
    assert learnt["trained_minus_frozen"]["after_won"]["difference"]["mean"] == 0.0
    assert learnt["trained_minus_frozen"]["after_lost"]["difference"]["mean"] == 1.0
    # ... so the bar (above the frozen one after wins too) is not met against a copier
    assert learnt["meets_the_bar"] is False
    against_constant = bench.probe_summary([RULE, WEST, RULE])
    # a constant side is right after 8 wins and 8 losses: the rule is +0.5 on both, 8 of 16
    # discordant pairs each (McNemar p = 2 / 2**8)
    versus = against_constant["trained_minus_frozen"]
    assert versus["after_won"]["difference"]["mean"] == 0.5
    assert versus["after_won"]["mcnemar_p"] == pytest.approx(2 / 2**8)
    assert against_constant["meets_the_bar"] is True
    constant = bench.probe_summary([WEST, COPY, RULE])
    assert (
        constant["trained"]["counts"]["right_won"]
        == constant["trained"]["counts"]["right_lost"]
        == 8
    )
    assert constant["meets_the_bar"] is False


def test_a_continuation_needs_its_seeds_checkpoint_and_keeps_a_probed_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RUNS", tmp_path / "runs")
    calls = []
    monkeypatch.setattr(bench, "comprl_gym", lambda *args: calls.append(args))
    assert bench.run_folder(0, 80) == tmp_path / "runs" / "extractor-credit-seed0-80it"
    with pytest.raises(SystemExit, match="no checkpoint to continue"):
        bench.continue_and_probe(0, 80)
    # a copy already probed is a finished continuation: nothing is trained again
    bench.run_folder(0, 80).mkdir(parents=True)
    (bench.run_folder(0, 80) / "probe.json").write_text("{}")
    bench.continue_and_probe(0, 80)
    assert calls == []


def test_a_continuation_copies_the_run_and_drops_the_source_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RUNS", tmp_path / "runs")
    calls = []
    monkeypatch.setattr(bench, "comprl_gym", lambda *args: calls.append(list(args)))
    source = bench.run_folder(1)
    (source / "checkpoints").mkdir(parents=True)
    (source / "metrics.jsonl").write_text('{"step": 40}\n')
    (source / "probe.json").write_text('{"at": 40}')
    bench.continue_and_probe(1, 80)
    copy = bench.run_folder(1, 80)
    assert (copy / "metrics.jsonl").read_text() == '{"step": 40}\n'
    assert not (copy / "probe.json").exists()  # the 40-iteration probe is not the copy's
    train, probe = calls
    assert train[0] == "train" and "resume=true" in train and "iterations=80" in train
    assert train[train.index("--output-dir") + 1] == str(copy)
    assert probe[:2] == ["probe", "--run"] and probe[2] == str(copy)


def test_linear_decoding_reads_a_separable_label_and_not_a_random_one():
    """Worked by hand: a label that is the sign of one feature is decoded perfectly from
    features the fit never saw; a label drawn independently of the features is not."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(400, 16, generator=generator)
    rows = list(x)
    by_sign = [int(v > 0) for v in x[:, 3]]
    assert bench.linear_decoding(rows[:300], by_sign[:300], rows[300:], by_sign[300:]) >= 0.97
    coin = torch.randint(0, 2, (400,), generator=generator).tolist()
    assert bench.linear_decoding(rows[:300], coin[:300], rows[300:], coin[300:]) < 0.65


@pytest.mark.slow
def test_answer_features_are_read_where_the_extractor_samples_its_side():
    """The log-odds answer_features reads (east over west, at the end of the chat prompt and the
    stem's opening) are those of the extractor's own sampling path: sampled until it has
    written both sides for an episode, the two samples' log-probabilities differ by them."""
    from comprl_gym.lessons.formats import fill_stem
    from comprl_gym.lessons.probe import load_probe_episodes
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.run import build_extractor

    config = TrainConfig.from_yaml(
        REPO_ROOT / bench.CONFIG, ["extractor.model=tiny", "extractor.lora.top_layers=1"]
    )
    extractor = build_extractor(config.extractor, config.experience, 0)
    episodes = load_probe_episodes("memory")[:3]
    features = bench.answer_features(extractor, episodes, (1, 2))
    assert [len(features[layer]) for layer in (1, 2, -1)] == [3, 3, 3]
    assert features[2][0].shape == (extractor.optimizer.model.config.hidden_size,)
    for episode, log_odds in zip(episodes, features[-1]):
        stem = family_spec("memory").stem_for(episode.task_id)
        sampled: dict[str, float] = {}
        for _ in range(40):
            generation, lesson = fill_stem(extractor, extractor.format.messages(episode), stem)
            side = "east" if lesson.endswith(stem.choices[0]) else "west"
            sampled[side] = generation.completion_logprobs[0]
            if len(sampled) == 2:
                break
        assert sampled["east"] - sampled["west"] == pytest.approx(log_odds, abs=1e-3)


def test_the_passing_learner_is_judged_by_its_greedy_choice():
    """The passing learner samples near a coin (temperature 10): its bar is read from the
    greedy choice. A writer whose samples name west everywhere but whose likeliest side is the
    rule's meets it against a frozen writer whose likeliest side is the walked one only where
    that one is wrong: after a loss (+1), not after a win (0)."""
    rule_at_heart = report("trained", lambda walked, won: "west", rule_side)
    copier = report("frozen", lambda walked, won: walked, lambda walked, won: walked)
    west_at_heart = report("frozen", lambda walked, won: walked, lambda walked, won: "west")
    sampled = bench.probe_summary([rule_at_heart, copier, RULE])
    assert sampled["trained"]["counts"]["right_won"] == 8  # its west samples: a coin
    greedy = bench.probe_summary([rule_at_heart, copier, RULE], read="greedy")
    assert greedy["judged"] == "greedy"
    counts = greedy["trained"]["counts"]
    assert (counts["greedy_right_won"], counts["greedy_right_lost"]) == (16, 16)
    assert greedy["trained_minus_frozen"]["after_won"]["difference"]["mean"] == 0.0
    assert greedy["trained_minus_frozen"]["after_lost"]["difference"]["mean"] == 1.0
    assert greedy["meets_the_bar"] is False  # not above the copier after a win
    assert bench.probe_summary([rule_at_heart, west_at_heart, RULE], read="greedy")["meets_the_bar"]
    assert "greedy_right_won" not in bench.probe_summary([RULE, COPY, RULE])["trained"]["counts"]
    # the sides its greedy choice names: the stairs' side, whichever way the walk went
    assert bench.greedy_cells(rule_at_heart["verdicts"]) == {
        "walked east, lost": {"east": 0, "west": 8},
        "walked east, won": {"east": 8, "west": 0},
        "walked west, lost": {"east": 8, "west": 0},
        "walked west, won": {"east": 0, "west": 8},
    }


def test_kept_records_read_back_and_do_not_change_when_the_record_does_not(tmp_path):
    from benchmarks.common import keep_records

    run = tmp_path / "runs" / "seed0"
    run.mkdir(parents=True)
    (run / "probe.json").write_text('{"verdicts": []}')
    into = tmp_path / "records"
    [written] = keep_records(run, ("probe.json", "metrics.jsonl"), into)  # no log: skipped
    assert written == into / "seed0-probe.json.gz"
    first = written.read_bytes()
    assert gzip.decompress(first) == b'{"verdicts": []}'
    keep_records(run, ("probe.json",), into)
    assert written.read_bytes() == first  # the same bytes: no timestamp in the header
