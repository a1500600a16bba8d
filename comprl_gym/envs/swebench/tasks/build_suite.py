"""Maintainer tool: regenerate the embedded SWE-bench suite (git bundles + instances.json).

The suite is three small Python libraries with a few commits of history each. Every task is a
real bug present at the repository's base commit, with a GitHub-issue-style report, a gold
patch (``git diff`` of the fix), a test patch (new tests), and FAIL_TO_PASS / PASS_TO_PASS
measured by running pytest on the host before and after the gold patch.

The fixes are never committed, so an agent cannot find them in the shipped history.

Run (needs git and pytest; writes next to this file)::

    python -m comprl_gym.envs.swebench.tasks.build_suite
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from swebench.harness.log_parsers.python import parse_log_pytest

HERE = Path(__file__).resolve().parent
OWNER = "comprl-gym"
VERSION = "0.1"


def _dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass
class Task:
    number: int
    problem_statement: str
    fix: list[tuple[str, str, str]]  # (path, old, new) replacements in source files
    tests: list[tuple[str, str]]  # (path, text appended to the test file)
    hints_text: str = ""


@dataclass
class Repo:
    name: str
    commits: list[tuple[str, dict[str, str]]]  # (message, files written in that commit)
    tasks: list[Task] = field(default_factory=list)


COMMON_FILES = {
    ".gitignore": "__pycache__/\n*.pyc\n.pytest_cache/\n",
}

# ------------------------------------------------------------------------------------ textkit
TEXTKIT = Repo(
    name="textkit",
    commits=[
        (
            "Initial commit: slugify and truncate",
            {
                **COMMON_FILES,
                "README.md": "# textkit\n\nSmall text helpers: slugs, truncation, chunks.\n",
                "pyproject.toml": '[project]\nname = "textkit"\nversion = "0.1.0"\n',
                "textkit/__init__.py": '"""Small text helpers."""\n',
                "textkit/strings.py": _dedent('''
                    """String helpers."""

                    import re
                    import unicodedata


                    def slugify(text: str, sep: str = "-") -> str:
                        """Lower-case ASCII slug: ``slugify("Hello World") == "hello-world"``."""
                        ascii_text = unicodedata.normalize("NFKD", text)
                        ascii_text = ascii_text.encode("ascii", "ignore").decode("ascii")
                        slug = re.sub(r"[^a-z0-9]", sep, ascii_text.lower())
                        return slug.strip(sep)


                    def truncate(text: str, width: int, placeholder: str = "...") -> str:
                        """Shorten ``text`` to at most ``width`` characters, ending with
                        ``placeholder`` when something was cut."""
                        if len(text) <= width:
                            return text
                        return text[:width] + placeholder
                '''),
                "tests/test_strings.py": _dedent("""
                    from textkit.strings import slugify, truncate


                    def test_slugify_simple():
                        assert slugify("hello world") == "hello-world"


                    def test_slugify_accents():
                        assert slugify("Crème brûlée") == "creme-brulee"


                    def test_truncate_short_text_unchanged():
                        assert truncate("short", 10) == "short"
                """),
            },
        ),
        (
            "Add chunked() for batching sequences",
            {
                "textkit/chunks.py": _dedent('''
                    """Batching helpers."""


                    def chunked(items, size):
                        """Split a sequence into lists of ``size`` items; the last may be shorter."""
                        if size < 1:
                            raise ValueError("size must be at least 1")
                        return [list(items[i : i + size]) for i in range(0, len(items) - size + 1, size)]
                '''),
                "tests/test_chunks.py": _dedent("""
                    import pytest

                    from textkit.chunks import chunked


                    def test_chunked_even():
                        assert chunked([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


                    def test_chunked_rejects_zero():
                        with pytest.raises(ValueError):
                            chunked([1], 0)
                """),
            },
        ),
        (
            "Add parse_duration for '1h30m' style strings",
            {
                "textkit/durations.py": _dedent('''
                    """Parse human durations such as ``1h30m`` or ``45s``."""

                    import re

                    _UNITS = {"h": 3600, "m": 60, "s": 1}


                    def parse_duration(text: str) -> int:
                        """Number of seconds in ``text`` (e.g. ``"1h30m"`` -> 5400)."""
                        total = 0
                        for number, unit in re.findall(r"(\\d+)([hms])", text):
                            total += int(number) * _UNITS[unit]
                        return total
                '''),
                "tests/test_durations.py": _dedent("""
                    from textkit.durations import parse_duration


                    def test_hours_and_minutes():
                        assert parse_duration("1h30m") == 5400


                    def test_seconds():
                        assert parse_duration("45s") == 45
                """),
            },
        ),
    ],
    tasks=[
        Task(
            1,
            _dedent("""
                slugify leaves double dashes for punctuation followed by a space

                ```python
                >>> from textkit.strings import slugify
                >>> slugify("Hello, World!")
                'hello--world'
                ```

                I expected `'hello-world'`. Any run of characters that are not letters or
                digits should become a single separator.
            """),
            fix=[
                (
                    "textkit/strings.py",
                    'slug = re.sub(r"[^a-z0-9]", sep, ascii_text.lower())',
                    'slug = re.sub(r"[^a-z0-9]+", sep, ascii_text.lower())',
                )
            ],
            tests=[
                (
                    "tests/test_strings.py",
                    "\n\ndef test_slugify_collapses_punctuation():\n"
                    '    assert slugify("Hello, World!") == "hello-world"\n'
                    '    assert slugify("a  --  b", sep="_") == "a_b"\n',
                )
            ],
        ),
        Task(
            2,
            _dedent("""
                truncate() returns strings longer than the requested width

                The docstring says the result has *at most* `width` characters, but the
                placeholder is added on top of the width:

                ```python
                >>> truncate("abcdefghij", 6)
                'abcdef...'   # 9 characters
                ```

                Expected `'abc...'`. When the width is smaller than the placeholder itself, the
                placeholder should be cut to the width.
            """),
            fix=[
                (
                    "textkit/strings.py",
                    "    return text[:width] + placeholder\n",
                    "    if width <= len(placeholder):\n"
                    "        return placeholder[:width]\n"
                    "    return text[: width - len(placeholder)] + placeholder\n",
                )
            ],
            tests=[
                (
                    "tests/test_strings.py",
                    "\n\ndef test_truncate_respects_width():\n"
                    '    assert truncate("abcdefghij", 6) == "abc..."\n'
                    '    assert len(truncate("x" * 50, 20)) == 20\n'
                    "\n\ndef test_truncate_tiny_width():\n"
                    '    assert truncate("abcdefghij", 2) == ".."\n',
                )
            ],
            hints_text="The placeholder counts towards the width.",
        ),
        Task(
            3,
            _dedent("""
                chunked() silently drops the last partial chunk

                ```python
                >>> chunked([1, 2, 3, 4, 5], 2)
                [[1, 2], [3, 4]]
                ```

                The 5 is lost. The docstring says the last chunk may be shorter, so I expected
                `[[1, 2], [3, 4], [5]]`. Also `chunked([1, 2], 5)` returns `[]` instead of
                `[[1, 2]]`.
            """),
            fix=[
                (
                    "textkit/chunks.py",
                    "range(0, len(items) - size + 1, size)",
                    "range(0, len(items), size)",
                )
            ],
            tests=[
                (
                    "tests/test_chunks.py",
                    "\n\ndef test_chunked_keeps_remainder():\n"
                    "    assert chunked([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]\n"
                    "\n\ndef test_chunked_size_larger_than_input():\n"
                    "    assert chunked([1, 2], 5) == [[1, 2]]\n",
                )
            ],
        ),
        Task(
            4,
            _dedent("""
                parse_duration accepts garbage and returns 0 (or a partial value)

                `parse_duration("abc")` returns `0`, and so does `parse_duration("10 minutes")`:
                whatever it does not understand is silently ignored. A typo in a config file
                then becomes a zero timeout.

                It should raise `ValueError` for anything that is not a sequence of
                `<number><h|m|s>` parts (white space between parts is fine: `"1h 30m"`).
            """),
            fix=[
                (
                    "textkit/durations.py",
                    "    total = 0\n",
                    '    compact = "".join(text.split())\n'
                    '    if not re.fullmatch(r"(\\d+[hms])+", compact):\n'
                    '        raise ValueError(f"not a duration: {text!r}")\n'
                    "    total = 0\n",
                )
            ],
            tests=[
                (
                    "tests/test_durations.py",
                    "\n\nimport pytest\n"
                    '\n\n@pytest.mark.parametrize("bad", ["abc", "", "10min", "5x"])\n'
                    "def test_rejects_garbage(bad):\n"
                    "    with pytest.raises(ValueError):\n"
                    "        parse_duration(bad)\n"
                    "\n\ndef test_spaces_between_parts():\n"
                    '    assert parse_duration("1h 30m") == 5400\n',
                )
            ],
        ),
    ],
)

# ---------------------------------------------------------------------------------- intervals
INTERVALS = Repo(
    name="intervals",
    commits=[
        (
            "Initial commit: closed Interval type",
            {
                **COMMON_FILES,
                "README.md": "# intervals\n\nClosed numeric intervals and merging.\n",
                "pyproject.toml": '[project]\nname = "intervals"\nversion = "0.1.0"\n',
                "intervals/__init__.py": _dedent('''
                    """Closed numeric intervals."""

                    from intervals.core import Interval, merge

                    __all__ = ["Interval", "merge"]
                '''),
                "intervals/core.py": _dedent('''
                    """The closed interval ``[start, end]``."""


                    class Interval:
                        """A closed interval of numbers; ``start <= end``."""

                        def __init__(self, start, end):
                            assert start <= end, "start must not exceed end"
                            self.start = start
                            self.end = end

                        def __repr__(self):
                            return f"Interval({self.start!r}, {self.end!r})"

                        def __eq__(self, other):
                            if not isinstance(other, Interval):
                                return NotImplemented
                            return (self.start, self.end) == (other.start, other.end)

                        @property
                        def length(self):
                            return self.end - self.start

                        def contains(self, value):
                            return self.start <= value <= self.end

                        def overlaps(self, other):
                            """True when the two closed intervals share at least one point."""
                            return self.start < other.end and other.start < self.end
                '''),
                "tests/test_core.py": _dedent("""
                    from intervals import Interval


                    def test_length():
                        assert Interval(2, 5).length == 3


                    def test_contains_endpoints():
                        assert Interval(1, 3).contains(1)
                        assert Interval(1, 3).contains(3)
                        assert not Interval(1, 3).contains(4)


                    def test_overlaps():
                        assert Interval(1, 5).overlaps(Interval(3, 8))
                        assert not Interval(1, 2).overlaps(Interval(5, 8))
                """),
            },
        ),
        (
            "Add merge() and Interval.intersection()",
            {
                "intervals/core.py": None,  # filled below: previous content + additions
                "tests/test_merge.py": _dedent("""
                    from intervals import Interval, merge


                    def test_merge_sorted_overlapping():
                        merged = merge([Interval(1, 3), Interval(2, 6), Interval(8, 9)])
                        assert merged == [Interval(1, 6), Interval(8, 9)]


                    def test_merge_empty():
                        assert merge([]) == []


                    def test_intersection_overlapping():
                        assert Interval(1, 5).intersection(Interval(3, 8)) == Interval(3, 5)
                """),
            },
        ),
    ],
    tasks=[
        Task(
            1,
            _dedent("""
                Interval(5, 1) raises AssertionError instead of ValueError

                Constructing an interval with start > end fails with a bare `AssertionError`,
                which callers cannot reasonably catch, and which disappears entirely under
                `python -O` (then the invalid interval is created!). Invalid arguments should
                raise `ValueError` with a message naming both bounds.
            """),
            fix=[
                (
                    "intervals/core.py",
                    '        assert start <= end, "start must not exceed end"\n',
                    "        if start > end:\n"
                    '            raise ValueError(f"start {start!r} exceeds end {end!r}")\n',
                )
            ],
            tests=[
                (
                    "tests/test_core.py",
                    "\n\nimport pytest\n"
                    "\n\ndef test_reversed_bounds_raise_value_error():\n"
                    '    with pytest.raises(ValueError, match="exceeds"):\n'
                    "        Interval(5, 1)\n",
                )
            ],
        ),
        Task(
            2,
            _dedent("""
                overlaps() is False for intervals that touch at an endpoint

                Intervals are documented as closed, so `[1, 2]` and `[2, 3]` share the point 2,
                yet:

                ```python
                >>> Interval(1, 2).overlaps(Interval(2, 3))
                False
                ```

                Same for a degenerate interval: `Interval(2, 2).overlaps(Interval(1, 3))` is
                True but `Interval(3, 3).overlaps(Interval(1, 3))` is False.
            """),
            fix=[
                (
                    "intervals/core.py",
                    "return self.start < other.end and other.start < self.end",
                    "return self.start <= other.end and other.start <= self.end",
                )
            ],
            tests=[
                (
                    "tests/test_core.py",
                    "\n\ndef test_touching_intervals_overlap():\n"
                    "    assert Interval(1, 2).overlaps(Interval(2, 3))\n"
                    "    assert Interval(3, 3).overlaps(Interval(1, 3))\n",
                )
            ],
        ),
        Task(
            3,
            _dedent("""
                merge() gives wrong results when the input is not sorted

                ```python
                >>> merge([Interval(5, 7), Interval(1, 6)])
                [Interval(5, 7), Interval(1, 6)]
                ```

                These overlap, so the answer should be `[Interval(1, 7)]`. The function
                should not require sorted input (the README does not say it does), and the
                result should be sorted by start.
            """),
            fix=[
                (
                    "intervals/core.py",
                    "    for interval in intervals:\n",
                    "    for interval in sorted(intervals, key=lambda iv: (iv.start, iv.end)):\n",
                )
            ],
            tests=[
                (
                    "tests/test_merge.py",
                    "\n\ndef test_merge_unsorted():\n"
                    "    assert merge([Interval(5, 7), Interval(1, 6)]) == [Interval(1, 7)]\n"
                    "    assert merge([Interval(8, 9), Interval(1, 2)]) == "
                    "[Interval(1, 2), Interval(8, 9)]\n",
                )
            ],
        ),
        Task(
            4,
            _dedent("""
                intersection() of disjoint intervals crashes

                The docstring says `intersection` returns `None` when the intervals do not
                meet, but

                ```python
                >>> Interval(1, 2).intersection(Interval(5, 8))
                Traceback (most recent call last):
                  ...
                AssertionError: start must not exceed end
                ```
            """),
            fix=[
                (
                    "intervals/core.py",
                    "        return Interval(max(self.start, other.start), min(self.end, other.end))\n",
                    "        start, end = max(self.start, other.start), min(self.end, other.end)\n"
                    "        if start > end:\n"
                    "            return None\n"
                    "        return Interval(start, end)\n",
                )
            ],
            tests=[
                (
                    "tests/test_merge.py",
                    "\n\ndef test_intersection_disjoint_is_none():\n"
                    "    assert Interval(1, 2).intersection(Interval(5, 8)) is None\n"
                    "    assert Interval(6, 9).intersection(Interval(0, 4)) is None\n",
                )
            ],
        ),
    ],
)
_INTERVAL_ADDITIONS = _dedent('''

        def intersection(self, other):
            """The common part of two intervals, or ``None`` when they do not meet."""
            return Interval(max(self.start, other.start), min(self.end, other.end))


    def merge(intervals):
        """Merge overlapping intervals; the result is sorted by start."""
        result = []
        for interval in intervals:
            if result and interval.start <= result[-1].end:
                last = result[-1]
                result[-1] = Interval(last.start, max(last.end, interval.end))
            else:
                result.append(interval)
        return result
''')
INTERVALS.commits[1][1]["intervals/core.py"] = (
    INTERVALS.commits[0][1]["intervals/core.py"] + "\n" + _INTERVAL_ADDITIONS
)

# ------------------------------------------------------------------------------------- kvconf
KVCONF = Repo(
    name="kvconf",
    commits=[
        (
            "Initial commit: key = value parser",
            {
                **COMMON_FILES,
                "README.md": "# kvconf\n\nA tiny `key = value` configuration format.\n",
                "pyproject.toml": '[project]\nname = "kvconf"\nversion = "0.1.0"\n',
                "kvconf/__init__.py": _dedent('''
                    """A tiny ``key = value`` configuration format."""

                    from kvconf.parser import Config, ParseError, parse

                    __all__ = ["Config", "ParseError", "parse"]
                '''),
                "kvconf/parser.py": _dedent('''
                    """Parse ``key = value`` lines; ``#`` starts a comment line."""


                    class ParseError(ValueError):
                        """A line is not ``key = value``."""


                    def parse(text: str) -> dict:
                        """Parse the text of a configuration file into a dict of strings."""
                        result = {}
                        for number, line in enumerate(text.splitlines(), 1):
                            line = line.strip()
                            if not line or line.startswith("#"):
                                continue
                            if "=" not in line:
                                raise ParseError(f"line {number}: expected 'key = value'")
                            key, value = line.split("=")
                            result[key.strip()] = value.strip()
                        return result
                '''),
                "tests/test_parser.py": _dedent("""
                    import pytest

                    from kvconf import ParseError, parse


                    def test_parse_basic():
                        assert parse("a = 1\\nb=two\\n") == {"a": "1", "b": "two"}


                    def test_comments_and_blank_lines():
                        assert parse("# header\\n\\nname = x\\n") == {"name": "x"}


                    def test_missing_equals_reports_line():
                        with pytest.raises(ParseError, match="line 2"):
                            parse("a = 1\\nnonsense\\n")
                """),
            },
        ),
        (
            "Add Config with typed getters",
            {
                "kvconf/config.py": _dedent('''
                    """Typed access to parsed configuration values."""

                    from kvconf.parser import parse


                    class Config:
                        """Parsed configuration with typed getters."""

                        def __init__(self, values):
                            self._values = dict(values)

                        @classmethod
                        def from_text(cls, text):
                            return cls(parse(text))

                        def get(self, key, default=None):
                            return self._values.get(key, default)

                        def get_int(self, key, default=None):
                            """The value as an int, or ``default`` when the key is absent."""
                            return int(self._values[key])

                        def get_bool(self, key, default=False):
                            """``true/yes/on/1`` are True, ``false/no/off/0`` are False."""
                            value = self._values.get(key)
                            if value is None:
                                return default
                            return bool(value)

                        def get_list(self, key):
                            """Comma-separated values as a list of stripped strings."""
                            return [item.strip() for item in self._values.get(key, "").split(",")]
                '''),
                "kvconf/__init__.py": _dedent('''
                    """A tiny ``key = value`` configuration format."""

                    from kvconf.config import Config
                    from kvconf.parser import ParseError, parse

                    __all__ = ["Config", "ParseError", "parse"]
                '''),
                "tests/test_config.py": _dedent("""
                    from kvconf import Config


                    def test_get_int_present():
                        assert Config.from_text("port = 8080").get_int("port") == 8080


                    def test_get_bool_true():
                        assert Config.from_text("debug = yes").get_bool("debug") is True


                    def test_get_list():
                        cfg = Config.from_text("hosts = a, b ,c")
                        assert cfg.get_list("hosts") == ["a", "b", "c"]
                """),
            },
        ),
    ],
    tasks=[
        Task(
            1,
            _dedent("""
                Values that contain '=' cannot be parsed

                A connection string in a config file breaks the parser:

                ```
                dsn = postgres://host/db?sslmode=require
                ```

                ```
                ValueError: too many values to unpack (expected 2)
                ```

                Only the first `=` separates the key from the value.
            """),
            fix=[("kvconf/parser.py", 'line.split("=")', 'line.split("=", 1)')],
            tests=[
                (
                    "tests/test_parser.py",
                    "\n\ndef test_value_may_contain_equals():\n"
                    '    text = "dsn = postgres://h/db?sslmode=require\\n"\n'
                    '    assert parse(text) == {"dsn": "postgres://h/db?sslmode=require"}\n',
                )
            ],
        ),
        Task(
            2,
            _dedent("""
                Config.get_int ignores its default and raises KeyError

                ```python
                >>> Config.from_text("").get_int("port", default=80)
                KeyError: 'port'
                ```

                The signature has a `default` argument and the docstring says it is returned
                when the key is absent.
            """),
            fix=[
                (
                    "kvconf/config.py",
                    "        return int(self._values[key])\n",
                    "        if key not in self._values:\n"
                    "            return default\n"
                    "        return int(self._values[key])\n",
                )
            ],
            tests=[
                (
                    "tests/test_config.py",
                    "\n\ndef test_get_int_default():\n"
                    '    assert Config.from_text("").get_int("port", default=80) == 80\n'
                    '    assert Config.from_text("").get_int("port") is None\n',
                )
            ],
        ),
        Task(
            3,
            _dedent("""
                get_bool returns True for "false"

                `debug = false` in a config file turns debugging ON:

                ```python
                >>> Config.from_text("debug = false").get_bool("debug")
                True
                ```

                `bool()` of any non-empty string is True. The docstring promises
                `false/no/off/0` are False (case-insensitive, I assume). Something that is
                neither should raise a ValueError naming the key.
            """),
            fix=[
                (
                    "kvconf/config.py",
                    "        return bool(value)\n",
                    "        lowered = value.strip().lower()\n"
                    '        if lowered in ("true", "yes", "on", "1"):\n'
                    "            return True\n"
                    '        if lowered in ("false", "no", "off", "0"):\n'
                    "            return False\n"
                    '        raise ValueError(f"{key}: not a boolean: {value!r}")\n',
                )
            ],
            tests=[
                (
                    "tests/test_config.py",
                    "\n\nimport pytest\n"
                    '\n\n@pytest.mark.parametrize("text", ["false", "No", "off", "0"])\n'
                    "def test_get_bool_false(text):\n"
                    '    assert Config.from_text(f"debug = {text}").get_bool("debug") is False\n'
                    "\n\ndef test_get_bool_garbage():\n"
                    '    with pytest.raises(ValueError, match="debug"):\n'
                    '        Config.from_text("debug = maybe").get_bool("debug")\n',
                )
            ],
        ),
        Task(
            4,
            _dedent("""
                get_list returns [''] for a missing or empty key

                ```python
                >>> Config.from_text("").get_list("hosts")
                ['']
                >>> Config.from_text("hosts =").get_list("hosts")
                ['']
                ```

                Both should be `[]`; code that loops over the hosts tries to connect to "".
                Trailing commas (`a, b,`) should not produce empty items either.
            """),
            fix=[
                (
                    "kvconf/config.py",
                    '        return [item.strip() for item in self._values.get(key, "").split(",")]\n',
                    '        items = self._values.get(key, "").split(",")\n'
                    "        return [item.strip() for item in items if item.strip()]\n",
                )
            ],
            tests=[
                (
                    "tests/test_config.py",
                    "\n\ndef test_get_list_empty():\n"
                    '    assert Config.from_text("").get_list("hosts") == []\n'
                    '    assert Config.from_text("hosts =").get_list("hosts") == []\n'
                    '    assert Config.from_text("hosts = a, b,").get_list("hosts") == ["a", "b"]\n',
                )
            ],
        ),
    ],
)

REPOS = [TEXTKIT, INTERVALS, KVCONF]


# ------------------------------------------------------------------------------- generation
def _git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="comprl-gym",
        GIT_AUTHOR_EMAIL="suite@comprl-gym.invalid",
        GIT_COMMITTER_NAME="comprl-gym",
        GIT_COMMITTER_EMAIL="suite@comprl-gym.invalid",
    )
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _pytest_status(repo_dir: Path, test_files: list[str]) -> dict[str, str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *test_files],
        cwd=repo_dir,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    return parse_log_pytest(run.stdout, None)


def _edit(repo_dir: Path, path: str, old: str, new: str) -> None:
    file = repo_dir / path
    text = file.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the text to replace occurs {text.count(old)} times: {old!r}")
    file.write_text(text.replace(old, new))


def build_repo(repo: Repo, workdir: Path) -> list[dict]:
    repo_dir = workdir / repo.name
    repo_dir.mkdir()
    _git(repo_dir, "init", "-q")
    for index, (message, files) in enumerate(repo.commits):
        for path, content in files.items():
            (repo_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (repo_dir / path).write_text(content)
        _git(repo_dir, "add", "-A")
        date = f"2025-0{index + 1}-15T10:00:00+00:00"
        os.environ["GIT_AUTHOR_DATE"] = os.environ["GIT_COMMITTER_DATE"] = date
        _git(repo_dir, "commit", "-q", "-m", message)
    base_commit = _git(repo_dir, "rev-parse", "HEAD").strip()
    bundle = HERE / f"{repo.name}.bundle"
    _git(repo_dir, "bundle", "create", str(bundle), "HEAD", "main")
    instances = []
    for task in repo.tasks:
        for path, text in task.tests:
            with open(repo_dir / path, "a") as handle:
                handle.write(text)
        test_patch = _git(repo_dir, "diff")
        test_files = sorted({path for path, _ in task.tests})
        before = _pytest_status(repo_dir, test_files)
        for path, old, new in task.fix:
            _edit(repo_dir, path, old, new)
        after = _pytest_status(repo_dir, test_files)
        _git(repo_dir, "checkout", "-q", "--", *test_files)
        patch = _git(repo_dir, "diff")
        _git(repo_dir, "checkout", "-q", "--", ".")
        fail_to_pass = sorted(
            t for t, s in after.items() if s == "PASSED" and before.get(t) != "PASSED"
        )
        pass_to_pass = sorted(
            t for t, s in after.items() if s == "PASSED" and before.get(t) == "PASSED"
        )
        if not fail_to_pass or any(s != "PASSED" for s in after.values()):
            raise SystemExit(f"{repo.name}-{task.number}: gold patch does not pass: {after}")
        instances.append(
            {
                "instance_id": f"{OWNER}__{repo.name}-{task.number}",
                "repo": f"{OWNER}/{repo.name}",
                "base_commit": base_commit,
                "environment_setup_commit": base_commit,
                "version": VERSION,
                "problem_statement": task.problem_statement,
                "hints_text": task.hints_text,
                "patch": patch,
                "test_patch": test_patch,
                "FAIL_TO_PASS": json.dumps(fail_to_pass),
                "PASS_TO_PASS": json.dumps(pass_to_pass),
                "created_at": f"2025-06-{task.number:02d}T12:00:00Z",
            }
        )
    return instances


def main() -> None:
    instances: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for repo in REPOS:
            instances.extend(build_repo(repo, Path(tmp)))
    (HERE / "instances.json").write_text(json.dumps(instances, indent=1) + "\n")
    print(f"wrote {len(instances)} instances and {len(REPOS)} bundles to {HERE}")


if __name__ == "__main__":
    main()
