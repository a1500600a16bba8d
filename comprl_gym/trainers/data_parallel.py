"""Data-parallel actor and extractor updates: one :class:`PolicyOptimizer` step over R ranks.

:func:`data_parallel` turns a trainer's :class:`~comprl_gym.trainers.policy.PolicyOptimizer`
(the actor's clipped-PG one or the extractor's CISPO one) into a
:class:`DataParallelOptimizer` with the same interface. The trainer keeps the local optimiser
as the *driver*: its model serves rollouts and weight pushes, and its checkpoint format does
not change. Each update is taken by R Ray actors (:class:`UpdateRank`) that form one
``torch.distributed`` process group (gloo on CPU, nccl on GPU; the master is rank 0's node IP
and a free port there) and hold a full replica of the model each (``update_strategy: ddp``) or
a shard of it (``fsdp``: FSDP2's ``fully_shard``, one shard group per transformer block).

The step, for a batch B split over the ranks (useful samples only, sorted by length and dealt
round-robin so the ranks get similar token counts):

* Full-batch loss. ``losses.aggregate`` makes the loss ``L = (1/D) * sum_{s in B} l_s``, with
  ``l_s`` the sequence's masked token sum (``loss_normalization: token``, ``D`` = trained
  tokens of B) or its masked token mean (``sequence``, ``D`` = useful sequences of B, so every
  episode weighs the same). ``D`` is a property of the whole batch.
* Rank r computes ``L_r = (1/D) * sum_{s in B_r} l_s`` with the *global* ``D`` (the driver
  counts it and passes it down; a rank never normalises by its own share), so
  ``sum_r L_r = L`` and, the gradient being linear, ``sum_r grad L_r = grad L``.
* The gradients are then summed over the ranks (not averaged as DDP's wrapper and FSDP do
  by default: the mean would need every ``L_r`` scaled by R, the same thing with one more
  multiply). ``ddp``: one all-reduce of the accumulated gradients before the step
  (:func:`sum_gradients`); ``fsdp``: FSDP's reduce-scatter in every backward, set to a plain
  SUM (divide factor 1). Every rank now holds ``grad L`` (or its shard of it) exactly, up to
  float summation order (~1e-7 relative).
* Clipping runs after the reduce, on the full gradient: its norm is the global norm, the
  same on every rank, the same as the one-process norm (FSDP: ``clip_grad_norm_`` over the
  DTensor shards computes the global norm too).
* Every rank takes the same AdamW step from the same state: the replicas stay identical.

Why not ``torch.nn.parallel.DistributedDataParallel`` itself: its reducer all-reduces inside
every ``backward()`` and needs every rank to run the same number of backward passes, while
:meth:`PolicyOptimizer.update` accumulates a variable number of micro-batches per rank (the
shares differ in size; a rank may have no useful sample). One explicit all-reduce of the
accumulated gradients before the step is DDP's algorithm with gradient accumulation
(``no_sync`` + one synced step) without that constraint. PolicyOptimizer stays the one owner
of the loss and the optimiser step; ranks call it with the global normalisers and the reduce
hook (``num_tokens``, ``num_sequences``, ``reduce_gradients``). A sharded forward is a
collective, so with ``fsdp`` every rank runs as many micro-batches as the largest share needs
(``micro_batches``; the extra ones score nothing).

After each step the driver copies rank 0's trainable parameters into its model (a few
hundred KB with LoRA). ``state_dict()`` fetches rank 0's full optimiser state (the existing
checkpoint format, written once by the driver); ``load_state_dict`` loads it into the driver
and every rank, whatever R was when it was saved. With ``fsdp`` the full state is gathered
onto rank 0 (``get_model_state_dict`` / ``get_optimizer_state_dict`` with
``full_state_dict``) and the optimiser state converted from parameter names to the
checkpoint's parameter indices; loading shards it again.

Example (no Ray needed for one rank: the optimiser comes back unchanged):
    >>> from comprl_gym.distributed.config import DistributedConfig
    >>> from comprl_gym.trainers.config import ModelSettings
    >>> from comprl_gym.trainers.policy import PolicyOptimizer
    >>> from comprl_gym.trainers.losses import CISPO
    >>> opt = PolicyOptimizer.from_settings(ModelSettings(model="tiny"), loss=CISPO())
    >>> data_parallel(opt, DistributedConfig(enabled=True, trainer_ranks=1)) is opt
    True
    >>> shard_samples(list("abcde"), 2)
    [['a', 'c', 'e'], ['b', 'd']]
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
from dataclasses import replace
from typing import Any

import ray
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

from comprl_gym.core import ConfigurationError
from comprl_gym.distributed.cluster import actor_options, wait_for_actors
from comprl_gym.distributed.config import DistributedConfig
from comprl_gym.trainers.config import ModelSettings
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample, load_causal_lm

logger = logging.getLogger(__name__)

#: PolicyOptimizer's constructor arguments beside the model: the loss and its knobs. A rank
#: builds its replica with the same ones (read from the driver's attributes of the same name).
_MODEL_ARGS = ("self", "model", "tokenizer", "settings")


def optimizer_options(optimizer: PolicyOptimizer) -> dict[str, Any]:
    """The keyword arguments that rebuild ``optimizer``'s loss and train/freeze switch, so a
    rank's replica computes the same loss.

    >>> from comprl_gym.trainers.config import ModelSettings
    >>> from comprl_gym.trainers.losses import CISPO
    >>> opt = PolicyOptimizer.from_settings(ModelSettings(model="tiny"), loss=CISPO())
    >>> optimizer_options(opt)
    {'loss': CISPO(eps_low=0.1, eps_high=0.1, variant='clip', normalization='sequence'), 'trainable': True}
    """
    names = inspect.signature(PolicyOptimizer.__init__).parameters
    return {name: getattr(optimizer, name) for name in names if name not in _MODEL_ARGS}


def check_update_config(config: DistributedConfig) -> None:
    """Refuse update settings this module cannot run, before any actor starts."""
    config.validate()
    if config.update_strategy not in ("ddp", "fsdp"):
        raise ConfigurationError(
            f"distributed.update_strategy must be 'ddp' or 'fsdp', got {config.update_strategy!r}"
        )
    if config.update_backend not in ("gloo", "nccl"):
        raise ConfigurationError(
            f"distributed.update_backend must be 'gloo' or 'nccl', got {config.update_backend!r}"
        )
    gpus = float(config.trainer_resources.get("num_gpus", 0))
    if config.update_backend == "nccl" and gpus < 1:
        raise ConfigurationError(
            "distributed.update_backend 'nccl' needs one GPU per trainer rank: set "
            "distributed.trainer_resources to {num_gpus: 1} (or use 'gloo' on CPU)"
        )


def shard_samples(samples: list[Any], ranks: int) -> list[list[Any]]:
    """Deal ``samples`` round-robin over ``ranks`` (sorted by length first, shares are even)."""
    return [samples[r::ranks] for r in range(ranks)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux), for gloo on a one-box cluster."""
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return None


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """All-reduce (SUM) the gradients of ``params`` over the default process group.

    One flat buffer, one collective. A parameter no rank gave a gradient stays ``None`` (AdamW
    then skips it, as the one-process step does); one that only some ranks touched gets the
    others' zeros.
    """
    device = params[0].device
    present = torch.tensor([float(p.grad is not None) for p in params], device=device)
    dist.all_reduce(present, op=dist.ReduceOp.SUM)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for param, seen in zip(params, present.tolist()):
        size = param.numel()
        param.grad = flat[offset : offset + size].view_as(param).clone() if seen else None
        offset += size


