"""Command line (DESIGN.md section 6): parse arguments, call the library, print.

The only module that prints: the library returns values and strings (STYLE.md).

Exit codes: 0 success; 1 a check or validation fell outside its tolerance; 2 bad input (one
message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ltsim.cli_parser import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, STDOUT, build_parser
from ltsim.cli_paths import (check_distinct, check_folder, check_folder_outputs, check_output,
                             written)
from ltsim.cli_progress import (batch_progress, count_progress, heartbeat, maxlen_progress,
                                progress_bar)
from ltsim.cli_strategies import (load_base, one_run_each, parse_strategy_list,
                                  strategy_scenarios)
from ltsim.errors import ConfigError, LtsimError, PlanError
from ltsim.files import write_text_atomically

def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name a terminal cannot show is escaped, not fatal
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-h"], ["--help"]) and len(argv) > 1:  # argparse would
        # print the version or the help, exit 0 and drop the rest
        fix = (f"run `ltsim {argv[1]} --help`" if argv[0] != "--version" and argv[1] in COMMANDS
               else f"run `ltsim {argv[0]}` alone")
        _error(f"ltsim: error: {argv[0]} takes no other arguments (got {' '.join(argv[1:])}). "
               f"Fix: {fix}")
        return EXIT_BAD_INPUT
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # named by the command they were given to, as its own usage errors are
        _error(f"ltsim {args.command}: error: unrecognized arguments: {' '.join(unknown)}. Fix: see "
               f"`ltsim {args.command} --help`")
        return EXIT_BAD_INPUT
    if sys.stdout is None:  # started with `>&-`: Python has no standard output at all
        _error(f"ltsim {args.command}: error: standard output must be open (got it closed). Fix: "
               "send it to a file or to /dev/null")
        return EXIT_BAD_INPUT
    try:
        # a line when a long batch says nothing for a while (the profiler has its own lines)
        with heartbeat(args.command) if args.command != "profile" else contextlib.nullcontext():
            code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a full disk shows here, not as Python's complaint at exit
        return code
    except LtsimError as exc:
        # a bad input's message is one line, whatever a path in it holds; a PlanError (a
        # strategy's bug) keeps the grid it draws
        exc = _named_by_scenario(exc, args)
        text = str(exc) if isinstance(exc, PlanError) else _one_line(str(exc))
        _error(f"ltsim {args.command}: error: {text}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:  # e.g. `ltsim ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:  # a file ltsim was pointed at; the commands turn the ones they know
        if exc.filename is None and exc.errno in _WRITE_ERRORS:  # standard output (or error)
            _drop_stdout()
            _error(f"ltsim {args.command}: error: its output could not be written (got "
                   f"{exc.strerror}). Fix: free space where standard output goes, or send it "
                   "to another file")
            return EXIT_BAD_INPUT
        if exc.filename is None:  # into ConfigErrors, this names any other and its reason
            raise
        _error(f"ltsim {args.command}: error: {str(exc.filename)!r} must be a usable path (got "
               f"{exc.strerror or type(exc).__name__}). Fix: check the path and its permissions")
        return EXIT_BAD_INPUT


# what writing to a full or failing disk raises (a closed pipe is BrokenPipeError)
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def _error(text: str) -> None:
    """One line on standard error; if that cannot be written either, the exit code says it."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _drop_stdout() -> None:
    """Point standard output at /dev/null, so Python does not fail again flushing what it holds
    at exit (the recipe of the signal module's notes on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind it (tests capture it)
        pass


def _named_by_scenario(exc: LtsimError, args: argparse.Namespace) -> LtsimError:
    """A ConfigError about a scenario key raised once the file was read (by a strategy, the
    planner or the cost model: its value is the file's, or an override's) names the scenario file,
    as the errors of reading it do."""
    scenario = getattr(args, "scenario", None)
    if not (isinstance(exc, ConfigError) and not exc.source and isinstance(scenario, str)
            and scenario.strip()):
        return exc
    from ltsim.scenario import SECTIONS, find_scenario

    section = exc.key.partition(".")[0]
    if section == "strategy" and getattr(args, "strategies", None):
        return exc  # the options came with --strategies, not from the file
    return exc.with_source(str(find_scenario(scenario))) if section in SECTIONS else exc


def _one_line(text: str) -> str:
    """``text`` with its line breaks and other unprintable characters escaped."""
    return text if text.isprintable() else "".join(
        c if c.isprintable() else repr(c)[1:-1] for c in text)


def _require_torch(command: str) -> None:
    """``profile`` and ``validate`` measure on a device with torch; say so before anything runs."""
    import importlib

    try:
        importlib.import_module("torch")
    except ImportError:
        raise ConfigError("torch", f"installed for `ltsim {command}` (it runs kernels on a device)",
                          "not importable", "pip install torch==2.13.0 (CPU; a CUDA build from "
                          "pytorch.org for GPUs). simulate, compare, sweep and check need no torch"
                          ) from None


def _print(data: Any, text: str, as_json: bool) -> None:
    from ltsim.report import to_json

    print(to_json(data) if as_json else text)


def _inputs(path: str, scenario: Any) -> tuple[Path, ...]:
    """The files a command reads: the scenario file, its length file and its profile's tables
    (an output path on one of them would overwrite it)."""
    from ltsim.datasets import packaged_files
    from ltsim.files import expand_user
    from ltsim.profile_files import PROFILE_FILES
    from ltsim.profiles import resolve_profile

    out = [Path(path)]
    if scenario.source:  # where it was found (a bundled scenario when the path did not exist)
        out.append(Path(scenario.source))
    if scenario.workload.dataset:  # a built-in name read from ltsim's own data, or a path
        out += (packaged_files(scenario.workload.dataset)
                or [expand_user(scenario.workload.dataset)])
    if not scenario.cluster.device.is_unit:
        try:
            profile = resolve_profile(scenario.cluster.profile_dir)
        except LtsimError:  # the run names a profile it cannot find; nothing to overwrite there
            profile = None
        if profile is not None:
            out += [profile / name for name in PROFILE_FILES]
    return tuple(out)


def cmd_simulate(args: argparse.Namespace) -> int:
    from ltsim.report import format_result
    from ltsim.scenario import load_scenario
    from ltsim.runner import run

    scenario = load_scenario(args.scenario, args.set)
    check_output("--trace", args.trace)
    check_output("--plot", args.plot)
    check_distinct({"--trace": args.trace, "--plot": args.plot}, _inputs(args.scenario, scenario))
    sim = run(scenario, keep=bool(args.trace or args.plot),
              progress=batch_progress("simulate", scenario.strategy, time.perf_counter()))
    result = sim.result.to_dict()
    if args.trace:
        written("--trace", args.trace, lambda: sim.traces[0].write_chrome_trace(
            args.trace, tokens=sim.result.unit_costs))
    if args.plot:
        from ltsim.viz import plot_simulation, short

        title = f"{short(scenario.name)}: {scenario.strategy}, bubble {100 * result['bubble_ratio']:.2f}%"
        written("--plot", args.plot, lambda: plot_simulation(sim, args.plot, title=title))
    text = format_result(result)
    for label, path in (("trace", args.trace), ("plot", args.plot)):
        if path:
            text += f"\n{label} written to {path}"
    _print(result, text, args.json)
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from ltsim.report import compare_rows, format_compare
    from ltsim.runner import first_plan, make_cost_model, run

    listed = parse_strategy_list(args.strategies)
    base, options = load_base(args.scenario, args.set, listed)
    scenarios = [(name + "".join(f" {k}={v}" for k, v in opts.items()), scenario)  # every
                 for (name, opts), scenario in zip(listed, strategy_scenarios(base, listed,
                                                                              options))]
    one_run_each(scenarios, args.strategies)  # strategy checked before the first one runs
    # every strategy plans its first batch before any simulation prints progress: one that
    # cannot plan this layout fails at once (the runs then start from those plans)
    costs = [make_cost_model(scenario) for _, scenario in scenarios]  # planning warns too
    first = [first_plan(scenario, cost) for (_, scenario), cost in zip(scenarios, costs)]
    started = time.perf_counter()
    results = [(label, run(scenario, keep=False, cost=cost, first=plan, progress=batch_progress(
        "compare", label, started)).result.to_dict())
        for (label, scenario), cost, plan in zip(scenarios, costs, first)]
    _print(compare_rows(results), format_compare(results), args.json)
    return EXIT_OK


def cmd_maxlen(args: argparse.Namespace) -> int:
    from ltsim.maxlen import find_max_length, worst_draw
    from ltsim.report import format_maxlen

    if not args.workload:  # one sequence per replica replaces the scenario's [workload]
        ignored = next((o for o in args.set or [] if o.strip().startswith("workload.")), None)
        if ignored is not None:
            raise ConfigError("--set", "no workload.* key without --workload (maxlen searches "
                              "one sequence per replica, not the scenario's workload)", ignored,
                              "drop it, or add --workload to scale the workload's lengths")
    else:  # the search sets the cap itself, and truncates what it cuts
        ignored = next((o for o in args.set or [] if o.strip().split("=", 1)[0].strip()
                        in ("workload.max_length", "workload.overlong")), None)
        if ignored is not None:
            raise ConfigError("--set", "no workload.max_length or workload.overlong with "
                              "--workload (the search sets the cap, truncating the longer "
                              "draws)", ignored, "drop it; --max-length bounds the search")
    listed = parse_strategy_list(args.strategies) if args.strategies is not None else None
    base, options = load_base(args.scenario, args.set, listed, any_workload=not args.workload)
    check_output("--plot", args.plot)
    check_distinct({"--plot": args.plot}, _inputs(args.scenario, base))
    scenarios = [base]
    if listed is not None:  # every strategy checked before the first search runs
        scenarios = strategy_scenarios(base, listed, options)
        one_run_each([(name + "".join(f":{k}={v}" for k, v in opts.items()),
                        worst_draw(scenario)[0])  # what each search runs (SpaCO: its worst draw)
                       for (name, opts), scenario in zip(listed, scenarios)], args.strategies)
    mode = "workload" if args.workload else "sequence"
    started = time.perf_counter()
    memos: list[dict] = [{} for _ in scenarios]
    if len(scenarios) > 1:  # every strategy's first length before any search prints progress:
        for s, memo in zip(scenarios, memos):  # a strategy that cannot plan fails at once
            find_max_length(s, step=args.step, max_length=max(args.step, 1), mode=mode,
                            points=memo)
    answers = [find_max_length(s, step=args.step, max_length=args.max_length, mode=mode,
                               progress=maxlen_progress(s.strategy, started), points=memo)
               for s, memo in zip(scenarios, memos)]
    text = format_maxlen(base.name, answers)
    if args.plot:
        from ltsim.viz_maxlen import plot_maxlen

        written("--plot", args.plot, lambda: plot_maxlen(answers, args.plot, title=base.name))
        text += f"\nplot written to {args.plot}"
    _print([a.to_dict() for a in answers], text, args.json)
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    """Expand the grid, evaluate, print the ranking, plot the heatmap."""
    from ltsim.planner import (check_executor, check_one_kind_of_hardware, expand_grid, rank,
                               run_sweep)
    from ltsim.report import format_sweep, to_json
    from ltsim.scenario import WORKLOAD_SOURCES, load_scenario
    from ltsim.sweepstore import SweepStore

    # every input before any work: scenario, grid, executor, --top, outputs, store, profile
    scenario = load_scenario(args.scenario, args.set)
    points = expand_grid(args.grid)
    if not points or not args.grid:
        raise ConfigError("--grid", "given at least once", None, "e.g. --grid strategy.k=1,2,4")
    fixed = {spec.split("=", 1)[0].strip() for spec in args.set or ()}
    both = next((key for key in points[0] if key in fixed), None)
    if both is not None:  # each point's value would silently replace the --set one
        raise ConfigError("--grid", "a key not also given with --set", both,
                          f"drop --set {both}=..., or add its value to the grid")
    check_one_kind_of_hardware(scenario, points)
    sources = {f"workload.{k}" for k in WORKLOAD_SOURCES}  # one replaces the others
    clash = next(((key, other) for key in points[0] if key in sources
                  for other in sorted(fixed & sources)), None)
    if clash is not None:
        raise ConfigError("--grid", "a workload source (dataset, lengths or fixed_length) that no "
                          "--set gives another of: each point's would replace it", clash[0],
                          f"drop --set {clash[1]}=..., or sweep {clash[1]} instead")
    if args.db is not None and str(args.db) == ":memory:":  # SQLite's name for no file at all
        raise ConfigError("--db", "a file (a sweep resumes from it)", str(args.db),
                          "give a file name, e.g. --db out/sweep.sqlite, or leave --db out")
    if args.db is not None and str(args.db)[:5].lower() == "file:":  # no URI's mode or options
        raise ConfigError("--db", "a file path, not an SQLite URI", str(args.db),
                          "give the file's path, e.g. --db out/sweep.sqlite")
    check_executor(args.executor)
    if args.top < 1:
        raise ConfigError("--top", "a positive number of rows", args.top, "e.g. --top 20")
    check_output("--plot", args.plot)
    check_output("--db", args.db)
    check_distinct({"--plot": args.plot, "--db": args.db}, _inputs(args.scenario, scenario))
    _load_profile(scenario)
    store = SweepStore(args.db) if args.db else SweepStore()
    show = progress_bar(time.perf_counter())

    def stale(count: int) -> None:
        print(f"ltsim sweep: {count} stored result{'s are' if count > 1 else ' is'} stale (inputs "
              "changed); recomputing", file=sys.stderr)

    def reused(count: int, total: int) -> None:
        print(f"ltsim sweep: {count} of {total} points read from {args.db} (inputs unchanged)",
              file=sys.stderr)

    with _sigterm_as_interrupt(), contextlib.closing(store):  # closed: its WAL written back
        rows = rank(run_sweep(scenario, points, executor=args.executor, store=store, progress=show,
                              on_stale=stale, on_reused=reused))
    keys = [spec.split("=", 1)[0].strip() for spec in args.grid]
    print(to_json(rows) if args.json else format_sweep(rows, keys, top=args.top))
    rejected = [row for row in rows if "error" in row]
    if rows and len(rejected) == len(rows):  # nothing ran: the grid itself is wrong (no plot)
        first = rejected[0]["error"].splitlines()[0].split(". Fix: ")[0]
        raise ConfigError("--grid", "a grid with at least one point that runs",
                          f"{len(rows)} of {len(rows)} rejected", "correct the grid's values",
                          context=f"the first: {first}")
    if args.plot:
        import pandas as pd

        from ltsim.viz_sweep import plot_heatmap, plot_line

        frame = pd.DataFrame([r for r in rows if "error" not in r])
        title = f"{scenario.name}: iteration time"
        label = ("iteration time (units of work)" if scenario.cluster.device.is_unit
                 else "iteration time (s)")
        if len(keys) >= 2:
            written("--plot", args.plot, lambda: plot_heatmap(
                frame, x=keys[0], y=keys[1], value="iteration_time_s", feasible="fits",
                path=args.plot, title=title, others=tuple(keys[2:]), label=label))
            figure = "heatmap"
        else:
            written("--plot", args.plot, lambda: plot_line(
                frame, x=keys[0], value="iteration_time_s", feasible="fits", path=args.plot,
                title=title, others=tuple(keys[1:]), label=label))
            figure = "line chart"
        if not args.json:
            print(f"{figure} written to {args.plot}")
    return EXIT_OK


def _load_profile(scenario: Any) -> None:
    """Load the scenario's profile tables now (cached), so a broken profile is one error, not one
    failed row per sweep point. Raises ProfileError."""
    if not scenario.cluster.device.is_unit:
        from ltsim.profiles import load_profile

        cluster = scenario.cluster  # the cost model's own key: loaded once, not twice
        load_profile(cluster.profile_dir, attention_kernel=cluster.attention_kernel or None)


class _sigterm_as_interrupt:
    """While a sweep runs, SIGTERM raises KeyboardInterrupt, so the pool is stopped and nothing is
    left running (main prints "interrupted", exit 130). Only in the main thread."""

    def __enter__(self) -> None:
        import signal
        import threading

        self._previous = None
        if threading.current_thread() is threading.main_thread():
            def interrupt(signum: int, frame: Any) -> None:
                raise KeyboardInterrupt

            self._previous = signal.signal(signal.SIGTERM, interrupt)

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            import signal

            signal.signal(signal.SIGTERM, self._previous)


def cmd_profile(args: argparse.Namespace) -> int:
    _require_torch("profile")
    check_folder("--out", getattr(args, "out", None))
    try:
        from ltsim.profiler.cli import run_from_args
    except ImportError as exc:
        raise ConfigError("ltsim profile", "run with torch installed", str(exc),
                          "pip install torch==2.13.0 (CPU) or a CUDA build") from exc
    try:
        out = run_from_args(args, progress=sys.stderr)
    except LtsimError as exc:
        print(f"ltsim profile: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"\nltsim profile: interrupted; finished tables and <table>.partial.csv checkpoints "
              f"are in {args.out}. Fix: run the same command with --resume", file=sys.stderr)
        return 130
    print(out)
    return EXIT_OK


def profile_main(argv: list[str] | None = None) -> int:
    """``python -m ltsim.profiler ...``: ``ltsim profile`` without the ``ltsim`` front end."""
    from ltsim.profiler import cli as profiler_cli

    parser = argparse.ArgumentParser(prog="ltsim profile",
                                     description=(profiler_cli.__doc__ or "").split("\n\n")[0])
    profiler_cli.add_arguments(parser)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return cmd_profile(parser.parse_args(argv))


def cmd_validate(args: argparse.Namespace) -> int:
    """0 within the tolerance, 1 outside (2, bad input, is main's ConfigError)."""
    from ltsim.errors import ProfileError
    from ltsim.profiles import available_profiles, load_profile, resolve_profile
    from ltsim.scenario import load_scenario, parse_override
    from ltsim.validate import (OUTPUT_FILES, require_real_device, same_kind_of_device,
                                summary_text, validate_scenario, write_outputs)

    _require_torch("validate")
    if not 0 < args.tolerance < float("inf"):  # inf would pass every comparison
        raise ConfigError("--tolerance", "a positive, finite fraction (0.10 = 10%)", args.tolerance)
    try:  # before anything runs
        profile = resolve_profile(args.profile)
    except ProfileError:
        raise ConfigError("--profile", "a profile directory (a bundled name or a path)",
                          str(args.profile), f"use one of {', '.join(available_profiles())}, or "
                          "the path of a directory written by `ltsim profile`") from None
    try:  # its tables too: a problem there names --profile, not the hardware.profile it becomes
        load_profile(profile)
    except ProfileError as exc:
        raise ConfigError("--profile", "a profile ltsim can read", str(args.profile),
                          "give a directory written by `ltsim profile`, or a bundled name",
                          context=exc.problem_and_fix()[0]) from None
    check_folder("--out", args.out)
    for text in args.set or ():  # --profile becomes hardware.profile: a --set of it was dropped
        key, value = parse_override(text)
        if key == "hardware.profile":
            raise ConfigError("--set", "a key other than hardware.profile (validate prices with "
                              "--profile)", text, f"drop it, or pass --profile {value}")
    scenario = load_scenario(args.scenario, args.set)
    require_real_device(scenario)  # before --profile becomes hardware.profile, which unit refuses
    other_model = same_kind_of_device(scenario, profile, args.profile)
    written = scenario.raw.get("hardware", {}).get("profile")
    try:  # a profile the scenario names, other than --profile: said once the plan is checked
        other = bool(written) and (Path(resolve_profile(written)).resolve()
                                   != Path(profile).resolve())
    except (ProfileError, OSError, RuntimeError):
        other = True
    unused = (f"validate: pricing with --profile {args.profile}; the scenario's hardware.profile "
              f"({written}) is not used" if other else "")
    scenario = scenario.with_overrides({"hardware.profile": str(args.profile)})
    if args.out:  # its files over an input (the scenario, the profile's tables) would lose it
        if Path(args.out).resolve() == Path(profile).resolve():
            raise ConfigError("--out", "a folder other than the profile's", str(args.out),
                              "write the comparison to a folder of its own, e.g. --out out/v")
        check_folder_outputs("--out", Path(args.out), OUTPUT_FILES,
                             _inputs(args.scenario, scenario))
    started = time.perf_counter()

    def announce(iterations: int, predicted_s: float) -> None:  # the executor can take minutes
        for note in (unused, other_model):  # once the plan passed every check: a refusal
            if note:  # stays one line
                _error(note)
        if time.perf_counter() - started + iterations * predicted_s >= 2.0:
            _error(f"validate: running {iterations} iterations of the plan, each predicted to take "
                   f"{predicted_s:.2f} s")

    validation = validate_scenario(scenario, announce=announce)
    title = f"{scenario.name}: {scenario.strategy}, predicted vs measured"
    text = summary_text(validation, args.tolerance)
    if args.out:
        paths = write_outputs(validation, Path(args.out), title, args.tolerance)
        text += "\n" + "\n".join(f"written {p}" for p in paths)
    print(text)
    return EXIT_OK if validation.within(args.tolerance) else EXIT_CHECK_FAILED


def cmd_check(args: argparse.Namespace) -> int:
    from ltsim.check import run_check
    from ltsim.report import format_table

    show = count_progress("check: case", time.perf_counter())
    rows = run_check(args.file, update=args.update, progress=show)
    columns = [("name", "case", str), ("speedup", "speedup", lambda x: f"{x:.3f}x"),
               ("expected_speedup", "recorded", lambda x: f"{x}x"),
               ("ok", "status", lambda x: "ok" if x else "FAIL")]
    print(format_table(rows, columns))
    for r in rows:
        for problem in r["problems"]:
            print(f"FAIL {r['name']}: {problem}")
        for note in r.get("notes", ()):
            print(f"note {r['name']}: {note}")
    if args.update:
        print(f"recorded {len(rows)} speedups in {args.file}")
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_CHECK_FAILED


def cmd_workload(args: argparse.Namespace) -> int:
    from ltsim.workload import describe, format_describe

    from ltsim.datasets import packaged_files
    from ltsim.length_files import MAX_SEQUENCE_TOKENS
    from ltsim.files import expand_user

    if not 0 <= args.max_length <= MAX_SEQUENCE_TOKENS:
        raise ConfigError("--max-length", f"a number of tokens from 0 (no limit) to "
                          f"{MAX_SEQUENCE_TOKENS:,}", args.max_length, "e.g. --max-length 32768")
    check_output("--plot", args.plot)
    check_distinct({"--plot": args.plot}, (expand_user(args.dataset), *packaged_files(args.dataset)))
    frame = describe(args.dataset, max_length=args.max_length, key="--max-length")
    text = format_describe(frame)
    if args.plot:
        from ltsim.workload import plot_histogram

        written("--plot", args.plot,
                 lambda: plot_histogram(args.dataset, args.plot, max_length=args.max_length,
                                        key="--max-length"))
        text += f"\nhistogram written to {args.plot}"
    records = frame.reset_index().astype(object).where(frame.reset_index().notna(), None)
    _print(records.to_dict(orient="records"), text, args.json)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """The first sampled batch's plan, DP replica 0, in ``--format`` (ltsim/export.py)."""
    from ltsim.export import get_format
    from ltsim.runner import run
    from ltsim.scenario import load_scenario

    exporter = get_format(args.format)  # a bad name fails before the simulation runs
    scenario = load_scenario(args.scenario, args.set)
    out = None if args.out == STDOUT else args.out
    check_output("--out", out)
    check_distinct({"--out": out}, _inputs(args.scenario, scenario))
    simulated = run(scenario)
    schedule = exporter(simulated.plans[0])
    if out is None:  # the schedule alone on standard output, for a pipe; the summary beside it
        sys.stdout.write(schedule.to_csv())
        _error(schedule.describe())
    else:
        written("--out", out, lambda: write_text_atomically(out, schedule.to_csv(), newline=""))
        print(f"{schedule.describe()}\nschedule written to {out}")
    if not simulated.result.fits:  # written all the same: a schedule to inspect, not to run
        _error(f"warning: the plan does not fit: {simulated.result.fit_reason}")
    return EXIT_OK


COMMANDS = {"simulate": cmd_simulate, "compare": cmd_compare, "sweep": cmd_sweep,
            "profile": cmd_profile, "validate": cmd_validate, "check": cmd_check,
            "workload": cmd_workload, "export": cmd_export, "maxlen": cmd_maxlen}
