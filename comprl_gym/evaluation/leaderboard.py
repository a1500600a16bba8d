"""``comprl-gym leaderboard``: eval result folders into one table across env families.

Each folder written by ``comprl-gym eval`` becomes one row (its agent, and its experience
condition when the run was paired); a folder written by ``comprl-gym stream`` becomes one row
per arm, and its arms' success at each visit goes to a per-visit table (``visits``); columns are the env families' success rates with 95%
Wilson score intervals, the overall success, mean steps and tokens. Runs with several agent
seeds also get per-seed rates, their spread and the pooled interval; ``warnings`` name the runs
whose overall interval is too wide to exclude a difference of 0.1, with the episodes that would.
Outputs:

* ``leaderboard.md`` — the table, a per-env-id table, the per-visit table of streaming runs,
  the seeds table and the warnings;
* ``leaderboard.json`` — rows, per-env details and run metadata;
* ``leaderboard.html`` — one self-contained page (no network): a sortable table and a
  per-episode trajectory viewer showing observations, replies, actions, rewards and the
  experiences each episode used.

Example:
    >>> import tempfile
    >>> from comprl_gym.evaluation.eval import EvalConfig, run_eval
    >>> out = tempfile.mkdtemp()
    >>> _ = run_eval(EvalConfig(env_ids=["comprl/MiniHack-Room-5x5-v0"], agent="expert",
    ...                         episodes=2, out_dir=out, progress=False))
    >>> board = build_leaderboard([out])
    >>> board["rows"][0]["agent"], board["rows"][0]["families"]["minihack"]["mean"]
    ('expert', 1.0)
"""

from __future__ import annotations

import html
import io
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from comprl_gym.core import DataError
from comprl_gym.evaluation.eval import (
    CONFIG_FILE,
    EPISODES_FILE,
    PLAIN,
    _seeds_markdown,
    _warnings_markdown,
    load_episodes,
)
from comprl_gym.evaluation.provenance import PROVENANCE_FILE
from comprl_gym.evaluation.stats import (
    episodes_needed,
    proportion_ci,
    resolution_warning,
    seed_summary,
)
from comprl_gym.evaluation.stream import streaming_summary
from comprl_gym.families import Pool, family_spec, family_specs, recorded_pool
from comprl_gym.utils import atomic_write_json, atomic_write_text, jsonable

#: Episodes per run embedded in the HTML viewer, and characters per text field.
MAX_VIEWER_EPISODES = 300
MAX_VIEWER_CHARS = 4000


def _clip(text: Any) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= MAX_VIEWER_CHARS else text[:MAX_VIEWER_CHARS] + " [...]"


