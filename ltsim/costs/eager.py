"""What eager PyTorch costs beyond the kernels, from a profile's eager.csv and optimizer.csv.

Both tables are measured on the executor's own code (ltsim/profiler/eager.py says how). A profile
without them (published or analytic tables, older profiles) prices kernels alone, as before.

- ``EagerFloor``: the least time an F, R or B op of ``layers`` layers takes, whatever its size: a
  per-op part plus a per-layer part, from whole executor ops over a tiny chunk (the least time
  over the token counts measured), at 1 and 2 layers. B = FB - F. R runs the executor's forward
  with its graph, the same code as a kept F, so its floor is F's (the table's FdRB rows, F_discard
  + R + B, check that reading: validation/executor/gpu_notes.md). A compute op then takes max(its kernels'
  time, this floor): launches are asynchronous, so the host hides behind long kernels and is the
  bottleneck of short ones.
- ``OptimizerRate``: seconds of the executor's Adam step as intercept + slope x parameters, from
  its rows at 1 and 2 layers. It prices OPT for ``optimizer_dtype = "model"`` (the executor's
  convention: Adam state in the parameters' dtype, ``foreach=False``) and for an fp32 model
  under ``"fp32"`` (the same state and step); fp32 master weights of a 16-bit model keep the
  bytes-through-HBM estimate (table.py).

Rows of the simulated model are used when the profile has them, else those of the measured model
closest in hidden size (the floor is host work, nearly independent of width; optimizer.csv has no
width column, so there the first model by name); the choice is noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
import statistics

from ltsim.model import CATALOG, ModelSpec
from ltsim.plan import Keep, OpKind
from ltsim.profiles import Table, read_optional_rows, stand_in


def _rows_for(directory: str | Path, table: str, model: ModelSpec, notes: list[str],
              **match: str) -> Table | None:
    """The table's rows (those equal to ``match`` too) of ``model`` in the model's dtype, else of
    the nearest measured model; None when the profile has no such table."""
    table_rows = read_optional_rows(directory, table)
    if table_rows is None:
        return None
    rows = table_rows.where(**match, dtype=model.dtype)
    if not len(rows):  # the 16-bit stand-in's (bf16 rows for an fp16 model, as GEMM rows are read)
        partner = stand_in(model.dtype, ())
        rows = table_rows.where(**match, dtype=partner) if partner else rows
    if not len(rows) and len(table_rows):  # (an fp16 model ran without its floor, unsaid)
        what = " ".join(map(str, match.values()))  # (optimizer.csv's are adam's)
        notes.append(f"{table}.csv has no {what + ' ' if what else ''}rows of {model.dtype}: it "
                     "is not used")
        return rows
    models = rows["model"]
    if model.name in models:
        return rows.where(model=model.name)
    if not len(rows):
        return rows
    if "hidden" in rows.columns:
        widths: dict[str, float] = {}
        for name, hidden in zip(models, rows["hidden"]):
            widths.setdefault(name, hidden)
        nearest = min(widths, key=lambda name: abs(widths[name] - model.hidden_size))
    else:
        nearest = sorted(set(models))[0]
    notes.append(f"{table}.csv has no rows for {model.name}; used {nearest}'s")
    return rows.where(model=nearest)


def _catalog_shape(model: ModelSpec) -> bool:
    """Whether ``model`` has its catalog namesake's shape, the one a profile's rows of that name
    timed (depth, dtype and a GPT's position-table rows aside: the rows are per layer, chosen
    by dtype, and a lookup of the table does not depend on its rows; maxlen grows the table
    with the length it searches). A preset with
    shape overrides keeps the name, not the shape: its whole-op residuals, the measured time
    less the preset's kernels, cancelled most of a larger vocabulary's cost (MFU 5.7 on the CPU
    preset; found by a fuzzer)."""
    base = CATALOG.get(model.name)
    return base is not None and replace(
        base, num_layers=model.num_layers, dtype=model.dtype,
        max_position_embeddings=model.max_position_embeddings) == model


def _grouped(rows: Table, keys: tuple[str, ...], reduce) -> dict[tuple, float]:
    """time_s reduced (min, median) over the rows of each value of ``keys``."""
    groups: dict[tuple, list[float]] = {}
    for key, time_s in zip(rows.rows(*keys), rows["time_s"]):
        groups.setdefault(key, []).append(float(time_s))
    return {key: reduce(values) for key, values in groups.items()}


def _line(times: dict[int, float]) -> tuple[float, float]:
    """(per-op, per-layer) seconds through the 1- and 2-layer points, both >= 0."""
    per_layer = max(0.0, times[2] - times[1])
    return max(0.0, times[1] - per_layer), per_layer


@dataclass(frozen=True, slots=True)
class EagerFloor:
    """(per-op, per-layer) seconds for each of F (kept graph), F_discard, R and B; and, when the
    rows are the simulated model's own, every measured whole-op time by token count (``whole``:
    (name, layers, stage) -> ((tokens, seconds), ...), names as ``parts``)."""

    parts: dict[str, tuple[float, float]]
    whole: dict[tuple[str, int, str], tuple[tuple[int, float], ...]] = field(default_factory=dict)
    # (name, layers) -> ((query tokens, context tokens, seconds), ...): ops of a middle stage over
    # a chunk after context_tokens earlier tokens of its sequence (own rows only)
    context: dict[tuple[str, int], tuple[tuple[int, int, float], ...]] = field(
        default_factory=dict)

    @classmethod
    def from_profile(cls, directory: str | Path, model: ModelSpec, notes: list[str]
                     ) -> "EagerFloor | None":
        rows = _rows_for(directory, "eager", model, notes)
        if rows is None or not len(rows):
            return None
        stages = rows["stage"] if "stage" in rows.columns else ["middle"] * len(rows)
        rows = rows.with_column("stage", [s or "middle" for s in stages])
        contexts = rows["context_tokens"] if "context_tokens" in rows.columns else [0] * len(rows)
        rows = rows.with_column("context_tokens", [int(c or 0) for c in contexts])
        context_rows = rows.where(stage="middle").without(context_tokens=0)
        whole_rows = rows.where(context_tokens=0)
        rows = whole_rows.where(stage="middle")  # the floor: ops without embedding or head
        if not len(rows):
            return None
        # the least time over the token counts measured: an op never takes less at more tokens,
        # so a slower small-chunk row is host jitter, not the floor
        t = {(op, int(layers)): time_s for (op, layers), time_s in
             _grouped(rows, ("op", "layers"), min).items()}
        try:
            measured = {op: {n: t[(op, n)] for n in (1, 2)} for op in ("F", "F_discard", "FB")}
        except KeyError:  # kernels alone, said (it was silent)
            notes.append(f"eager.csv has no F, F_discard and FB rows at both 1 and 2 layers for "
                         f"{rows['model'][0]} (a middle stage, no context): ops are priced by "
                         "their kernels alone, without the eager floor; re-run the profiler's "
                         "eager table to use one")
            return None
        backward = {n: measured["FB"][n] - measured["F"][n] for n in (1, 2)}
        forward = _line(measured["F"])
        own = all(name == model.name for name in rows["model"])
        if own and not _catalog_shape(model):  # the rows timed the preset, not these widths
            notes.append(f"eager.csv's {model.name} rows timed its catalog shape: with other "
                         "widths they give the per-op floor only, not whole-op times")
            own = False
        return cls(parts={"F": forward, "F_discard": _line(measured["F_discard"]),
                          "B": _line(backward), "R": forward},
                   whole=_whole_ops(whole_rows) if own else {},
                   context=_context_ops(context_rows) if own else {})

    def floor_s(self, kind: OpKind, layers: int, keep: Keep) -> float:
        """Least seconds of an op of ``kind`` over ``layers`` layers (0 for kinds not measured)."""
        part = self.parts.get(_name(kind, keep))
        return 0.0 if part is None or layers <= 0 else part[0] + part[1] * layers

    def context_points(self, kind: OpKind, keep: Keep
                       ) -> tuple[tuple[int, int, float, float], ...]:
        """(query tokens, context tokens, seconds at 1 layer, at 2 layers) of an op of ``kind``
        over a chunk with context, middle stage (empty when the profile has none)."""
        name = _name(kind, keep)
        two = {(q, c): v for q, c, v in self.context.get((name, 2), ())}
        return tuple((q, c, v, two[(q, c)]) for q, c, v in self.context.get((name, 1), ())
                     if (q, c) in two)

    def whole_points(self, kind: OpKind, keep: Keep, stage: str = "middle"
                     ) -> tuple[tuple[int, float, float], ...]:
        """(tokens, seconds at 1 layer, at 2 layers) of a whole op of ``kind`` over a ``stage``
        ("middle", "first": with the embedding, "last": with the head and loss), at every token
        count measured at both (empty when the profile has none)."""
        name = _name(kind, keep)
        one = self.whole.get((name, 1, stage), ())
        two = dict(self.whole.get((name, 2, stage), ()))
        return tuple((tokens, t1, two[tokens]) for tokens, t1 in one if tokens in two)


def _name(kind: OpKind, keep: Keep) -> str:
    if kind is OpKind.F and keep not in (Keep.ALL, Keep.SELECTIVE):
        return "F_discard"
    return kind.name


def _context_ops(rows: Table) -> dict[tuple[str, int], tuple[tuple[int, int, float], ...]]:
    """Median seconds per (op, layers, query tokens, context tokens) of the rows with context;
    B = FB - F; R and F_discard read the context as F does, so they take F's points."""
    if not len(rows):
        return {}
    t = {(op, int(n), int(q), int(c)): time_s for (op, n, q, c), time_s in _grouped(
        rows, ("op", "layers", "num_tokens", "context_tokens"), statistics.median).items()}
    out: dict[tuple[str, int], tuple[tuple[int, int, float], ...]] = {}
    for n in sorted({n for _, n, _, _ in t}):
        forward = tuple((q, c, v) for (op, m, q, c), v in sorted(t.items())
                        if op == "F" and m == n)
        backward = tuple((q, c, t[("FB", n, q, c)] - v) for q, c, v in forward
                         if ("FB", n, q, c) in t)
        for name, points in (("F", forward), ("F_discard", forward), ("R", forward),
                             ("B", backward)):
            if points:
                out[(name, n)] = points
    return out


