"""TextWorld's PDDL engine with each game translated once, then reused.

Upstream (``textworld.envs.pddl.PddlEnv`` behind ``textworld.gym`` as alfworld's
``AlfredTWEnv`` sets it up) spends a reset almost entirely on work whose result never
changes for a game:

* ``PddlEnv.load`` and ``PddlEnv.reset`` each build a ``PddlState``, and each ``PddlState``
  runs Fast Downward's PDDL->SAS translation twice (plain and optimised for replanning):
  four translations, ~0.4 s each on a real-size game;
* ``GameLogic`` re-parses the game's grammar with TatSu on every load;
* every ``grammar.derive(...)`` (the intro, each feedback, the text of every admissible
  command, every step) re-parses its start string and each rule condition with TatSu.

This module keeps the products of those steps in a per-game :class:`CompiledGame` (held in
memory, and pickled under the comprl cache so a new process pays nothing either) and a
grammar whose parses are memoised. The engine code that produces text, admissible commands
and ``won`` is textworld's own: :class:`FastPddlEnv` subclasses ``PddlEnv`` and only swaps
where the parsed/translated objects come from, so what an agent sees is unchanged (the
tests compare it with ``AlfredTWEnv`` command by command).

Example:
    >>> from comprl_gym.envs.alfworld.engine import make_alfred_engine
    >>> engine = make_alfred_engine()          # PddlEnv + AlfredDemangler + AlfredInfos
    >>> # engine.load(game_dict_or_path); state = engine.reset(); state.feedback
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import pickle
import re
import threading
from collections import Counter, OrderedDict, defaultdict
from copy import deepcopy
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from comprl_gym.core import EnvBackendError, require
from comprl_gym.utils import atomic_write_bytes, cache_dir

logger = logging.getLogger(__name__)

textworld = require("textworld", "ALFWorld", extra="alfworld")
fast_downward = require("fast_downward", "ALFWorld", extra="alfworld")
# The imports below need the two packages checked above.
from textworld.core import GameState  # noqa: E402
from textworld.envs.pddl import PddlEnv, textgen  # noqa: E402
from textworld.envs.pddl import logic as pddl_logic  # noqa: E402
from textworld.logic import Proposition, Rule, Variable  # noqa: E402

#: Bump when the pickled layout of :class:`CompiledGame` changes.
COMPILED_FORMAT = 1
#: Games kept compiled in memory per process (more are reloaded from disk in ~10 ms).
MEMORY_CACHE_GAMES = 32


# --------------------------------------------------------------------------------------------
# Memoised grammar
# --------------------------------------------------------------------------------------------
_PARSE_LOCK = threading.Lock()
_SYMBOLS_CACHE: dict[str, list[Any]] = {}
_QUERY_CACHE: dict[str, Rule] = {}


def _parsed_symbols(text: str) -> list[Any]:
    """TatSu parse of a grammar right-hand side, memoised (callers deep-copy the result)."""
    cached = _SYMBOLS_CACHE.get(text)
    if cached is None:
        with _PARSE_LOCK:
            cached = textgen._parse_and_convert(text, rule_name="symbols")
            cached = [_cached_symbol(symbol) for symbol in cached]
        _SYMBOLS_CACHE[text] = cached
    return cached


def _conjunctive_query(expression: str) -> Rule:
    rule = _QUERY_CACHE.get(expression)
    if rule is None:
        with _PARSE_LOCK:
            rule = Rule.parse_conjunctive_query(expression)
        _QUERY_CACHE[expression] = rule
    return rule


class _CachedConditionalSymbol(textgen.ConditionalSymbol):
    """``ConditionalSymbol`` whose ``given`` query is parsed once (same semantics)."""

    def derive(self):
        if len(self.context) == 0:
            raise ValueError("Empty context")
        context = textgen.copy_context(self.context)
        contexts = [context]
        if self.given:
            rule = _conjunctive_query(self.given)
            contexts = []
            for mapping in context["state"].all_assignments(rule, context["mapping"]):
                new_context = textgen.copy_context(context)
                infos = new_context["entity_infos"]
                new_context["variables"].update(
                    {ph.name: infos[var.name] for ph, var in mapping.items()}
                )
                new_context["mapping"].update(mapping)
                contexts.append(new_context)
        return [self.expression.copy(ctx) for ctx in contexts]


def _cached_symbol(symbol: Any) -> Any:
    """Swap parsed ``ConditionalSymbol`` nodes (also inside lists) for the memoised kind."""
    if isinstance(symbol, textgen.ListSymbol):
        symbol.symbol = _cached_symbol(symbol.symbol)
    elif isinstance(symbol, textgen.ConditionalSymbol) and not isinstance(
        symbol, _CachedConditionalSymbol
    ):
        symbol.__class__ = _CachedConditionalSymbol
        symbol.expression = _cached_symbol(symbol.expression)
    return symbol


class CachedGrammar(textgen.ContextSensitiveGrammar):
    """textworld's context-sensitive grammar with every parse done once per string."""

    @classmethod
    def from_grammar(cls, grammar: textgen.ContextSensitiveGrammar) -> CachedGrammar:
        cached = cls()
        cached.update(grammar)
        for rules in cached._rules.values():
            for rule in rules:
                rule.rhs = [_cached_symbol(symbol) for symbol in rule.rhs]
        return cached

    def replace(self, start):
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)
        for rule in rules:  # the first applicable rule wins, as upstream
            if not rule.condition or any(
                True
                for _ in start.context["state"].all_assignments(
                    _conjunctive_query(rule.condition), start.context["mapping"]
                )
            ):
                break
        else:
            raise IndexError(f"no applicable production rule for #{start}#")
        symbols = deepcopy(rule.rhs)
        for symbol in symbols:
            symbol.context = textgen.copy_context(start.context)
        return symbols

    def derive(self, start: str, context={}) -> str:  # noqa: B006 - upstream signature
        derivation = deepcopy(_parsed_symbols(start))[::-1]
        for symbol in derivation:
            symbol.context = textgen.copy_context(context)
        derived = []
        while derivation:
            symbol = derivation.pop()
            if isinstance(symbol, textgen.TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, textgen.NonterminalSymbol):
                derivation += self.replace(symbol)[::-1]
            else:  # conditional, eval and list symbols expand themselves
                derivation += symbol.derive()[::-1]
        return "".join(map(str, derived))


