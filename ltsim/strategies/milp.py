"""SCIP as the planners run it (FlexSP's grouping, Skrull's DACP, InfiniPipe's checkpointing)."""

from __future__ import annotations

from typing import Any

_solved = [0]  # solves so far in this process (the command line's heartbeat tells the count)


def solved() -> int:
    """How many models ``optimize`` has solved in this process."""
    return _solved[0]


def optimize(model: Any) -> str:
    """Solve ``model`` (a pyscipopt Model) and return its status. SCIP catches Ctrl-C itself: it
    stops the solve and reports ``userinterrupt``, and the command would go on with the solution
    found so far; here it is a KeyboardInterrupt, as anywhere else in ltsim (exit 130, and an
    interrupted sweep keeps only the points it finished)."""
    model.optimize()
    _solved[0] += 1
    status = model.getStatus()
    if status == "userinterrupt":
        raise KeyboardInterrupt
    return status
