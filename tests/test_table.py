"""``comprl-gym table`` (:mod:`comprl_gym.evaluation.table`): each method's deployed arm pooled
over seeds, paired against other methods per (seed, task, visit); the committed memory-family
table is reproduced from its committed per-seed files."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT

from comprl_gym.cli import main
from comprl_gym.evaluation.table import Run, load_run, markdown, method_table, pooled

RESULTS = REPO_ROOT / "benchmarks" / "results"

#: The committed table's methods and files (benchmarks/results/extractor_memory_table.json).
COMMITTED = {
    "GRPO": "extractor_memory_grpo",
    "static experience": "extractor_memory_stem_static",
    "experience-only": "extractor_memory_stem_experience_only",
    "Complementary RL": "extractor_memory_stem_complementary",
    "Complementary RL, paired credit": "extractor_memory_stem_complementary_paired",
    "exemplar memory": "extractor_memory_exemplar",
}


def run(seed, algorithm, arms, visit=1):
    episodes = [
        {"arm": arm, "visit": visit, "task_index": t, "won": w, "reset_seed": t,
         "sampling_seed": seed}
        for arm, won in arms.items() for t, w in enumerate(won)
    ]  # fmt: skip
    return Run(seed, algorithm, "stem", episodes)


def test_each_methods_deployed_arm_pairs_seed_by_seed():
    """Worked by hand. GRPO streams no store, so its deployed arm is 'none'; static's is 'own'.
    Seed 0: static's own wins tasks 0 and 1, GRPO's none task 0 only; seed 1: static's own wins
    task 0, GRPO's none wins tasks 0 and 1. Static minus GRPO pooled over 4 pairs: (3 - 3) / 4
    = 0, one discordant pair each way (McNemar p 1). Static's own minus its none over its three
    seeds: 4 of 6 against 0, +2/3. Static's seed 2, which GRPO never ran, pairs with nothing."""
    static = [run(0, "static_experience", {"none": [0, 0], "own": [1, 1]}),
              run(1, "static_experience", {"none": [0, 0], "own": [1, 0]}),
              run(2, "static_experience", {"none": [0, 0], "own": [1, 0]})]  # fmt: skip
    grpo = [run(0, "grpo", {"none": [1, 0]}), run(1, "grpo", {"none": [1, 1]})]
    for r in static:  # each store: 1 right, 1 wrong, 1 naming both sides (counted, not right)
        r.store_sides = {s: {"right": 1, "wrong": 1, "both": 1} for s in ("own", "training_run")}
        r.cispo_batches = {"batches": 9, "batches_with_signal": 7}
    static[0].cispo_batches = {"batches": 9, "batches_with_signal": 9}
    out = method_table({"GRPO": grpo, "static": static}, ["GRPO"])
    grpo_row, static_row = out["rows"]
    assert grpo_row["deployed_arm"] == "none" and static_row["deployed_arm"] == "own"
    assert static_row["success"]["own"]["1"]["mean"] == 4 / 6
    assert static_row["per_seed"]["1"] == {"none": 0.0, "own": 0.5}
    assert static_row["deployed_minus_none"]["1"]["difference"]["mean"] == 4 / 6
    vs = static_row["versus"]["GRPO"]
    assert vs["seeds"] == [0, 1]
    assert vs["this_minus_that"]["1"]["pairs"] == 4
    assert vs["this_minus_that"]["1"]["difference"]["mean"] == 0.0
    assert vs["this_minus_that"]["1"]["mcnemar_p"] == 1.0
    assert vs["per_seed"]["0"]["1"]["difference"]["mean"] == 0.5  # 2 - 1 of 2
    assert vs["per_seed"]["1"]["1"]["difference"]["mean"] == -0.5  # 1 - 2 of 2
    assert "GRPO" not in grpo_row["versus"]  # not against itself
    assert grpo_row["extractor"] is None
    assert static_row["extractor"] == {
        "training_run": {"right": 3, "lessons": 9},
        "own": {"right": 3, "lessons": 9},
        "batches_with_signal": 9 + 7 + 7,
        "batches": 27,
    }
    assert "| static | 0,1,2 | 0.67 [" in markdown(out)
    with pytest.raises(ValueError, match="each seed once"):  # a file given twice
        method_table({"GRPO": [grpo[0], grpo[0]]}, [])
    with pytest.raises(ValueError, match="not a method"):
        method_table({"GRPO": grpo}, ["static"])