def _whole_ops(rows: Table) -> dict[tuple[str, int, str], tuple[tuple[int, float], ...]]:
    """Median whole-op seconds per (op, layers, stage, tokens); B = FB - F and R = F (a recompute
    runs the kept forward's code), at the token counts where both were measured."""
    t = {(op, int(n), stage, int(tokens)): time_s for (op, n, stage, tokens), time_s in
         _grouped(rows, ("op", "layers", "stage", "num_tokens"), statistics.median).items()}
    out: dict[tuple[str, int, str], tuple[tuple[int, float], ...]] = {}
    for n, stage in {(layers, stage) for _, layers, stage, _ in t}:
        sizes = sorted(x for op, layers, st, x in t if (layers, st) == (n, stage) and op == "F")
        for name, value in (("F", lambda x: t.get(("F", n, stage, x))),
                            ("F_discard", lambda x: t.get(("F_discard", n, stage, x))),
                            ("B", lambda x: (t[("FB", n, stage, x)] - t[("F", n, stage, x)])
                             if ("FB", n, stage, x) in t else None),
                            ("R", lambda x: t.get(("F", n, stage, x)))):
            points = tuple((x, v) for x in sizes if (v := value(x)) is not None)
            if points:
                out[(name, n, stage)] = points
    return out


@dataclass(frozen=True, slots=True)
class OptimizerRate:
    """Seconds of the executor's Adam step: ``intercept_s + per_param_s`` x parameters."""

    intercept_s: float
    per_param_s: float

    @classmethod
    def from_profile(cls, directory: str | Path, model: ModelSpec, notes: list[str]
                     ) -> "OptimizerRate | None":
        rows = _rows_for(directory, "optimizer", model, notes, optimizer="adam")
        if rows is None:
            return None
        points = sorted((p, t) for (p,), t in
                        _grouped(rows, ("num_params",), statistics.median).items())
        if len(points) < 2:
            return None
        (p1, t1), (p2, t2) = points[:2]
        slope = max(0.0, (t2 - t1) / (p2 - p1))
        return cls(intercept_s=max(0.0, t1 - slope * p1), per_param_s=slope)

    def time_s(self, num_params: float) -> float:
        return self.intercept_s + self.per_param_s * num_params


@lru_cache(maxsize=64)
def eager_costs(directory: str, model: ModelSpec, tables: object = None
                ) -> tuple[EagerFloor | None, OptimizerRate | None, tuple[str, ...]]:
    """The profile's eager floor and optimizer rate for ``model`` (None where it has no table),
    and notes on rows borrowed from another model; read once per profile and model (``tables``:
    the Profile's ``tables``, a key only: a profile edited and loaded again is read again)."""
    notes: list[str] = []
    floor = EagerFloor.from_profile(directory, model, notes)
    rate = OptimizerRate.from_profile(directory, model, notes)
    return floor, rate, tuple(notes)
