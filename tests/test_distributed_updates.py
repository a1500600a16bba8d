"""Data-parallel updates over Ray actors (gloo) against the one-process PolicyOptimizer step.

A two-node Ray cluster on loopback (``ray.cluster_utils.Cluster``, one CPU per node) runs the
ranks, one per node; the truth is the one-process :meth:`PolicyOptimizer.update` on the same
batch from the same weights and optimiser state.
"""

from __future__ import annotations

import copy
import random

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.distributed.cluster import loopback_only, remote_capable  # noqa: E402
from comprl_gym.distributed.config import DistributedConfig  # noqa: E402
from comprl_gym.trainers.checkpoint import CheckpointManager  # noqa: E402
from comprl_gym.trainers.config import LoraSettings, ModelSettings  # noqa: E402
from comprl_gym.trainers.data_parallel import (  # noqa: E402
    DataParallelOptimizer,
    check_update_config,
    data_parallel,
    optimizer_options,
)
from comprl_gym.trainers.losses import CISPO, ClippedPG  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample  # noqa: E402

TWO_RANKS = DistributedConfig(enabled=True, trainer_ranks=2, update_backend="gloo")
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def ray_cluster():
    """Two CPU nodes on 127.0.0.1; nothing of it survives the module."""
    loopback_only()  # Ray >= 2.50 would bind the node's default-route IP
    # Two logical CPUs per node: a finished group's ranks may still hold theirs while the
    # next group starts (each rank gets one thread either way).
    node = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        ray.init(address=cluster.address, log_to_driver=False)
        assert len(ray.nodes()) == 2
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        remote_capable()


def make_batch(seed: int, vocab: int = 300) -> list[TrainSample]:
    """Seven sequences of different lengths: prompt tokens (mask 0) then trained tokens, mixed
    advantages and weights, one with advantage 0 (skipped), sampler log-probs on some."""
    rng = random.Random(seed)
    samples = []
    for i, advantage in enumerate([1.0, -0.5, 0.0, 2.0, -1.5, 0.7, -0.2]):
        prompt = rng.randint(3, 9)
        completion = rng.randint(1, 6)
        ids = [rng.randrange(vocab) for _ in range(prompt + completion)]
        old = None
        if i % 2:  # off-policy log-probs: ratios away from 1, so clipping is exercised
            old = [rng.uniform(-9.0, -4.0) for _ in ids]
        samples.append(
            TrainSample(
                ids,
                [0] * prompt + [1] * completion,
                advantage,
                old_logprobs=old,
                weight=1.0 + 0.25 * (i % 3),
            )
        )
    return samples


def max_weight_difference(a: PolicyOptimizer, b: PolicyOptimizer) -> float:
    ours = dict(a.model.named_parameters())
    return max(float((p - ours[n]).detach().abs().max()) for n, p in b.model.named_parameters())


def max_optimizer_difference(a: dict, b: dict) -> float:
    """Largest difference between two AdamW state dicts (exp_avg, exp_avg_sq, step)."""
    assert a["state"].keys() == b["state"].keys()
    worst = 0.0
    for index, state in a["state"].items():
        for key, value in state.items():
            worst = max(worst, float((value - b["state"][index][key]).abs().max()))
    assert a["param_groups"] == b["param_groups"]
    return worst


def one_process_twin(group: DataParallelOptimizer) -> PolicyOptimizer:
    """A one-process optimiser with the group's current weights and optimiser state."""
    twin = PolicyOptimizer.from_settings(group.settings, **optimizer_options(group.driver))
    twin.load_state_dict(copy.deepcopy(group.state_dict()))
    assert max_weight_difference(group.driver, twin) == 0.0
    return twin


@pytest.mark.slow
# First in the file: the module-scoped actor group below holds both nodes' CPUs until the
# module ends.
def test_two_rank_extractor_cispo_update_equals_the_one_process_update(ray_cluster):
    # The extractor's optimiser as the trainer builds it (CISPO; here with token
    # normalisation, the actor test covers per-sequence): no sampler log-probs (the old
    # log-probs are the trainer's own), training-count weights on the advantages.
    settings = ModelSettings(
        model="tiny",
        lr=1e-3,
        max_grad_norm=1.0,
        micro_batch_size=4,
        lora=LoraSettings(enabled=True, r=4, dropout=0.0),
    )
    # A fixed LoRA init: with a random one (the global RNG after whatever ran before) the
    # step-2 difference ranged 7e-8 .. 3.7e-5 — Adam's first steps divide near-zero gradient
    # entries by their own size, which turns summation-order rounding into weight.
    torch.manual_seed(0)
    driver = PolicyOptimizer.from_settings(
        settings, loss=CISPO(eps_low=0.1, eps_high=0.1, normalization="token")
    )
    group = data_parallel(driver, TWO_RANKS)
    try:
        reference = one_process_twin(group)  # the group's ranks took the driver's LoRA init
        for step, seed in enumerate([6, 7]):
            batch = [
                TrainSample.from_generation(
                    s.input_ids[:4], s.input_ids[4:], s.advantage, weight=0.5
                )
                for s in make_batch(seed)
            ]
            assert_same_step(group, reference, batch, f"extractor CISPO step {step + 1}")
        # A batch without signal takes no step anywhere, as in one process.
        silent = [TrainSample([1, 2, 3], [0, 1, 1], 0.0)]
        assert group.update(silent)["samples"] == reference.update(silent)["samples"] == 0
        assert group.steps == reference.steps == 2
    finally:
        group.close()


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def actor_group(ray_cluster, request):
    """The actor's optimiser (clipped PG, per-episode normalisation) over two ranks, replicas
    (ddp) or FSDP2 shards. A small clip: the global gradient norm is above it, so clipping
    acts (a rank clipping by its own share's norm would land elsewhere). Micro-batches of 2:
    the ranks' shares need different numbers of them."""
    settings = ModelSettings(model="tiny", lr=1e-3, max_grad_norm=0.05, micro_batch_size=2)
    driver = PolicyOptimizer.from_settings(settings, loss=ClippedPG(normalization="sequence"))
    config = DistributedConfig(**{**vars(TWO_RANKS), "update_strategy": request.param})
    group = data_parallel(driver, config)
    assert isinstance(group, DataParallelOptimizer)
    try:
        yield group
    finally:
        group.close()


