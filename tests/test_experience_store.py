"""ExperienceStore: recall, durability, corruption handling, export/import, bad input (SIGKILL
mid-write, mid-eviction, mid-merge and mid-cleanup: tests/test_experience_kill.py).

Vectors: the recall and crash tests use precomputed clustered random unit vectors (384-d, the
default model's dimension) because embedding 10,000 texts takes ~50 s on 2 cores; the
end-to-end tests embed real texts with the packaged all-MiniLM-L6-v2.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3

import numpy as np
import pytest

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.experience import (
    ExperienceConfig,
    ExperienceStore,
    Provenance,
    SentenceTransformerEmbedder,
    default_embedder,
)

DIM = 384


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return default_embedder()  # one model load per test process


def clustered(n: int, seed: int = 0, intrinsic: int = 24, noise: float = 0.05) -> np.ndarray:
    """Unit vectors on a noisy 24-dimensional subspace of R^384: like sentence embeddings,
    whose intrinsic dimension is far below 384 (i.i.d. Gaussian vectors have no neighbour
    structure at all and are not what a store of lessons holds)."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(12345).normal(size=(intrinsic, DIM))
    points = rng.normal(size=(n, intrinsic)) @ basis + noise * np.sqrt(intrinsic) * rng.normal(
        size=(n, DIM)
    )
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def texts(n: int, start: int = 0) -> list[str]:
    return [
        f"## Title: lesson {i}\n## Description: case {i}\n## Content: do thing {i}"
        for i in range(start, start + n)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["i8", "f32"])
def test_recall_at_8_against_exact_search_on_10000(tmp_path, embedder, dtype):
    store = ExperienceStore(tmp_path / "bank", embedder, ExperienceConfig(hnsw_dtype=dtype))
    vectors = clustered(10_000)
    store.add_texts(texts(10_000), vectors=vectors)
    queries = clustered(300, seed=1)
    approx, _ = store.search(queries, 8, store.family_keys(None))
    sims = queries @ vectors.T  # numpy truth; store ids are 1..10000 in insertion order
    exact = np.argsort(-sims, axis=1)[:, :8] + 1
    recall = np.mean([len(set(a) & set(e)) / 8 for a, e in zip(approx, exact)])
    assert recall >= 0.99, recall
    store.close()


@pytest.mark.parametrize("dtype", ["i8", "f16"])
def test_quantised_graph_reranked_in_float32_gives_brute_force_top_k(tmp_path, embedder, dtype):
    """The quantised graph's candidates re-ranked with float32 carry numpy's exact
    similarities in descending order, and find numpy's top-8 (recall >= 0.97: the graph is
    approximate, so a rare true neighbour may be missed), after removals and after a reopen
    (rows from SQLite)."""
    config = ExperienceConfig(hnsw_dtype=dtype)
    vectors = clustered(2000)
    queries = clustered(50, seed=7)
    path = tmp_path / "bank"
    with ExperienceStore(path, embedder, ExperienceConfig(hnsw_dtype="f32")) as store:
        ids = np.asarray(store.add_texts(texts(2000), vectors=vectors))
    # saved as f32, opened as a quantised graph: rebuilt from the database
    store = ExperienceStore(path, embedder, config)
    with store.transaction() as cursor:
        store.retire(cursor, ids[::3].tolist(), "dropped")
    active = np.setdiff1d(ids, ids[::3])

    def check(current: ExperienceStore) -> None:
        found, sims = current.search(queries, 8, current.family_keys(None))
        truth = queries @ vectors[active - 1].T
        order = np.argsort(-truth, axis=1)[:, :8]
        # the re-rank is exact: each returned id with its true float32 cosine, best first
        exact = np.einsum("qd,qkd->qk", queries, vectors[found - 1])
        np.testing.assert_allclose(sims, exact, atol=1e-5)
        assert (np.diff(sims, axis=1) <= 1e-7).all()
        recall = np.mean([len(set(f) & set(t)) / 8 for f, t in zip(found, active[order])])
        assert recall >= 0.97, recall

    check(store)
    store.close()
    reopened = ExperienceStore(path, embedder, config)
    assert reopened.check_consistency()["ok"]
    check(reopened)
    reopened.close()


