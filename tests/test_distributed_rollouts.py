"""Env worker pools on a real multi-node Ray cluster in one box (3 CPU-only nodes, loopback).

The truth is the local rollout: the same seeds give the same trajectories in one process and
through the pool, also when a worker is killed mid-rollout (its episodes are played again and
counted, none is lost or doubled). Nothing of the cluster listens beyond 127.0.0.1 or outlives
it.
"""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import psutil
import pytest
from conftest import assert_listens_on_loopback_only, ray_session_processes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import comprl_gym  # noqa: E402, F401
from comprl_gym.agents.base import RandomAgent  # noqa: E402
from comprl_gym.agents.llm_agent import agent_from_spec  # noqa: E402
from comprl_gym.distributed import DistributedConfig  # noqa: E402
from comprl_gym.distributed.cluster import RayCluster, loopback_only  # noqa: E402
from comprl_gym.distributed.env_pool import EnvPool  # noqa: E402
from comprl_gym.env_factory import EnvSpec  # noqa: E402
from comprl_gym.rollouts import RolloutConfig, RolloutWorker, Trajectory  # noqa: E402

pytestmark = pytest.mark.slow

ROOM = "comprl/MiniHack-Room-5x5-v0"
MAX_STEPS = 8
#: The env every test plays: a spec carries its gym.make arguments to the workers.
ROOM_SPEC = EnvSpec.of(ROOM, {"max_steps": MAX_STEPS})
CONFIG = DistributedConfig(enabled=True, env_workers=2, envs_per_worker=2, max_episode_retries=2)


@pytest.fixture(scope="module")
def cluster():
    """Three nodes of one CPU each; the driver joins by address, as on a real cluster."""
    loopback_only()
    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    session_dir = nodes.head_node.get_session_dir_path()
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1)
        config = DistributedConfig(**{**vars(CONFIG), "address": nodes.address})
        with RayCluster(config) as connected:
            yield connected, session_dir
    finally:
        nodes.shutdown()
    deadline = time.monotonic() + 20
    while ray_session_processes(session_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p.pid for p in ray_session_processes(session_dir)]
    assert not left, f"Ray processes left after shutdown: {left}"


@pytest.fixture(scope="module")
def pool(cluster):
    with EnvPool(CONFIG) as env_pool:
        yield env_pool


def comparable(trajectory: Trajectory) -> dict:
    """A trajectory without what differs between two plays of one episode: its random id and
    the clocks."""
    record = trajectory.to_dict()
    for key in ("episode_id", "wall_time_s", "env_time_s", "gen_time_s", "reruns"):
        record.pop(key)
    for turn in record["turns"]:
        turn.pop("env_time_s")
        turn.pop("gen_time_s")
    return record


def local_rollout(seeds, agent=None, agent_factory=None, n_envs=4):
    envs = [gym.make(ROOM, max_steps=MAX_STEPS, disable_env_checker=True) for _ in range(n_envs)]
    try:
        worker = RolloutWorker(envs, agent=agent, agent_factory=agent_factory)
        return worker.run(seeds)
    finally:
        for env in envs:
            env.close()


def seeded_random(env, seed):
    return RandomAgent(seed=seed)


def test_the_pool_plays_the_local_trajectories_on_two_nodes(cluster, pool):
    seeds = list(range(10))
    remote = RolloutWorker(
        pool.envs([ROOM_SPEC] * pool.capacity), agent_factory=seeded_random, stepper=pool
    ).run(seeds)
    local = local_rollout(seeds, agent_factory=seeded_random)
    assert [t.seed for t in remote] == seeds
    assert [comparable(t) for t in remote] == [comparable(t) for t in local]
    assert sum(len(t.turns) for t in remote) > len(seeds)  # real episodes, several steps each
    assert all(t.reruns == 0 for t in remote)
    # the two workers are two actors on two different nodes of the cluster
    places = pool.worker_places()
    assert len({p["node_id"] for p in places}) == 2 and len({p["pid"] for p in places}) == 2


