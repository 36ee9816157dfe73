"""`ltsim profile`: argument parsing for the profiler; the work is `ltsim.profiler.run_profile`.

    ltsim profile --device cpu|cuda --out profiles/NAME [--model PRESET ...] [--tp 1,2,4]
                  [--quick] [--resume] [--threads N]

Exit codes: 0 done, 2 bad input (one message on stderr, no traceback), 130 interrupted (Ctrl-C;
rerun with --resume to continue).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ltsim.errors import ConfigError, LtsimError


def _tp_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'--tp' must be comma-separated integers (got {text!r})")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"'--tp' must be positive integers (got {text!r})")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `ltsim profile` options to `parser`."""
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"),
                        help="where to measure")
    parser.add_argument("--out", required=True, type=Path, help="profile directory to write")
    parser.add_argument("--model", dest="models", action="append", default=[], metavar="PRESET",
                        help="catalog model whose shapes to measure (repeatable; default: "
                        "llama-tiny and llama-small on cpu, qwen2.5-7b on cuda)")
    parser.add_argument("--tp", dest="tp_degrees", type=_tp_list, default=[], metavar="1,2,4",
                        help="tensor-parallel degrees (default: 1 on cpu, 1,2,4,8 on cuda)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--resume", action="store_true",
                        help="keep finished tables and partial checkpoints in --out")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads (default: torch's own choice)")


def run(args: argparse.Namespace) -> int:
    """Run the profile described by parsed `args`; returns the exit code."""
    from ltsim.profiler import run_profile

    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ConfigError("--threads", "a positive integer", args.threads)
            import torch
            torch.set_num_threads(args.threads)
        out = run_profile(device=args.device, out=args.out, models=list(args.models),
                          tp_degrees=list(args.tp_degrees), quick=args.quick, resume=args.resume,
                          progress=True)
    except LtsimError as exc:
        print(f"ltsim profile: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nltsim profile: interrupted; finished tables and <table>.partial.csv checkpoints "
              f"are in {args.out}. Fix: run the same command with --resume", file=sys.stderr)
        return 130
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m ltsim.profiler ...`: the same command without the `ltsim` front end."""
    parser = argparse.ArgumentParser(prog="ltsim profile", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return run(parser.parse_args(argv))
