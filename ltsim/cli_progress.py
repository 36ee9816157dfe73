"""Progress of the long commands on stderr: a sweep's bar (a line per tenth of the points
when not on a terminal, or per point of a short sweep after 2 s), and a line per simulated batch
(simulate, compare), length (maxlen) or case (check) once a command has run 2 s. Part of the
command line (ltsim/cli.py)."""

from __future__ import annotations

import sys
import time
from typing import Callable


def batch_progress(command: str, label: str, started_s: float, after_s: float = 2.0):
    """A simulation's progress on stderr, a line per global batch once the command has run
    ``after_s`` (a planner with MILPs takes seconds a batch)."""
    return count_progress(f"{command}: {label}: batch", started_s, after_s)


def count_progress(what: str, started_s: float, after_s: float = 2.0):
    """``show(done, total)``: "{what} {done} of {total} done" on stderr once the command has run
    ``after_s`` (``ltsim check``'s cases: 40 of FlexSP ran minutes without a word)."""
    def show(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started_s
        if elapsed >= after_s and done < total:
            sys.stderr.write(f"{what} {done} of {total} done, {elapsed:.0f} s\n")
            sys.stderr.flush()
    return show


def maxlen_progress(strategy: str, started_s: float, after_s: float = 2.0):
    """A search's progress on stderr, a line per simulated length once the command has run
    ``after_s`` (a planner with MILPs can take minutes: the user sees it is working)."""
    def show(point) -> None:
        elapsed = time.perf_counter() - started_s
        if elapsed >= after_s:
            verdict = ("fit" if point.fits else "planning refused" if point.limit == "plan"
                       else f"do not fit ({point.limit} memory)")
            sys.stderr.write(f"maxlen: {strategy}: {point.length:,} tokens {verdict}, "
                             f"{elapsed:.0f} s\n")
            sys.stderr.flush()
    return show


def progress_bar(started_s: float, after_s: float = 2.0) -> Callable[[int, int], None]:
    """A sweep's progress on stderr, ``show(done, total)``: a tqdm bar on a terminal, otherwise
    a line at every tenth of the points (and the last) for sweeps of 20 points or more, and a
    line per point for shorter ones once the sweep has run ``after_s`` (19 InfiniPipe points ran
    minutes without a word)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar: list = []

        def show_bar(done: int, total: int) -> None:
            if not bar:
                bar.append(tqdm(total=total, unit="plan", file=sys.stderr, dynamic_ncols=True))
            bar[0].update(done - bar[0].n)
            if done >= total:
                bar[0].close()
        return show_bar
    shown = [-1]  # the last count printed

    def show_lines(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started_s
        last, step = shown[0], max(1, total // 10)
        if done == last:
            return
        if (done > 0 and elapsed >= after_s if total < 20
                else done == total or done // step != last // step or last < 0):
            shown[0] = done
            sys.stderr.write(f"sweep: {done}/{total} points, {elapsed:.0f} s\n")
            sys.stderr.flush()
    return show_lines
