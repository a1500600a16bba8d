"""Small shared helpers: the cache folder and atomic writes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """:func:`atomic_write_bytes` for an indented JSON document."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
