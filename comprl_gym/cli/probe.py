"""``comprl-gym probe``: the extractor probe on a saved run's extractors, or on a model.

``comprl-gym probe --run DIR`` gives a family's committed probe episodes
(:mod:`comprl_gym.lessons.probe`) to the run's trained extractor (its newest checkpoint),
its frozen one (the same model with the weights it started from,
:func:`~comprl_gym.trainers.run.run_extractors`) and the scripted outcome-aware rule (the
ceiling), and prints P(right | won) and P(right | lost) of each; ``--extractor MODEL`` probes
a model no run trained; ``--config FILE`` the extractor a run of that config starts with (its
model, LoRA, ``init_weights``, sampling and format); ``--out FILE`` keeps every lesson, with the sha256 of the checkpoint
and of the model's weight files.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
    >>> add_probe(sub)
    >>> args = parser.parse_args(["probe", "--run", "runs/memory-complementary"])
    >>> args.run, args.family, args.no_frozen
    ('runs/memory-complementary', [], False)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings

# The models' engines (torch, transformers) load only when the command runs: every other
# ``comprl-gym`` command stays as light as it was.

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "probe": """examples:
  comprl-gym probe --run runs/demo
  comprl-gym probe --extractor smollm2 --family memory --out probe.json
  comprl-gym probe --config configs/memory-writer.yaml --out probe.json""",
}


def _cmd_probe(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from comprl_gym.evaluation.provenance import model_weights
    from comprl_gym.families import family_specs
    from comprl_gym.lessons.probe import ScriptedRule, can_probe, probe_table
    from comprl_gym.trainers.probing import ExtractorWriter, probe_reports, probed_families
    from comprl_gym.trainers.run import build_extractor, run_extractors
    from comprl_gym.utils import atomic_write_json, jsonable, writes_to_stdout

    # The JSON alone on standard output when it goes there (--out -): the tables to stderr.
    messages = sys.stderr if writes_to_stdout(args.out) else sys.stdout

    if not (args.run or args.extractor or args.config):
        raise ConfigurationError("probe needs --run DIR, --extractor MODEL or --config FILE")
    writers: list[tuple[str, Any]] = []
    sources: dict[str, Any] = {}
    families = list(args.family)
    if args.run:
        config, sources["run"], extractors = run_extractors(args.run, not args.no_frozen)
        sources["run"]["extractor"] = model_weights(config.extractor.model)
        writers += [(name, ExtractorWriter(e, name)) for name, e in extractors]
        families = families or probed_families(config.env_ids)
    if args.extractor:
        settings = ExperienceSettings(extractor_format=args.format)
        model = ModelSettings(model=args.extractor, temperature=args.temperature)
        name = f"extractor {args.extractor} ({args.format})"
        writers.append((name, ExtractorWriter(build_extractor(model, settings, args.seed), name)))
        sources["extractor"] = model_weights(args.extractor)
    if args.config:
        from comprl_gym.evaluation.provenance import file_sha256
        from comprl_gym.trainers.config import TrainConfig

        config = TrainConfig.from_yaml(args.config)
        name = f"extractor of {args.config}"
        extractor = build_extractor(config.extractor, config.experience, config.seed)
        writers.append((name, ExtractorWriter(extractor, name)))
        weights = config.extractor.init_weights
        sources["config"] = {
            "path": str(args.config),
            "extractor": model_weights(config.extractor.model),
            "init_weights": weights,
            "init_weights_sha256": file_sha256(weights) if weights else None,
        }
        families = families or probed_families(config.env_ids)
    families = families or [name for name in family_specs() if can_probe(name)]
    if not families:
        raise ConfigurationError("no family to probe: none has a lesson judge and probe episodes")
    writers.append((ScriptedRule.outcome_aware().name, ScriptedRule.outcome_aware()))
    results: dict[str, Any] = {"sources": sources, "families": {}}
    for family in families:
        reports = [probe_reports(writer, [family], name=name)[family] for name, writer in writers]
        results["families"][family] = [report.to_dict() for report in reports]
        episodes = len(reports[0].verdicts)
        print(
            f"\n{family}: {episodes} probe episodes (P(right | outcome), 95% Wilson interval)\n",
            file=messages,
        )
        print(probe_table(reports), file=messages)
    if args.out:
        atomic_write_json(args.out, jsonable(results))
        print(f"\nreports with every lesson: {args.out}", file=messages)
    return 0


def add_probe(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="score an extractor's lessons on the committed probe episodes",
        description=(
            "Give a family's committed probe episodes (held-out, both outcomes: e.g. the memory "
            "family's 16 dungeons walked east and west) to an extractor and judge what it "
            "writes: P(right | won) and P(right | lost) with 95% Wilson intervals, beside "
            "the scripted outcome-aware rule (the ceiling, right 1.0 / 1.0). An extractor that "
            "learnt the rule is right after wins AND losses; one that copies the side walked is "
            "right after wins only, one that always names the same side about half the time."
        ),
    )
    p.add_argument(
        "--run",
        help="a training run's output_dir: its newest checkpoint's extractor, and its frozen one",
    )
    p.add_argument("--no-frozen", action="store_true", help="leave the run's frozen extractor out")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a training config: the extractor a run of it starts with (its model, LoRA, "
        "extractor.init_weights, temperature and format)",
    )
    p.add_argument(
        "--extractor", help="a model to probe as an untrained extractor: smollm2, tiny or a folder"
    )
    p.add_argument(
        "--format",
        default="stem",
        choices=["stem", "plain", "operations"],
        help="what --extractor writes (default: stem)",
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="--extractor's sampling temperature"
    )
    p.add_argument("--seed", type=int, default=0, help="--extractor's sampling seed")
    p.add_argument(
        "--family",
        action="append",
        default=[],
        help="a family to probe (repeatable; default: the run's, else every family that can)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the reports, every lesson included, to this JSON file (- for standard "
        "output; the tables then go to standard error)",
    )
    p.set_defaults(func=_cmd_probe)
