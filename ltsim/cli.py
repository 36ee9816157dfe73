"""Command line (DESIGN.md section 6): parse arguments, call the library, print.

With its cli_* modules, the only code that prints: the library returns values and strings
(STYLE.md). The sweep (cli_sweep.py) and the commands that need torch (cli_device.py) live apart.

Exit codes: 0 success; 1 a check or validation fell outside its tolerance; 2 bad input (one
message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys
import time
from typing import Any

from ltsim.cli_device import cmd_profile, cmd_validate
from ltsim.cli_parser import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, STDOUT, build_parser
from ltsim.cli_paths import check_distinct, check_output, command_inputs, written
from ltsim.cli_progress import (batch_progress, count_progress, error_line, heartbeat,
                                maxlen_progress)
from ltsim.cli_strategies import (load_base, one_run_each, parse_strategy_list,
                                  strategy_scenarios)
from ltsim.cli_sweep import cmd_sweep
from ltsim.errors import ConfigError, LtsimError, PlanError
from ltsim.files import write_text_atomically
from ltsim.gcpause import before_exit


def program() -> None:
    """The ``ltsim`` program (``python -m ltsim`` and the installed command): ``main`` on the
    process's arguments, then exit with its code, the shutdown spared the collector's passes
    (gcpause.before_exit). Tests and scripts call ``main``."""
    code = main()
    before_exit()
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name a terminal cannot show is escaped, not fatal
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-h"], ["--help"]) and len(argv) > 1:  # argparse would
        # print the version or the help, exit 0 and drop the rest
        fix = (f"run `ltsim {argv[1]} --help`" if argv[0] != "--version" and argv[1] in COMMANDS
               else f"run `ltsim {argv[0]}` alone")
        error_line(f"ltsim: error: {argv[0]} takes no other arguments (got "
                   f"{' '.join(argv[1:])}). Fix: {fix}")
        return EXIT_BAD_INPUT
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # named by the command they were given to, as its own usage errors are
        error_line(f"ltsim {args.command}: error: unrecognized arguments: {' '.join(unknown)}. "
                   f"Fix: see `ltsim {args.command} --help`")
        return EXIT_BAD_INPUT
    if sys.stdout is None:  # started with `>&-`: Python has no standard output at all
        error_line(f"ltsim {args.command}: error: standard output must be open (got it closed). "
                   "Fix: send it to a file or to /dev/null")
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
        error_line(f"ltsim {args.command}: error: {text}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except BrokenPipeError:  # e.g. `ltsim ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:  # a file ltsim was pointed at; the commands turn the ones they know
        if exc.filename is None and exc.errno in _WRITE_ERRORS:  # standard output (or error)
            _drop_stdout()
            error_line(f"ltsim {args.command}: error: its output could not be written (got "
                       f"{exc.strerror}). Fix: free space where standard output goes, or send "
                       "it to another file")
            return EXIT_BAD_INPUT
        if exc.filename is None:  # into ConfigErrors, this names any other and its reason
            raise
        error_line(f"ltsim {args.command}: error: {str(exc.filename)!r} must be a usable path "
                   f"(got {exc.strerror or type(exc).__name__}). Fix: check the path and its "
                   "permissions")
        return EXIT_BAD_INPUT


# what writing to a full or failing disk raises (a closed pipe is BrokenPipeError)
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


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


def _print(data: Any, text: str, as_json: bool) -> None:
    from ltsim.report import to_json

    print(to_json(data) if as_json else text)


def cmd_simulate(args: argparse.Namespace) -> int:
    from ltsim.report import format_result
    from ltsim.scenario import load_scenario
    from ltsim.runner import run

    scenario = load_scenario(args.scenario, args.set)
    check_output("--trace", args.trace)
    check_output("--plot", args.plot)
    check_distinct({"--trace": args.trace, "--plot": args.plot},
                   command_inputs(args.scenario, scenario))
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
        ignored = next((o for o in args.set or [] if o.strip().startswith("workload.")
                        or o.split("=", 1)[0].strip() == "seed"), None)
        if ignored is not None:
            raise ConfigError("--set", "no workload.* key nor seed without --workload (maxlen "
                              "searches one sequence per replica, not the scenario's workload, "
                              "and draws nothing)", ignored,
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
    check_distinct({"--plot": args.plot}, command_inputs(args.scenario, base))
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
        print(f"recorded {len(rows)} speedup{'' if len(rows) == 1 else 's'} in {args.file}")
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
    try:
        frame = describe(args.dataset, max_length=args.max_length, key="--max-length")
    except ConfigError as exc:  # the dataset is this command's argument, not a scenario key
        if exc.key != "workload.dataset":
            raise
        raise ConfigError("dataset", exc.rule, exc.value, exc.fix, source=exc.source,
                          context=exc.context) from None
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
    check_distinct({"--out": out}, command_inputs(args.scenario, scenario))
    simulated = run(scenario)
    schedule = exporter(simulated.plans[0])
    if out is None:  # the schedule alone on standard output, for a pipe; the summary beside it
        sys.stdout.write(schedule.to_csv())
        error_line(schedule.describe())
    else:
        written("--out", out, lambda: write_text_atomically(out, schedule.to_csv(), newline=""))
        print(f"{schedule.describe()}\nschedule written to {out}")
    if not simulated.result.fits:  # written all the same: a schedule to inspect, not to run
        error_line(f"warning: the plan does not fit: {simulated.result.fit_reason}")
    return EXIT_OK


COMMANDS = {"simulate": cmd_simulate, "compare": cmd_compare, "sweep": cmd_sweep,
            "profile": cmd_profile, "validate": cmd_validate, "check": cmd_check,
            "workload": cmd_workload, "export": cmd_export, "maxlen": cmd_maxlen}