def test_a_graph_saved_with_other_settings_is_rebuilt_with_the_configs(tmp_path, embedder):
    """A store saved by the previous default graph (i8, cosine, degree 16) and opened with
    the current default (inner product, degree 32) gets a graph of the new settings, and
    finds numpy's top-8 through it (graph settings are fixed at build time, so only a
    rebuild can apply them)."""
    previous = ExperienceConfig(hnsw_dtype="i8", hnsw_metric="cos", hnsw_connectivity=16)
    vectors, queries = clustered(2000), clustered(50, seed=5)
    with ExperienceStore(tmp_path / "bank", embedder, previous) as store:
        store.add_texts(texts(2000), vectors=vectors)
        graph = store.index.indexes[""]
        assert (str(graph.metric_kind), graph.connectivity) == ("MetricKind.Cos", 16)
    with ExperienceStore(tmp_path / "bank", embedder, ExperienceConfig()) as store:
        graph = store.index.indexes[""]
        assert (str(graph.metric_kind), graph.connectivity, len(graph)) == (
            "MetricKind.IP",
            32,
            2000,
        )
        found, _ = store.search(queries, 8, store.family_keys(None))
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :8] + 1
    assert np.mean([len(set(f) & set(e)) / 8 for f, e in zip(found, exact)]) >= 0.97


def test_i8_codes_span_the_configured_range_and_older_codes_are_rebuilt(tmp_path, embedder, caplog):
    """The i8 graph holds round(x * 127 / (4 / sqrt(384))) clipped to +-127 (the default
    ``hnsw_i8_range``), worked here by hand, not usearch's cast (x / |x| * 127). A store
    whose graph was coded by usearch's cast (``hnsw_i8_range`` = sqrt(384), the previous
    default), or saved before the range was recorded, is rebuilt with the new codes on open."""
    vectors = clustered(300)
    usearch_cast = ExperienceConfig(hnsw_i8_range=384**0.5)
    with ExperienceStore(tmp_path / "bank", embedder, usearch_cast) as store:
        ids = store.add_texts(texts(300), vectors=vectors)
        np.testing.assert_array_equal(
            store.index.indexes[""].get(ids[0]), np.rint(vectors[0] * 127)
        )
    wanted = np.clip(np.rint(vectors[:5] * 127 * 384**0.5 / 4), -127, 127)
    assert np.abs(wanted).max() > 3 * np.abs(np.rint(vectors[:5] * 127)).max()  # finer codes

    def reopen() -> bool:
        """Open with the default config, check codes and search; True if it rebuilt."""
        caplog.clear()
        with (
            caplog.at_level(logging.INFO, logger="comprl_gym.experience.vector_index"),
            ExperienceStore(tmp_path / "bank", embedder, ExperienceConfig()) as store,
        ):
            graph = store.index.indexes[""]
            codes = np.vstack([graph.get(i) for i in ids[:5]])
            np.testing.assert_array_equal(codes, wanted)
            found, _ = store.search(vectors[:5], 1, store.family_keys(None))
            assert found[:, 0].tolist() == ids[:5]
        return "rebuilding it" in caplog.text

    assert reopen()  # coded by usearch's cast
    assert not reopen()  # coded as the config asks
    state_file = tmp_path / "bank" / "index-state.json"
    state = json.loads(state_file.read_text())
    for entry in state["files"].values():
        del entry["i8_range"]  # as saved before the range was recorded
    state_file.write_text(json.dumps(state))
    assert reopen()


def test_reopen_keeps_everything_and_index_agrees(tmp_path, embedder):
    path = tmp_path / "bank"
    store = ExperienceStore(path, embedder)
    prov = Provenance(
        task_ids=("t1",), trajectory_ids=("traj-9",), actor_step=7, policy_version="v3"
    )
    ids = store.add_texts(texts(50), prov, env_family="minihack", vectors=clustered(50))
    before = store.search(clustered(5, seed=3), 5, ["minihack"])
    store.close()
    store = ExperienceStore(path, embedder)
    assert store.count() == 50 and store.check_consistency()["ok"]
    exp = store.get([ids[3]])[0]
    assert (
        exp.source_task_ids,
        exp.source_trajectory_ids,
        exp.created_step,
        exp.policy_version,
        exp.env_family,
    ) == (["t1"], ["traj-9"], 7, "v3", "minihack")
    after = store.search(clustered(5, seed=3), 5, ["minihack"])
    np.testing.assert_array_equal(before[0], after[0])
    store.close()


