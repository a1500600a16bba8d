"""The shared experience service: on a real local Ray cluster (loopback, CPU only) and, without
Ray, over a unix socket to AsyncVectorEnv workers.

* The Ray client answers as the in-process manager does, for the same operations.
* A service killed mid-write (SIGKILL while writes are in flight; and a service that dies
  after committing, before it answers) restarts from its SQLite store: every acknowledged
  write is present, none is applied twice.
* AsyncVectorEnv with 4 MiniHack workers sharing one store counts every outcome once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import gymnasium as gym
import numpy as np
import pytest
from test_experience_manager import LESSONS as MANAGER_LESSONS

import comprl_gym  # noqa: F401  (registers the comprl/ envs)
from comprl_gym.distributed import DistributedConfig
from comprl_gym.distributed.cluster import loopback_only, remote_capable
from comprl_gym.distributed.experience_service import (
    ExperienceClient,
    ExperienceServer,
    ExperienceService,
    ExperienceServiceActor,
    RayTransport,
    experience_actor_options,
    start_experience_service,
    stop_experience_service,
)
from comprl_gym.experience import (
    Experience,
    ExperienceConfig,
    ExperienceManager,
    Provenance,
    Retrieved,
    default_embedder,
)
from comprl_gym.experience.access import ExperienceAccess
from comprl_gym.wrappers import ExperienceAugmentedEnv

ray = pytest.importorskip("ray", reason="the distributed extra (ray) is not installed")

LESSONS = {family: MANAGER_LESSONS[family] for family in ("minihack", "alfworld")}
#: Fields that depend on the wall clock, not on the operations (retrieval counts are buffered
#: and flushed on a timer).
CLOCK_FIELDS = ("created_at", "updated_at", "last_retrieved_at", "retrieval_count")
#: Diversification reads recency and retrieval counts (timing): off to compare answers.
PLAIN_TOP_K = ExperienceConfig(diversify=False)


def lesson(i: int | str) -> str:
    return f"## Title: lesson {i}\n## Description: case {i}\n## Content: do thing {i}"


def unit(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, 384))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def comparable(value):
    """``value`` with the wall-clock fields of experiences dropped and scores to 1e-5."""
    if isinstance(value, Experience):
        return {k: v for k, v in vars(value).items() if k not in CLOCK_FIELDS}
    if isinstance(value, Retrieved):
        return (round(value.score, 5), comparable(value.experience))
    if isinstance(value, list | tuple):
        return [comparable(v) for v in value]
    return value


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray node on loopback with 2 CPUs for the module; nothing left after.

    ``address="local"`` and a private temp dir: never join (or disturb) another Ray cluster
    running on this machine."""
    temp_dir = tempfile.mkdtemp(prefix="rx-", dir="/tmp")  # short: Ray's socket paths
    loopback_only()  # bind and advertise 127.0.0.1 only
    ray.init(
        address="local",
        _temp_dir=temp_dir,
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        namespace=f"comprl-test-{uuid.uuid4().hex[:8]}",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.getcwd(), "HF_HUB_OFFLINE": "1"}},
    )
    yield
    ray.shutdown()
    remote_capable()
    deadline = time.time() + 30
    while time.time() < deadline and _ray_processes(temp_dir):
        time.sleep(0.5)
    assert not _ray_processes(temp_dir), f"Ray processes left: {_ray_processes(temp_dir)}"
    shutil.rmtree(temp_dir, ignore_errors=True)


def _ray_processes(temp_dir: str) -> list[str]:
    """raylet/gcs_server processes of the cluster whose session lives under ``temp_dir``."""
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [
        line
        for line in listing.splitlines()
        if ("raylet" in line or "gcs_server" in line) and temp_dir in line
    ]


# ======================================================================== without Ray
def test_request_id_makes_every_write_apply_once(tmp_path, embedder):
    """A retried write (same request id) changes nothing and answers as the first did."""
    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    service = ExperienceService(manager)
    first = service.call("add", ([lesson(1)],), {"request_id": "a"})
    again = service.call("add", ([lesson(1)],), {"request_id": "a"})
    assert again == first and len(manager) == 1
    for _ in range(3):  # one episode reported three times by retries: counted once
        service.call("report_outcome", (first, True), {"request_id": "episode-1"})
    service.call("report_outcome", (first, False), {"request_id": "episode-2"})
    service.call("mark_trained", (first, 4), {"request_id": "t"})
    service.call("mark_trained", (first, 4), {"request_id": "t"})
    output = '<answer>[{"function_name": "upvote", "parameters": {"idx": [1]}}]</answer>'
    for _ in range(2):
        result = service.call("apply_extractor_output", (output, first), {"request_id": "x"})
    assert result.ok and result.voted == first
    [e] = manager.get(first)
    assert (e.uses, e.wins, e.training_count, e.upvotes) == (2, 1, 1, 1)
    manager.close()


