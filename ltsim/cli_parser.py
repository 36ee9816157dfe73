"""The command line's arguments: every command's options and their types (an output file that
is a folder, an empty folder name), with argparse's usage errors as one line (exit 2). The
commands themselves are ltsim.cli's."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ltsim.files import folder_arg

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=_input_arg, help="scenario TOML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, TOML syntax (e.g. strategy.k=2)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


STDOUT = "-"  # export --out -: the schedule on standard output


def _file_arg(text: str) -> Path:
    """An output file's path; one that ends in a slash names a folder (Path would drop the slash
    and write a file of the folder's name). '-' (standard output, as many tools read it) is
    refused where the output is not text for a pipe (export's --out takes it: _file_or_stdout)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a file name (got an empty name)")
    if text == STDOUT:
        raise argparse.ArgumentTypeError("must be a file name: '-' (standard output) is not taken "
                                         "here; write ./- for a file named '-'")
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a file name, not a folder (it ends "
                                         "in a slash)")
    return Path(text)


def _file_or_stdout(text: str) -> Path | str:
    return STDOUT if text == STDOUT else _file_arg(text)


def _input_arg(text: str) -> str:
    """An input file's path; one that ends in a slash names a folder (Path would drop the slash
    and read the file of that name)."""
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a file, not a folder (it ends in a "
                                         "slash)")
    return text


class _StoreOnce(argparse._StoreAction):
    """An option that takes one value refuses a second (argparse keeps the last one given,
    silently: ``--plot a.png --plot b.png`` wrote only b.png, and ``--executor local:0 --executor
    local`` hid the bad first value)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", set())
        if self.dest in given:
            parser.error(f"argument {option_string}: given more than once (it takes one value)")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (exit 2) like every other bad input, and an
    option of one value given once (_StoreOnce)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)  # the default action, and "store"
        self.register("action", "store", _StoreOnce)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}. Fix: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ltsim", description="Simulate, compare, size and validate long-context LLM training "
        "schedules. Exit codes: 0 ok, 1 a check or validation out of tolerance, 2 bad input.")
    from ltsim import __version__

    parser.add_argument("--version", action="version", version=f"ltsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="predict one scenario")
    _scenario_args(p)
    p.add_argument("--trace", type=_file_arg, help="write a Chrome trace (Perfetto) of the first batch")
    p.add_argument("--plot", type=_file_arg, help="write a Gantt + memory PNG of the first batch")
    p = sub.add_parser("compare", help="compare strategies on one scenario")
    _scenario_args(p)
    p.add_argument("--strategies", required=True,
                   help="comma-separated names; options as name:key=value:key=value")
    p = sub.add_parser("maxlen", help="the longest sequence each strategy can train")
    _scenario_args(p)
    p.add_argument("--strategies", help="comma-separated names, options as name:key=value "
                   "(default: the scenario's strategy)")
    p.add_argument("--step", type=int, default=1024, help="length granularity in tokens")
    p.add_argument("--max-length", type=int, default=1 << 30, help="search no further")
    p.add_argument("--plot", type=_file_arg, help="write peak memory by term against length (PNG)")
    p.add_argument("--workload", action="store_true",
                   help="search the cap (workload.max_length) of the scenario's own length "
                   "distribution instead of one sequence")
    p = sub.add_parser("sweep", help="grid search over scenario values")
    _scenario_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a swept key and its values (repeatable)")
    p.add_argument("--executor", default="local", help="local | local:N | dask://HOST:PORT")
    p.add_argument("--db", type=_file_arg, help="SQLite results store (resumes an interrupted sweep)")
    p.add_argument("--plot", type=_file_arg, help="heatmap PNG over the first two grid keys (a line "
                   "chart with one key)")
    p.add_argument("--top", type=int, help="rows to print, best first (default: 20 in the "
                   "table, every row with --json)")
    p = sub.add_parser("profile", help="measure cost tables on this machine")
    _add_profile_args(p)
    p = sub.add_parser("validate", help="predict and measure a scenario, compare")
    p.add_argument("scenario", type=_input_arg, help="scenario TOML file (a plan the executor "
                   "runs: pipeline and data parallelism)")
    p.add_argument("--profile", required=True, help="profile directory or name to predict with")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, TOML syntax (e.g. strategy.k=2)")
    p.add_argument("--out", type=folder_arg, help="directory for the table, figure and summary")
    p.add_argument("--tolerance", type=float, default=0.10, help="relative error of time and "
                   "peak memory above which the exit code is 1 (default: 0.10, 10%%)")
    p = sub.add_parser("check", help="CI regression of predicted speedups")
    p.add_argument("file", type=lambda text: Path(_input_arg(text)))
    p.add_argument("--update", action="store_true", help="record the current predictions")
    p = sub.add_parser("workload", help="length distributions")
    wsub = p.add_subparsers(dest="workload_command", required=True)
    d = wsub.add_parser("describe", help="the papers' length table and a histogram")
    d.add_argument("dataset", help="a built-in dataset name or a length file (.txt, .csv, "
                   ".jsonl, .parquet)")
    d.add_argument("--max-length", type=int, default=0,
                   help="leave out sequences longer than this many tokens (default: 0, no limit)")
    d.add_argument("--plot", type=_file_arg, help="write a histogram of the lengths (PNG)")
    d.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p = sub.add_parser("export", help="write the first batch's simulated schedule for a runtime")
    p.add_argument("scenario", type=_input_arg, help="scenario TOML file")
    p.add_argument("--format", required=True, help="torch-pipelining: the compute-only CSV that "
                   "torch.distributed.pipelining's _load_csv reads (DP replica 0)")
    p.add_argument("--out", type=_file_or_stdout, required=True,
                   help="file to write ('-': standard output, the summary then on standard error)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, TOML syntax (e.g. strategy.k=2)")
    return parser


def _add_profile_args(p: argparse.ArgumentParser) -> None:
    try:
        from ltsim.profiler.cli import add_arguments
    except ImportError:  # the profiler needs torch; say so when it is run
        p.add_argument("rest", nargs=argparse.REMAINDER)
        return
    add_arguments(p)
