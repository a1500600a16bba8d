"""Recompute a registered table from its committed records alone (issue 56, item 5).

The bench (:mod:`benchmarks.sealed_table.run`) keeps, for a plan that names ``records``, every
(method, seed)'s per-episode records there, gzipped: the stream's ``episodes.jsonl``,
``config.json`` and ``summary.json``, the training run's ``summary.json`` and
``metrics.jsonl``, and both runs' ``provenance.json``. This script unpacks them into a scratch
folder, reads them as the table reads a run (:func:`comprl_gym.evaluation.table.load_run`), recomputes every method's row and
the primary comparison, and compares them with the committed result: nothing in ``runs/``,
no model and no environment is needed.

Run:  python -m benchmarks.sealed_table.recompute --plan benchmarks/preregistered/capable_table.yaml
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import benchmarks.sealed_table.run as bench
from comprl_gym.evaluation.table import Run, load_run, method_table


def runs_from_records(plan: dict[str, Any], scratch: Path) -> dict[str, list[Run]]:
    """Every method's runs, one per seed, read from the plan's committed records."""
    records = bench.REPO / plan["records"]
    methods: dict[str, list[Run]] = {}
    for method in plan["methods"]:
        for seed in plan["seeds"]:
            train = bench.unpack_records(
                records, scratch / bench.train_folder(method, seed).name, bench.TRAIN_RECORDS
            )
            stream = bench.unpack_records(
                records, scratch / bench.stream_folder(method, seed).name, bench.STREAM_RECORDS
            )
            # the stream names the training run it came from: here, its unpacked records
            config = json.loads((stream / "config.json").read_text())
            config["config"]["run"] = str(train)
            (stream / "config.json").write_text(json.dumps(config))
            methods.setdefault(method["name"], []).append(load_run(stream))
    return methods


def recompute(plan: dict[str, Any]) -> dict[str, Any]:
    """The table's rows and primary cell from the records alone."""
    others = [m["name"] for m in plan["methods"] if m["name"] != plan["primary"]["treatment"]]
    with tempfile.TemporaryDirectory(prefix="comprl-recompute-") as scratch:
        table = method_table(runs_from_records(plan, Path(scratch)), others)
    return {"rows": table["rows"], "primary": bench.primary_cell(plan, table)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True, help="the plan whose table to recompute")
    args = parser.parse_args(argv)
    plan = bench.load_plan(Path(args.plan))
    if not plan.get("records"):
        raise SystemExit(f"{args.plan}: the plan names no records folder")
    committed_file = bench.REPO / f"{plan['output']}.json"
    if not committed_file.is_file():
        raise SystemExit(f"{committed_file}: the table has not been written yet")
    committed = json.loads(committed_file.read_text())
    again = json.loads(json.dumps(recompute(plan)))  # as the file stores it
    differs = [key for key in ("rows", "primary") if again[key] != committed[key]]
    primary = again["primary"]
    seeds = primary["between_seeds"]
    print(
        f"{primary['comparison']}: between seeds {seeds['mean']:+.3f} "
        f"[{seeds['low']:+.3f}, {seeds['high']:+.3f}] over {seeds['n']} seeds; pooled "
        f"{primary['difference']['mean']:+.3f} [{primary['difference']['low']:+.3f}, "
        f"{primary['difference']['high']:+.3f}] over {primary['pairs']} pairs, McNemar p "
        f"{primary['mcnemar_p']:.3g}; holds: {primary['holds']}"
    )
    if differs:
        print(f"DIFFERS from {committed_file.name}: {', '.join(differs)}")
        return 1
    print(f"every row and the primary cell of {committed_file.name} recompute from the records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