def _run_provenance(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = folder / PROVENANCE_FILE
    try:
        provenance = json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        provenance = {}
    if not provenance.get("suite") and config.get("suite"):
        provenance["suite"] = config["suite"]
    return provenance


def build_leaderboard(
    folders: list[str | os.PathLike[str]], suite: str | None = None
) -> dict[str, Any]:
    """Read result folders; returns ``{"rows", "per_env", "visits", "episodes", "families",
    "labels", "groups", "refused", "notices"}``.

    Rows are grouped by suite version and content hash (:mod:`comprl_gym.evaluation.suites`)
    and ranked only within their group; ``suite="NAME@VERSION"`` keeps the runs of that
    version with its published hash and refuses the others, saying why. Families are in the
    order they are listed (:mod:`comprl_gym.families`); a family no spec knows still gets its
    column, after them, under its own name.
    """
    refused: list[str] = []
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    per_env: list[dict[str, Any]] = []
    visits: list[dict[str, Any]] = []
    episodes: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        folder = Path(folder)
        if not (folder / EPISODES_FILE).exists():
            raise DataError(
                folder,
                f"no {EPISODES_FILE} here",
                "pass folders written by `comprl-gym eval --out`",
            )
        records = load_episodes(folder, repair=False)
        if not records:
            continue
        config = {}
        if (folder / CONFIG_FILE).exists():
            try:
                config = json.loads((folder / CONFIG_FILE).read_text())
            except json.JSONDecodeError:
                config = {}
        provenance = _run_provenance(folder, config)
        run_suite = provenance.get("suite") or {}
        pools = run_pools(config)
        if suite is not None:
            why = _refusal(folder.name, run_suite, suite)
            if why:
                refused.append(why)
                continue
        latest: dict[str, dict[str, Any]] = {}
        for r in records:
            latest[r["key"]] = r
        by_condition: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(latest):
            by_condition[latest[key].get("condition", PLAIN)].append(latest[key])
        streamed = all("arm" in r and "visit" in r for r in latest.values())
        if streamed:
            visits += _visit_rows(folder.name, list(latest.values()))
        for condition, recs in sorted(by_condition.items()):
            agent = recs[0].get("agent", config.get("identity", {}).get("agent", "?"))
            run_id = _run_id(folder.name, condition, streamed)
            success = proportion_ci([float(bool(r["won"])) for r in recs])
            by_seed: dict[int, list[float]] = defaultdict(list)
            for r in recs:
                by_seed[int(r.get("agent_seed", 0))].append(float(bool(r["won"])))
            row: dict[str, Any] = {
                "run": run_id,
                "folder": str(folder),
                "suite": run_suite.get("key"),
                "suite_hash": run_suite.get("hash"),
                # a run on a training pool is ranked apart: it is not a held-out result
                "group": _group_label(run_suite)
                + ("" if all(p.held_out for p in pools) else TRAINING_GROUP),
                "pool": ", ".join(sorted({p.label() for p in pools})) or "–",
                "episodes_expected": run_suite.get("episodes_expected"),
                "agent_provenance": provenance.get("agent") or {"spec": agent},
                "finished_at": provenance.get("finished_at", ""),
                "flags": [],
                "agent": agent,
                "condition": condition,
                "episodes": len(recs),
                "families": {},
                "success": success.to_dict(),
                "episodes_needed": episodes_needed(success.mean),
                "seeds": seed_summary(by_seed) if len(by_seed) > 1 else None,
                "score_mean": sum(float(r.get("score", 0)) for r in recs) / len(recs),
                "steps_mean": sum(float(r.get("steps", 0)) for r in recs) / len(recs),
                "tokens_mean": sum(
                    float(r.get("prompt_tokens", 0)) + float(r.get("completion_tokens", 0))
                    for r in recs
                )
                / len(recs),
            }
            fam: dict[str, list[float]] = defaultdict(list)
            env: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in recs:
                fam[r.get("env_family", "?")].append(float(bool(r["won"])))
                env[_env_label(r)].append(r)
            row["families"] = {f: proportion_ci(v).to_dict() for f, v in sorted(fam.items())}
            rows.append(row)
            warning = resolution_warning(f"{run_id}: success", success, row["episodes_needed"])
            if warning:
                warnings.append(warning)
            for env_id, rs in sorted(env.items()):
                per_env.append(
                    {
                        "run": run_id,
                        "agent": agent,
                        "env_id": env_id,
                        "env_family": rs[0].get("env_family", "?"),
                        "episodes": len(rs),
                        "success": proportion_ci([float(bool(r["won"])) for r in rs]).to_dict(),
                        "steps_mean": sum(float(r.get("steps", 0)) for r in rs) / len(rs),
                    }
                )
            episodes[run_id] = [_viewer_episode(r) for r in recs[:MAX_VIEWER_EPISODES]]
    rows.sort(key=lambda r: -(r["success"]["mean"] if not math.isnan(r["success"]["mean"]) else -1))
    groups = _rank_in_groups(rows)
    notices = _version_notices(rows)
    families = [f for f in family_specs() if any(f in r["families"] for r in rows)]
    families += sorted({f for r in rows for f in r["families"]} - set(families))
    labels = {f: spec.label if (spec := family_spec(f)) else f for f in families}
    return {
        "rows": rows,
        "per_env": per_env,
        "visits": visits,
        "episodes": episodes,
        "families": families,
        "labels": labels,
        "warnings": warnings,
        "groups": groups,
        "refused": refused,
        "notices": notices,
    }


TRAINING_GROUP = ", training pool"


def run_pools(config: dict[str, Any]) -> list[Pool]:
    """The pools a run folder's ``config.json`` says it played (empty: no family with pools).

    Runs written before pools were recorded name none: they played their ``split``
    argument, or without one the env's training pool (:func:`~comprl_gym.families.
    recorded_pool`).

    Example:
        >>> run_pools({"kind": "stream", "env_ids": ["comprl/Memory-Fork-v0"],
        ...            "config": {"env_kwargs": {}}})
        [Pool(split='train', held_out=False, chosen='env')]
    """
    if config.get("pools"):  # an eval or a suite: one pool per id or pinned task
        return [Pool(**pool) for pool in config["pools"].values()]
    if config.get("pool"):  # a stream
        return [Pool(**config["pool"])]
    kwargs = (config.get("config") or {}).get("env_kwargs")
    if kwargs is None:
        kwargs = (config.get("identity") or {}).get("env_kwargs") or {}
    if config.get("suite"):  # a suite pins each task's split: read nothing into its top level
        return []
    pools = [recorded_pool(env_id, kwargs) for env_id in config.get("env_ids") or []]
    return [pool for pool in pools if pool is not None]


def _run_id(folder: str, condition: str, streamed: bool) -> str:
    """A row's name: the folder, with its arm (a stream) or its experience condition."""
    if streamed:
        return f"{folder} [{condition}]"
    return folder if condition == PLAIN else f"{folder} ({condition} experience)"


def _visit_rows(folder: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stream's arms, one row each: success at each visit and over all visits, and the
    arm minus ``none`` over all visits (:func:`~comprl_gym.evaluation.stream.summary.
    streaming_summary`)."""
    rows = []
    for arm, row in streaming_summary(records).items():
        cells = row["visits"]
        rows.append(
            {
                "run": _run_id(folder, arm, streamed=True),
                "folder": folder,
                "arm": arm,
                "visits": {v: c["success"] for v, c in cells.items() if v != "all"},
                "all": cells["all"]["success"],
                "minus_none": row.get("minus_none", {}).get("all"),
            }
        )
    return rows


NO_SUITE = "no suite"
#: Flags of a row: its run is not complete; its n cannot resolve a difference of 0.1; a second
#: run from the same recorded settings fell within its interval.
INCOMPLETE, SMALL_N, REPRODUCED = "incomplete", "small n", "reproduced"


def _group_label(run_suite: dict[str, Any]) -> str:
    if not run_suite.get("key"):
        return NO_SUITE
    return f"{run_suite['key']} ({str(run_suite.get('hash'))[:12]})"


def _env_label(record: dict[str, Any]) -> str:
    task = record.get("suite_task")
    return f"{record['env_id']} [{task}]" if task else record["env_id"]


def _refusal(run: str, run_suite: dict[str, Any], wanted: str) -> str | None:
    """Why ``run`` may not share a rank on suite ``wanted`` (``None`` when it may)."""
    from comprl_gym.evaluation.suites import load_suite

    published = load_suite(wanted).published_hash
    key, content = run_suite.get("key"), run_suite.get("hash")
    if key != wanted:
        return (
            f"{run}: refused a rank on {wanted}: it ran "
            f"{'suite ' + key if key else 'no suite'}; results of different suite versions "
            "are not comparable"
        )
    if content != published:
        return (
            f"{run}: refused a rank on {wanted}: it played content hashed "
            f"{str(content)[:12]}, not the published {str(published)[:12]} (other data or "
            "engines); rerun it where the content matches"
        )
    return None


def _same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("spec", "weights_sha256", "sampling", "seeds")
    pa, pb = a["agent_provenance"], b["agent_provenance"]
    return a["condition"] == b["condition"] and all(pa.get(k) == pb.get(k) for k in keys)


def _rank_in_groups(rows: list[dict[str, Any]]) -> list[str]:
    """Rank rows within their suite group, set their flags; returns the groups in order."""
    groups: list[str] = []
    for row in rows:
        if row["group"] not in groups:
            groups.append(row["group"])
    groups.sort(key=lambda g: (g == NO_SUITE, g))
    rows.sort(key=lambda r: groups.index(r["group"]))  # stable: best first within a group
    rank: dict[str, int] = defaultdict(int)
    for row in rows:
        rank[row["group"]] += 1
        row["rank"] = rank[row["group"]]
        expected = row.get("episodes_expected")
        if expected and row["episodes"] < expected:
            row["flags"].append(f"{INCOMPLETE} ({row['episodes']} of {expected})")
        if row["episodes"] < (row["episodes_needed"] or 0):
            row["flags"].append(SMALL_N)
    for i, first in enumerate(rows):
        for second in rows[i + 1 :]:
            if first["group"] != second["group"] or first["group"] == NO_SUITE:
                continue
            if not _same_settings(first, second):
                continue
            a, b = sorted((first, second), key=lambda r: (r["finished_at"], r["run"]))
            if a["success"]["low"] <= b["success"]["mean"] <= a["success"]["high"]:
                for row, other in ((a, b), (b, a)):
                    row["flags"].append(f"{REPRODUCED} (by {other['run']})")
    return groups


def _version_notices(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per suite played in several versions or content hashes."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["suite"]:
            seen[row["suite"].split("@")[0]].add(row["group"])
    return [
        f"suite {name}: {len(labels)} versions or content hashes ({', '.join(sorted(labels))}) "
        "are ranked separately: results of different suite versions are not comparable"
        for name, labels in sorted(seen.items())
        if len(labels) > 1
    ]


def _viewer_episode(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": record["key"],
        "env_id": record["env_id"],
        "task": _clip(record.get("task")),
        "won": bool(record["won"]),
        "score": float(record.get("score", 0)),
        "steps": int(record.get("steps", 0)),
        "experience_ids": record.get("experience_ids", []),
        "experiences": record.get("experiences", []),
        "error": record.get("error"),
        "turns": [
            {
                "observation": _clip(t.get("observation")),
                "text": _clip(t.get("text")),
                "action": _clip(t.get("action")),
                "reward": t.get("reward", 0.0),
                "invalid": bool(t.get("invalid_action")),
                "format_error": bool(t.get("format_error")),
            }
            for t in record.get("turns", [])
        ],
    }


def _ci(ci: dict[str, Any] | None) -> str:
    if not ci or ci.get("n", 0) == 0 or ci.get("mean") is None or math.isnan(ci["mean"]):
        return "–"
    return f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def leaderboard_markdown(board: dict[str, Any], title: str = "comprl-gym leaderboard") -> str:
    fams = board["families"]
    lines = [f"# {title}\n", "Success rate with 95% Wilson score interval.\n"]
    lines.append(
        "| rank | run | agent | "
        + " | ".join(board["labels"][f] for f in fams)
        + " | overall | episodes | steps | tokens/episode | pool | suite | flags |"
    )
    lines.append(
        "| --- | --- | --- | "
        + " | ".join("---" for _ in fams)
        + " | --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in board["rows"]:
        cells = [_ci(r["families"].get(f)) for f in fams]
        lines.append(
            f"| {r['rank']} | {r['run']} | `{r['agent']}` | "
            + " | ".join(cells)
            + f" | {_ci(r['success'])} | {r['episodes']} | {r['steps_mean']:.1f} | "
            f"{r['tokens_mean']:.0f} | {r.get('pool', '–')} | {r['group']} | "
            f"{', '.join(r['flags'])} |"
        )
    if len(board.get("groups", [])) > 1:
        lines.append("\nRanks count within a suite group (suite version and content hash).")
    lines += [f"\n> {n}" for n in board.get("notices", []) + board.get("refused", [])]
    lines += [
        "\n## Per env id\n",
        "| run | env id | episodes | success | steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e in board["per_env"]:
        lines.append(
            f"| {e['run']} | {e['env_id']} | {e['episodes']} | {_ci(e['success'])} | {e['steps_mean']:.1f} |"
        )
    lines += _visits_markdown(board.get("visits", []))
    lines += _seeds_markdown([(r["run"], r) for r in board["rows"]])
    lines += _warnings_markdown(board.get("warnings", []))
    return "\n".join(lines) + "\n"


def _visits_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The streaming runs' success by visit, one row per arm."""
    if not rows:
        return []
    visits = sorted({v for r in rows for v in r["visits"]}, key=int)
    lines = [
        "\n## Streaming runs: success by visit\n",
        "| run | "
        + " | ".join(f"visit {v}" for v in visits)
        + " | all visits | minus none (paired) | McNemar p |",
        "| --- | " + " | ".join("---" for _ in visits) + " | --- | --- | --- |",
    ]
    for r in rows:
        paired = r["minus_none"] or {}
        difference = paired.get("difference")
        lines.append(
            f"| {r['run']} | "
            + " | ".join(_ci(r["visits"].get(v)) for v in visits)
            + f" | {_ci(r['all'])} | {_ci(difference) if paired.get('pairs') else ''} | "
            + (f"{paired['mcnemar_p']:.3g}" if paired.get("pairs") else "")
            + " |"
        )
    return lines


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f0f0f0;cursor:pointer;user-select:none}th.asc:after{content:" \\25B2"}th.desc:after{content:" \\25BC"}
tr.sel{background:#eef5ff}.won{color:#070}.lost{color:#a00}pre{white-space:pre-wrap;background:#f7f7f7;padding:.4em;margin:.2em 0;max-height:20em;overflow:auto}
.turn{border-left:3px solid #ccc;padding-left:.6em;margin:.6em 0}.bad{border-color:#d55}.exp{background:#fffbe6;padding:.4em;margin:.3em 0}
#episodes li{cursor:pointer}.warn{color:#8a5a00}#episodes li:hover{text-decoration:underline}
</style></head><body>
<h1>__TITLE__</h1>
<p>Success rate with 95% Wilson score interval. Click a column to sort; click a row to browse its episodes.</p>
<label>Suite: <select id="suite-filter"></select></label>
<ul id="notices" class="warn"></ul>
<table id="board"><thead><tr id="head"></tr></thead><tbody></tbody></table>
<ul id="warnings" class="warn"></ul>
<div id="visits"></div>
<h2 id="eptitle">Episodes</h2><ul id="episodes"></ul><div id="viewer"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const fams = DATA.families;
const ci = c => (!c || c.n === 0 || c.mean === null) ? "\\u2013" : c.mean.toFixed(2) + " [" + c.low.toFixed(2) + ", " + c.high.toFixed(2) + "]";
const cols = [
  {name: "run", get: r => r.run, show: r => r.run + (r.flags.length ? " \u2014 " + r.flags.join("; ") : "")},
  {name: "agent", get: r => r.agent, show: r => r.agent},
  ...fams.map(f => ({name: DATA.labels[f], get: r => r.families[f] ? r.families[f].mean : -1, show: r => ci(r.families[f])})),
  {name: "overall", get: r => r.success.mean, show: r => ci(r.success)},
  {name: "episodes", get: r => r.episodes, show: r => String(r.episodes)},
  {name: "steps", get: r => r.steps_mean, show: r => r.steps_mean.toFixed(1)},
  {name: "tokens/episode", get: r => r.tokens_mean, show: r => r.tokens_mean.toFixed(0)},
];
let sortCol = cols.findIndex(c => c.name === "overall"), sortDir = -1;
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function renderHead() {
  const head = document.getElementById("head"); head.innerHTML = "";
  cols.forEach((c, i) => { const th = el("th", c.name); if (i === sortCol) th.className = sortDir > 0 ? "asc" : "desc";
    th.onclick = () => { sortDir = (i === sortCol) ? -sortDir : -1; sortCol = i; render(); }; head.appendChild(th); });
}
function render() {
  renderHead();
  const wantedGroup = document.getElementById("suite-filter").value;
  const rows = DATA.rows.filter(r => !wantedGroup || r.group === wantedGroup).sort((a, b) => { const x = cols[sortCol].get(a), y = cols[sortCol].get(b); return (x < y ? -1 : x > y ? 1 : 0) * sortDir; });
  const body = document.querySelector("#board tbody"); body.innerHTML = "";
  rows.forEach(r => { const tr = el("tr"); tr.dataset.run = r.run; tr.dataset.group = r.group; cols.forEach(c => tr.appendChild(el("td", c.show(r))));
    tr.onclick = () => { document.querySelectorAll("#board tr").forEach(t => t.classList.remove("sel")); tr.classList.add("sel"); showRun(r.run); };
    body.appendChild(tr); });
}
function showRun(run) {
  document.getElementById("eptitle").textContent = "Episodes of " + run;
  const list = document.getElementById("episodes"); list.innerHTML = ""; document.getElementById("viewer").innerHTML = "";
  (DATA.episodes[run] || []).forEach((ep, i) => { const li = el("li", ep.key + " \\u2014 " + (ep.won ? "won" : "lost") + ", " + ep.steps + " steps", ep.won ? "won" : "lost");
    li.onclick = () => showEpisode(ep); list.appendChild(li); });
}
function showEpisode(ep) {
  const v = document.getElementById("viewer"); v.innerHTML = "";
  v.appendChild(el("h3", ep.key)); v.appendChild(el("p", "Task: " + ep.task));
  v.appendChild(el("p", (ep.won ? "Won" : "Not won") + ", score " + ep.score.toFixed(2) + ", " + ep.steps + " steps" + (ep.error ? ", error: " + ep.error : "")));
  const exps = ep.experiences || [];
  v.appendChild(el("h4", "Experiences used (" + (ep.experience_ids || []).length + ")"));
  if (!exps.length && (ep.experience_ids || []).length) v.appendChild(el("p", "ids: " + ep.experience_ids.join(", ")));
  exps.forEach(x => { const d = el("div", undefined, "exp"); d.appendChild(el("b", "#" + x.id + " " + (x.title || ""))); d.appendChild(el("pre", (x.description || "") + "\\n" + (x.content || ""))); v.appendChild(d); });
  v.appendChild(el("h4", "Trajectory"));
  ep.turns.forEach((t, i) => { const d = el("div", undefined, "turn" + (t.invalid || t.format_error ? " bad" : ""));
    d.appendChild(el("div", "step " + (i + 1) + " \\u2014 reward " + t.reward + (t.invalid ? " \\u2014 invalid" : "") + (t.format_error ? " \\u2014 format error" : "")));
    d.appendChild(el("pre", t.observation)); if (t.text) d.appendChild(el("pre", "reply: " + t.text)); d.appendChild(el("div", "action: " + t.action));
    v.appendChild(d); });
}
const filter = document.getElementById("suite-filter");
filter.appendChild(el("option", "all suites (ranked within each)")); filter.options[0].value = "";
(DATA.groups || []).forEach(g => { const o = el("option", g); o.value = g; filter.appendChild(o); });
const fromHash = decodeURIComponent((location.hash.match(/^#suite=(.*)$/) || [])[1] || "");
if (fromHash) filter.value = fromHash;
filter.onchange = render;
render();
[...(DATA.notices || []), ...(DATA.refused || [])].forEach(n => document.getElementById("notices").appendChild(el("li", n)));
// Streaming runs: each arm's success at each visit.
const visitRows = DATA.visits || [];
if (visitRows.length) {
  const box = document.getElementById("visits"), vs = [...new Set(visitRows.flatMap(r => Object.keys(r.visits)))].sort((a, b) => a - b);
  box.appendChild(el("h2", "Streaming runs: success by visit"));
  const table = el("table"), head = el("tr");
  ["run", ...vs.map(v => "visit " + v), "all visits"].forEach(h => head.appendChild(el("th", h)));
  table.appendChild(head);
  visitRows.forEach(r => { const tr = el("tr"); tr.appendChild(el("td", r.run)); vs.forEach(v => tr.appendChild(el("td", ci(r.visits[v])))); tr.appendChild(el("td", ci(r.all))); table.appendChild(tr); });
  box.appendChild(table);
}
(DATA.warnings || []).forEach(w => document.getElementById("warnings").appendChild(el("li", "\\u26A0 " + w)));
if (DATA.rows.length) showRun(DATA.rows[0].run);
// A link such as leaderboard.html#ep=KEY opens that episode.
const wanted = decodeURIComponent((location.hash.match(/^#ep=(.*)$/) || [])[1] || "");
if (wanted) { for (const run of Object.keys(DATA.episodes)) { const ep = DATA.episodes[run].find(e => e.key === wanted); if (ep) { showRun(run); showEpisode(ep); break; } } }
document.body.setAttribute("data-ready", "1");
</script></body></html>
"""


def leaderboard_html(board: dict[str, Any], title: str = "comprl-gym leaderboard") -> str:
    """A self-contained page; the data is embedded as JSON (``</`` escaped)."""
    data = json.dumps(jsonable(board), ensure_ascii=False).replace("</", "<\\/")
    return _HTML.replace("__TITLE__", html.escape(title)).replace("__DATA__", data)


def write_leaderboard(
    board: dict[str, Any], out_dir: str | os.PathLike[str], title: str = "comprl-gym leaderboard"
) -> dict[str, Path]:
    """Write ``leaderboard.md``, ``.json`` and ``.html`` into ``out_dir``."""
    out = Path(out_dir)
    paths = {
        "markdown": out / "leaderboard.md",
        "json": out / "leaderboard.json",
        "html": out / "leaderboard.html",
    }
    atomic_write_text(paths["markdown"], leaderboard_markdown(board, title))
    atomic_write_json(paths["json"], jsonable({k: v for k, v in board.items() if k != "episodes"}))
    atomic_write_text(paths["html"], leaderboard_html(board, title))
    paths.update(write_family_plots(board, out))
    return paths


def write_family_plots(board: dict[str, Any], out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """One PNG per family: each row's success with its 95% interval, labelled by suite group."""
    if not board["rows"]:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from comprl_gym.utils import atomic_write_bytes

    paths = {}
    for family in board["families"]:
        rows = [r for r in board["rows"] if r["families"].get(family, {}).get("n")]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
        for y, r in enumerate(rows):
            ci = r["families"][family]
            ax.errorbar(
                ci["mean"], y, xerr=[[ci["mean"] - ci["low"]], [ci["high"] - ci["mean"]]], fmt="o"
            )
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{r['run']} [{r['group']}]" for r in rows], fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_xlabel("success (95% Wilson interval)")
        ax.set_title(board["labels"][family])
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        plt.close(fig)
        path = Path(out_dir) / f"leaderboard_{family}.png"
        atomic_write_bytes(path, buffer.getvalue())
        paths[f"plot_{family}"] = path
    return paths