def test_the_seed_level_interval_takes_each_training_seed_as_one_observation():
    """Worked by hand. Five seeds of ten tasks; treatment minus control per seed +0.1, +0.2,
    0.0, +0.3, +0.1: mean 0.14, sd sqrt(0.052 / 4) = 0.1140, t(0.975, 4) = 2.7764, half width
    2.7764 x 0.1140 / sqrt 5 = 0.1416, so [-0.0016, +0.2816]: it includes 0 although the
    pooled 50 pairs (7 discordant, all one way: McNemar p 2/128) do not."""
    wins = [1, 2, 0, 3, 1]
    control = [run(s, "grpo", {"none": [0] * 10}) for s in range(5)]
    treatment = [run(s, "complementary", {"none": [0] * 10, "own": [1] * w + [0] * (10 - w)})
                 for s, w in enumerate(wins)]  # fmt: skip
    vs = method_table({"GRPO": control, "CRL": treatment}, ["GRPO"])["rows"][1]["versus"]["GRPO"]
    cell = vs["between_seeds"]["1"]
    assert (cell["n"], cell["method"]) == (5, "student-t")
    assert cell["mean"] == pytest.approx(0.14)
    assert (cell["low"], cell["high"]) == (pytest.approx(-0.0016, abs=1e-4),
                                            pytest.approx(0.2816, abs=1e-4))  # fmt: skip
    pooled_cell = vs["this_minus_that"]["1"]
    assert pooled_cell["difference"]["low"] > 0
    assert pooled_cell["mcnemar_p"] == pytest.approx(2 / 128)


def test_pooled_runs_pair_each_task_only_with_its_partner_run():
    """Worked by hand: pair 1 has task 0 won 1 against 0 and task 1 won 1 against 1; pair 2
    reuses task index 0 (another seed: won 0 against 1). Pooled: 3 pairs, 2 - 2 wins = 0;
    keyed by task alone, pair 2's task 0 would have overwritten pair 1's."""

    def own(seed, *won):
        r = run(seed, "static_experience", {"own": list(won)}, visit=2)
        for e in r.episodes:
            e["reset_seed"] = seed
        return r

    out = pooled([(own(0, 1, 1), own(0, 0, 1)), (own(1, 0), own(1, 1))], "own")
    assert out["2"]["pairs"] == 3 and out["2"]["difference"]["mean"] == 0.0
    assert out["all"]["mcnemar_p"] == 1.0  # one discordant pair each way
    with pytest.raises(ValueError, match="do not share their seeds"):
        pooled([(own(0, 1), own(5, 1))], "own")


def test_the_command_reproduces_the_committed_table_from_its_per_seed_files(tmp_path, capsys):
    """The committed extractor_memory_table.json was written by benchmarks/paper_table.py;
    the library's command, given the same per-seed result files, writes it again, every
    number and every byte the same (and the same Markdown table)."""
    argv = ["table"]
    for method, stem in COMMITTED.items():
        argv += ["--method", method]
        argv += [str(RESULTS / f"{stem}{suffix}.json") for suffix in ("", "_seed1", "_seed2")]
    out = tmp_path / "table"
    argv += ["--versus", "static experience", "--versus", "GRPO", "--out", str(out)]
    assert main(argv) == 0
    committed = RESULTS / "extractor_memory_table.json"
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(committed.read_text())
    assert out.with_suffix(".json").read_bytes() == committed.read_bytes()
    assert out.with_suffix(".md").read_text() == committed.with_suffix(".md").read_text()
    assert out.with_suffix(".png").stat().st_size > 10_000
    # Complementary RL minus static experience at visit 2, as the README quotes it.
    assert "| Complementary RL | 0,1,2 | 0.48 [0.41, 0.55] |" in capsys.readouterr().out


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    grpo = str(RESULTS / "extractor_memory_grpo.json")
    out = tmp_path / "table"
    assert main(["table", "--method", "GRPO", grpo, "--versus", "static", "--out", str(out)]) == 2
    assert "not a method" in capsys.readouterr().err
    assert main(["table", "--method", "GRPO", grpo, grpo, "--out", str(out)]) == 2
    assert "each seed once" in capsys.readouterr().err
    assert main(["table", "--method", "GRPO", str(tmp_path / "no.json"), "--out", str(out)]) == 2
    assert "no such run folder or result file" in capsys.readouterr().err
    assert main(["table", "--method", "GRPO", "--out", str(out)]) == 2
    assert "give its runs" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    broken = tmp_path / "broken.json"
    broken.write_text('{"episodes": []}')
    with pytest.raises(Exception, match="not a streamed run.s results"):
        load_run(broken)