def test_old_store_gains_the_requests_table_and_keeps_its_rows(tmp_path, embedder):
    import sqlite3

    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    [eid] = manager.add([lesson(1)], vectors=unit(1, 0))
    manager.close()
    db = sqlite3.connect(tmp_path / "bank" / "experiences.sqlite3")
    db.execute("DROP TABLE requests")  # what a schema-1 store looks like
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    assert manager.store.get_meta("schema_version") == "3"  # schema 3: revisions
    manager.report_outcome([eid], True, request_id="r")
    manager.report_outcome([eid], True, request_id="r")
    assert manager.get_one(eid).uses == 1 and manager.get_one(eid).title == "lesson 1"
    manager.close()


def test_socket_client_matches_the_manager_and_runs_callables_here(tmp_path, embedder):
    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    for family, texts in LESSONS.items():
        manager.add(texts, env_family=family)
    asked: list[int] = []

    def refiner(question, experiences, context):
        asked.append(os.getpid())  # runs in the caller's process
        return f"advice on {question}: {experiences[0].title}"

    with ExperienceServer(manager) as server:
        client = server.client()
        assert isinstance(client, ExperienceAccess)
        local = manager.search_and_ask("how do I leave the room?", 2, "minihack", refiner)
        remote = client.search_and_ask("how do I leave the room?", 2, "minihack", refiner)
        assert remote == local and asked == [os.getpid(), os.getpid()]
        assert client.service_pid() == os.getpid()  # served from this process's thread
        assert len(client) == len(manager) == 4
        with pytest.raises(Exception, match="not a method of the experience service"):
            client._transport.call("import_bank", ("/tmp",), {})
    manager.close()


def _minihack_worker(client: ExperienceClient):
    def make():
        env = gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=2)
        return ExperienceAugmentedEnv(env, client, inject_top_k=3, search_budget=0)

    return make


@pytest.mark.slow
def test_async_vector_env_workers_share_one_store(tmp_path, embedder):
    """4 AsyncVectorEnv workers, each an ExperienceAugmentedEnv over one served store.

    By hand: max_steps=2 and the action ``wait`` end every episode by truncation on its 2nd
    step; with gymnasium's next-step autoreset, steps 1-2 end episode 1 of each worker, step 3
    resets, steps 4-5 end episode 2. 4 workers x 2 episodes = 8 episodes, each shown both
    minihack lessons (top-3, the two alfworld ones are another family): uses = 8 each, wins 0.
    """
    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    ids = manager.add(LESSONS["minihack"], env_family="minihack")
    other = manager.add(LESSONS["alfworld"], env_family="alfworld")
    with ExperienceServer(manager) as server:
        envs = gym.vector.AsyncVectorEnv([_minihack_worker(server.client()) for _ in range(4)])
        _, infos = envs.reset(seed=list(range(4)))
        assert [sorted(x) for x in infos["experience_ids"]] == [sorted(ids)] * 4
        ended = 0
        worker_pids = {process.pid for process in envs.processes}
        for _ in range(5):
            _, _, terminated, truncated, infos = envs.step(["wait"] * 4)
            ended += int(np.sum(terminated | truncated))
        envs.close()
    assert ended == 8 and len(worker_pids) == 4 and os.getpid() not in worker_pids
    assert [(e.uses, e.wins) for e in manager.get(ids)] == [(8, 0), (8, 0)]
    assert [(e.uses, e.wins) for e in manager.get(other)] == [(0, 0), (0, 0)]
    assert manager.check_consistency()["ok"]
    manager.close()


# ======================================================================== on Ray
def _same_operations(store, refiner, extractor) -> dict:
    """One script of calls, run against an in-process manager and against the Ray client."""
    out: dict = {}
    out["added"] = [store.add(texts, env_family=f) for f, texts in LESSONS.items()]
    out["plain"] = store.add([lesson(i) for i in range(6)], Provenance(task_ids=("t",)))
    queries = [f"how do I {w}?" for w in ("leave the room", "heat an apple", "find a key")]
    out["retrieve"] = [store.retrieve(q, 3, "minihack") for q in queries]
    out["batch"] = store.retrieve_batch(queries * 11, 2)  # 33 queries
    out["ask"] = store.search_and_ask("where is the exit?", 2, "minihack", refiner)
    store.report_outcome(out["added"][0], True)
    store.report_outcome(out["added"][0][:1], False)
    out["apply"] = store.apply_extractor_output(
        '<answer>[{"function_name": "add", "parameters": {"new_memory": "<title>Keys</title>'
        '<content>Pick up the key before the door.</content>"}}, '
        '{"function_name": "upvote", "parameters": {"idx": [1]}}]</answer>',
        out["added"][0],
        Provenance(task_ids=("room-1",), env_family="minihack"),
    )
    store.mark_trained(out["plain"][:2], actor_step=3)
    out["weights"] = store.sample_weights([out["plain"][:2], out["plain"][2:]], actor_step=4)
    out["merge"] = store.merge(extractor, actor_step=5, policy_version="v1")
    out["dedupe"] = store.dedupe()
    out["len"] = len(store)
    out["all"] = store.experiences(include_inactive=True)
    return {key: comparable(value) for key, value in out.items()}