def assert_same_step(group, reference, batch, label: str) -> float:
    """One step of both on ``batch``: same statistics, same weights; the weight difference."""
    expected = reference.update(batch)
    got = group.update(batch)
    assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5, abs=1e-7)
    for key in ("samples", "tokens", "seq_tokens"):
        assert got[key] == expected[key]
    assert got["clip_fraction"] == pytest.approx(expected["clip_fraction"], abs=1e-6)
    difference = max_weight_difference(group.driver, reference)
    strategy = group.config.update_strategy
    print(f"{label} ({strategy}): max |w_2ranks - w_1process| = {difference:.3g}")
    assert difference < TOLERANCE
    return expected["grad_norm"]


@pytest.mark.slow
def test_two_rank_actor_update_equals_the_one_process_update(actor_group):
    reference = one_process_twin(actor_group)
    nodes = {ray.get(rank.master_address.remote())[0] for rank in actor_group.ranks}
    assert nodes == {"127.0.0.1"}
    for step, seed in enumerate([1, 2]):
        norm = assert_same_step(actor_group, reference, make_batch(seed), f"actor step {step + 1}")
        assert norm > actor_group.settings.max_grad_norm  # clipping was active
    if actor_group.config.update_strategy == "ddp":  # the replicas agree with the driver
        replica = ray.get(actor_group.ranks[1].trainable_parameters.remote())
        for name, param in actor_group.model.named_parameters():
            assert float((replica[name] - param.detach()).abs().max()) < TOLERANCE


@pytest.mark.slow
def test_checkpoint_saved_at_two_ranks_resumes_at_one_and_back(actor_group, tmp_path):
    reference = one_process_twin(actor_group)
    steps = reference.steps
    assert_same_step(actor_group, reference, make_batch(3), "before the checkpoint")
    # Saved once, by the driver, in the one-process format.
    CheckpointManager(tmp_path / "two").save(1, {"actor": actor_group.state_dict()})
    saved = CheckpointManager(tmp_path / "two").load()["state"]["actor"]
    resumed = PolicyOptimizer.from_settings(
        actor_group.settings, loss=ClippedPG(eps_high=0.28)
    )  # fresh
    resumed.load_state_dict(saved)
    assert resumed.steps == reference.steps == steps + 1
    weights = max_weight_difference(resumed, reference)
    moments = max_optimizer_difference(
        resumed.optimizer.state_dict(), reference.optimizer.state_dict()
    )
    strategy = actor_group.config.update_strategy
    print(f"2 ({strategy}) -> 1 ranks: weights {weights:.3g}, AdamW state {moments:.3g}")
    assert weights < TOLERANCE and moments < TOLERANCE
    # Training goes on the same from there.
    resumed.update(make_batch(4))
    reference.update(make_batch(4))
    assert max_weight_difference(resumed, reference) < TOLERANCE

    # Back: a one-rank checkpoint loaded onto the two ranks (which hold other weights now).
    CheckpointManager(tmp_path / "one").save(2, {"actor": reference.state_dict()})
    actor_group.load_state_dict(CheckpointManager(tmp_path / "one").load()["state"]["actor"])
    # Every rank holds the loaded state (an FSDP rank gathers its shards onto rank 0).
    states = ray.get([rank.state_dict.remote() for rank in actor_group.ranks])
    for state in states if actor_group.config.update_strategy == "ddp" else states[:1]:
        assert state["steps"] == reference.steps
        moments = max_optimizer_difference(state["optimizer"], reference.optimizer.state_dict())
        assert moments < TOLERANCE
    assert_same_step(actor_group, reference, make_batch(5), "1 -> 2 ranks, one more step")


def test_unsupported_update_settings_are_refused_clearly():
    with pytest.raises(ConfigurationError, match="update_strategy"):
        check_update_config(DistributedConfig(trainer_ranks=2, update_strategy="zero3"))
    with pytest.raises(ConfigurationError, match="num_gpus"):
        check_update_config(DistributedConfig(trainer_ranks=2, update_backend="nccl"))
