"""The store over a long run: the cap and its eviction policies, expiry, delete, cleanup's dry
run, usefulness at retrieval, the revision log, lineage, the write fence.

Every expected id below is worked by hand from the policy's definition (the comments give the
arithmetic). Vectors are supplied (no embedding model): ``HashEmbedder`` only names the store's
model and embeds merge outputs.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
import time

import numpy as np
import pytest

from comprl_gym.cli import main as cli_main
from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.experience import (
    ExperienceConfig,
    ExperienceManager,
    Operation,
    Provenance,
    parse_experience_text,
)
from comprl_gym.experience.records import posterior_win_rate

DIM = 8


class HashEmbedder:
    """A deterministic stand-in model: a unit vector from the text's SHA-256."""

    name = "hash-embedder-8"
    dim = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8])).normal(
                size=DIM
            )
            for t in texts
        ]
        out = np.array(rows, dtype=np.float32).reshape(len(texts), DIM)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def lesson(i: int | str) -> str:
    return f"## Title: lesson {i}\n## Description: case {i}\n## Content: do thing {i}"


def axis(i: int) -> np.ndarray:
    vector = np.zeros((1, DIM), dtype=np.float32)
    vector[0, i % DIM] = 1.0
    return vector


def open_manager(path, **settings) -> ExperienceManager:
    quiet = {"diversity_dropout_p": 0.0, "stats_flush_interval_s": 3600.0}
    return ExperienceManager(path, ExperienceConfig(**{**quiet, **settings}), HashEmbedder())


def add_one(manager: ExperienceManager, i: int, **kwargs) -> int:
    [eid] = manager.add([lesson(i)], vectors=axis(i), **kwargs)
    return eid


def kinds(manager: ExperienceManager, eid: int) -> list[str]:
    return [r["kind"] for r in manager.revisions(eid)]


# ------------------------------------------------------------------ the cap and its policies
def test_fifo_cap_evicts_the_oldest_in_the_writing_transaction(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=3)
    ids = [add_one(manager, i) for i in range(5)]
    # 5 writes into 3 slots, first in first out: the first two are gone, rows and all.
    assert [e.id for e in manager.experiences(include_inactive=True)] == ids[2:]
    assert manager.get(ids[:2]) == []
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    assert kinds(manager, ids[0]) == ["add", "evict"]
    evicted = manager.revisions(ids[0])[-1]["detail"]
    assert evicted["policy"] == "fifo" and evicted["title"] == "lesson 0"
    # revisions: 5 adds + 2 evictions, numbered 1..7 with no gap
    assert manager.revision == 7
    assert [r["rev"] for r in manager.revisions()] == list(range(1, 8))
    manager.close()


def test_the_first_eviction_of_a_stores_life_warns_once_and_is_counted(tmp_path, caplog):
    caplog.set_level("WARNING", logger="comprl_gym.experience.store")
    manager = open_manager(tmp_path / "s", max_entries=3)
    for i in range(3):
        add_one(manager, i)
    assert caplog.records == [] and manager.stats()["evicted"] == 0  # full, nothing dropped
    add_one(manager, 3)  # 4 writes into 3 slots: the first eviction of the store's life
    [warning] = caplog.records
    assert warning.levelname == "WARNING"
    assert "max_entries=3" in warning.getMessage() and "eviction_policy='fifo'" in (
        warning.getMessage()
    )
    add_one(manager, 4)
    assert len(caplog.records) == 1  # one warning, not one per eviction
    stats = manager.stats()
    assert (stats["evicted"], stats["max_entries"], stats["eviction_policy"]) == (2, 3, "fifo")
    manager.close()
    # The count lives in the database: a reopened store goes on counting, still quiet.
    manager = open_manager(tmp_path / "s", max_entries=3)
    add_one(manager, 5)
    assert manager.stats()["evicted"] == 3 and len(caplog.records) == 1
    # A cleanup that evicts (a lowered cap) counts too; the evict revisions agree.
    manager.close()
    manager = open_manager(tmp_path / "s", max_entries=1)
    assert manager.cleanup(dry_run=False).evicted and manager.stats()["evicted"] == 5
    assert sum(r["kind"] == "evict" for r in manager.revisions()) == 5
    manager.close()


