"""ltsim.strategies.milp: a Ctrl-C during a SCIP solve stops the command."""

from __future__ import annotations

import os
import signal

import pytest
from pyscipopt import SCIP_EVENTTYPE, Eventhdlr, Model, quicksum

from ltsim.strategies import milp


class _PressCtrlC(Eventhdlr):
    """Sends this process a SIGINT when the solve reaches its first node, as a user's Ctrl-C."""

    def eventinit(self):
        self.model.catchEvent(SCIP_EVENTTYPE.NODEFOCUSED, self)

    def eventexit(self):
        self.model.dropEvent(SCIP_EVENTTYPE.NODEFOCUSED, self)

    def eventexec(self, event):
        os.kill(os.getpid(), signal.SIGINT)


def _model() -> Model:
    model = Model()
    model.hideOutput()
    x = [model.addVar(vtype="I", lb=0, ub=100) for _ in range(30)]
    model.addCons(quicksum((i % 7 + 3) * v for i, v in enumerate(x)) <= 1000)
    model.setObjective(quicksum((i % 5 + 1) * v for i, v in enumerate(x)), "maximize")
    return model


def test_a_ctrl_c_scip_catches_is_a_keyboard_interrupt():
    """SCIP stops on Ctrl-C and reports 'userinterrupt'; FlexSP, Skrull and InfiniPipe went on
    with the solution found so far, so `compare` and `sweep` ran to the end and exited 0."""
    reached_python = []
    previous = signal.signal(signal.SIGINT, lambda *_: reached_python.append(True))
    try:  # SCIP installs its own handler while it solves; ours tells if it did not
        model = _model()
        model.includeEventhdlr(_PressCtrlC(), "press", "a user's Ctrl-C")
        with pytest.raises(KeyboardInterrupt):
            milp.optimize(model)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not reached_python


def test_an_uninterrupted_solve_returns_its_status():
    assert milp.optimize(_model()) == "optimal"
