"""CITATION.cff cites the software at the version pyproject.toml builds, with the paper it
implements as a reference, and names no repository URL (the project has no public remote)."""

from __future__ import annotations

import tomllib

import yaml
from conftest import REPO_ROOT


def test_the_citation_file_cites_this_version_and_the_paper():
    cff = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["title"] == "comprl-gym" == project["name"]
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"]
    assert cff["authors"] == [{"name": "comprl-gym maintainers"}]
    [paper] = cff["references"]
    assert paper["title"] == "Complementary Reinforcement Learning" and paper["year"] == 2026
    assert paper["authors"][0] == {"family-names": "Muhtar"}
    assert paper["identifiers"][0]["value"] == "arXiv:2603.17621"
    assert "repository-code" not in cff and "repository" not in cff
    for required in ("message", "title", "authors"):  # the format's required keys
        assert cff[required]


def test_the_readme_says_how_to_cite():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "How to cite" in readme and "(CITATION.cff)" in readme
