"""SIGKILL in the middle of the store's heavy changes: a plain write, an eviction, a merge, a
cleanup and a purge of merged tombstones. A real child process writes and prints each acknowledged id; it is killed at a random
moment (most of its time is spent inside those transactions); the store is reopened and must
hold every acknowledged lesson the revision log does not say was removed, its index must equal
its database, and the log must agree with the rows.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from comprl_gym.experience import ExperienceConfig, ExperienceStore

#: The child's embedding model (merge outputs are embedded): deterministic, no model files.
EMBEDDER_SOURCE = textwrap.dedent(
    """
    import hashlib
    import numpy as np

    class HashEmbedder:
        name = "hash-embedder-8"
        dim = 8

        def encode(self, texts):
            rows = [
                np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8]))
                .normal(size=8) for t in texts
            ]
            out = np.array(rows, dtype=np.float32).reshape(len(texts), 8)
            return out / np.linalg.norm(out, axis=1, keepdims=True)
    """
)

_CHILD = EMBEDDER_SOURCE + textwrap.dedent(
    """
    import sys
    from comprl_gym.experience import ExperienceConfig, ExperienceManager

    path, mode, round_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
    settings = {
        "write": dict(max_entries=0),
        "evict": dict(max_entries=60),
        "merge": dict(max_entries=0, merge_window=5),
        "cleanup": dict(max_entries=0, expire_after_s=1e-3),
        "purge": dict(max_entries=0, merge_window=5, tombstone_retention_s=1e-3),
    }[mode]
    config = ExperienceConfig(  # index saves every 97 changes: kills land in saves too
        revision_log_max_rows=0, stats_flush_interval_s=3600, index_autosave_changes=97, **settings
    )
    manager = ExperienceManager(path, config, HashEmbedder())
    rng = np.random.default_rng(round_)
    n = 0

    def write(count):
        global n
        items = [
            f"## Title: w{round_}-{n + j}\\n## Description: d{j % 7}\\n## Content: c{n + j}"
            for j in range(count)
        ]
        n += count
        ids = manager.add(items, vectors=rng.normal(size=(count, 8)), env_family=f"f{n % 2}")
        print(" ".join(map(str, ids)), flush=True)

    def merge_chunk(texts):  # two lessons out of each chunk of five
        return [
            f"## Title: merged {len(t)}\\n## Description: m\\n## Content: {t[-40:]}"
            for t in texts[:2]
        ]

    while True:
        if mode in ("write", "evict"):
            write(25 if mode == "evict" else 5)  # evict: every write past 60 evicts 25
        elif mode == "merge":
            write(30)
            manager.merge(merge_chunk, actor_step=n)
        elif mode == "purge":  # every merged tombstone is a millisecond old at the cleanup
            write(60)
            manager.merge(merge_chunk, actor_step=n)
            manager.cleanup(dry_run=False)
        else:  # cleanup: everything idle for a millisecond expires; 3 deleted per round
            write(30)
            manager.delete(manager.store.active_ids()[:3])
            manager.cleanup(dry_run=False)
    """
)


def _kill_mid_run(path: Path, mode: str, round_: int, min_acked: int) -> list[int]:
    """Run the child until it acknowledged ``min_acked`` ids, SIGKILL it a random moment later
    (seeded), and return every id it acknowledged."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), mode, str(round_)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    acked: list[int] = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    try:
        while len(acked) < min_acked and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.extend(int(x) for x in line.split())
        time.sleep(random.Random(f"{mode}-{round_}").uniform(0.0, 0.3))
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
    # lines written before the kill were acknowledged too (the parent had not read them yet)
    for line in rest.splitlines():
        if line.strip():
            acked.extend(int(x) for x in line.split())
    assert len(acked) >= min_acked, f"the {mode} child did not get going"
    return acked


def _open(path: Path) -> ExperienceStore:
    namespace: dict = {}
    exec(EMBEDDER_SOURCE, namespace)  # the child's model, for the name and dimension check
    return ExperienceStore(path, namespace["HashEmbedder"](), ExperienceConfig(max_entries=0))


def _check_after_kill(path: Path, acked: list[int]) -> ExperienceStore:
    store = _open(path)
    assert store.check_consistency()["ok"], store.check_consistency()
    revisions = store.check_revisions()
    assert revisions["ok"], revisions["faults"]
    removed = {
        r["experience_id"] for r in store.revisions() if r["kind"] in ("evict", "delete", "purge")
    }
    present = {e.id for e in store.iter_experiences(include_inactive=True)}
    missing = set(acked) - removed - present
    assert not missing, f"acknowledged and not removed, yet missing: {sorted(missing)[:10]}"
    assert not (removed & present)
    return store