def test_a_store_that_evicted_before_the_counter_counts_its_evict_revisions(tmp_path, caplog):
    manager = open_manager(tmp_path / "s", max_entries=2)
    for i in range(4):
        add_one(manager, i)
    manager.close()
    # An older store had no counter: drop it, as such a store would be.
    with sqlite3.connect(tmp_path / "s" / "experiences.sqlite3") as conn:
        conn.execute("DELETE FROM meta WHERE key = 'evicted_total'")
    caplog.clear()  # the first life's warning
    manager = open_manager(tmp_path / "s", max_entries=2)
    assert manager.stats()["evicted"] == 2
    add_one(manager, 4)
    assert manager.stats()["evicted"] == 3 and caplog.records == []  # it had evicted before
    manager.close()


def test_usefulness_policy_evicts_the_lowest_posterior_win_rate_untried_at_the_prior(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=3, eviction_policy="usefulness")
    a, b, c = (add_one(manager, i) for i in range(3))
    for won in (False, False, False, True):  # a: 1 win in 4 uses -> (1+1)/(4+2) = 0.333
        manager.report_outcome([a], won)
    for _ in range(3):  # b: 3 of 3 -> 4/5 = 0.8
        manager.report_outcome([b], True)
    # c untried: the prior mean 1/2. A fourth lesson (also 1/2) evicts a, the lowest.
    d = add_one(manager, 3)
    assert {e.id for e in manager.experiences()} == {b, c, d}
    # Next: c and d tie at 1/2 (b has 0.8); the older, c, goes.
    e = add_one(manager, 4)
    assert {x.id for x in manager.experiences()} == {b, d, e}
    assert manager.revisions(a)[-1]["detail"]["policy"] == "usefulness"
    manager.close()


def test_age_policy_evicts_the_longest_unused(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=2, eviction_policy="age")
    old, young = add_one(manager, 0), add_one(manager, 1)
    # the oldest lesson was retrieved after the younger was written: the younger is idler
    manager.store.flush_usage({old: (1, time.time() + 60)})
    add_one(manager, 2)
    assert young not in {e.id for e in manager.experiences()}
    assert old in {e.id for e in manager.experiences()}
    manager.close()


def test_a_cap_of_zero_is_unbounded_and_bad_settings_are_refused():
    assert ExperienceConfig().max_entries == 20000 and ExperienceConfig().eviction_policy == "fifo"
    for bad in (
        {"max_entries": -1},
        {"eviction_policy": "lru"},
        {"usefulness_prior": (0.0, 1.0)},
        {"usefulness_weight": -1},
        {"expire_after_s": -5},
        {"tombstone_retention_s": -1},
    ):
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            ExperienceConfig(**bad)


# ------------------------------------------------------------------ expiry, delete, cleanup
def test_cleanup_dry_run_reports_then_expires_hides_and_restore_brings_back(tmp_path):
    manager = open_manager(tmp_path / "s", expire_after_s=100.0, max_entries=0)
    idle, used = add_one(manager, 0), add_one(manager, 1)
    now = time.time() + 200  # both written 200 s before "now"; `used` retrieved 50 s before
    manager.store.flush_usage({used: (1, now - 50)})
    revision = manager.revision
    report = manager.cleanup(dry_run=True, now=now)
    assert (report.dry_run, report.expired, report.evicted) == (True, [idle], [])
    assert manager.revision == revision and len(manager) == 2  # a dry run changes nothing
    report = manager.cleanup(dry_run=False, now=now)
    assert (report.expired, report.evicted, report.revision) == ([idle], [], revision + 1)
    # hidden, not deleted: the row is there, retrieval and the index no longer see it
    [hidden] = manager.get([idle])
    assert hidden.status == "expired" and hidden.title == "lesson 0"
    hits = manager.retrieve_by_vector(axis(0)[0], k=2, record=False)
    assert [h.id for h in hits] == [used]
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    assert manager.restore([idle]) == [idle]
    hits = manager.retrieve_by_vector(axis(0)[0], k=1, record=False)
    assert [h.id for h in hits] == [idle]
    assert kinds(manager, idle) == ["add", "expire", "restore"]
    assert manager.cleanup(dry_run=False, now=time.time()).expired == []
    manager.close()


def test_cleanup_applies_a_lowered_cap_after_expiry(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=0)
    ids = [add_one(manager, i) for i in range(5)]
    manager.close()
    manager = open_manager(tmp_path / "s", max_entries=3, expire_after_s=100.0)
    now = time.time() + 200
    # only ids[3] is idle past 100 s: the others were retrieved 10 s before "now"
    manager.store.flush_usage({i: (1, now - 10) for i in ids if i != ids[3]})
    report = manager.cleanup(dry_run=True, now=now)
    # 5 active - 1 expired = 4 > cap 3: evict 1, first in first out among the rest -> ids[0]
    assert (report.expired, report.evicted) == ([ids[3]], [ids[0]])
    assert len(manager) == 5
    manager.cleanup(dry_run=False, now=now)
    assert [e.id for e in manager.experiences()] == [ids[1], ids[2], ids[4]]
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    manager.close()