def test_a_read_only_database_reads_what_the_store_wrote_and_writes_nothing(tmp_path, embedder):
    from comprl_gym.evaluation.provenance import experience_info
    from comprl_gym.experience.database import DB_NAME, ExperienceDatabase

    path = tmp_path / "bank"
    store = ExperienceStore(path, embedder)
    ids = store.add_texts(texts(6), env_family="minihack", vectors=clustered(6))
    with store.transaction() as cursor:
        store.retire(cursor, ids[:2], "dropped")
    # While the writer is open (a WAL beside the file) and after it closed cleanly (none).
    for state in ("open", "closed"):
        if state == "closed":
            store.close()
        files = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
        with ExperienceDatabase(path / DB_NAME, readonly=True) as db:
            assert [e.text for e in db.iter_experiences()] == texts(4, start=2), state
            assert len(list(db.iter_experiences(include_inactive=True))) == 6
            assert [r["kind"] for r in db.revisions()] == ["add"] * 6 + ["retire"] * 2
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                db.writer.execute("DELETE FROM experiences")
        if state == "closed":  # nothing created or touched
            assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == files
    # provenance's hash of an eval's store: every row's text and status, as SQL lists them
    with sqlite3.connect(path / DB_NAME) as db:
        rows = db.execute(
            "SELECT id, title, description, content, env_family, status FROM experiences "
            "ORDER BY id"
        ).fetchall()
    digest = hashlib.sha256("".join(f"{row!r}\n" for row in rows).encode()).hexdigest()
    assert experience_info(path) == {
        "path": str(path), "entries": 4, "rows": 6, "sha256": digest
    }  # fmt: skip
    with pytest.raises(DataError, match="no experience database"):
        ExperienceDatabase(tmp_path / "none" / DB_NAME, readonly=True)


def test_index_missing_after_crash_is_rebuilt_from_sqlite(tmp_path, embedder):
    path = tmp_path / "bank"
    store = ExperienceStore(path, embedder, ExperienceConfig(index_autosave_changes=0))
    store.add_texts(texts(40), vectors=clustered(40))
    store._db.close()  # simulate a crash: nothing saved, index files never written
    store._closed = True
    assert not list(path.glob("index-*.usearch"))
    reopened = ExperienceStore(path, embedder)
    assert reopened.count() == 40 and reopened.check_consistency()["ok"]
    reopened.close()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip"])
def test_corrupt_index_raises_data_error_naming_file_and_repair_rebuilds(
    tmp_path, embedder, damage
):
    path = tmp_path / "bank"
    store = ExperienceStore(path, embedder)
    store.add_texts(texts(200), vectors=clustered(200))
    query = clustered(3, seed=5)
    expected = store.search(query, 5, store.family_keys(None))[0]
    store.close()
    [index_file] = path.glob("index-*.usearch")
    data = index_file.read_bytes()
    if damage == "truncate":
        index_file.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        index_file.write_bytes(b"\x00garbage" * 100)
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        index_file.write_bytes(bytes(flipped))
    with pytest.raises(DataError) as info:
        ExperienceStore(path, embedder)
    assert index_file.name in str(info.value) and "repair=True" in str(info.value)
    repaired = ExperienceStore(path, embedder, repair=True)
    assert repaired.count() == 200 and repaired.check_consistency()["ok"]
    np.testing.assert_array_equal(
        repaired.search(query, 5, repaired.family_keys(None))[0], expected
    )
    repaired.close()


