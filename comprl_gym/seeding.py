"""Seeds and generator states: make a run repeatable and a resumed run identical.

:func:`seed_everything` seeds Python, NumPy and torch at the start of a run;
:func:`capture_rng_state` and :func:`restore_rng_state` save and restore every generator's
state with a checkpoint, so a resumed run draws exactly what the uninterrupted one drew.

Example:
    >>> import random
    >>> seed_everything(3)
    >>> state = capture_rng_state()
    >>> first = random.random(), float(torch.rand(1))
    >>> restore_rng_state(state)
    >>> (random.random(), float(torch.rand(1))) == first
    True
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; make torch pick deterministic kernels where it can."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) generator states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back the generator states :func:`capture_rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