def test_cleanup_purges_merged_tombstones_past_their_retention_dry_run_first(tmp_path, capsys):
    manager = open_manager(tmp_path / "s", max_entries=0, tombstone_retention_s=100.0)
    first, second = add_one(manager, 0), add_one(manager, 1)
    [joined] = manager.maintenance.merge(lambda texts: [lesson("merged")], actor_step=1).merged
    later = add_one(manager, 2)
    assert {e.id: e.status for e in manager.get([first, second])} == {
        first: "merged",
        second: "merged",
    }
    # 50 s after the merge the tombstones are within their 100 s retention: nothing to purge.
    assert manager.cleanup(dry_run=True, now=time.time() + 50).purged == []
    now = time.time() + 200
    revision = manager.revision
    report = manager.cleanup(dry_run=True, now=now)
    assert (report.dry_run, report.purged, report.expired, report.evicted) == (
        True,
        [first, second],
        [],
        [],
    )
    assert manager.revision == revision and len(manager.get([first, second])) == 2  # unchanged
    report = manager.cleanup(dry_run=False, now=now)
    # one purge revision each, in one transaction; the rows are gone, the rest untouched
    assert (report.purged, report.revision) == ([first, second], revision + 2)
    assert manager.get([first, second]) == []
    assert [e.id for e in manager.experiences()] == [joined, later]
    assert kinds(manager, first)[-1] == "purge"
    assert manager.revisions(first)[-1]["detail"]["replaced_by"] == joined
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    assert manager.cleanup(dry_run=True, now=now).purged == []
    manager.close()
    # the purged lesson's history still answers from its revision's snapshot
    assert cli_main(["lesson", str(tmp_path / "s"), str(first)]) == 0
    out = capsys.readouterr().out
    assert "(purge)" in out and f"merged into: {joined}" in out
    # a retention of 0 keeps tombstones forever
    manager = open_manager(tmp_path / "t", max_entries=0, tombstone_retention_s=0.0)
    add_one(manager, 0), add_one(manager, 1)
    manager.maintenance.merge(lambda texts: [lesson("merged")], actor_step=1)
    assert manager.cleanup(dry_run=True, now=time.time() + 1e9).purged == []
    manager.close()


def test_delete_removes_for_good_and_a_repeat_changes_nothing(tmp_path):
    manager = open_manager(tmp_path / "s")
    keep, gone = add_one(manager, 0), add_one(manager, 1)
    assert manager.delete([gone, 999]) == [gone]
    assert manager.get([gone]) == [] and [e.id for e in manager.experiences()] == [keep]
    revision = manager.revision
    assert manager.delete([gone]) == [] and manager.revision == revision
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    manager.close()


# ------------------------------------------------------------------ usefulness at retrieval
def test_usefulness_weighs_retrieval_with_a_beta_prior_worked_by_hand(tmp_path):
    manager = open_manager(
        tmp_path / "s",
        diversity_lambda=0.0,
        diversity_recent_penalty=0.0,
        usefulness_weight=4.0,
        max_entries=0,
    )
    query = np.array([1.0, 0.3, 0.2, 0, 0, 0, 0, 0], np.float32)
    # similarity ranks to the query: loser 0, untried 1, winner 2
    loser = manager.add([lesson("L")], vectors=np.array([[1.0, 0.1, 0, 0, 0, 0, 0, 0]]))[0]
    untried = manager.add([lesson("U")], vectors=np.array([[1.0, 0, 0.5, 0, 0, 0, 0, 0]]))[0]
    winner = manager.add([lesson("W")], vectors=np.array([[0.5, 0, 0, 1.0, 0, 0, 0, 0]]))[0]
    for _ in range(8):
        manager.report_outcome([loser], False)
        manager.report_outcome([winner], True)
    assert posterior_win_rate(0, 8) == pytest.approx(0.1)
    # score = -rank - 4 * (1 - posterior): loser 0 - 4*0.9 = -3.6; untried -1 - 4*0.5 = -3;
    # winner -2 - 4*0.1 = -2.4. Best first: winner, untried, loser.
    hits = manager.retrieve_by_vector(query, k=3, record=False)
    assert [h.id for h in hits] == [winner, untried, loser]
    # similarities are the true cosines whatever the order
    assert hits[0].score == pytest.approx(0.5 / np.sqrt(1.25) / np.linalg.norm(query), abs=1e-5)
    manager.close()
    # weight 0 (the default, the reference): plain similarity order
    manager = open_manager(
        tmp_path / "s", diversity_lambda=0.0, diversity_recent_penalty=0.0, max_entries=0
    )
    hits = manager.retrieve_by_vector(query, k=3, record=False)
    assert [h.id for h in hits] == [loser, untried, winner]
    manager.close()