def _whole_batches(store: ExperienceStore) -> None:
    assert store.count() % 5 == 0  # a killed batch of 5 is all-or-nothing


def _cap_held(store: ExperienceStore) -> None:
    assert store.count() <= 60  # the cap held through the kill
    evicted = [r for r in store.revisions() if r["kind"] == "evict"]
    assert len(evicted) >= 200  # the child was evicting all along


def _successors_exist(store: ExperienceStore) -> None:
    rows = {e.id: e for e in store.iter_experiences(include_inactive=True)}
    for e in rows.values():  # a tombstone names a successor that exists
        assert e.status != "merged" or e.replaced_by in rows
    assert any(r["kind"] == "merge" for r in store.revisions())


def _purged(store: ExperienceStore) -> None:
    _successors_exist(store)  # a purge never leaves a tombstone naming a missing successor
    purged = [r for r in store.revisions() if r["kind"] == "purge"]
    assert len(purged) >= 100  # the child was purging all along
    assert all(r["detail"]["status"] == "merged" for r in purged)  # and only tombstones


def _cleaned(store: ExperienceStore) -> None:
    assert {"expire", "delete"} <= {r["kind"] for r in store.revisions()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, min_acked, check",
    [
        ("write", 400, _whole_batches),
        ("evict", 300, _cap_held),
        ("merge", 120, _successors_exist),
        ("cleanup", 150, _cleaned),
        ("purge", 240, _purged),
    ],
)
def test_sigkill_keeps_every_acknowledged_lesson_and_the_log_consistent(
    tmp_path, mode, min_acked, check
):
    path = tmp_path / "bank"
    for round_ in range(3):  # each round reopens what the previous kill left
        acked = _kill_mid_run(path, mode, round_, min_acked)
        store = _check_after_kill(path, acked)
        check(store)
        store.close()


_PURGE_KILLED_INSIDE = EMBEDDER_SOURCE + textwrap.dedent(
    """
    import os, signal, sys
    from comprl_gym.experience import ExperienceConfig, ExperienceManager

    config = ExperienceConfig(max_entries=0, merge_window=5, tombstone_retention_s=1e-3)
    manager = ExperienceManager(sys.argv[1], config, HashEmbedder())
    items = [f"## Title: w{j}\\n## Description: d\\n## Content: c{j}" for j in range(40)]
    ids = manager.add(items, vectors=np.random.default_rng(0).normal(size=(40, 8)))
    manager.merge(lambda texts: [f"## Title: m{len(texts)}\\n## Description: m\\n## Content: x"])
    print(" ".join(map(str, ids)), flush=True)
    delete_rows = manager.store.database.delete_rows

    def killed_midway(cursor, ids, kind, detail):  # half the tombstones deleted, then SIGKILL
        if kind == "purge":
            delete_rows(cursor, ids[: len(ids) // 2], kind, detail)
            print("killed mid-purge", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return delete_rows(cursor, ids, kind, detail)

    manager.store.database.delete_rows = killed_midway
    manager.cleanup(dry_run=False)
    """
)


def test_a_sigkill_inside_the_purge_loses_nothing_and_purges_nothing(tmp_path):
    path = tmp_path / "bank"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", _PURGE_KILLED_INSIDE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    acked_line, said = done.stdout.splitlines()
    assert said == "killed mid-purge"
    store = _check_after_kill(path, [int(x) for x in acked_line.split()])
    # The purge's transaction never committed: every tombstone is back, no purge revision.
    tombstones = [
        e.id for e in store.iter_experiences(include_inactive=True) if e.status == "merged"
    ]
    assert len(tombstones) == 40 and not any(r["kind"] == "purge" for r in store.revisions())
    store.close()
    # and the next cleanup purges them all
    namespace: dict = {}
    exec(EMBEDDER_SOURCE, namespace)
    config = ExperienceConfig(max_entries=0, tombstone_retention_s=1e-3)
    from comprl_gym.experience import ExperienceManager

    manager = ExperienceManager(path, config, namespace["HashEmbedder"]())
    assert manager.cleanup(dry_run=False).purged == tombstones
    assert manager.check_consistency()["ok"] and manager.check_revisions()["ok"]
    manager.close()
