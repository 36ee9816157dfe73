"""Progress of the long commands on stderr: a sweep's bar (a line per tenth of the points
when not on a terminal, or per point of a short sweep after 2 s), and a line per simulated batch
(simulate, compare), length (maxlen) or case (check) once a command has run 2 s; and, under any
command, a line after every 15 s in which none of those came (``heartbeat``: one batch of a
planner with MILPs, or of thousands of sequences, can take minutes). Part of the command line
(ltsim/cli.py)."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

_last_line = [time.monotonic()]  # when a progress line (or the sweep bar) last showed
# held while a progress line is written, and by a fork (a sweep's workers) while it copies the
# process: a child never starts with stderr's lock taken by a thread it does not have, and the
# heartbeat never writes just after another line it had not seen
_writing = threading.RLock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_writing.acquire, after_in_parent=_writing.release,
                        after_in_child=_writing.release)


def say(text: str) -> None:
    """A progress line on stderr."""
    with _writing:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        _last_line[0] = time.monotonic()


def error_line(text: str) -> None:
    """One line on standard error; if that cannot be written either, the exit code says it."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


@contextmanager
def heartbeat(command: str, every_s: float = 15.0) -> Iterator[None]:
    """While the body runs, "ltsim {command}: still working, N s" on stderr after every
    ``every_s`` without another progress line, with the MILPs solved so far where a planner
    solved some (a thread: the planners run in the main one; a SCIP solve stops at its time
    limit, so a line is at most that late)."""
    started = _last_line[0] = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(min(1.0, every_s / 4)):
            if time.monotonic() - _last_line[0] < every_s:
                continue
            milp = sys.modules.get("ltsim.strategies.milp")  # (imported by the planners)
            solved = milp.solved() if milp is not None else 0
            extra = f", {solved:,} MILPs solved" if solved else ""
            try:
                with _writing:  # (another line may have come meanwhile)
                    now = time.monotonic()
                    if now - _last_line[0] >= every_s:
                        say(f"ltsim {command}: still working, {now - started:.0f} s{extra}")
            except (OSError, ValueError):  # stderr closed: nobody to tell
                return

    thread = threading.Thread(target=beat, name="ltsim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
            say(f"{what} {done} of {total} done, {elapsed:.0f} s")
    return show


def maxlen_progress(strategy: str, started_s: float, after_s: float = 2.0):
    """A search's progress on stderr, a line per simulated length once the command has run
    ``after_s`` (a planner with MILPs can take minutes: the user sees it is working)."""
    def show(point) -> None:
        elapsed = time.perf_counter() - started_s
        if elapsed >= after_s:
            verdict = ("fit" if point.fits else "planning refused" if point.limit == "plan"
                       else f"do not fit ({point.limit} memory)")
            say(f"maxlen: {strategy}: {point.length:,} tokens {verdict}, {elapsed:.0f} s")
    return show


def progress_bar(started_s: float, after_s: float = 2.0) -> Callable[[int, int], None]:
    """A sweep's progress on stderr, ``show(done, total)``: a tqdm bar on a terminal, otherwise
    nothing in the sweep's first ``after_s`` (a sweep of a second stays quiet, as DESIGN.md's
    command line does off a terminal; one of 20 points printed 11 lines), then a line at every
    tenth of the points (and the last) for sweeps of 20 points or more, and a line per point for
    shorter ones (19 InfiniPipe points ran minutes without a word). Off a terminal a long sweep
    also gets a line at least every ``EVERY_S`` of points finishing, and each line before the
    last the time left at the pace so far (a grid of 90,000 points at 0.5 s each said nothing
    for its first 9,000)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar: list = []

        def show_bar(done: int, total: int) -> None:
            if not bar:
                bar.append(tqdm(total=total, unit="plan", file=sys.stderr, dynamic_ncols=True))
            bar[0].update(done - bar[0].n)
            _last_line[0] = time.monotonic()
            if done >= total:
                bar[0].close()
        return show_bar
    shown = [-1, 0.0]  # the last count printed, and when

    def show_lines(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started_s
        last, step = shown[0], max(1, total // 10)
        if done == last or elapsed < after_s:
            return
        if (done > 0 if total < 20
                else done == total or done // step != last // step or last < 0
                or elapsed - shown[1] >= EVERY_S):
            shown[0], shown[1] = done, elapsed
            left = (f", about {_duration(elapsed / done * (total - done))} left"
                    if 0 < done < total else "")
            say(f"sweep: {done}/{total} points, {elapsed:.0f} s{left}")
    return show_lines


EVERY_S = 60.0  # the longest a long sweep goes without a line off a terminal


def _duration(seconds: float) -> str:
    """A time left as a person reads it: "40 s", "12 min", "3.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
