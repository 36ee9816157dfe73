"""`ltsim profile`: argument parsing for the profiler; the work is `ltsim.profiler.run_profile`.

    ltsim profile --device cpu|cuda --out profiles/NAME [--model PRESET ...] [--tp 1,2,4]
                  [--quick] [--resume] [--threads N]

Exit codes: 0 done, 2 bad input (one message on stderr, no traceback), 130 interrupted (Ctrl-C;
rerun with --resume to continue). The command itself (messages, exit codes) is `ltsim.cli`'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from ltsim.files import folder_arg


def _tp_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]  # an empty item is an error, as in --grid
    except ValueError:
        raise argparse.ArgumentTypeError(f"'--tp' must be comma-separated integers (got {text!r})")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"'--tp' must be positive integers (got {text!r})")
    if len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"'--tp' must name each degree once (got {text!r})")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `ltsim profile` options to `parser`."""
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"),
                        help="where to measure")
    parser.add_argument("--out", required=True, type=folder_arg, help="profile directory to write")
    parser.add_argument("--model", dest="models", action="append", default=[], metavar="PRESET",
                        help="catalog model whose shapes to measure (repeatable; default: "
                        "llama-tiny and llama-small on cpu, qwen2.5-7b on cuda)")
    parser.add_argument("--tp", dest="tp_degrees", type=_tp_list, default=[], metavar="1,2,4",
                        help="tensor-parallel degrees (default: 1 on cpu, 1,2,4,8 on cuda); a "
                        "degree a model cannot take is skipped for it, with a note in meta.json")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--resume", action="store_true",
                        help="keep finished tables and partial checkpoints in --out")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads (default: 1 on cpu, as the executor runs one "
                        "thread per process; torch's own choice on cuda)")


def run_from_args(args: argparse.Namespace, *, progress: TextIO | None) -> Path:
    """Run the profile described by parsed `args`; returns the profile directory.

    progress: the stream for progress (a bar on a terminal, else a line per finished table), or
    None. Raises LtsimError for bad input; KeyboardInterrupt leaves the finished tables and
    checkpoints.
    """
    from ltsim.errors import ConfigError
    from ltsim.model import get_model
    from ltsim.profiler import run_profile
    from ltsim.profiler.tables import progress_stream

    for name in args.models:  # named by its flag, before any measuring
        try:
            get_model(name)
        except ConfigError as exc:
            raise ConfigError("--model", exc.rule, name, "give one of these catalog names",
                              context=exc.context) from None
    twice = [name for i, name in enumerate(args.models) if name in args.models[:i]]
    if twice:  # as --tp refuses a repeated degree
        raise ConfigError("--model", "each model once", twice[0], f"give --model {twice[0]} once")
    if not args.resume and (Path(args.out) / "meta.json").exists():  # its tables would be
        # measured again and replaced, a shipped profile's too
        raise ConfigError("--out", "a folder without a profile, or given with --resume",
                          str(args.out), "give a new folder; --resume completes this one (delete "
                          "a table first to measure it again)")
    with progress_stream(progress):
        return run_profile(device=args.device, out=args.out, models=list(args.models),
                           tp_degrees=list(args.tp_degrees), quick=args.quick, resume=args.resume,
                           progress=progress is not None, threads=args.threads)