class Walker:
    """Walks one side every turn, whatever it is told."""

    side = "east"

    def reset(self, task, info):
        pass

    def act(self, observation, info):
        return self.side


class EastWalker(Walker):
    side = "east"


class WestWalker(Walker):
    side = "west"


@pytest.mark.slow
def test_stream_run_folders_pair_per_seed_task_and_visit(tmp_path):
    """Two scripted methods streamed on the held-out memory dungeons with the library's
    command: walking east wins exactly the dungeons whose stairs lie east (the family's hidden
    sides), walking west the others, at every visit, so east minus west is (east - west) / n
    and the oracle lesson changes nothing for a walker that does not read."""
    from comprl_gym.envs.memory import dungeon, pool

    tasks, seeds = 6, (0, 1)
    sides = [dungeon(index).side for index in list(pool("test"))[:tasks]]
    east = sides.count("east")
    argv = ["table"]
    for name in ("EastWalker", "WestWalker"):
        argv += ["--method", name]
        for seed in seeds:
            out = tmp_path / f"{name}-seed{seed}"
            command = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test"]
            command += ["--tasks", str(tasks), "--visits", "2", "--seed", str(seed)]
            command += ["--arms", "oracle", "--agent", f"{__name__}:{name}"]
            assert main([*command, "--output-dir", str(out), "--no-progress"]) == 0
            argv.append(str(out))
    argv += ["--versus", "WestWalker", "--out", str(tmp_path / "table")]
    assert main(argv) == 0
    rows = {r["method"]: r for r in json.loads((tmp_path / "table.json").read_text())["rows"]}
    walker = rows["EastWalker"]
    assert walker["deployed_arm"] == "none" and walker["seeds"] == [0, 1]
    assert walker["success"]["none"]["2"]["mean"] == east / tasks
    assert walker["success"]["none"]["2"]["n"] == tasks * len(seeds)
    assert walker["success"]["oracle"]["all"]["mean"] == east / tasks
    assert walker["per_seed"] == {
        str(s): {"none": east / tasks, "oracle": east / tasks} for s in seeds
    }
    versus = walker["versus"]["WestWalker"]
    assert versus["seeds"] == [0, 1]
    cell = versus["this_minus_that"]["all"]
    assert cell["pairs"] == tasks * 2 * len(seeds)
    assert cell["difference"]["mean"] == pytest.approx((2 * east - tasks) / tasks)
    assert versus["per_seed"]["1"]["2"]["pairs"] == tasks
    assert walker["extractor"] is None  # no trained run, no store of its own


def test_a_training_runs_folder_gives_its_store_verdicts_and_cispo_updates(tmp_path):
    """Worked by hand on the files a trainer writes: two iterations logged the store's
    verdicts (the last counts), three took a CISPO update, one of them with every advantage 0
    (no gradient)."""
    from comprl_gym.evaluation.table import training_facts

    rows = [
        {"step": 1, "store/memory/right": 1, "store/memory/wrong": 2},
        {"step": 2, "extractor/batch": 8, "extractor/samples": 0},
        {"step": 3, "extractor/batch": 8, "extractor/samples": 5, "store/memory/right": 4,
         "store/memory/wrong": 3, "store/memory/no_task": 1},
        {"step": 4, "extractor/batch": 8, "extractor/samples": 2},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"algorithm": "complementary", "experience": {"extractor_format": "stem"}}
    (tmp_path / "summary.json").write_text(
        json.dumps({"algorithm": "complementary", "config": config})
    )
    facts = training_facts(tmp_path)
    assert facts["algorithm"] == "complementary" and facts["config"] == config
    assert facts["verdicts"] == {"right": 4, "wrong": 3, "no_task": 1}
    assert facts["cispo"] == {"batches": 3, "batches_with_signal": 2}
