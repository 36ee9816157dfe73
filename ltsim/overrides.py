"""``--set`` overrides of a scenario's TOML (DESIGN.md section 4: every value can be
overridden): a ``section.key=value`` text parsed, and a set of them applied to a scenario's table
(a workload source replacing the others, another strategy keeping the options it takes). Split
from ltsim/scenario.py, which checks the keys and builds the Scenario."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from typing import Any

from ltsim.errors import ConfigError, check_argument

KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)?")


def parse_override(text: str) -> tuple[str, Any]:
    """``"strategy.k=2"`` -> ("strategy.k", 2). Values use TOML syntax; a bare word is a string.

    Raises ConfigError for a missing ``=``, a key that is not ``key`` or ``section.key``, or a
    value that starts like a TOML array, table or string but does not parse.
    """
    if "=" not in text:
        raise ConfigError("--set", "of the form section.key=value", text, "e.g. --set parallel.pp=2")
    key, value = (part.strip() for part in text.split("=", 1))
    if not KEY_PATH.fullmatch(key):
        raise ConfigError("--set", "of the form section.key=value with a key such as parallel.pp",
                          text, "name one key: a top-level key (name, seed) or section.key")
    try:
        parsed = tomllib.loads(f"v = {value}")
        if set(parsed) != {"v"}:  # a newline in the value made another key: it would be dropped
            raise ConfigError("--set", "one key=value, without a newline in the value", text,
                              "give each key its own --set")
        return key, parsed["v"]
    except RecursionError:
        raise ConfigError("--set", "a TOML value nested at most a few hundred levels deep", key,
                          "flatten the value") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer past Python's 4300-digit limit
        if not isinstance(exc, tomllib.TOMLDecodeError):
            raise ConfigError("--set", "a TOML value with numbers of at most 4300 digits", key,
                              "give a realistic value") from None
        if value[:1] in "[{\"'" and value:
            raise ConfigError("--set", "a TOML value (e.g. 2, 1.5, true, [4, 2], \"text\")", text,
                              "close the brackets or quotes of the value") from None
        return key, value


WORKLOAD_SOURCES = ("dataset", "lengths", "fixed_length")  # each given replaces the others


def apply_overrides(raw: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """``raw`` with ``overrides`` applied: ``section.key=value`` texts (``--set``; a whole table
    there is refused: it would drop the file's other keys of the section), or a dict of key
    paths to values, which a program may use to replace a whole table."""
    if isinstance(overrides, str):  # one override, not a list of its characters
        overrides = [overrides]
    check_argument("overrides", overrides, (dict, list, tuple),
                   "section.key=value texts (a list) or a dict of key paths to values",
                   'e.g. ["parallel.pp=2"] or {"parallel.pp": 2}')
    if not isinstance(overrides, dict):
        for text in overrides:
            check_argument("overrides", text, str, "section.key=value texts",
                           'e.g. ["parallel.pp=2"]')
    else:
        for key in overrides:  # (an int key was an AttributeError where it is split)
            check_argument("overrides", key, str, "a dict keyed by key paths (text)",
                           'e.g. {"parallel.pp": 2}')
    texts = not isinstance(overrides, dict)
    items = list(overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides))
    given = {key for key, _ in items}
    if len(given) < len(items):  # the last one silently won, hiding a bad earlier value
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise ConfigError("--set", "each key once", key, f"give {key} one value")
            seen.add(key)
    sources = sorted(given & {f"workload.{k}" for k in WORKLOAD_SOURCES})
    if len(sources) > 1:  # each replaces the others: the first was dropped
        raise ConfigError("--set", "one workload source (dataset, lengths or fixed_length)",
                          " and ".join(sources), f"keep one of {' and '.join(sources)}")
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    new = dict(items).get("strategy.name")
    old = raw.get("strategy", {}).get("name") if isinstance(raw.get("strategy"), dict) else None
    if isinstance(new, str) and isinstance(old, str) and new.lower() != old.lower():
        # another strategy: the file's options of its own that the new one does not take go
        # (as compare --strategies runs each on the file's shared options); a --set is checked
        try:
            accepted = strategy_option_names(new)
        except ConfigError:  # no such strategy: the scenario's build names it
            accepted = None
        if accepted is not None:
            merged["strategy"] = {k: v for k, v in merged["strategy"].items()
                                  if k in accepted or f"strategy.{k}" in given}
    for key, value in items:
        section, _, name = key.rpartition(".")
        target = merged.setdefault(section, {}) if section else merged
        if not isinstance(target, dict):
            raise ConfigError(key, "a key inside a [section]", value, f"name a key of a section "
                              f"(such as strategy.k), or set {section} itself as {section}=VALUE",
                              context=f"{section} is a plain key of the scenario, not a section")
        if texts and isinstance(value, dict) and (not section or isinstance(target.get(name), dict)):
            # a whole table would replace the file's, dropping the keys it does not repeat
            raise ConfigError("--set", "one key at a time (section.key=value), not a whole table",
                              f"{key}={value}", f"set each key on its own, e.g. {key}.KEY=VALUE")
        target[name] = value
        if section == "workload" and name in WORKLOAD_SOURCES:
            for other in set(WORKLOAD_SOURCES) - {name}:
                target.pop(other, None)  # choosing one workload source replaces the others
            if name == "lengths" and "workload.global_batch_size" not in given:
                target.pop("global_batch_size", None)  # the lengths are the batch, and its size
    return merged


def strategy_option_names(name: str) -> set[str]:
    """The option names strategy ``name`` takes, with "name". Raises ConfigError for an unknown
    strategy (naming the known ones)."""
    from ltsim.strategies import get_strategy  # strategies sit below scenario; import on use

    return {"name", *(f.name for f in fields(get_strategy(name).options_type))}