def test_corrupt_database_raises_and_repair_salvages_keeping_the_damaged_file(tmp_path, embedder):
    path = tmp_path / "bank"
    store = ExperienceStore(path, embedder)
    store.add_texts([t + " " + "pad " * 100 for t in texts(2000)], vectors=clustered(2000))
    store.close()
    db = path / "experiences.sqlite3"
    # two leaf pages of lessons in the middle of the table turn to noise (SQLite's dbstat
    # table says which pages those are; the file also holds indexes and the revision log)
    with sqlite3.connect(db) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaves = [
            page
            for (page,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'experiences' AND pagetype = 'leaf' "
                "ORDER BY pageno"
            )
        ]
    data = bytearray(db.read_bytes())
    for page in leaves[len(leaves) // 2 : len(leaves) // 2 + 2]:
        data[(page - 1) * page_size : page * page_size] = os.urandom(page_size)
    db.write_bytes(bytes(data))
    with pytest.raises(DataError) as info:
        ExperienceStore(path, embedder)
    assert "experiences.sqlite3" in str(info.value)
    repaired = ExperienceStore(path, embedder, repair=True)
    assert 1900 <= repaired.count() < 2000  # the rows on the damaged pages are gone, the rest kept
    assert repaired.check_consistency()["ok"]
    # the revision log says what became of every lesson: salvaged rows have their revisions
    # (or a new one), and those the log names that could not be read are recorded as lost
    assert repaired.check_revisions()["ok"]
    lost = {r["experience_id"] for r in repaired.revisions() if r["kind"] == "lost"}
    assert len(lost) == 2000 - repaired.count() and lost.isdisjoint(repaired.active_ids())
    assert list(path.glob("experiences.sqlite3.corrupt-*"))
    repaired.close()

    db.write_bytes(b"not a database" * 100)
    with pytest.raises(DataError, match="experiences.sqlite3"):
        ExperienceStore(path, embedder)


def test_export_import_same_model_keeps_vectors_stats_and_provenance(tmp_path, embedder):
    source = ExperienceStore(tmp_path / "a", embedder)
    prov = Provenance(
        task_ids=("task-1",), trajectory_ids=("tr-1",), actor_step=11, policy_version="p"
    )
    ids = source.add_texts(texts(30), prov, env_family="webshop", vectors=clustered(30))
    with source.transaction() as cur:
        cur.execute("UPDATE experiences SET wins = 2, uses = 3 WHERE id = ?", (ids[0],))
        [new] = source.insert(
            cur,
            source.to_texts(texts(1, 99)),
            clustered(1, seed=9),
            prov,
            "webshop",
            merged_from=[[ids[1], ids[2]]],
        )
        source.retire(cur, [ids[1], ids[2]], "merged", replaced_by=new)
    bank = source.export(tmp_path / "bank")
    manifest = json.loads((bank / "manifest.json").read_text())
    assert manifest["embedding_model"] == embedder.name and manifest["embedding_dim"] == DIM
    assert {"experiences.jsonl", "vectors.npy", "index.usearch"} <= set(manifest["files"])

    target = ExperienceStore(tmp_path / "b", embedder)
    target.add_texts(texts(3, 500), vectors=clustered(3, seed=4))  # ids collide with the bank's
    mapping = target.import_bank(bank)
    assert len(mapping) == 31 and target.count() == 3 + 29 and target.check_consistency()["ok"]
    got = target.get([mapping[ids[0]]])[0]
    assert (got.wins, got.uses, got.source_task_ids, got.created_step, got.env_family) == (
        2,
        3,
        ["task-1"],
        11,
        "webshop",
    )
    merged = target.get([mapping[new]])[0]
    assert merged.merged_from == [mapping[ids[1]], mapping[ids[2]]]
    assert target.get([mapping[ids[1]]])[0].replaced_by == mapping[new]
    np.testing.assert_allclose(
        target.vectors([mapping[ids[5]]]), source.vectors([ids[5]]), atol=1e-6
    )
    source.close()
    target.close()


class OtherModel:
    """Stands for a different sentence-transformers model (another name and dimension)."""

    name = "other-model"
    dim = 16

    def encode(self, texts: list[str]) -> np.ndarray:
        rng = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=16) for t in texts]
        out = np.array(rng, dtype=np.float32).reshape(len(texts), 16)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_import_into_store_with_another_model_refuses_or_reembeds(tmp_path, embedder):
    source = ExperienceStore(tmp_path / "a", embedder)
    source.add_texts(texts(5), vectors=clustered(5))
    bank = source.export(tmp_path / "bank")
    source.close()
    other = ExperienceStore(tmp_path / "c", OtherModel())
    with pytest.raises(ConfigurationError, match="reembed=True"):
        other.import_bank(bank)
    assert other.count() == 0
    assert len(other.import_bank(bank, reembed=True)) == 5
    assert other.count() == 5 and other.check_consistency()["ok"]
    other.close()
    with pytest.raises(ConfigurationError, match="other-model"):
        ExperienceStore(tmp_path / "c", embedder)  # reopening with the wrong model is refused


def test_damaged_bank_is_refused_with_the_file_named(tmp_path, embedder):
    source = ExperienceStore(tmp_path / "a", embedder)
    source.add_texts(texts(5), vectors=clustered(5))
    bank = source.export(tmp_path / "bank")
    source.close()
    jsonl = bank / "experiences.jsonl"
    jsonl.write_text(jsonl.read_text()[:-20])
    target = ExperienceStore(tmp_path / "b", embedder)
    with pytest.raises(DataError, match="experiences.jsonl"):
        target.import_bank(bank)
    assert target.count() == 0
    target.close()


def test_bad_texts_are_refused_and_odd_text_is_stored_safely(tmp_path, embedder):
    store = ExperienceStore(tmp_path / "bank", embedder)
    with pytest.raises(ConfigurationError, match="empty"):
        store.add_texts(["   "])
    with pytest.raises(ConfigurationError, match="max_text_chars"):
        store.add_texts(["x" * 20000])
    assert store.count() == 0
    ids = store.add_texts(
        [b"## Title: caf\xe9\n## Content: bytes that are not UTF-8", "lone \udcff surrogate"]
    )
    got = store.get(ids)
    assert got[0].title == "caf\ufffd" and "surrogate" in got[1].content
    # real embeddings: a relevant query finds the relevant text
    ids = store.add_texts(
        [
            "## Title: Heating food\n## Description: ALFWorld\n## Content: put the egg in the microwave and heat it"
        ]
    )
    hits, _ = store.search(embedder.encode(["how do I heat an egg?"]), 1, store.family_keys(None))
    assert hits[0][0] == ids[0]
    store.close()
