"""What the study runners share: where things are, how a bench runs ``comprl-gym`` and resumes,
and the runner of a study that streams several readers alike (``landmark_rule``,
``second_reader``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The checkout, its committed results and its (ignored) run folders.
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
RUNS = REPO / "runs"
#: How a bench runs ``comprl-gym``: with the Python that runs the bench (its environment and
#: package; no ``.venv/bin`` path, nothing looked up on ``PATH``). A bench builds and records
#: a command as ``["comprl-gym", ...]`` and runs ``[*CLI, *command[1:]]``.
CLI = (sys.executable, "-m", "comprl_gym.cli")


def shared_data_dir() -> Path:
    """The official data: ``$COMPRL_SHARED_DATA``, or ``../shared/data`` beside the checkout."""
    env = os.environ.get("COMPRL_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


def comprl_gym(*args: str) -> None:
    """Runs ``comprl-gym ARGS`` in the checkout; a failed command ends the bench."""
    subprocess.run([*CLI, *args], check=True, cwd=REPO)


def finished(folder: Path) -> bool:
    """A training run or stream that ran to its end (both write ``summary.json`` last)."""
    from comprl_gym.evaluation.eval import SUMMARY_FILE

    return (folder / SUMMARY_FILE).is_file()


def fresh(folder: Path) -> Path:
    """``folder``, refused when it exists: a bench does not write into a run it could summarise."""
    if folder.exists():
        raise SystemExit(f"{folder} exists: move it away, or summarise it with --reuse")
    return folder


def write_result(out: Path, result: dict, plot: Callable[[dict, Path], None]) -> None:
    """The result file and its plot beside it (``.png``)."""
    from comprl_gym.utils import atomic_write_json

    atomic_write_json(out, result)
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png').name}")


def keep_records(folder: Path, names: Sequence[str], into: Path) -> list[Path]:
    """Commit-ready copies of a run's per-episode records: each of ``names`` in ``folder``
    gzipped to ``into/<folder name>-<name>.gz`` (no timestamp in the header, so an unchanged
    record writes the same bytes). Names the folder lacks are skipped; returns the written."""
    import gzip

    from comprl_gym.utils import atomic_write_bytes

    written = []
    for name in names:
        source = folder / name
        if source.is_file():
            target = into / f"{folder.name}-{name}.gz"
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, gzip.compress(source.read_bytes(), mtime=0))
            written.append(target)
    return written


@dataclass(frozen=True)
class ReaderStudy:
    """Readers (name -> weights file) streamed by ``comprl-gym stream --config CONFIG`` on the
    same dungeons, arms and seeds, each into ``runs/<name>-<reader>``; when a reader's weights
    are absent, ``warmups`` (``comprl-gym train --config CONFIG`` arguments, in order) make
    them first."""

    name: str
    config: str
    readers: dict[str, str]
    arms: tuple[str, ...]
    #: The paired comparisons, (treatment, control).
    versus: tuple[tuple[str, str], ...]
    #: The stream's env, pool, visits and sampling (its arms and comparisons follow).
    pool_args: tuple[str, ...]
    warmups: tuple[tuple[str, ...], ...] = ((),)

    @property
    def stream_args(self) -> list[str]:
        versus = [arg for t, c in self.versus for arg in ("--versus", f"{t}:{c}")]
        return [*self.pool_args, "--arms", ",".join(self.arms), *versus]

    def folder(self, reader: str) -> Path:
        return RUNS / f"{self.name}-{reader.replace('_', '-')}"

    def run(self) -> None:
        """The warm-ups when a reader is absent, then every reader's stream into a new folder."""
        if not all((REPO / path).exists() for path in self.readers.values()):
            for warmup in self.warmups:
                comprl_gym("train", "--config", self.config, *warmup)
        for reader, path in self.readers.items():
            folder = fresh(self.folder(reader))
            comprl_gym(
                "stream", "--config", self.config, "--set", f"actor.init_weights={path}",
                *self.stream_args, "--output-dir", str(folder),
            )  # fmt: skip

    def summary(
        self, keys: tuple[str, ...], measures: Callable[[list[dict]], dict]
    ) -> tuple[dict, dict[str, list[dict]]]:
        """What every result of such a study holds (the command, the arms and comparisons in
        the order the page prints them, and per reader its weights, the stream's ``keys`` and
        ``measures`` of its episodes), and each reader's episodes."""
        from comprl_gym.evaluation.eval import load_episodes
        from comprl_gym.evaluation.provenance import file_sha256
        from comprl_gym.evaluation.stream import stream_result

        out: dict = {
            "config": self.config,
            "command": f"comprl-gym stream --config {self.config} "
            "--set actor.init_weights=READER " + " ".join(self.stream_args),
            "interval": "Wilson 95% for rates; Newcombe's paired 95% and McNemar's exact p",
            "arms": list(self.arms),
            "comparisons": [f"{t} minus {c}" for t, c in self.versus],
            "readers": {},
        }
        episodes = {}
        for reader, path in self.readers.items():
            folder = self.folder(reader)
            episodes[reader] = load_episodes(folder, repair=False)
            out["readers"][reader] = {
                "weights": {"path": path, "sha256": file_sha256(REPO / path)},
                **stream_result(folder, keys),
                **measures(episodes[reader]),
            }
        return out, episodes

    def main(
        self,
        doc: str,
        out: Path,
        summarise: Callable[[], dict],
        plot: Callable[[dict, Path], None],
        argv: Sequence[str] | None = None,
    ) -> int:
        """The study's command line: run (or, ``--reuse``, only summarise) and write."""
        parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
        parser.add_argument(
            "--reuse", action="store_true", help="summarise streams already under runs/"
        )
        parser.add_argument("--out", type=Path, default=out)
        args = parser.parse_args(argv)
        if not args.reuse:
            self.run()
        write_result(args.out, summarise(), plot)
        return 0


def warmup_summaries(folders: dict[str, Path]) -> dict[str, dict]:
    """Each warm-up's loss summary (:func:`~comprl_gym.trainers.warmup.warmup_loss_summary`),
    by name, for those folders that hold a ``warmup/warmup.json``."""
    from comprl_gym.trainers.warmup import warmup_loss_summary

    return {
        name: warmup_loss_summary(json.loads((folder / "warmup" / "warmup.json").read_text()))
        for name, folder in folders.items()
        if (folder / "warmup" / "warmup.json").exists()
    }