# ------------------------------------------------------------------ revisions and lineage
def test_every_change_is_a_revision_in_its_own_transaction(tmp_path, monkeypatch):
    manager = open_manager(tmp_path / "s", max_entries=0)
    first = add_one(manager, 0, provenance=Provenance(("t0",), ("traj0",), 4, "v4"))
    second = add_one(manager, 1)
    # a write that fails half-way (after its update, at its vote) leaves no revision behind
    revision = manager.revision

    def broken_vote(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(manager.store, "add_votes", broken_vote)
        bad = manager.apply_operations(
            [_op("update", (1, 2), lesson("joined")), _op("upvote", (1,))], [first, second]
        )
    assert not bad.ok and manager.revision == revision
    assert [e.id for e in manager.experiences()] == [first, second]
    result = manager.apply_operations(
        [_op("update", (1, 2), lesson("joined")), _op("upvote", (1,))], [first, second]
    )
    [joined] = result.updated
    assert kinds(manager, first) == ["add", "replaced", "vote"]
    assert kinds(manager, second) == ["add", "replaced"]
    assert kinds(manager, joined) == ["update"]
    manager.report_outcome([joined], True)
    assert kinds(manager, joined) == ["update", "outcome"]
    assert manager.revision == revision + 5  # update, 2 replaced, vote, outcome
    assert manager.check_revisions()["ok"]
    manager.close()


def _op(kind: str, idx: tuple[int, ...], text: str | None = None) -> Operation:
    return Operation(kind, idx, parse_experience_text(text) if text else None)


def test_the_log_is_trimmed_from_its_oldest_end_and_numbering_goes_on(tmp_path):
    manager = open_manager(tmp_path / "s", revision_log_max_rows=3, max_entries=0)
    for i in range(5):
        add_one(manager, i)
    assert [r["rev"] for r in manager.revisions()] == [3, 4, 5]
    assert manager.revision == 5 and manager.check_revisions()["ok"]
    manager.close()


def test_an_old_store_gains_the_log_with_a_revision_per_row(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=0)
    ids = [add_one(manager, i) for i in range(3)]
    manager.close()
    db = sqlite3.connect(tmp_path / "s" / "experiences.sqlite3")
    db.execute("DROP TABLE revisions")  # what a schema-2 store looks like
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'revisions'")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    manager = open_manager(tmp_path / "s", max_entries=0)
    assert [(r["experience_id"], r["kind"]) for r in manager.revisions()] == [
        (i, "migrated") for i in ids
    ]
    assert manager.check_revisions()["ok"] and manager.revision == 3
    manager.close()


def test_lesson_command_tells_origin_merge_and_track_record(tmp_path, capsys):
    manager = open_manager(tmp_path / "s", max_entries=0)
    first = add_one(manager, 0, provenance=Provenance(("room-7",), ("traj-3",), 12, "v12"))
    second = add_one(manager, 1)
    manager.report_outcome([first], True)
    manager.report_outcome([first], False)
    joined = manager.maintenance.merge(lambda texts: [lesson("merged")], actor_step=15)
    [new_id] = joined.merged
    manager.close()
    assert cli_main(["lesson", str(tmp_path / "s"), str(first)]) == 0
    out = capsys.readouterr().out
    assert "lesson 0" in out and "(merged)" in out
    assert "room-7" in out and "traj-3" in out and "policy v12" in out and "step 12" in out
    assert f"merged into: {new_id} (active)" in out
    assert "used 2 times, won 1" in out
    assert cli_main(["lesson", str(tmp_path / "s"), str(new_id), "--json"]) == 0
    history = __import__("json").loads(capsys.readouterr().out)
    assert history["origin"]["merged_from"] == [first, second]
    assert history["origin"]["kind"] == "merge" and history["uses"] == 2
    # unknown lesson, missing store: a clear error, exit 2
    assert cli_main(["lesson", str(tmp_path / "s"), "999"]) == 2
    assert "no lesson 999" in capsys.readouterr().err
    assert cli_main(["lesson", str(tmp_path / "nowhere"), "1"]) == 2


def test_an_evicted_lesson_keeps_its_history_in_the_log(tmp_path, capsys):
    manager = open_manager(tmp_path / "s", max_entries=1)
    gone = add_one(manager, 0, provenance=Provenance(("room-1",), (), 3, "v3"))
    manager.report_outcome([gone], True)
    add_one(manager, 1)
    manager.close()
    assert cli_main(["lesson", str(tmp_path / "s"), str(gone)]) == 0
    out = capsys.readouterr().out
    assert "(evict)" in out and "room-1" in out and "used 1 times, won 1" in out


# ------------------------------------------------------------------ fence and suspension
def test_suspended_holds_writes_not_reads_and_fence_returns_the_revision(tmp_path):
    manager = open_manager(tmp_path / "s", max_entries=0)
    add_one(manager, 0)
    done = threading.Event()
    with manager.suspended() as revision:
        assert revision == manager.revision == 1
        writer = threading.Thread(target=lambda: (add_one(manager, 1), done.set()))
        writer.start()
        assert manager.retrieve_by_vector(axis(0)[0], k=1, record=False)  # reads go on
        assert not done.wait(0.3) and manager.revision == 1  # the write waits
    assert done.wait(10) and manager.fence() == 2
    writer.join()
    manager.close()


def test_resumed_store_reports_the_checkpointed_revision(tmp_path):
    from comprl_gym.trainers.checkpoint import CheckpointManager

    store_dir = tmp_path / "store"
    manager = open_manager(store_dir, max_entries=2)
    for i in range(3):
        add_one(manager, i)
    manager.save()
    saved_revision = manager.revision
    checkpoints = CheckpointManager(tmp_path)
    checkpoints.save(1, {"store_revision": saved_revision}, store_dir=store_dir)
    add_one(manager, 3)  # after the checkpoint: lost on resume
    manager.close()
    checkpoints.restore_store(1, store_dir)
    manager = open_manager(store_dir, max_entries=2)
    assert manager.revision == checkpoints.load()["state"]["store_revision"] == saved_revision
    assert manager.check_revisions()["ok"] and manager.check_consistency()["ok"]
    manager.close()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_resumed_run_is_at_the_uninterrupted_runs_store_revision(tmp_path):
    from test_trainers_run import _config  # the trainers' tiny end-to-end run

    from comprl_gym.trainers import make_trainer
    from comprl_gym.trainers.checkpoint import CheckpointManager

    def run(output_dir, iterations):
        config = _config(
            output_dir,
            "complementary",
            iterations=iterations,
            eval_tasks=0,
            env_ids=["comprl/MiniHack-Room-5x5-v0"],
        )
        trainer = make_trainer(config)
        try:
            trainer.train()
            probe = trainer.manager.retrieve("where is the exit?", k=2, record=False)
            return trainer.manager.revision, [hit.id for hit in probe]
        finally:
            trainer.close()

    straight = run(tmp_path / "a", 3)
    assert straight[1], "the run wrote no lesson to retrieve"
    first_revision, _ = run(tmp_path / "b", 2)
    output = tmp_path / "b" / "complementary"  # where _config puts the run
    assert CheckpointManager(output).load()["state"]["store_revision"] == first_revision
    assert first_revision > 0
    # a store copy at another revision than the checkpoint recorded is refused on resume
    copy = output / "checkpoints" / "step-2" / "experience"
    shutil.copytree(copy, tmp_path / "backup")
    with ExperienceManager(copy, ExperienceConfig(max_entries=0)) as tampered:
        tampered.add([lesson("late")], vectors=np.eye(1, 384, dtype=np.float32))
    with pytest.raises(DataError, match="revision"):
        run(tmp_path / "b", 3)
    shutil.rmtree(copy)
    shutil.copytree(tmp_path / "backup", copy)
    # the untouched copy: the uninterrupted run's revision and next retrievals
    assert run(tmp_path / "b", 3) == straight


def test_the_service_client_offers_the_lifecycle_and_the_revision(tmp_path):
    from comprl_gym.distributed.experience_service import ExperienceServer

    manager = open_manager(tmp_path / "s", max_entries=0, expire_after_s=100.0)
    a, b, c = (add_one(manager, i) for i in range(3))
    with ExperienceServer(manager) as server:
        client = server.client()
        assert client.revision == manager.revision == 3
        assert client.fence() == 3
        report = client.cleanup(dry_run=True, now=time.time() + 200)
        assert (report.dry_run, report.expired) == (True, [a, b, c])
        assert client.expire([a]) == [a] and client.restore([a]) == [a]
        assert client.delete([b]) == [b] and client.delete([b]) == []
        assert [r["kind"] for r in client.revisions(a)] == ["add", "expire", "restore"]
        assert client.check_revisions()["ok"] and client.revision == manager.revision == 6
    manager.close()
