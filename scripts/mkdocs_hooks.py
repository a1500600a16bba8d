"""mkdocs hook: serve the repository files the docs pages link to (``mkdocs.yml``: ``hooks``).

The pages under ``docs/`` link to repository files the way GitHub shows them, relative to the
page (``../../benchmarks/results/demo.png`` from ``docs/results/demo.md``), so the same Markdown
reads right on GitHub and on the site. Such a file lies outside ``docs_dir``, where mkdocs would
call the link broken. This hook copies every linked repository file that exists into the site
under ``repo/<its path>`` and points the link there; a link to a file that does not exist is
left as written, so ``mkdocs build --strict`` fails on it. Nothing is fetched: the build stays
offline.

>>> _outside_links("![plot](../../benchmarks/results/demo.png) and [home](../index.md)")
['../../benchmarks/results/demo.png', '../index.md']
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import griffe
from mkdocs.structure.files import File, Files

#: ``[text](target)`` or ``![alt](target)``; the target ends at ``)``, a space or a ``#``.
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)([^)]*\))")
#: Where the linked repository files land in the site.
MIRROR = "repo"


def _outside_links(markdown: str) -> list[str]:
    """The relative link targets of a page (the ones a hook may have to serve)."""
    return [m.group(2) for m in LINK.finditer(markdown) if "://" not in m.group(2)]


def _repo_target(page_uri: str, target: str, docs_dir: Path, repo: Path) -> str | None:
    """The repository path a page's link points to, when it leaves ``docs_dir`` for a file."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri), target))
    if not joined.startswith("../"):
        return None  # inside docs_dir: mkdocs checks it itself
    path = (docs_dir / joined).resolve()
    if not path.is_file() or repo not in path.parents:
        return None  # missing: left as written, so the strict build reports it
    return path.relative_to(repo).as_posix()


def _repo_root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config) -> Files:
    docs_dir, repo = Path(config.docs_dir).resolve(), _repo_root(config)
    wanted: set[str] = set()
    for page in files.documentation_pages():
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        for target in _outside_links(text):
            path = _repo_target(page.src_uri, target, docs_dir, repo)
            if path:
                wanted.add(path)
    for path in sorted(wanted):
        files.append(File.generated(config, f"{MIRROR}/{path}", abs_src_path=str(repo / path)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    docs_dir, repo = Path(config.docs_dir).resolve(), _repo_root(config)
    page_dir = posixpath.dirname(page.file.src_uri)

    def relink(match: re.Match) -> str:
        target = match.group(2)
        if "://" in target:
            return match.group(0)
        path = _repo_target(page.file.src_uri, target, docs_dir, repo)
        if path is None:
            return match.group(0)
        served = posixpath.relpath(f"{MIRROR}/{path}", page_dir or ".")
        return match.group(1) + served + match.group(3)

    return LINK.sub(relink, markdown)


#: A reST role (``:func:`~pkg.mod.name` ``), which Markdown would print as written.
ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def markdown_docstring(docstring: str) -> str:
    r"""A docstring written for Sphinx and doctest, as Markdown: each reST role becomes a code
    span, and each doctest run (``>>>`` lines and their output) a ``python`` fence at the
    margin, so Markdown shows it as code instead of reading ``x["key"][0]`` as a link.

    >>> markdown_docstring("Count with :func:`~math.fsum`:\n    >>> 1 + 1\n    2").splitlines()
    ['Count with `math.fsum`:', '', '```python', '>>> 1 + 1', '2', '```']
    """
    out: list[str] = []
    indent: str | None = None  # the indent of the open fence, None when none is open
    for line in ROLE.sub(r"`\1`", docstring).splitlines():
        stripped = line.lstrip()
        if indent is None and stripped.startswith(">>>"):
            # At the margin, after a blank line: an indented run under "Example:" would
            # otherwise continue that paragraph.
            indent = line[: len(line) - len(stripped)]
            out += ["", "```python"]
        elif indent is not None and not stripped:
            out.append("```")
            indent = None
        out.append(line.removeprefix(indent) if indent else line)
    if indent is not None:
        out.append("```")
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    """Griffe extension (``mkdocs.yml``: the python handler's ``extensions``) that applies
    :func:`markdown_docstring` to every docstring mkdocstrings renders."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