def _already_reduced(params: list[torch.nn.Parameter]) -> None:
    """FSDP reduce-scatters (sums) each gradient shard inside backward: nothing left to do."""


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: each transformer block its own shard group, the rest (embeddings, tied LM head,
    final norm) the root's. Gradients are summed over the ranks, not averaged (the losses
    already carry the global normaliser)."""
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module)
    fully_shard(model)
    for module in model.modules():
        if hasattr(module, "set_gradient_divide_factor"):
            # A plain SUM, divided by 1: FSDP would otherwise ask for PREMUL_SUM, which gloo
            # lacks.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def _trained_names(model: torch.nn.Module) -> list[str]:
    """Trained parameters' names in the optimiser's order (PolicyOptimizer's param list)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def optimizer_state_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A ``torch.optim`` state dict keyed by parameter index -> keyed by parameter name (the
    form ``torch.distributed.checkpoint.state_dict`` reads and writes)."""
    return {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]
        ],
    }


def optimizer_state_by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`optimizer_state_by_name` (the checkpoint's form; the gathered
    groups come back with lists where torch keeps tuples, such as AdamW's ``betas``)."""
    index = {name: i for i, name in enumerate(names)}
    groups = []
    for group in state["param_groups"]:
        group = {k: tuple(v) if isinstance(v, list) else v for k, v in group.items()}
        groups.append({**group, "params": [index[n] for n in group["params"]]})
    return {"state": {index[n]: v for n, v in state["state"].items()}, "param_groups": groups}