# --------------------------------------------------------------------------------------------
# Compiled games
# --------------------------------------------------------------------------------------------
@dataclass
class CompiledGame:
    """Everything about a game that does not change between episodes.

    Attributes:
        key: hash of domain, problem, grammar and engine versions.
        logic: the parsed grammar and action templates (``GameLogic``).
        task: Fast Downward's normalised PDDL task (objects, init, actions, types).
        sas: the plain SAS translation (every fact and operator kept: the game state).
        sas_replan: the optimised SAS translation the planner searches; made on the first
            call to :meth:`FastPddlEnv.plan` (playing never needs it).
    """

    key: str
    logic: Any
    task: Any
    sas: str
    sas_replan: str | None = None


def _engine_versions() -> str:
    parts = []
    for dist in ("textworld", "fast-downward-textworld", "alfworld"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=?")
    return ";".join(parts)


_MEMORY: OrderedDict[str, CompiledGame] = OrderedDict()
_MEMORY_LOCK = threading.Lock()


def game_key(game_data: dict[str, Any]) -> str:
    """Stable hash of what determines a game's dynamics and text."""
    digest = hashlib.sha256()
    for part in (
        _engine_versions(),
        str(COMPILED_FORMAT),
        game_data["pddl_domain"],
        game_data["pddl_problem"],
        game_data["grammar"],
    ):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def compile_game(game_data: dict[str, Any], use_disk_cache: bool = True) -> CompiledGame:
    """Parse and translate a game once; later calls (any process) reuse the result."""
    key = game_key(game_data)
    with _MEMORY_LOCK:
        compiled = _MEMORY.get(key)
        if compiled is not None:
            _MEMORY.move_to_end(key)
            return compiled
    path = _disk_path(key) if use_disk_cache else None
    compiled = None
    if path is not None and path.exists():
        try:
            compiled = pickle.loads(path.read_bytes())
        except Exception as exc:  # a stale or truncated cache entry is rebuilt, never fatal
            logger.warning("ignoring unreadable compiled-game cache %s (%s)", path, exc)
            compiled = None
    if compiled is None:
        compiled = _translate(key, game_data)
        if path is not None:
            _save(compiled)
    with _MEMORY_LOCK:
        _MEMORY[key] = compiled
        while len(_MEMORY) > MEMORY_CACHE_GAMES:
            _MEMORY.popitem(last=False)
    return compiled


_TASK_SENTENCE = re.compile(r"Your task is to: ([^\"#{}\[\]|\\]*?)\.\"")
_LOGIC_TEMPLATES: dict[str, bytes] = {}


def _game_logic(domain: str, grammar: str) -> Any:
    """``GameLogic`` of a game, parsing each grammar only once up to its task sentence.

    Games of one release share their grammar except for the sentence "Your task is to: ...".
    TatSu parses the shared text once; each game gets a copy with its sentence put into the
    one terminal symbol that holds it, which is what parsing its own text would give.
    """
    match = _TASK_SENTENCE.search(grammar)
    if match is None:
        logic = pddl_logic.GameLogic(domain=domain, grammar=grammar)
        logic.grammar = CachedGrammar.from_grammar(logic.grammar)
        return logic
    placeholder = "COMPRL TASK SENTENCE"
    template = grammar[: match.start(1)] + placeholder + grammar[match.end(1) :]
    template_key = hashlib.sha256((domain + "\0" + template).encode("utf-8")).hexdigest()
    blob = _LOGIC_TEMPLATES.get(template_key)
    if blob is None:
        logic = pddl_logic.GameLogic(domain=domain, grammar=template)
        logic.grammar = CachedGrammar.from_grammar(logic.grammar)
        blob = _LOGIC_TEMPLATES[template_key] = pickle.dumps(logic, pickle.HIGHEST_PROTOCOL)
    logic = pickle.loads(blob)
    replaced = 0
    for rules in logic.grammar._rules.values():
        for rule in rules:
            for symbol in rule.rhs:
                if isinstance(symbol, textgen.TerminalSymbol) and placeholder in str(symbol.symbol):
                    symbol.symbol = symbol.symbol.replace(placeholder, match.group(1))
                    replaced += 1
    if replaced != 1:  # the sentence sat somewhere unexpected: parse this grammar in full
        logic = pddl_logic.GameLogic(domain=domain, grammar=grammar)
        logic.grammar = CachedGrammar.from_grammar(logic.grammar)
    return logic


def _translate(key: str, game_data: dict[str, Any]) -> CompiledGame:
    logic = _game_logic(game_data["pddl_domain"], game_data["grammar"])
    task, sas = _pddl2sas(logic.domain, game_data["pddl_problem"], optimize=False)
    for type_ in task.types:  # what PddlState.__init__ registers on every construction
        with contextlib.suppress(ValueError):  # already known
            logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
    return CompiledGame(key=key, logic=logic, task=task, sas=sas)


def _pddl2sas(domain: str, problem: str, optimize: bool) -> tuple[Any, str]:
    import sys

    argv = list(sys.argv)  # fast_downward.pddl2sas overwrites sys.argv
    try:
        return fast_downward.pddl2sas(domain, problem, optimize=optimize)
    finally:
        sys.argv[:] = argv


def _disk_path(key: str) -> Path:
    return cache_dir("alfworld", "compiled", key[:2]) / f"{key}.pkl"


def ensure_replan(compiled: CompiledGame, game_data: dict[str, Any]) -> str:
    """The planner's SAS translation of a game, made once (and cached) on first need."""
    if compiled.sas_replan is None:
        _, compiled.sas_replan = _pddl2sas(
            compiled.logic.domain, game_data["pddl_problem"], optimize=True
        )
        if _disk_path(compiled.key).exists():  # refresh the entry of a disk-cached game
            _save(compiled)
    return compiled.sas_replan


def _save(compiled: CompiledGame) -> None:
    path = _disk_path(compiled.key)
    try:
        atomic_write_bytes(path, pickle.dumps(compiled, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as exc:
        logger.warning("could not write compiled-game cache %s (%s)", path, exc)


class CompiledPddlState(pddl_logic.PddlState):
    """``PddlState`` built from a :class:`CompiledGame` instead of translating again."""

    def __init__(self, downward_lib: Any, compiled: CompiledGame):  # noqa: D107
        # The attributes textworld.logic.State keeps (PddlState sets them the same way).
        self._facts = defaultdict(set)
        self._vars_by_name = {}
        self._vars_by_type = defaultdict(set)
        self._var_counts = Counter()
        self._logic = compiled.logic
        self.downward_lib = downward_lib
        self.pddl_problem = None
        self.task, self.sas, self.sas_replan = compiled.task, compiled.sas, compiled.sas_replan
        self._actions = {action.name: action for action in self.task.actions}
        self.downward_lib.load_sas(self.sas.encode("utf-8"))
        if self.sas_replan is not None:
            self.downward_lib.load_sas_replan(self.sas_replan.encode("utf-8"))
        self.name2type = {obj.name: obj.type_name for obj in self.task.objects}
        self.add_facts(self._initial_static_facts())
        atoms = (pddl_logic.Atom * self.downward_lib.get_state_size())()
        self.downward_lib.get_state(atoms)
        facts = [atom.get_fact(self.name2type) for atom in atoms]
        self.add_facts([fact for fact in facts if not fact.is_negation])

    def _initial_static_facts(self) -> list[Proposition]:
        conditions = fast_downward.translate.pddl.conditions
        f_expression = fast_downward.translate.pddl.f_expression
        facts = []
        for atom in self.task.init:
            if isinstance(atom, conditions.Atom):
                if atom.predicate == "=":
                    continue
                name = atom.predicate
                args = atom.args
            elif isinstance(atom, f_expression.Assign):
                if atom.fluent.symbol == "total-cost":
                    continue
                name = f"{atom.expression.value}"
                if name.isdigit():  # distances between locations
                    continue
                args = atom.fluent.args
            else:
                continue
            facts.append(Proposition(name, [Variable(arg, self.name2type[arg]) for arg in args]))
        return facts


class FastPddlEnv(PddlEnv):
    """textworld's ``PddlEnv`` with compiled games: same text, same commands, fast resets."""

    #: Keep compiled games on disk too (a new process then skips the translation).
    use_disk_cache = True

    def load(self, filename_or_data: str | Path | dict[str, Any]) -> None:
        if isinstance(filename_or_data, dict):
            data, self._game_file = filename_or_data, None
        else:
            with open(filename_or_data, encoding="utf-8") as handle:
                data = json.load(handle)
            self._game_file = str(filename_or_data)
        self._game_data = data
        self.walkthrough = data.get("walkthrough", None)
        self._compiled = compile_game(data, use_disk_cache=self.use_disk_cache)
        self._logic = self._compiled.logic
        self._pddl_state = CompiledPddlState(self.downward_lib, self._compiled)
        self._entity_infos = self._get_entity_infos()

    def reset(self) -> GameState:
        self._pddl_state = CompiledPddlState(self.downward_lib, self._compiled)
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {
            "state": self._pddl_state,
            "facts": list(self._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": self._entity_infos,
        }
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        if "walkthrough" in self.request_infos.extras:
            self.state["extra.walkthrough"] = self.walkthrough or self._pddl_state.replan(
                self._entity_infos
            )
        return self.state

    def plan(self) -> list[str]:
        """Fast Downward's plan from the current state, as game commands ([] if none)."""
        if self._pddl_state.sas_replan is None:
            sas_replan = ensure_replan(self._compiled, self._game_data)
            self._pddl_state.sas_replan = sas_replan
            self.downward_lib.load_sas_replan(sas_replan.encode("utf-8"))
        return self._pddl_state.replan(self._entity_infos)


def make_alfred_engine(request_infos: Any = None) -> Any:
    """A :class:`FastPddlEnv` wrapped as ``AlfredTWEnv`` wraps textworld's env.

    The wrappers are alfworld's own ``AlfredDemangler`` (ids such as
    ``Apple_bar__plus_00_dot_16...`` become "apple 1"; no shuffling, as in evaluation) and
    ``AlfredInfos`` (``extra.gamefile``). ``request_infos`` defaults to what ``AlfredTWEnv``
    requests: ``won``, ``admissible_commands`` and the game file.
    """
    alfred_env = require("alfworld.agents.environment.alfred_tw_env", "ALFWorld", "alfworld")
    if request_infos is None:
        request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    try:
        env = FastPddlEnv(request_infos)
    except OSError as exc:  # pragma: no cover - libdownward.so missing or unloadable
        raise EnvBackendError(f"could not load Fast Downward's library: {exc}") from exc
    env = alfred_env.AlfredDemangler(shuffle=False)(env)
    return alfred_env.AlfredInfos()(env)
