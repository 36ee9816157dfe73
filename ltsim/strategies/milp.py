"""SCIP as the planners run it (FlexSP's grouping, Skrull's DACP, InfiniPipe's checkpointing)."""

from __future__ import annotations

from typing import Any


def optimize(model: Any) -> str:
    """Solve ``model`` (a pyscipopt Model) and return its status. SCIP catches Ctrl-C itself: it
    stops the solve and reports ``userinterrupt``, and the command would go on with the solution
    found so far; here it is a KeyboardInterrupt, as anywhere else in ltsim (exit 130, and an
    interrupted sweep keeps only the points it finished)."""
    model.optimize()
    status = model.getStatus()
    if status == "userinterrupt":
        raise KeyboardInterrupt
    return status