class UpdateRank:
    """One data-parallel rank in its own process (a Ray actor), a member of the update
    process group: a replica :class:`PolicyOptimizer` (``ddp``) or a shard of one (``fsdp``:
    the optimiser is built over the sharded parameters once the group is joined).

    With ``fsdp`` every method that reads or writes weights is a collective: the driver calls
    it on every rank and reads rank 0's answer.
    """

    def __init__(
        self, settings: ModelSettings, options: dict[str, Any], backend: str, strategy: str
    ):
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU: it is cuda:0 here; gloo ranks
        # compute on the CPU. The dtype is the driver's (DataParallelOptimizer resolves it).
        settings = replace(settings, device="cuda:0" if backend == "nccl" else "cpu")
        self.settings = settings
        self.options = options
        self.backend = backend
        self.strategy = strategy
        self.rank = -1
        self.model, self.tokenizer = load_causal_lm(settings, "distributed rank")
        self.optimizer: PolicyOptimizer | None = None
        if strategy == "ddp":
            self.optimizer = PolicyOptimizer(self.model, self.tokenizer, settings, **options)

    def master_address(self) -> tuple[str, int]:
        """This node's IP and a free port on it (asked of rank 0)."""
        return ray.util.get_node_ip_address(), _free_port()

    def join(self, rank: int, world_size: int, address: str, port: int) -> int:
        if self.backend == "gloo" and address.startswith("127."):
            interface = _loopback_interface()
            if interface is not None:  # gloo would otherwise bind the hostname's address
                os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        dist.init_process_group(
            self.backend,
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
        )
        self.rank = rank
        if self.strategy == "fsdp":
            shard_model(self.model)
            self.optimizer = PolicyOptimizer(
                self.model, self.tokenizer, self.settings, **self.options
            )
        return rank

    def update(
        self,
        samples: list[TrainSample],
        num_tokens: float,
        num_sequences: float,
        micro_batches: int,
    ) -> dict[str, float]:
        sharded = self.strategy == "fsdp"
        return self.optimizer.update(
            samples,
            num_tokens=num_tokens,
            num_sequences=num_sequences,
            reduce_gradients=_already_reduced if sharded else sum_gradients,
            micro_batches=micro_batches if sharded else 0,
        )

    def trainable_parameters(self) -> dict[str, torch.Tensor]:
        """The trained parameters (all of them, or the LoRA adapters), whole, on the CPU."""
        out = {}
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                full = p.full_tensor() if hasattr(p, "full_tensor") else p
                out[name] = full.detach().cpu()
        return out

    def state_dict(self) -> dict[str, Any]:
        """:meth:`PolicyOptimizer.state_dict`'s format, unsharded (rank 0's is complete)."""
        if self.strategy == "ddp":
            return _to_cpu(self.optimizer.state_dict())
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model = get_model_state_dict(self.model, options=full)
        optim = get_optimizer_state_dict(self.model, self.optimizer.optimizer, options=full)
        if self.rank != 0:  # cpu_offload gathers onto rank 0 only
            return {}
        names = _trained_names(self.model)
        return {
            "model": model,
            "optimizer": optimizer_state_by_index(optim, names),
            "steps": self.optimizer.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.strategy == "ddp":
            self.optimizer.load_state_dict(state)
            return
        full = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, state["model"], options=full)
        if state["optimizer"]["state"]:
            optim = optimizer_state_by_name(state["optimizer"], _trained_names(self.model))
            set_optimizer_state_dict(self.model, self.optimizer.optimizer, optim, options=full)
        else:
            # A fresh optimiser (no step yet). The sharded loader would materialise its state
            # with one zero-gradient step, leaving AdamW's step count at 1 instead of 0.
            self.optimizer.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.steps = int(state["steps"])

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value


