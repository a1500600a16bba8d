"""The wheel installs and runs outside the checkout: built from a copy of the sources (the
checkout gets no build/ or egg-info), installed with pip into a fresh virtual environment, and
the README's Python blocks (the Quickstart, then the Experience block) run there from a
folder that is not the checkout, importing ``comprl_gym`` from the wheel. Nothing downloads:
``--no-build-isolation`` builds with this environment's setuptools, ``--no-index --no-deps``
installs the one file.

The fresh environment gets the dependencies by one ``.pth`` line naming this environment's
``site-packages``, written after the install: a path listed in a ``.pth`` file is appended to
``sys.path`` without its own ``.pth`` files being run, so the editable install of this
checkout (a ``.pth`` hook there) stays out, and the new environment's own ``site-packages``,
holding the wheel, comes first. (``venv --system-site-packages`` would not do: made from a
venv's interpreter it sees the base Python's packages, not this environment's.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytestmark = pytest.mark.slow

#: What the build reads: the project file, the files it names, the package.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "comprl_gym")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout installed in it."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    dist = root / "dist"
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist),
          f"./{source.name}"], root)  # fmt: skip
    [wheel] = dist.glob("comprl_gym-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root)
    _run([str(venv / "bin" / "pip"), "install", "--no-deps", "--no-index", str(wheel)], root)
    purelib = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        root,
    ).stdout.strip()
    (Path(purelib) / "_comprl_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_the_wheel_is_imported_from_the_new_environment(installed, tmp_path):
    code = "import comprl_gym; print(comprl_gym.__file__); print(comprl_gym.__version__)"
    out = _run([str(installed / "bin" / "python"), "-c", code], tmp_path, _user_env()).stdout
    path, version = out.split()
    assert Path(path).is_relative_to(installed), path
    assert not Path(path).is_relative_to(REPO_ROOT)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    # the console script, and the package data it reads (the pinned suites)
    script = installed / "bin" / "comprl-gym"
    assert _run([str(script), "--version"], tmp_path, _user_env()).stdout.strip() == version
    suites = _run([str(script), "suites"], tmp_path, _user_env()).stdout
    assert "memory@1" in suites and "minihack-nav@1" in suites


def test_the_readme_python_blocks_run_from_the_wheel(installed, tmp_path):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)
    assert len(blocks) >= 2 and "gym.make" in blocks[0]
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks) + "\nprint('imported from', comprl_gym.__file__)\n")
    out = _run([str(installed / "bin" / "python"), str(script)], tmp_path, _user_env()).stdout
    assert re.search(r"^won: True in \d+ steps$", out, flags=re.M)  # the Quickstart
    assert "won: True | lesson uses: 1 wins: 1" in out  # the Experience block
    assert (tmp_path / "bank" / "manifest.json").is_file()
    imported = out.strip().splitlines()[-1].removeprefix("imported from ")
    assert Path(imported).is_relative_to(installed), imported
