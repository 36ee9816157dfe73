"""Command line (DESIGN.md section 6): parse arguments, call the library, print.

Exit codes: 0 success; 1 a check or validation fell outside its tolerance; 2 bad input (one
message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ltsim.errors import ConfigError, LtsimError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario TOML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, TOML syntax (e.g. strategy.k=2)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltsim", description="Simulate, compare, size and validate long-context LLM training "
        "schedules. Exit codes: 0 ok, 1 a check or validation out of tolerance, 2 bad input.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="predict one scenario")
    _scenario_args(p)
    p.add_argument("--trace", type=Path, help="write a Chrome trace (Perfetto) of the first batch")
    p.add_argument("--plot", type=Path, help="write a Gantt + memory PNG of the first batch")
    p = sub.add_parser("compare", help="compare strategies on one scenario")
    _scenario_args(p)
    p.add_argument("--strategies", required=True,
                   help="comma-separated names; options as name:key=value:key=value")
    p = sub.add_parser("sweep", help="grid search over scenario values")
    _scenario_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a swept key and its values (repeatable)")
    p.add_argument("--executor", default="local", help="local | local:N | dask://HOST:PORT")
    p.add_argument("--db", type=Path, help="SQLite results store (resumes an interrupted sweep)")
    p.add_argument("--plot", type=Path, help="heatmap PNG over the first two grid keys")
    p.add_argument("--top", type=int, default=20, help="rows to print")
    p = sub.add_parser("profile", help="measure cost tables on this machine")
    _add_profile_args(p)
    p = sub.add_parser("validate", help="predict and measure a scenario, compare")
    p.add_argument("scenario")
    p.add_argument("--profile", required=True, help="profile directory or name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, help="directory for the table, figure and summary")
    p.add_argument("--tolerance", type=float, default=0.10, help="relative error allowed")
    p = sub.add_parser("check", help="CI regression of predicted speedups")
    p.add_argument("file", type=Path)
    p.add_argument("--update", action="store_true", help="record the current predictions")
    p = sub.add_parser("workload", help="length distributions")
    wsub = p.add_subparsers(dest="workload_command", required=True)
    d = wsub.add_parser("describe", help="the papers' length table and a histogram")
    d.add_argument("dataset")
    d.add_argument("--max-length", type=int, default=0)
    d.add_argument("--plot", type=Path)
    d.add_argument("--json", action="store_true")
    return parser


def _add_profile_args(p: argparse.ArgumentParser) -> None:
    try:
        from ltsim.profiler.cli import add_arguments
    except ImportError:  # the profiler needs torch; say so when it is run
        p.add_argument("rest", nargs=argparse.REMAINDER)
        return
    add_arguments(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except LtsimError as exc:
        print(f"ltsim {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `ltsim ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return EXIT_OK


def _print(data: Any, text: str, as_json: bool) -> None:
    from ltsim.report import to_json

    print(to_json(data) if as_json else text)


def cmd_simulate(args: argparse.Namespace) -> int:
    from ltsim.report import format_result
    from ltsim.scenario import load_scenario
    from ltsim.runner import run

    scenario = load_scenario(args.scenario, args.set)
    sim = run(scenario)
    result = sim.result.to_dict()
    if args.trace:
        sim.traces[0].write_chrome_trace(args.trace)
    if args.plot:
        from ltsim.viz import plot_simulation

        title = f"{scenario.name}: {scenario.strategy}, bubble {100 * result['bubble_ratio']:.2f}%"
        plot_simulation(sim.traces[0], args.plot, plan=sim.plans[0], title=title,
                        limit_bytes=result["memory_limit_bytes"])
    text = format_result(result)
    for label, path in (("trace", args.trace), ("plot", args.plot)):
        if path:
            text += f"\n{label} written to {path}"
    _print(result, text, args.json)
    return EXIT_OK


def parse_strategy_list(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``"megatron-1f1b,chunkflow:chunk_size=8192:k=4"`` -> [(name, overrides), ...]."""
    from ltsim.scenario import parse_override

    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, *opts = item.split(":")
        out.append((name, dict(parse_override(o) for o in opts)))
    if not out:
        raise ConfigError("--strategies", "a comma-separated list of strategy names", text)
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    from ltsim.report import compare_rows, format_compare
    from ltsim.scenario import load_scenario
    from ltsim.runner import simulate

    base = load_scenario(args.scenario, args.set)
    results = []
    for name, opts in parse_strategy_list(args.strategies):
        keep = base.strategy_options if name.lower() == base.strategy.lower() else {}
        raw = {**base.raw, "strategy": {"name": name, **keep, **opts}}
        scenario = _rebuild(raw, base.source)
        label = name + "".join(f" {k}={v}" for k, v in opts.items())
        results.append((label, simulate(scenario).to_dict()))
    _print(compare_rows(results), format_compare(results), args.json)
    return EXIT_OK


def _rebuild(raw: dict[str, Any], source: str):
    from ltsim.scenario import build_scenario

    return build_scenario(raw, source=source)


def cmd_sweep(args: argparse.Namespace) -> int:
    from ltsim.planner import run_sweep_command

    return run_sweep_command(args)


def cmd_profile(args: argparse.Namespace) -> int:
    try:
        from ltsim.profiler.cli import run
    except ImportError as exc:
        raise ConfigError("ltsim profile", "run with torch installed", str(exc),
                          "pip install torch==2.13.0 (CPU) or a CUDA build") from exc
    return run(args)


def cmd_validate(args: argparse.Namespace) -> int:
    from ltsim.validate import run_validate_command

    return run_validate_command(args)


def cmd_check(args: argparse.Namespace) -> int:
    from ltsim.check import run_check_command

    return run_check_command(args)


def cmd_workload(args: argparse.Namespace) -> int:
    from ltsim.workload import describe, format_describe

    frame = describe(args.dataset, max_length=args.max_length)
    text = format_describe(frame)
    if args.plot:
        from ltsim.workload import plot_histogram

        plot_histogram(args.dataset, args.plot, max_length=args.max_length)
        text += f"\nhistogram written to {args.plot}"
    records = frame.reset_index().astype(object).where(frame.reset_index().notna(), None)
    _print(records.to_dict(orient="records"), text, args.json)
    return EXIT_OK


COMMANDS = {"simulate": cmd_simulate, "compare": cmd_compare, "sweep": cmd_sweep,
            "profile": cmd_profile, "validate": cmd_validate, "check": cmd_check,
            "workload": cmd_workload}
