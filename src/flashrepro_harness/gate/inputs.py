"""The rules a results JSON or baseline must follow before the gate reads a number from it. A
breach is a refusal (exit 4) naming the file and the rule, never a traceback (docs/gate.md)."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any, NoReturn

from flashrepro_harness.gate.numbers import MAX_INT, is_number
from flashrepro_harness.gate.refusals import BaselineError, Refused, ResultsError
from flashrepro_harness.gate.stats import MAX_ROUNDS
from flashrepro_harness.results import COMPLETE, RESULTS_SCHEMA, is_product

MAX_FILE_BYTES = 32 * 2**20
"""Largest results or baseline file read (about 25 MB at
:data:`~flashrepro_harness.gate.stats.MAX_ROUNDS` rounds)."""
BASELINE_SCHEMA = "flashrepro.baseline/1"
PROBLEM_TYPES = {"batch": int, "heads": int, "seqlen_q": int, "seqlen_k": int, "head_dim": int,
                 "dtype": str, "causal": bool}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def read_json(path: Path, label: str, error: type[Refused] = ResultsError) -> Any:
    """The JSON value in ``path``; ``label`` names it in messages (``"--results PATH"``).

    Raises:
        Refused: (``error``) the file is a symbolic link or not a regular file, cannot be
            read, holds more than :data:`MAX_FILE_BYTES`, is not UTF-8, not JSON, or nested
            too deeply to parse.
    """
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
            raise error(f"{label}: {kind}; only a plain file is read (a link could point at "
                        "another run's results, a pipe or device would never end)")
        size = info.st_size
        if size > MAX_FILE_BYTES:
            raise error(f"{label}: {size} bytes, more than the {MAX_FILE_BYTES} a results or "
                        "baseline file may hold")
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{label}: cannot read it: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or an int past Python's digit limit
        raise error(f"{label}: not JSON ({exc})") from exc
    except RecursionError as exc:
        raise error(f"{label}: JSON nested too deeply to read") from exc


def check_samples(values: Any, what: str, refuse: Any) -> None:
    """``values`` is a list of 1 to :data:`MAX_ROUNDS` finite numbers > 0 (its length checked
    before anything else), else ``refuse(rule)``."""
    if not isinstance(values, list) or not values:
        refuse(f"{what} must be a non-empty list of numbers (µs or ratios), got {_kind(values)}")
    if len(values) > MAX_ROUNDS:
        refuse(f"{what} holds {len(values)} rounds; the gate reads at most {MAX_ROUNDS} rounds "
               "per record (gate.stats.MAX_ROUNDS)")
    bad = next((i for i, v in enumerate(values)
                if not (is_number(v) and math.isfinite(v) and v > 0)), None)
    if bad is not None:
        refuse(f"{what}[{bad}] is {values[bad]!r}: every value must be a finite number > 0")


def _check_problem(problem: dict[str, Any], refuse: Any) -> None:
    unknown = sorted(map(str, set(problem) - set(PROBLEM_TYPES)))
    if unknown:
        refuse(f"'problem' has fields the gate does not know: {unknown} (it judges a problem "
               f"of exactly {list(PROBLEM_TYPES)}; an unknown field could change what was "
               "timed unseen)")
    for field, kind in PROBLEM_TYPES.items():
        value = problem.get(field)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool)
                                                            or not 1 <= value <= MAX_INT)):
            rule = "an int in [1, 2^53]" if kind is int else kind.__name__
            refuse(f"'problem.{field}' must be {rule}, got {value!r}")


def _check_strings(obj: dict[str, Any], fields: tuple[str, ...], where: str,
                   refuse: Any) -> None:
    for field in fields:
        if obj.get(field) is not None and not isinstance(obj[field], str):
            refuse(f"'{where}.{field}' must be a string or null, got {_kind(obj[field])}")


def check_results(data: Any, label: str) -> dict[str, Any]:
    """``data`` (a parsed results file) if it follows the rules, else a refusal.

    The rules: an object of schema ``flashrepro.results/1`` and kind ``reproduce``, with the
    completion marker (``"complete": true``), ``env`` and ``problem`` objects (the problem's
    fields, and no other, typed), and ``records``: objects with unique non-empty names, where
    present finite ``host_us`` and ``eager_us`` >= 0, each either ``skipped`` or ``failed`` (a
    reason) or timed: 1 to :data:`MAX_ROUNDS` round medians, each a finite number > 0, a
    numeric ``max_abs_err`` >= 0 (NaN allowed: a failed output check, judged later); a ``reference``
    whose ``src`` and ``commit`` are strings or null. Numbers are floats or ints of magnitude at
    most :data:`~flashrepro_harness.gate.numbers.MAX_INT`. (Its times' floor is
    :func:`~flashrepro_harness.gate.plausible.check_floor`, once the problem is the judge's.)

    Raises:
        ResultsError: the first rule broken, with ``label`` (the file) in the message.
    """
    def refuse(rule: str) -> NoReturn:
        raise ResultsError(f"{label}: {rule}")

    if not isinstance(data, dict):
        refuse(f"the top level must be an object (a reproduce results file), got {_kind(data)}")
    if data.get("schema") != RESULTS_SCHEMA or data.get("kind") != "reproduce":
        refuse(f"must be a {RESULTS_SCHEMA!r} file of kind 'reproduce' (what `python -m "
               f"flashrepro_harness reproduce` writes), got schema {data.get('schema')!r}, kind "
               f"{data.get('kind')!r}")
    for key, kind in (("env", dict), ("problem", dict), ("records", list)):
        if not isinstance(data.get(key), kind):
            refuse(f"'{key}' must be a{'n object' if kind is dict else ' list'}, got "
                   f"{_kind(data.get(key))}")
    if data.get(COMPLETE) is not True:
        refuse(f"no completion marker (\"{COMPLETE}\": true), which reproduce writes once every "
               "row is timed and checked: a run that stopped early, or a file from before the "
               "marker, is not judged")
    for key in ("method", "reference", "injection", "test_hooks"):
        if key in data and not isinstance(data[key], dict):
            refuse(f"'{key}' must be an object, got {_kind(data[key])}")
    _check_strings(data.get("reference", {}), ("src", "commit"), "reference", refuse)
    if not all(isinstance(i, dict) for i in data.get("injection", {}).values()):
        refuse("'injection' must map records to objects (FLASHREPRO_INJECT_SLOWDOWN's)")
    if data["env"].get("gpu") is not None and not isinstance(data["env"]["gpu"], dict):
        refuse(f"'env.gpu' must be an object or null, got {_kind(data['env']['gpu'])}")
    _check_problem(data["problem"], refuse)
    seen: dict[str, int] = {}
    for i, rec in enumerate(data["records"]):
        if not isinstance(rec, dict):
            refuse(f"records[{i}] must be an object, got {_kind(rec)}")
        name = rec.get("name")
        if not isinstance(name, str) or not name:
            refuse(f"records[{i}] has no name (a non-empty string)")
        if name in seen:
            refuse(f"record {name!r} twice (records[{seen[name]}] and records[{i}]): names must "
                   "be unique, or one would silently replace the other")
        seen[name] = i
        for field in ("host_us", "eager_us"):
            if field in rec and not (is_number(rec[field]) and math.isfinite(rec[field])
                                     and rec[field] >= 0):
                refuse(f"record {name!r} '{field}' must be a finite number >= 0 (µs), got "
                       f"{rec[field]!r}")
        states = [k for k in ("skipped", "failed") if k in rec]
        if states:
            if not all(isinstance(rec[k], str) and rec[k] for k in states) or \
                    "round_medians_us" in rec:
                refuse(f"record {name!r}: '{states[0]}' must be a reason (a non-empty string), "
                       "on a record without round medians")
            continue
        check_samples(rec.get("round_medians_us"), f"record {name!r} 'round_medians_us'",
                      refuse)
        err = rec.get("max_abs_err")
        if not is_number(err):
            refuse(f"timed record {name!r} has no numeric 'max_abs_err' (got {err!r}): every "
                   "timed row's output must be checked against the float32 reference")
        if err < 0:
            refuse(f"timed record {name!r} has 'max_abs_err' {err!r}: a maximum of absolute "
                   "differences is >= 0 (or NaN, a failed check)")
    if not seen:
        refuse("'records' is empty")
    return data


def check_baseline(data: Any, path: Path) -> dict[str, Any]:
    """``data`` (a parsed baseline file) if it follows the rules, else a refusal.

    The rules: an object of schema ``flashrepro.baseline/1`` with ``env`` (its ``git_commit``
    and ``date`` strings or null), ``problem`` (its fields, and no other, typed) and ``method``
    objects, optional ``gate`` settings (an object; their ranges are checked where they are
    used), ``records`` mapping names to objects whose ``round_medians_us`` (and
    ``round_ratios``, as many: required of a flashrepro row) hold 1 to :data:`MAX_ROUNDS`
    finite numbers > 0, a ``history`` list of objects whose ``median_ratio`` maps names to
    numbers (``git_commit`` and ``date`` as env's), and an optional ``host_cost`` object of
    per-record numbers (or null).

    Raises:
        BaselineError: the first rule broken, with ``path`` in the message.
    """
    def refuse(rule: str) -> NoReturn:
        raise BaselineError(f"baseline {path}: {rule}")

    if not isinstance(data, dict):
        refuse(f"the top level must be an object, got {_kind(data)}")
    if data.get("schema") != BASELINE_SCHEMA:
        refuse(f"not a baseline of schema {BASELINE_SCHEMA!r} (schema {data.get('schema')!r})")
    for key in ("env", "problem", "method", "records"):
        if not isinstance(data.get(key), dict):
            refuse(f"'{key}' must be an object, got {_kind(data.get(key))}")
    for key, kind in (("gate", dict), ("history", list), ("host_cost", dict)):
        if key in data and not isinstance(data[key], kind):
            refuse(f"'{key}' must be a{'n object' if kind is dict else ' list'}, got "
                   f"{_kind(data[key])}")
    _check_problem(data["problem"], refuse)
    for name, rec in data["records"].items():
        if not isinstance(rec, dict):
            refuse(f"records[{name!r}] must be an object, got {_kind(rec)}")
        check_samples(rec.get("round_medians_us"), f"records[{name!r}].round_medians_us",
                      refuse)
        if "round_ratios" in rec or is_product(name):  # a judged row's primary metric
            check_samples(rec.get("round_ratios"), f"records[{name!r}].round_ratios", refuse)
            if len(rec["round_ratios"]) != len(rec["round_medians_us"]):
                refuse(f"records[{name!r}] has {len(rec['round_ratios'])} round_ratios and "
                       f"{len(rec['round_medians_us'])} round_medians_us: one of each per round")
    _check_strings(data["env"], ("git_commit", "date"), "env", refuse)
    for i, entry in enumerate(data.get("history", [])):
        ratios = entry.get("median_ratio", {}) if isinstance(entry, dict) else None
        if not isinstance(ratios, dict) or not all(is_number(v) for v in ratios.values()):
            refuse(f"history[{i}] must be an object whose 'median_ratio' maps records to "
                   "numbers")
        _check_strings(entry, ("git_commit", "date"), f"history[{i}]", refuse)
    for name, cost in data.get("host_cost", {}).items():
        if not isinstance(cost, dict) or not all(v is None or is_number(v)
                                                 for v in cost.values()):
            refuse(f"host_cost[{name!r}] must map host_us and eager_us to numbers or null")
    return data