@pytest.mark.slow
def test_ray_service_answers_like_the_in_process_manager(tmp_path, embedder, ray_cluster):
    calls: list[tuple[int, int]] = []

    def refiner(question, experiences, context):
        calls.append((os.getpid(), len(experiences)))
        return " / ".join(e.title for e in experiences)

    def extractor(texts):  # merges each chunk into one item; runs in this process
        calls.append((os.getpid(), len(texts)))
        return [
            f"## Title: merged {len(texts)}\n## Description: merged\n## Content: {len(texts)} lessons"
        ]

    local = ExperienceManager(tmp_path / "local", config=PLAIN_TOP_K, embedder=embedder)
    expected = _same_operations(local, refiner, extractor)
    local.close()
    local_calls, calls[:] = list(calls), []
    client = start_experience_service(tmp_path / "remote", config=PLAIN_TOP_K)
    try:
        assert client.service_pid() != os.getpid()
        got = _same_operations(client, refiner, extractor)
    finally:
        stop_experience_service(client)
    assert calls == local_calls and all(pid == os.getpid() for pid, _ in calls)
    assert expected["merge"].merged and expected["apply"].ok  # the script did real work
    for key in expected:
        assert got[key] == expected[key], key


def _fire_and_kill(client: ExperienceClient, base: int, n: int) -> tuple[list, list, int, int]:
    """``n`` adds and ``n`` outcome reports in flight at once; SIGKILL the service after the
    first few are answered. Returns the refs of both kinds and the pid before and after."""
    actor = client._transport.actor
    pid = client.service_pid()
    adds = [
        actor.call.remote("add", ([lesson(f"w{i}")],), {"request_id": f"add-{i}"}) for i in range(n)
    ]
    reports = [
        actor.call.remote("report_outcome", ([base], i % 3 == 0), {"request_id": f"rep-{i}"})
        for i in range(n)
    ]
    ray.wait(adds, num_returns=3, timeout=120)
    _, pending = ray.wait(adds + reports, num_returns=2 * n, timeout=0)
    os.kill(pid, signal.SIGKILL)
    assert pending, "every write finished before the kill: nothing was in flight"
    return adds, reports, pid, client.service_pid()


@pytest.mark.slow
def test_killed_service_restarts_with_every_acknowledged_write_once(
    tmp_path, embedder, ray_cluster
):
    n = 24
    client = start_experience_service(
        tmp_path / "bank", distributed=DistributedConfig(enabled=True, max_restarts=2)
    )
    try:
        [base] = client.add([lesson("base")], vectors=unit(1, seed=0))
        adds, reports, before, after = _fire_and_kill(client, base, n)
        assert after != before, "the service did not restart"
        added = ray.get(adds, timeout=300)  # every call answered (retried after the restart)
        ray.get(reports, timeout=300)
        rows = client.experiences(include_inactive=True)
        titles = [e.title for e in rows]
        for i, ids in enumerate(added):  # acknowledged => present, under the id it answered
            assert [e.title for e in client.get(ids)] == [f"lesson w{i}"]
        assert sorted(titles) == sorted(["lesson base"] + [f"lesson w{i}" for i in range(n)])
        base_row = client.get_one(base)
        assert (base_row.uses, base_row.wins) == (n, len(range(0, n, 3)))
        assert client.check_consistency()["ok"]
    finally:
        stop_experience_service(client)


@pytest.mark.slow
def test_service_dying_after_commit_is_retried_without_a_duplicate(tmp_path, embedder, ray_cluster):
    """The worst case for a retry: the write committed, the process died before answering."""
    marker = tmp_path / "died-once"

    class DiesAfterFirstCommit(ExperienceServiceActor):
        def call(self, method, args, kwargs):
            result = super().call(method, args, kwargs)
            if method in ("add", "report_outcome") and not marker.exists():
                marker.touch()
                os._exit(1)  # committed, never answered
            return result

    dist = DistributedConfig(enabled=True, max_restarts=2, experience_service_name="dying")
    actor = (
        ray.remote(DiesAfterFirstCommit)
        .options(**experience_actor_options(dist))
        .remote(str(tmp_path / "bank"))
    )
    client = ExperienceClient(RayTransport(actor))
    try:
        first_pid = client.service_pid()
        ids = client.add([lesson("once")], vectors=unit(1, seed=0))
        assert marker.exists() and client.service_pid() != first_pid
        assert [e.title for e in client.experiences(include_inactive=True)] == ["lesson once"]
        assert [e.id for e in client.experiences()] == ids
        marker.unlink()
        client.report_outcome(ids, True)
        assert marker.exists() and (client.get_one(ids[0]).uses, client.get_one(ids[0]).wins) == (
            1,
            1,
        )
    finally:
        stop_experience_service(client)
