"""``ltsim profile`` and ``ltsim validate`` (DESIGN.md section 6): the commands that run kernels
on a device with torch. Part of the command line (ltsim/cli.py)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from ltsim.cli_parser import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK
from ltsim.cli_paths import check_folder, check_folder_outputs, command_inputs
from ltsim.cli_progress import error_line
from ltsim.errors import ConfigError, LtsimError


def require_torch(command: str) -> None:
    """``profile`` and ``validate`` measure on a device with torch; say so before anything runs."""
    import importlib

    try:
        importlib.import_module("torch")
    except ImportError:
        raise ConfigError("torch", f"installed for `ltsim {command}` (it runs kernels on a device)",
                          "not importable", "pip install torch==2.13.0 (CPU; a CUDA build from "
                          "pytorch.org for GPUs). simulate, compare, sweep and check need no torch"
                          ) from None


def cmd_profile(args: argparse.Namespace) -> int:
    require_torch("profile")
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
    from ltsim.overrides import parse_override
    from ltsim.scenario import load_scenario
    from ltsim.validate import (OUTPUT_FILES, require_real_device, same_kind_of_device,
                                summary_text, validate_scenario, write_outputs)

    if not 0 < args.tolerance < float("inf"):  # inf would pass every comparison
        raise ConfigError("--tolerance", "a positive, finite fraction (0.10 = 10%)", args.tolerance)
    require_torch("validate")  # (after the flags: importing torch takes seconds)
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
                             command_inputs(args.scenario, scenario))
    started = time.perf_counter()

    def announce(iterations: int, predicted_s: float) -> None:  # the executor can take minutes
        for note in (unused, other_model):  # once the plan passed every check: a refusal
            if note:  # stays one line
                error_line(note)
        if time.perf_counter() - started + iterations * predicted_s >= 2.0:
            error_line(f"validate: running {iterations} iterations of the plan, each predicted "
                       f"to take {predicted_s:.2f} s")

    validation = validate_scenario(scenario, announce=announce)
    title = f"{scenario.name}: {scenario.strategy}, predicted vs measured"
    text = summary_text(validation, args.tolerance)
    if args.out:
        paths = write_outputs(validation, Path(args.out), title, args.tolerance)
        text += "\n" + "\n".join(f"written {p}" for p in paths)
    print(text)
    return EXIT_OK if validation.within(args.tolerance) else EXIT_CHECK_FAILED
