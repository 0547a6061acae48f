#!/usr/bin/env python3
"""Checks JSON documents against a type the `berserk` package declares.

berserk (the typed Python client of the Lichess API) declares the opening
explorer's response as TypedDicts: `berserk.types.OpeningStatistic` and the
types it names (Move, Game, Opening, Player, ...). This script loads that
declaration from the installed package (typing.get_type_hints) and checks
each document recursively: every required key present, no key the type
does not declare, every value of its declared type (str, int but not bool,
Literal values, lists, `X | None`, nested TypedDicts).

Two kinds of exception may be named, each for a key where berserk's
declaration and the Lichess server (lila-openingexplorer) disagree:
--absent-ok TYPE.KEY, a key berserk declares required but the server leaves
out of some answers (`skip_serializing_if`), which may then be absent and
must have its type when present; --extra-ok TYPE.KEY, a key the server sends
that berserk does not declare, which may then be present (any value).
Both repeatable.

Input: lines `LABEL<TAB>JSON` on stdin. Output: one line per problem
(`LABEL: path: what`), then `N documents checked, M problems`. Exit status
1 if any problem, 2 on bad usage.

Usage: py_berserk_types.py [--type OpeningStatistic] [--absent-ok TYPE.KEY]
                           [--extra-ok TYPE.KEY] < lines
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing

import berserk.types
from typing_extensions import is_typeddict


def check(value, hint, path, allowed, problems):
    """Appends to `problems` what is wrong with `value` as a `hint`."""
    origin = typing.get_origin(hint)
    if is_typeddict(hint):
        if not isinstance(value, dict):
            problems.append(f"{path}: {value!r} is not an object ({hint.__name__})")
            return
        hints = typing.get_type_hints(hint)
        for key in sorted(hint.__required_keys__):
            if key not in value and f"{hint.__name__}.{key}" not in allowed["absent"]:
                problems.append(f"{path}: required key {key!r} of {hint.__name__} missing")
        for key, item in value.items():
            if key not in hints:
                if f"{hint.__name__}.{key}" in allowed["extra"]:
                    continue
                problems.append(f"{path}: key {key!r} is not declared by {hint.__name__}")
            else:
                check(item, hints[key], f"{path}.{key}", allowed, problems)
    elif origin in (typing.Union, types.UnionType):
        alternatives = typing.get_args(hint)
        for alternative in alternatives:
            trial = []
            check(value, alternative, path, allowed, trial)
            if not trial:
                return
        problems.append(f"{path}: {value!r} is none of {hint}")
    elif origin is typing.Literal:
        if value not in typing.get_args(hint) or isinstance(value, bool):
            problems.append(f"{path}: {value!r} is not one of {typing.get_args(hint)}")
    elif origin is list:
        if not isinstance(value, list):
            problems.append(f"{path}: {value!r} is not a list")
            return
        (item,) = typing.get_args(hint)
        for i, element in enumerate(value):
            check(element, item, f"{path}[{i}]", allowed, problems)
    elif hint is type(None):
        if value is not None:
            problems.append(f"{path}: {value!r} is not null")
    elif hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: {value!r} is not an int")
    elif hint is str:
        if not isinstance(value, str):
            problems.append(f"{path}: {value!r} is not a str")
    else:
        problems.append(f"{path}: the declared type {hint} is not one this script checks")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--type", default="OpeningStatistic")
    ap.add_argument("--absent-ok", action="append", default=[])
    ap.add_argument("--extra-ok", action="append", default=[])
    ns = ap.parse_args()
    declared = getattr(berserk.types, ns.type, None)
    if declared is None or not is_typeddict(declared):
        print(f"berserk.types has no TypedDict {ns.type}", file=sys.stderr)
        return 2
    allowed = {"absent": set(ns.absent_ok), "extra": set(ns.extra_ok)}
    checked = 0
    problems = []
    for line in sys.stdin:
        if not line.strip():
            continue
        label, _, text = line.rstrip("\n").partition("\t")
        found = []
        try:
            document = json.loads(text)
        except json.JSONDecodeError as e:
            found.append(f"$: not JSON ({e})")
        else:
            check(document, declared, "$", allowed, found)
        problems.extend(f"{label}: {p}" for p in found)
        checked += 1
    for problem in problems:
        print(problem)
    print(f"{checked} documents checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
