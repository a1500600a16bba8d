"""Where a result came from: ``provenance.json`` beside every eval summary.

It records what someone needs to rerun the row or to know it is not comparable: the suite
(name, version, content hash and whether it matches the published one), the package version
and git commit (with a dirty flag), the agent (spec, model path and weights hash, sampling
settings, seeds), the experience store (entries and a hash of their text) when one was used,
the engines' versions, the hardware and the wall time.

Example:
    >>> info = package_info()
    >>> sorted(info)
    ['git_commit', 'git_dirty', 'version']
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import comprl_gym
from comprl_gym.utils import atomic_write_json, jsonable

PROVENANCE_FILE = "provenance.json"
#: Packages whose version decides what an env plays or how an agent samples.
ENGINES = (
    "gymnasium",
    "minihack",
    "nle",
    "alfworld",
    "textworld",
    "bm25s",
    "spacy",
    "swebench",
    "torch",
    "transformers",
    "vllm",
)
_PACKAGE_DIR = Path(comprl_gym.__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(_PACKAGE_DIR), *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def package_info() -> dict[str, Any]:
    """comprl-gym's version, and the git commit of the checkout it runs from (if any)."""
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=no", "--", str(_PACKAGE_DIR))
        dirty = bool(status) if status is not None else None
    return {"version": comprl_gym.__version__, "git_commit": commit, "git_dirty": dirty}


def engine_versions() -> dict[str, str]:
    """Installed versions of :data:`ENGINES` (those present)."""
    found = {}
    for name in ENGINES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def hardware_info() -> dict[str, Any]:
    """CPU, memory and (when torch is already loaded) accelerators."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    torch = sys.modules.get("torch")  # never import an engine just to describe the machine
    if torch is not None and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def files_sha256(paths: list[Path]) -> str:
    """One SHA-256 over the files' names (relative to their common folder) and bytes."""
    digest = hashlib.sha256()
    paths = sorted(paths)
    root = Path(os.path.commonpath([str(p) for p in paths])) if paths else Path()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


#: Weight files hashed for an agent's model (a folder's other files are configuration).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def agent_info(spec: str, seeds: list[int]) -> dict[str, Any]:
    """The agent: spec, sampling settings, seeds, and for a local model its path and weights hash."""
    info: dict[str, Any] = {"spec": spec, "seeds": list(seeds)}
    from comprl_gym.agents.llm_agent import LLM_SPEC_KINDS, parse_agent_spec

    if ":" not in spec or spec.split(":", 1)[0] not in LLM_SPEC_KINDS:
        info["kind"] = spec if spec in ("random", "expert") else "python"
        return info
    base, options = parse_agent_spec(spec)
    kind, model = base.split(":", 1)
    info.update(kind=kind, model=model, sampling=options)
    if kind == "openai":
        return info  # a served model: its weights are not ours to read
    try:
        from comprl_gym.llm.models import resolve_model

        path = Path(resolve_model(model))
    except Exception as exc:  # the model is resolved again when the agent is built
        info["model_path_error"] = str(exc)
        return info
    info["model_path"] = str(path)
    weights = (
        [p for p in path.rglob("*") if p.suffix in WEIGHT_SUFFIXES] if path.is_dir() else [path]
    )
    if weights:
        info["weights_sha256"] = files_sha256(weights)
    return info


def experience_info(folder: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """Entries of an experience store and one hash of their text (read-only)."""
    if not folder:
        return None
    path = Path(folder) / "experiences.sqlite3"
    if not path.exists():
        return {"path": str(folder), "entries": 0, "sha256": None}
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT id, title, description, content, env_family, status FROM experiences "
            "ORDER BY id"
        ).fetchall()
    digest = hashlib.sha256()
    for row in rows:
        digest.update(repr(row).encode("utf-8") + b"\n")
    active = sum(1 for row in rows if row[5] == "active")
    return {"path": str(folder), "entries": active, "rows": len(rows), "sha256": digest.hexdigest()}


def build_provenance(
    config: Any, wall_time_s: float, suite: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The provenance record of an eval run (``config`` is an ``EvalConfig``)."""
    return {
        "suite": suite,
        "package": package_info(),
        "agent": agent_info(config.agent, list(config.seeds)),
        "experience": experience_info(config.experience),
        "engines": engine_versions(),
        "hardware": hardware_info(),
        "wall_time_s": round(float(wall_time_s), 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_provenance(
    out_dir: str | os.PathLike[str],
    config: Any,
    wall_time_s: float,
    suite: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``provenance.json`` into ``out_dir`` (atomically) and return it."""
    record = build_provenance(config, wall_time_s, suite)
    atomic_write_json(Path(out_dir) / PROVENANCE_FILE, jsonable(record))
    return record
