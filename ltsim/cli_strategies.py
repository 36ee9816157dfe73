"""The command line's ``--strategies`` (compare, maxlen): the list parsed, each item made a
scenario on the base scenario's footing, and two items that would run alike refused."""

from __future__ import annotations

from typing import Any

from ltsim.errors import ConfigError


def parse_strategy_list(text: str | None) -> list[tuple[str, dict[str, Any]]]:
    """``"megatron-1f1b,chunkflow:chunk_size=8192:k=4"`` -> [(name, overrides), ...]. An empty
    item or an option given twice is refused rather than dropped."""
    from ltsim.overrides import parse_override

    items = [s.strip() for s in (text or "").split(",")]
    if not any(items):
        raise ConfigError("--strategies", "a comma-separated list of strategy names", text,
                          "e.g. --strategies megatron-1f1b,chunkflow")
    out = []
    for item in items:
        if not item:
            raise ConfigError("--strategies", "a comma-separated list without empty items", text,
                              "remove the extra comma")
        name, *opts = item.split(":")
        name = name.strip().lower()  # names are case-insensitive (strategies.get_strategy)
        _known(name, item, out)
        try:
            pairs = [parse_override(o) for o in opts]
        except ConfigError:
            cut = any(mark in item for mark in "[{\"'")  # a value holding "," or ":" was split
            raise ConfigError("--strategies", "name:key=value:key=value,... (e.g. "
                              "chunkflow:chunk_size=8192:k=2)", text if cut else item,
                              "give an option whose value holds a comma or colon with --set "
                              "(here commas separate strategies, colons options)" if cut else
                              "write each option as key=value after a colon") from None
        keys = [key for key, _ in pairs]
        if "name" in keys:  # it would run another strategy under this one's label
            raise ConfigError("--strategies", "options other than name (the strategy is named "
                              "before the first colon)", item, "write the other strategy as its "
                              "own item, e.g. --strategies chunkflow,megatron-1f1b")
        twice = next((key for key in keys if keys.count(key) > 1), None)
        if twice is not None:
            raise ConfigError("--strategies", "each option once per strategy", item,
                              f"give {twice} one value (or the strategy twice)")
        if (name, dict(pairs)) in out:  # the same run twice: a row that says nothing new
            raise ConfigError("--strategies", "a list naming each strategy with its options once",
                              text, f"remove the second {item}, or give it other options")
        out.append((name, dict(pairs)))
    return out


def _known(name: str, item: str, before: list) -> None:
    """Refuse an item that names no strategy, as --strategies' (a value after a comma, as in
    ``chunkflow:k=1,2``, read as a strategy named "2")."""
    from ltsim.strategies import get_strategy

    try:
        get_strategy(name)
    except ConfigError as exc:
        # an option after a comma (chunkflow:k=1,2 or chunkflow:chunk_size=8192,k=2)
        value_like = "=" in name or (before and before[-1][1] and not name[:1].isalpha())
        raise ConfigError("--strategies", exc.rule, item,
                          "commas separate strategies and colons their options (chunkflow:"
                          "chunk_size=8192:k=2); give a value that holds a comma with --set"
                          if value_like else exc.fix
                          ) from None


def load_base(path: str, sets: list[str] | None, listed: list[tuple[str, dict[str, Any]]] | None,
              **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """The scenario at ``path`` with the ``--set`` overrides, and its strategy options. With
    ``--strategies`` (``listed``), a ``--set strategy.KEY`` is not checked against the file's own
    strategy but must be an option one of the listed strategies takes without giving its own
    value (it was refused when the file's strategy did not take it, and dropped unread when none
    of the listed did, or each that did gave its own)."""
    from ltsim.overrides import apply_overrides, parse_override
    from ltsim.scenario import load_scenario

    sets = list(sets or [])
    ours = [parse_override(t)[0].startswith("strategy.") for t in sets] if listed else []
    base = load_scenario(path, [t for t, o in zip(sets, ours or [False] * len(sets)) if not o],
                         **kwargs)
    given = [t for t, o in zip(sets, ours) if o]
    if not given:
        return base, dict(base.strategy_options)
    options = {**base.strategy_options, **apply_overrides({}, given).get("strategy", {})}
    # a --set no listed strategy reads would be dropped silently: one that does not take it, or
    # gives its own value in --strategies (which wins)
    taken = {k for name, own in listed for k in shared_options(options, name) if k not in own}
    for text in given:
        key = parse_override(text)[0].removeprefix("strategy.")
        if key not in taken:
            own = [name for name, opts in listed if key in opts]
            fix = (f"drop the --set, or {key}=... from {', '.join(dict.fromkeys(own))} in "
                   "--strategies" if own else "give each strategy its options in --strategies, "
                   "e.g. chunkflow:k=2")
            raise ConfigError("--set", "an option one of the compared strategies takes and does "
                              "not give itself in --strategies", text, fix)
    return base, options


def strategy_scenarios(base: Any, listed: list[tuple[str, dict[str, Any]]],
                       options: dict[str, Any] | None = None) -> list[Any]:
    """The base scenario with each listed strategy and its options, and the base's own strategy
    options (or ``options``, as ``load_base`` gives them) that the strategy also takes."""
    options = base.strategy_options if options is None else options
    return [rebuild({**base.raw, "strategy": {"name": name, **shared_options(options, name),
                                              **opts}}, base.source, opts)
            for name, opts in listed]


def one_run_each(runs: list[tuple[str, Any]], text: str) -> None:
    """Two items of ``--strategies`` that resolve to the same strategy and options (one gives a
    default, or the scenario's own value) would run twice and print the same row."""
    import dataclasses

    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import unused_options

    seen: dict[tuple[str, str], str] = {}
    for label, scenario in runs:
        options = {k: v for k, v in scenario.strategy_options.items() if k != "name"}
        parsed = get_strategy(scenario.strategy).parse(options)
        defaults = {f.name: f.default for f in dataclasses.fields(parsed)}
        parsed = dataclasses.replace(parsed, **{k: defaults[k]  # what the run does not read
                                                for k in unused_options(parsed, options)})
        key = (scenario.strategy, repr(parsed))
        if key in seen:
            raise ConfigError("--strategies", "strategies that run differently once their defaults "
                              "and the scenario's own options are filled in (maxlen: with what "
                              "the search reads)", text, f"remove {label}: it runs exactly as "
                              f"{seen[key]}")
        seen[key] = label


def shared_options(options: dict[str, Any], name: str) -> dict[str, Any]:
    """The scenario's strategy options that strategy ``name`` also takes (e.g. skrull's
    bucket_size for deepspeed-cp), so a comparison runs both on the same footing."""
    from ltsim.overrides import strategy_option_names

    accepted = strategy_option_names(name)
    return {k: v for k, v in options.items() if k in accepted and k != "name"}


def rebuild(raw: dict[str, Any], source: str, opts: dict[str, Any] | None = None):
    """The scenario of ``raw``; a bad option that ``--strategies`` gave (``opts``) is named
    as that flag's, not the scenario file's."""
    from ltsim.scenario import build_scenario
    from ltsim.strategies.base import toml_text

    try:
        return build_scenario(raw, source=source)
    except ConfigError as exc:
        given = exc.key.removeprefix("strategy.")
        if opts and exc.key.startswith("strategy.") and given in opts:
            name = raw["strategy"]["name"]  # the value as written: k="2", not k=2
            raise ConfigError("--strategies", exc.rule, f"{name}:{given}={toml_text(opts[given])}",
                              exc.fix or f"write {name}:{given}=VALUE, VALUE {exc.rule}",
                              context=f"{name}'s strategy.{given}") from None
        raise
