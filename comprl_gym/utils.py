"""Small shared helpers: the cache folder and atomic writes."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib
import io
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


def cache_dir(*parts: str) -> Path:
    """``$COMPRL_GYM_CACHE/<parts>`` (default ``~/.cache/comprl-gym``), created on demand.

    Example:
        >>> cache_dir("models").name
        'models'
    """
    root = Path(os.environ.get("COMPRL_GYM_CACHE", Path.home() / ".cache" / "comprl-gym"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


#: The path that means standard output wherever a command takes an output file.
STDOUT = "-"


#: glibc's ``mallopt`` parameter number of the mmap threshold (``M_MMAP_THRESHOLD``).
_M_MMAP_THRESHOLD = -3


def return_freed_memory(threshold: int = 128 * 1024) -> bool:
    """Serve every allocation of ``threshold`` bytes or more (a tensor's buffer) from its own
    mapping, so that freeing it gives the memory back to the system. Returns whether glibc
    took the setting (``False`` off Linux, without glibc, or when ``MALLOC_MMAP_THRESHOLD_``
    is set: the user's choice stands).

    Why: glibc raises its threshold each time a mapped block is freed, up to 32 MiB, and from
    then on a training step's tensors come from the heap, whose freed middle it cannot give
    back. A memory-family training run's heap grew to 9 GiB within 5 iterations; with the
    threshold fixed it stays at 3.5-6 GiB, so several runs fit on one machine (issue 56).
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    Only a regular file (or nothing) is replaced. ``-`` is standard output. A symbolic link is
    followed: the file it names is replaced and the link stays a link. Anything else that
    exists (``/dev/stdout``, a pipe, a terminal) is written in place, since renaming over it
    would replace the device with a file (as root) or fail; a folder is refused.

    Example:
        >>> atomic_write_bytes("-", b"to standard output\\n")
        to standard output
    """
    if os.fspath(path) == STDOUT:
        _write_stdout(data)
        return
    path = Path(path)
    if path.is_dir():
        from comprl_gym.core import ConfigurationError  # core imports gymnasium: only here

        raise ConfigurationError(f"{path} is a folder: name a file to write, or - for stdout")
    if path.exists() and not path.is_file():
        # A device or a pipe, through any links (/dev/stdout -> /proc/self/fd/1 -> a pipe,
        # whose resolved name is no path): opened by the name given, written where it is.
        with open(path, "wb") as handle:
            handle.write(data)
        return
    path = Path(os.path.realpath(path))  # a link's target, so the link is never replaced
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_stdout(data: bytes) -> None:
    """``data`` on standard output, after what was printed before it."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (a test's capture)
        sys.stdout.write(data.decode("utf-8"))
    else:
        buffer.write(data)
    sys.stdout.flush()


def writes_to_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether writing ``path`` lands on this process's standard output (``-``,
    ``/dev/stdout``, or the file or pipe standard output is): a command then prints its
    messages to standard error, so that standard output holds only what was asked for.

    Example:
        >>> writes_to_stdout("-"), writes_to_stdout(None)
        (True, False)
    """
    if path is None:
        return False
    if os.fspath(path) == STDOUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """:func:`atomic_write_bytes` for an indented JSON document."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive lock across processes, held for the ``with`` block.

    Builders of one cached artefact (a converted model, a sandbox image) take it so that two
    processes never build the same thing at once.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: The ``--env-arg KEY=VALUE`` help (read by :func:`parse_key_values`), one wording for every
#: command that takes it.
ENV_ARG = "an argument of the env's constructor (repeatable), e.g. max_steps=30 or split=test"


def parse_key_values(pairs: list[str], flag: str = "--env-arg") -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``; values are JSON when they parse as JSON.

    Example:
        >>> parse_key_values(["max_steps=5", "split=train", 'task_types=["a"]'])
        {'max_steps': 5, 'split': 'train', 'task_types': ['a']}
    """
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: numpy scalars and arrays, tuples and sets become numbers
    and lists, NaN and infinities ``None`` (JSON has neither), anything else its ``str``.

    Example:
        >>> jsonable({"a": (1, 2), "b": float("nan"), "c": Path("x")})
        {'a': [1, 2], 'b': None, 'c': 'x'}
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def json_sha256(value: Any) -> str:
    """One SHA-256 of ``value`` as sorted-key JSON (:func:`jsonable`): a content hash of data.

    Example:
        >>> json_sha256({"b": 1, "a": (2,)}) == json_sha256({"a": [2], "b": 1})
        True
    """
    text = json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def load_object(path: str) -> Any:
    """Import ``"package.module:Name"`` (the form family specs and configs name code by, so
    listing them imports nothing until the object is used)."""
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
