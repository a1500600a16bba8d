"""What the study runners share: where things are, and how a command runs and resumes."""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout, its committed results and its (ignored) run folders.
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
RUNS = REPO / "runs"


def shared_data_dir() -> Path:
    """The official data: ``$COMPRL_SHARED_DATA``, or ``../shared/data`` beside the checkout."""
    env = os.environ.get("COMPRL_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"