class DataParallelOptimizer:
    """A :class:`PolicyOptimizer` whose ``update`` runs over ``config.trainer_ranks`` Ray actors.

    ``driver`` is the trainer's own optimiser: it keeps serving rollouts and weight pushes
    (``model``, ``tokenizer``, ``trainable_state_dict``, ``fill_old_logprobs``; other
    attributes are read from it), and receives rank 0's weights after every step. Ray must be
    initialised (``ray.init`` or the distributed cluster) before it is built.
    """

    def __init__(
        self, driver: PolicyOptimizer, config: DistributedConfig, start_timeout_s: float = 600.0
    ):
        check_update_config(config)
        if not ray.is_initialized():
            raise ConfigurationError(
                "data-parallel updates run on Ray: call ray.init() (or start the distributed "
                "cluster) before building them"
            )
        self.driver = driver
        self.config = config
        self.world_size = config.trainer_ranks
        remote = ray.remote(max_restarts=0)(UpdateRank)
        options = actor_options(config.trainer_resources)
        # SPREAD: on a multi-node cluster the ranks land on different nodes when they can.
        self.ranks = [
            remote.options(**options, scheduling_strategy="SPREAD").remote(
                replace(driver.settings, dtype=str(driver.compute_dtype).removeprefix("torch.")),
                optimizer_options(driver),
                config.update_backend,
                config.update_strategy,
            )
            for _ in range(self.world_size)
        ]
        # Every rank must start before any can join: a rank Ray cannot place (too few
        # CPUs/GPUs for trainer_resources) would otherwise hang the group forever.
        address, port = wait_for_actors(
            self.ranks,
            "trainer ranks",
            config.trainer_resources,
            start_timeout_s,
            first_call="master_address",
        )[0]
        ray.get(
            [
                rank.join.remote(index, self.world_size, address, port)
                for index, rank in enumerate(self.ranks)
            ]
        )
        logger.info(
            "data-parallel update group: %d ranks, %s, master %s:%d",
            self.world_size,
            config.update_backend,
            address,
            port,
        )
        # The replicas start from the driver's weights (a LoRA adapter's init is random).
        self._broadcast(driver.state_dict())

    # ------------------------------------------------------------------ the PolicyOptimizer face
    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks: the driver's settings, loss, ...
        if name in ("driver", "ranks"):  # not built yet (a failed __init__)
            raise AttributeError(name)
        return getattr(self.driver, name)

    @property
    def model(self) -> Any:
        return self.driver.model

    @property
    def steps(self) -> int:
        return self.driver.steps

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        """One optimiser step on ``samples`` over the ranks; the statistics of the one-process
        step (sums of the ranks' shares; ``grad_norm`` is the global norm)."""
        useful = [s for s in samples if s.has_signal]
        if not self.driver.trainable or not useful:
            return self.driver.update(samples)  # no step: the one-process answer, no gradient
        num_tokens = float(sum(s.num_action_tokens for s in useful))
        num_sequences = float(len(useful))
        ordered = sorted(useful, key=lambda s: len(s.input_ids))
        shares = shard_samples(ordered, self.world_size)
        micro = max(1, self.driver.settings.micro_batch_size)
        passes = max((len(share) + micro - 1) // micro for share in shares)
        results = ray.get(
            [
                rank.update.remote(share, num_tokens, num_sequences, passes)
                for rank, share in zip(self.ranks, shares)
            ]
        )
        self._pull_weights()
        stats = {key: sum(r[key] for r in results) for key in ("loss", "samples", "tokens")}
        stats["seq_tokens"] = sum(r["seq_tokens"] for r in results)
        stats["clip_fraction"] = sum(r["clip_fraction"] for r in results)  # each over global D
        stats["grad_norm"] = results[0]["grad_norm"]  # the same on every rank
        stats["update_time_s"] = max(r["update_time_s"] for r in results)
        stats["tokens_per_s"] = stats["seq_tokens"] / max(stats["update_time_s"], 1e-9)
        stats["ranks"] = self.world_size
        return stats

    def _pull_weights(self) -> None:
        """Copy rank 0's trained parameters into the driver's model (the rollout weights)."""
        updated = self._from_rank0("trainable_parameters")
        with torch.no_grad():
            for name, param in self.driver.model.named_parameters():
                if name in updated:
                    param.copy_(updated[name])
        self.driver.steps += 1

    def _from_rank0(self, method: str) -> Any:
        """Rank 0's answer; sharded ranks must all take part (the call gathers shards)."""
        ranks = self.ranks if self.config.update_strategy == "fsdp" else self.ranks[:1]
        return ray.get([getattr(rank, method).remote() for rank in ranks])[0]

    def _broadcast(self, state: dict[str, Any]) -> None:
        ref = ray.put(state)  # one copy in the object store, read by every rank
        ray.get([rank.load_state_dict.remote(ref) for rank in self.ranks])

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Rank 0's optimiser state in :meth:`PolicyOptimizer.state_dict`'s format (the
        replicas are identical): a checkpoint written once, loadable on any number of ranks.
        The driver takes it too, so it is also current for a later one-process run."""
        state = self._from_rank0("state_dict")
        self.driver.load_state_dict(state)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a checkpoint saved at any number of ranks into the driver and every rank."""
        self.driver.load_state_dict(state)
        self._broadcast(state)

    def close(self) -> None:
        """Leave the process group and stop the rank actors."""
        ranks, self.ranks = self.ranks, []
        try:
            ray.get([rank.close.remote() for rank in ranks], timeout=60)
        except ray.exceptions.GetTimeoutError:
            logger.warning("trainer ranks did not leave the process group in 60 s; killing them")
        finally:
            for rank in ranks:
                ray.kill(rank)


def data_parallel(
    optimizer: PolicyOptimizer, config: DistributedConfig
) -> PolicyOptimizer | DataParallelOptimizer:
    """``optimizer`` itself when the updates stay in this process (``distributed.enabled``
    false or one trainer rank), else a :class:`DataParallelOptimizer` over
    ``config.trainer_ranks`` Ray actors (Ray must be initialised)."""
    if not config.enabled or config.trainer_ranks == 1:
        check_update_config(config)
        return optimizer
    return DataParallelOptimizer(optimizer, config, config.actor_start_timeout_s)
