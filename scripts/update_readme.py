"""Regenerate the README's environment table from comprl_gym.registration (``make readme``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from comprl_gym.registration import markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- envs:start -->", "<!-- envs:end -->"


def render(text: str) -> str:
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{README}: markers {START} / {END} not found")
    return pattern.sub(f"{START}\n{markdown_table()}\n{END}", text)


if __name__ == "__main__":
    current = README.read_text(encoding="utf-8")
    updated = render(current)
    if "--check" in sys.argv:
        sys.exit(0 if updated == current else "README env table is stale: run `make readme`")
    README.write_text(updated, encoding="utf-8")
