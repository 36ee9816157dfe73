"""Collective times from a profile's collectives.csv (DESIGN.md section 7): curves over bytes per
(op, group size, scope), with the nccl-tests bus-bandwidth factor for what the table lacks.
Split from ltsim/profiles.py, whose ``Profile.collective_time_s`` asks it."""

from __future__ import annotations

import math

from ltsim.lookup import ABOVE, INSIDE, MonotoneCurve, Notes
from ltsim.profile_checks import OP_ALIASES

__all__ = ["CollectiveLookup", "bus_factor"]


def bus_factor(op: str, group_size: int) -> float:
    """nccl-tests bus-bandwidth factor (NVIDIA nccl-tests doc/PERFORMANCE.md): busbw = algbw x this."""
    n = group_size
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "send_recv":
        return 1.0
    return (n - 1) / n


class CollectiveLookup:
    """Collective time from (op, group_size, scope) curves over bytes.

    ``bytes`` is the nccl-tests "size": the full buffer (all_reduce in = out, all_gather output,
    reduce_scatter input, all_to_all send buffer per rank, send_recv message). At equal bus
    bandwidth all_gather, reduce_scatter and all_to_all then take half the all_reduce time of the
    same bytes; a missing op is derived that way (send_recv from a 2-rank all_reduce). A missing
    group size uses the nearest one, rescaled by the bus factor; a missing scope uses the other.
    """

    __slots__ = ("_curves",)

    def __init__(self, rows: list[tuple[str, int, str, float, float]]) -> None:
        points: dict[tuple[str, str, int], tuple[list[float], list[float]]] = {}
        for op, group, scope, num_bytes, t in rows:
            xs, ys = points.setdefault((OP_ALIASES.get(op, op), scope, int(group)), ([], []))
            xs.append(float(num_bytes))
            ys.append(float(t))
        self._curves: dict[tuple[str, str], dict[int, MonotoneCurve]] = {}
        for (op, scope, group), (xs, ys) in sorted(points.items()):
            self._curves.setdefault((op, scope), {})[group] = MonotoneCurve.fit(xs, ys)

    def has(self, op: str, scope: str) -> bool:
        return (OP_ALIASES.get(op, op), scope) in self._curves

    def _source(self, op: str, scope: str, notes: Notes) -> tuple[str, str, float]:
        scopes = (scope, "inter" if scope == "intra" else "intra")
        for s in scopes:
            if (op, s) in self._curves:
                base, factor = op, 1.0
            elif (("all_reduce", s) in self._curves and op != "all_reduce"):
                base, factor = "all_reduce", (1.0 if op == "send_recv" else 0.5)
                notes.append(("text", f"collectives: no {op} rows ({s}); derived from all_reduce "
                              f"x {factor:g} (bus-bandwidth ratio)"))
            else:
                continue
            if s != scope:
                notes.append(("text", f"collectives: no {scope}-node rows for {op}; using {s}"))
            return base, s, factor
        raise KeyError(op)

    def time_s(self, op: str, group_size: int, scope: str, num_bytes: float, notes: Notes) -> float:
        base, s, factor = self._source(op, scope, notes)
        curves = self._curves[(base, s)]
        want = 2 if op == "send_recv" else group_size
        table_group = min(curves, key=lambda g: (abs(math.log(g / want)), -g))
        if table_group != want:
            factor *= bus_factor(base, want) / bus_factor(base, table_group)
            notes.append(("text", f"collectives: {base} group_size={want} ({s}) not in table; "
                          f"used {table_group} scaled by the bus factor"))
        t, where = curves[table_group](num_bytes)
        if where != INSIDE:
            curve = curves[table_group]
            bound = curve.x_max if where == ABOVE else curve.x_min
            notes.append(("range", "collectives", f"{op} bytes", num_bytes, bound, where))
        return factor * t