def test_an_llm_agent_plays_the_same_episodes_through_the_pool(pool):
    """The batched path: the real tiny model in the driver, one generation call per round for
    every live episode, the envs on the workers."""
    seeds = [3, 4, 5, 6]
    spec = "hf:tiny?max_tokens=4&temperature=1.0"
    remote = RolloutWorker(
        pool.envs([ROOM_SPEC] * 4),
        agent=agent_from_spec(spec, seed=7),
        config=RolloutConfig(max_turns=4),
        stepper=pool,
    ).run(seeds)
    local = RolloutWorker(
        [gym.make(ROOM, max_steps=MAX_STEPS) for _ in range(4)],
        agent=agent_from_spec(spec, seed=7),
        config=RolloutConfig(max_turns=4),
    ).run(seeds)

    def logprobs(trajectories):
        return [lp for t in trajectories for turn in t.turns for lp in turn.completion_logprobs]

    # float32 forward passes of one batch agree to rounding (Ray changes torch's thread count)
    assert logprobs(remote) == pytest.approx(logprobs(local), abs=1e-5)
    for trajectory in remote + local:
        for turn in trajectory.turns:
            turn.completion_logprobs = None
    assert [comparable(t) for t in remote] == [comparable(t) for t in local]
    assert all(turn.completion_token_ids for t in remote for turn in t.turns)


class KillingAgent(RandomAgent):
    """A seeded random agent that SIGKILLs an env worker's process at one step of one
    episode: the worker dies between two rounds, mid-rollout, with episodes running on it."""

    def __init__(self, seed, victim_pid, kill_at, killed):
        super().__init__(seed=seed)
        self.victim_pid, self.kill_at, self.steps, self.killed = victim_pid, kill_at, 0, killed

    def act(self, observation, info):
        self.steps += 1
        if self.kill_at is not None and self.steps == self.kill_at:
            os.kill(self.victim_pid, signal.SIGKILL)
            self.killed.append(self.seed)
            self.kill_at = None
        return super().act(observation, info)


def test_a_killed_worker_loses_no_episode_and_doubles_none(pool):
    seeds = list(range(20, 28))
    victim = pool.worker_places()[0]["pid"]
    killed = []

    def factory(env, seed):
        # the second episode's third step kills worker 0 (it runs on worker 1)
        kill_at = 3 if seed == seeds[1] and not killed else None
        agent = KillingAgent(seed, victim, kill_at, killed)
        agent.seed = seed
        return agent

    finished = []
    remote = RolloutWorker(
        pool.envs([ROOM_SPEC] * pool.capacity),
        agent_factory=factory,
        config=RolloutConfig(max_episode_retries=CONFIG.max_episode_retries),
        stepper=pool,
    ).run(seeds, on_episode=finished.append)
    assert killed == [seeds[1]]
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == "zombie"
    # every episode once, in order, and each as the local rollout plays it
    assert [t.seed for t in remote] == seeds
    assert sorted(t.seed for t in finished) == seeds  # on_episode: once per episode
    local = local_rollout(seeds, agent_factory=seeded_random)
    assert [comparable(t) for t in remote] == [comparable(t) for t in local]
    # the episodes live on worker 0 (envs 0 and 2 of 4) when it died were played again, once
    rerun = [t.seed for t in remote if t.reruns]
    assert seeds[1] not in rerun  # seed 21 runs on env 1, i.e. worker 1: the killer survives
    assert len(rerun) in (1, 2) and all(t.reruns == 1 for t in remote if t.reruns)
    # Ray restarted the worker (max_restarts): a new process that plays on
    new_pid = pool.worker_places()[0]["pid"]
    assert new_pid != victim


def test_every_ray_server_listens_on_loopback_only(cluster):
    _, session_dir = cluster
    pids = {p.pid for p in ray_session_processes(session_dir)} | {os.getpid()}
    assert_listens_on_loopback_only(pids)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}


def test_a_pool_the_cluster_cannot_hold_fails_clearly(pool):
    from comprl_gym.core import ConfigurationError

    # more CPUs than the three nodes have: refused at once
    with pytest.raises(ConfigurationError, match="whole cluster has 3"):
        EnvPool(DistributedConfig(enabled=True, env_workers=4))
    # fits the cluster but not beside the running pool: refused after the start timeout,
    # instead of Ray waiting forever
    crowded = DistributedConfig(enabled=True, env_workers=2, actor_start_timeout_s=5)
    with pytest.raises(ConfigurationError, match="did not all start within 5 s"):
        EnvPool(crowded)
    assert len(pool.worker_places()) == 2  # the running pool is untouched
