"""``ltsim sweep`` (DESIGN.md section 6): expand the grid, evaluate its points (resuming from the
database), print the ranking and plot it. Part of the command line (ltsim/cli.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

from ltsim.cli_parser import EXIT_OK
from ltsim.cli_paths import check_distinct, check_output, command_inputs, written
from ltsim.cli_progress import progress_bar
from ltsim.errors import ConfigError, LtsimError


TABLE_ROWS = 20  # the table's rows without --top (--json prints every row)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Expand the grid, evaluate, print the ranking, plot the heatmap."""
    from ltsim.grid import expand_grid
    from ltsim.planner import check_executor, check_one_kind_of_hardware, rank, run_sweep
    from ltsim.report import format_sweep, to_json
    from ltsim.overrides import WORKLOAD_SOURCES
    from ltsim.scenario import load_scenario
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
    if args.top is not None and args.top < 1:
        raise ConfigError("--top", "a positive number of rows", args.top, "e.g. --top 20")
    check_output("--plot", args.plot)
    check_output("--db", args.db)
    check_distinct({"--plot": args.plot, "--db": args.db}, command_inputs(args.scenario, scenario))
    load_profile_first(scenario)
    store = SweepStore(args.db) if args.db else SweepStore()
    show = progress_bar(time.perf_counter())

    def stale(count: int) -> None:
        print(f"ltsim sweep: {count} stored result{'s are' if count > 1 else ' is'} stale (inputs "
              "changed); recomputing", file=sys.stderr)

    def reused(count: int, total: int) -> None:
        print(f"ltsim sweep: {count} of {total} points read from {args.db} (inputs unchanged)",
              file=sys.stderr)

    with sigterm_as_interrupt(), contextlib.closing(store):  # closed: its WAL written back
        rows = rank(run_sweep(scenario, points, executor=args.executor, store=store, progress=show,
                              on_stale=stale, on_reused=reused))
    keys = [spec.split("=", 1)[0].strip() for spec in args.grid]
    print(to_json(rows[:args.top]) if args.json
          else format_sweep(rows, keys, top=args.top or TABLE_ROWS))
    rejected = [row for row in rows if "error" in row]
    if rows and len(rejected) == len(rows):  # nothing ran (no plot)
        errors = {row["error"] for row in rejected}
        error = next(iter(errors))
        if (len(errors) == 1 and not error.startswith("internal error")  # (a bug: the rows say)
                and not any(f"--grid {key}" in error for key in keys)):
            raise LtsimError(error)  # one problem, not the grid's: its own fix
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


def load_profile_first(scenario: Any) -> None:
    """Load the scenario's profile tables now (cached), so a broken profile is one error, not one
    failed row per sweep point. Raises ProfileError."""
    if not scenario.cluster.device.is_unit:
        from ltsim.profiles import load_profile

        cluster = scenario.cluster  # the cost model's own key: loaded once, not twice
        load_profile(cluster.profile_dir, attention_kernel=cluster.attention_kernel or None)


class sigterm_as_interrupt:
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
