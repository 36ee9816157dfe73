"""Profile tables: the on-disk format (DESIGN.md section 7), reading, writing and lookups.

A profile is a directory holding ``meta.json`` and CSV tables whose column names carry units:

- ``gemm.csv``: m, n, k, dtype, time_s  (C[m,n] = A[m,k] @ B[k,n])
- ``attention.csv``: q_tokens, kv_tokens, num_heads, num_kv_heads, head_dim, causal, pass, time_s
  (pass is "fwd" or "bwd"; kv_tokens counts the context plus the query tokens)
- ``collectives.csv``: op, group_size, scope, bytes, time_s  (op in all_reduce, all_gather,
  reduce_scatter, all_to_all, send_recv; scope "intra" or "inter" node). Optional: a profile
  measured on one GPU has none; looking up a collective over 2 or more ranks then raises
  ProfileError (single-device scenarios never do)
- ``gemm_bwd.csv`` (optional): m, n, k, dtype, time_s, pass, the backward GEMMs of a forward
  Y[T,N] = X[T,K] W^T: ``dgrad`` dX = dY W (m=T, n=K, k=N) and ``wgrad`` dW = dY^T X (m=N, n=K,
  k=T). ``gemm_backward_time_s`` looks them up by the forward's (T, N, K); without the table a
  backward costs two forwards
- optional tables the cost model uses, checked by the same rules (ltsim.profile_files):
  ``elementwise.csv``, ``eager.csv``, ``optimizer.csv``, ``host_copy.csv``. The profiler also
  writes ``memory.csv`` and ``attention_varlen.csv`` for comparison; the simulator never reads
  them (the memory model is analytic, ltsim/memory.py), so their values are not checked.

Every table may carry extra columns (``source``, ``method`` = measured|published|analytic,
``time_s_spread``, ``kernel``); ``meta.json`` records the provenance of every table.
meta.json's ``tables.gemm.m_quantum`` turns on GEMM tile plateaus (ltsim.lookup.MonotoneCurve);
``tables.attention.default_kernel`` names the default of a ``kernel`` column.

``load_profile(name_or_path)`` returns a cached ``Profile`` whose methods answer in seconds:
``gemm_time_s``, ``attention_time_s``, ``collective_time_s`` (interpolation schemes in
ltsim.lookup and ltsim.collectives); lookups outside the tables are recorded as warnings
(``warnings()``, ``take_warnings()``).
"""

from __future__ import annotations

import copy
import math
import os
from itertools import groupby
from pathlib import Path
from typing import Any, Callable, TypeVar

import ltsim.profile_cache as profile_cache
from ltsim.errors import ConfigError, ProfileError
from ltsim.collectives import CollectiveLookup
from ltsim.lookup import ABOVE, BELOW, AttentionLookup, GemmLookup
from ltsim.model import DTYPES

T = TypeVar("T")
REQUIRED_TABLES = ("gemm", "attention")  # collectives.csv is optional (see collective_time_s)
# attention.csv rows of queries with earlier context (q < kv) whose ``mask`` column names a
# context-only path (a boolean mask; torch's lower-right causal bias, which runs another kernel
# than cuDNN's is_causal; the CPU flash kernel with a bottom-right mask) measure a different
# kernel from the is_causal rows on the diagonal; they are looked up as kernel
# "<kernel>+context" and never interpolated with the diagonal's.
CONTEXT_SUFFIX = "+context"
from ltsim.profile_checks import (COLLECTIVE_OPS, CONTEXT_MASKS, OP_ALIASES, TABLE_COLUMNS,
                                  check_table)
from ltsim.profile_files import (METHODS, ProfileMeta, Table, read_host_copies, read_meta,
                                 read_optional_rows, read_rows, read_table, write_meta,
                                 write_table)
from ltsim.profile_paths import PROFILES_DIR, available_profiles, resolve_profile

__all__ = ["CONTEXT_SUFFIX", "METHODS", "PROFILES_DIR", "REQUIRED_TABLES",
           "SDPA_BOOL_MASK_KERNEL", "SDPA_KERNEL", "SDPA_KERNELS", "TABLE_COLUMNS", "Profile",
           "ProfileMeta", "Table", "available_profiles", "check_table", "load_profile",
           "read_host_copies", "read_meta", "read_optional_rows", "read_rows", "read_table",
           "resolve_profile", "write_meta", "write_table"]


# attention.csv's kernel for the executor's SDPA path: one torch SDPA call per slice of a packed
# chunk, the outputs concatenated (ltsim/executor/model.py), which the memory model counts
# (memory.activation_bytes_per_token's sdpa_output_copy)
SDPA_KERNEL = "torch_sdpa"
# The same SDPA path with a boolean bottom-right mask for slices with context (what ltsim's
# executor ran up to commit 1acdf9d; its H100 development set was measured with it): torch turns
# the mask into an additive bias of the query dtype and keeps it for the backward
# (costs/buffers.py), and SDPA runs its masked kernel (attention.csv's "bool_bottom_right" rows).
SDPA_BOOL_MASK_KERNEL = "torch_sdpa_boolmask"
SDPA_KERNELS = (SDPA_KERNEL, SDPA_BOOL_MASK_KERNEL)


# ---------------------------------------------------------------------------------------------
# Loading and lookups.

_CACHE: dict[tuple[Path, str], tuple[tuple, "Profile"]] = {}  # -> (its files' stamp, profile)
_CACHE_ENTRIES = 200_000  # lookups remembered per Profile
_HOW = {ABOVE: ("above measured max", "extrapolated at constant throughput"),
        BELOW: ("below measured min", "held at the smallest measured point")}


def load_profile(directory: str | Path, *, attention_kernel: str | None = None) -> "Profile":
    """Load (and cache by resolved path and kernel) a profile. Raises ProfileError.

    The cached Profile is shared: its warnings accumulate across callers; a cost model works on
    ``for_run()``, a view with warnings of its own.
    """
    path = resolve_profile(directory)
    key = (path, attention_kernel or "")
    stamp = _stamp(path)
    found = _CACHE.get(key)
    if found is None or found[0] != stamp:  # parsed once per edit, in a process and across them
        _CACHE[key] = found = (stamp, profile_cache.cached(path, key[1], lambda: Profile(
            path, attention_kernel=attention_kernel), Profile))
    return found[1]


def _stamp(path: Path) -> tuple:
    """Name, size, modification time and inode of each file of a profile folder: what tells
    ``load_profile``'s in-process cache that a table was edited since it was parsed (a notebook
    that rewrites a profile, then simulates again), as the disk cache's digest of their bytes
    does across commands. A stat per file, not a read."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return ()
    out = []
    for name in names:
        try:
            info = os.stat(path / name)
        except OSError:
            out.append((name,))
            continue
        out.append((name, info.st_size, info.st_mtime_ns, info.st_ino))
    return tuple(out)


def _least(*sizes: float, lookup: str) -> float:
    """The least of a lookup's sizes, each checked finite first (a NaN was an IndexError inside
    the lookup, inf a finite time, -inf 0 s; numpy numbers alike). Raises ValueError."""
    for size in sizes:
        if not math.isfinite(size):
            raise ValueError(f"the {lookup} lookup needs finite sizes (got {size})")
    return min(sizes)


def _attention_lookups(attention: Table
                       ) -> tuple[AttentionLookup, dict[str, AttentionLookup], frozenset[str]]:
    """The lookup of all the rows, one per dtype the rows name when they name several (each
    with the rows of no dtype; a table of one dtype has one lookup, keyed ""), and those dtypes.
    The profiler times each model's dtype (llama-tiny in fp32 beside Qwen in bf16); one lookup of
    both combined their rows (the slower won)."""
    columns = ("kernel", "pass", "causal", "head_dim", "num_heads", "q_tokens", "kv_tokens",
               "time_s")
    rows = list(attention.rows(*columns))
    whole = AttentionLookup(_monotone_attention(rows))
    cells = attention["dtype"] if "dtype" in attention.columns else [None] * len(attention)
    dtypes = frozenset(d for d in cells if d)
    if len(dtypes) < 2:
        return whole, {"": whole}, dtypes
    return whole, {d: AttentionLookup(_monotone_attention(
        [row for row, cell in zip(rows, cells) if cell in (d, None, "")])) for d in sorted(dtypes)
    }, dtypes


def stand_in(dtype: str, dtypes: tuple[str, ...]) -> str:
    """``dtype`` if a table has it, else the 16-bit type that stands in for it ("" if none)."""
    return dtype if dtype in dtypes else {"bf16": "fp16", "fp16": "bf16"}.get(dtype, "")


def _backward_gemms(directory: Path, quantum: int) -> dict[str, GemmLookup] | None:
    """gemm_bwd.csv's dgrad and wgrad rows, each keyed by its forward GEMM's (m=T, n=N, k=K)."""
    table = read_optional_rows(directory, "gemm_bwd")
    if table is None:
        return None
    parts = {"dgrad": ("dtype", "m", "k", "n", "time_s"),  # dX[T,K] = dY[T,N] W[N,K]
             "wgrad": ("dtype", "k", "m", "n", "time_s")}  # dW[N,K] = dY^T[N,T] X[T,K]
    lookups = {}
    for part, columns in parts.items():
        rows = table.where(**{"pass": part})
        if not len(rows):
            return None
        lookups[part] = GemmLookup(rows.rows(*columns), quantum=quantum)
    return lookups


class Profile:
    """Cost tables of one device: GEMM, attention and collective times in seconds.

    Lookups interpolate in log-log space (see ``ltsim.lookup`` for the schemes and their
    extrapolation rules) and record every lookup outside the tabulated range as a warning.
    """

    __slots__ = ("path", "meta", "attention_kernel", "_gemm", "_gemm_bwd", "_attention",
                 "_collectives", "_cache", "_range_notes", "_text_notes", "_recorders", "tables",
                 "host_copies", "attention_dtypes", "_attention_by", "_attention_for")

    def __init__(self, directory: str | Path, *, attention_kernel: str | None = None) -> None:
        self.path = Path(directory)
        self.meta = read_meta(self.path)
        gemm = read_rows(self.path, "gemm")
        attention = read_rows(self.path, "attention")
        collectives = read_optional_rows(self.path, "collectives")
        quantum = self.meta.tables.get("gemm", {}).get("m_quantum", 0)
        if isinstance(quantum, bool) or not isinstance(quantum, int) or not 0 <= quantum <= 2**20:
            raise ProfileError(f"{self.path / 'meta.json'}: tables.gemm.m_quantum must be a "
                               "non-negative integer of at most 1,048,576 (GEMM rows per tile "
                               "plateau; 0 for none). Fix: correct it or remove the key")
        self._gemm = GemmLookup(gemm.rows("dtype", "m", "n", "k", "time_s"), quantum=quantum)
        self._gemm_bwd = _backward_gemms(self.path, quantum)
        self.host_copies = read_host_copies(self.path)
        kernel = (attention["kernel"] if "kernel" in attention.columns
                  else ["default"] * len(attention))
        if "mask" in attention.columns:  # a masked kernel for slices with context is its own table
            kernel = [f"{k}{CONTEXT_SUFFIX}" if str(m) in CONTEXT_MASKS else k
                      for k, m in zip(kernel, attention["mask"])]
        attention = attention.with_column("kernel", kernel).with_column(
            "causal", [_as_bool(c) for c in attention["causal"]])
        self._attention, self._attention_by, self.attention_dtypes = _attention_lookups(attention)
        self._attention_for: dict[str, tuple[AttentionLookup, str]] = {}  # a dtype -> its lookup
        self._collectives = None if collectives is None else CollectiveLookup(
            collectives.rows("op", "group_size", "scope", "bytes", "time_s"))
        kernels = tuple(k for k in self._attention.kernels if not k.endswith(CONTEXT_SUFFIX))
        if not kernels:
            raise ProfileError(f"{self.path}: table 'attention' has no rows of attention without "
                               "context (every row's mask reads earlier K/V). Fix: re-run the "
                               "profiler for attention")
        default = self.meta.tables.get("attention", {}).get("default_kernel", kernels[0])
        if not isinstance(default, str) or default not in kernels:  # never a silent other kernel
            raise ProfileError(f"{self.path / 'meta.json'}: tables.attention.default_kernel must "
                               f"name one of the kernels attention.csv holds ({', '.join(kernels)})"
                               ". Fix: name one of them, or remove the key (the first is then "
                               "the default)")
        self.attention_kernel = attention_kernel or default
        if self.attention_kernel not in kernels:
            raise ConfigError("hardware.attention_kernel", f"one of {', '.join(kernels)}, the "
                              f"kernels profile {self.path} measured", self.attention_kernel,
                              f"set hardware.attention_kernel = {kernels[0]}, or profile that "
                              "kernel into the profile")
        self._cache: dict[tuple, tuple[float, tuple]] = {}
        self._range_notes: dict[tuple[str, str, float, int], float] = {}
        self._text_notes: set[str] = set()
        self._recorders: list[list] = []  # noted(): the notes of what is being computed
        self.tables = object()  # these tables' identity, shared by every for_run() view

    @property
    def memory_bytes(self) -> int:
        return int(self.meta.memory_bytes)

    def __repr__(self) -> str:
        return f"Profile({str(self.path)!r}, device={self.meta.device!r})"

    # -- lookups ------------------------------------------------------------------------------
    def gemm_time_s(self, m: int, n: int, k: int, dtype: str = "bf16") -> float:
        """Seconds for C[m,n] = A[m,k] @ B[k,n]. Non-decreasing in m. Raises ProfileError for a
        dtype the table lacks (bf16 and fp16 stand in for each other)."""
        if _least(m, n, k, lookup="gemm") <= 0:
            return 0.0
        dtypes = self._gemm.dtypes
        use = stand_in(dtype, dtypes)
        if use not in dtypes:
            known = [d for d in dtypes if d in DTYPES]  # (a cell is not quoted: file content)
            has = f"has {', '.join(known)}" if known else f"none of {', '.join(DTYPES)}"
            raise ProfileError(f"{self.path}: gemm.csv has no rows for dtype {dtype!r} ({has}). "
                               "Fix: profile that dtype or change model.dtype")
        return self._cached(("gemm", m, n, k, use),
                            lambda notes: self._gemm.time_s(m, n, k, use, notes))

    def best_large_gemm_flops_per_s(self, dtype: str) -> float:
        """``best_gemm_flops_per_s`` over the rows of at least lookup.LARGE_GEMM_FLOPS (0 without
        such rows)."""
        return self._gemm.best_large_flops_per_s.get(stand_in(dtype, self._gemm.dtypes), 0.0)

    def best_gemm_flops_per_s(self, dtype: str) -> float:
        """The most FLOP/s a gemm.csv row of ``dtype`` (or its stand-in) measured; 0 without."""
        return self._gemm.best_flops_per_s.get(stand_in(dtype, self._gemm.dtypes), 0.0)

    def gemm_backward_time_s(self, m: int, n: int, k: int, dtype: str = "bf16"
                             ) -> tuple[float, float] | None:
        """(dgrad, wgrad) seconds of the backward of the forward GEMM Y[m,n] = X[m,k] W^T, from
        gemm_bwd.csv; None when the profile has no such table (or no rows of the dtype)."""
        if self._gemm_bwd is None or _least(m, n, k, lookup="gemm_bwd") <= 0:
            return None
        dgrad, wgrad = self._gemm_bwd["dgrad"], self._gemm_bwd["wgrad"]
        use = stand_in(dtype, dgrad.dtypes)
        if use not in dgrad.dtypes or use not in wgrad.dtypes:
            return None
        return self._cached(("gemm_bwd", m, n, k, use), lambda notes: (  # type: ignore[return-value]
            dgrad.time_s(m, n, k, use, notes), wgrad.time_s(m, n, k, use, notes)))

    def _attention_lookup(self, dtype: str) -> tuple[AttentionLookup, str]:
        """The lookup ``attention_time_s`` reads for ``dtype`` and its key in the cache (once
        per dtype: every attention price asks): the rows of the dtype or its 16-bit stand-in,
        else the first dtype's; all rows ("*") when those lack the kernel."""
        use = stand_in(dtype, tuple(self._attention_by))
        lookup = self._attention_by.get(use) or self._attention_by[min(self._attention_by)]
        if self.attention_kernel not in lookup.kernels:
            lookup, use = self._attention, "*"
        self._attention_for[dtype] = lookup, use
        return lookup, use

    def attention_time_s(self, q_tokens: int, kv_tokens: int, *, num_heads: int, num_kv_heads: int,
                         head_dim: int, causal: bool = True, pass_: str = "fwd",
                         dtype: str = "") -> float:
        """Seconds of one attention kernel pass (``pass_`` "fwd" or "bwd") over one sequence slice:
        q_tokens queries against kv_tokens keys (context plus the slice itself), at the packed
        (varlen) throughput of the tables. num_kv_heads does not change the time (GQA). Of a
        table of several dtypes, the rows of ``dtype`` (or its 16-bit stand-in; else the first
        dtype's) with those of no dtype."""
        if pass_ not in ("fwd", "bwd"):
            raise ValueError(f"pass_ must be 'fwd' or 'bwd' (got {pass_!r})")
        if _least(q_tokens, kv_tokens, num_heads, head_dim, lookup="attention") <= 0:
            return 0.0
        kernel = self.attention_kernel
        lookup, use = self._attention_for.get(dtype) or self._attention_lookup(dtype)
        if use == "*":  # timed in another dtype only: its rows of every dtype
            self.note(f"attention.csv has no {kernel} rows of {dtype or 'the model dtype'}: "
                      "that kernel's rows of the other dtypes are read")
        key = ("attention", q_tokens, kv_tokens, num_heads, head_dim, bool(causal), pass_, use)
        if kv_tokens > q_tokens and kernel + CONTEXT_SUFFIX in lookup.kernels:
            kernel += CONTEXT_SUFFIX  # queries with earlier context ran the masked kernel
        return self._cached(key, lambda notes: lookup.time_s(
            q_tokens, kv_tokens, num_heads=num_heads, head_dim=head_dim, causal=bool(causal),
            pass_=pass_, kernel=kernel, notes=notes))

    def collective_time_s(self, op: str, *, group_size: int, scope: str, num_bytes: int) -> float:
        """Seconds of one collective over ``group_size`` ranks (scope "intra" or "inter" node);
        ``num_bytes`` is the full buffer (nccl-tests size). 0 for one rank or no bytes."""
        name = OP_ALIASES.get(op, op)
        if name not in COLLECTIVE_OPS:
            raise ValueError(f"op must be one of {', '.join(COLLECTIVE_OPS)} (got {op!r})")
        if scope not in ("intra", "inter"):
            raise ValueError(f"scope must be 'intra' or 'inter' (got {scope!r})")
        if group_size <= 1 or _least(num_bytes, lookup="collective") <= 0:
            return 0.0
        if self._collectives is None:
            raise ProfileError(_no_collectives(self.path, name, group_size))
        key = ("collective", name, group_size, scope, num_bytes)
        try:
            return self._cached(key, lambda notes: self._collectives.time_s(
                name, group_size, scope, num_bytes, notes))
        except KeyError:
            raise ProfileError(f"{self.path}: collectives.csv has no {name} or all_reduce rows. "
                               "Fix: re-run the profiler with collectives") from None

    def has_collective_rows(self, op: str, scope: str) -> bool:
        """Whether collectives.csv has rows of ``op`` in ``scope`` itself (not derived)."""
        return self._collectives is not None and self._collectives.has(op, scope)

    # -- warnings -----------------------------------------------------------------------------
    def warnings(self) -> list[str]:
        """Lookups outside the tables and approximations used so far, de-duplicated, sorted."""
        out = set(self._text_notes)
        for (table, dim, bound, where), value in self._range_notes.items():
            text, how = _HOW[where]
            out.add(f"{table}: {dim}={value:g} {text} {bound:g} ({how})")
        return sorted(out)

    def note(self, text: str) -> None:
        """Report an approximation a cost model made with these tables among the warnings."""
        self._note(("text", text))

    def noted(self, fn: Callable[..., T], *args: Any) -> tuple[T, tuple]:
        """(``fn(*args)``, the notes made meanwhile, each once): a cache of values computed from
        these tables keeps them with each value and hands them to ``renote`` on every hit, so a
        warning does not depend on which caller computed a value first (``memo``, the engine's
        prices). Calls nest: an outer call also gets the notes of the inner ones."""
        notes: list[tuple] = []
        recorders = self._recorders
        recorders.append(notes)
        try:
            value = fn(*args)
        finally:
            recorders.pop()  # calls nest: this one is on top
        return value, tuple(dict.fromkeys(notes)) if notes else ()

    def renote(self, notes: tuple) -> None:
        """Make ``notes`` (from ``noted``) again: as warnings, and in any ``noted`` call open."""
        for note in notes:
            self._note(note)

    def memo(self, fn: Callable[..., T], maxsize: int) -> Callable[..., T]:
        """``fn`` memoized by its positional arguments (at most ``maxsize`` values, then begun
        anew), with the notes of each value made again on every hit."""
        cache: dict[tuple, tuple[T, tuple]] = {}

        def call(*args):
            hit = cache.get(args)
            if hit is None:
                if len(cache) >= maxsize:
                    cache.clear()
                hit = cache[args] = self.noted(fn, *args)
            elif hit[1]:
                self.renote(hit[1])
            return hit[0]

        return call

    def for_run(self) -> "Profile":
        """A view sharing this profile's tables and lookup cache, with warnings of its own: a cost
        model takes one per run, so a run reports only its own out-of-range lookups."""
        view = copy.copy(self)
        view._range_notes = {}
        view._text_notes = set()
        view._recorders = []
        return view

    def take_warnings(self) -> list[str]:
        """``warnings()``, then forget them."""
        out = self.warnings()
        self._range_notes.clear()
        self._text_notes.clear()
        return out

    def _cached(self, key: tuple, compute) -> float:
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= _CACHE_ENTRIES:  # bound memory in long sweeps
                self._cache.clear()
            notes: list[tuple] = []
            hit = (compute(notes), tuple(notes))
            self._cache[key] = hit
        for note in hit[1]:
            self._note(note)
        return hit[0]

    def _note(self, note: tuple) -> None:
        for notes in self._recorders:
            notes.append(note)
        if note[0] == "text":
            self._text_notes.add(note[1])
            return
        _, table, dim, value, bound, where = note
        key = (table, dim, float(bound), where)
        old = self._range_notes.get(key)
        if old is None or (value > old if where == ABOVE else value < old):
            self._range_notes[key] = float(value)


def _no_collectives(path: Path, op: str, group_size: int) -> str:
    """The error for a collective looked up in a profile without collectives.csv."""
    published = [name for name in available_profiles()
                 if (PROFILES_DIR / name / "collectives.csv").is_file() and name != path.name
                 and _meta_method(PROFILES_DIR / name) != "measured"]
    published.sort(key=lambda name: not name.endswith("-public"))  # built from public data only
    example = (f" such as profiles/{published[0]}" if published else "")
    return (f"profile '{path}' has no collectives.csv, so {op} over {group_size} ranks cannot be "
            "priced (it was measured where no group of 2 devices could run, e.g. on one GPU). "
            "Fix: profile on a machine with >= 2 GPUs, or copy a collectives.csv from a published "
            f"profile{example} into it and mark it in meta.json (tables.collectives: its method "
            "and source), or simulate on one device")


def _meta_method(directory: Path) -> str:
    try:
        return read_meta(directory).method
    except ProfileError:
        return ""


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _monotone_attention(rows: list[tuple]) -> list[tuple]:
    """Attention rows (kernel, pass, causal, head_dim, num_heads, q, kv, time) lifted so that more
    queries or more keys never take less time: each row's time becomes the largest time of its
    kernel group at (q' <= q, kv' <= kv). Measured launch-bound rows are noisy (cuDNN picks other
    kernels at small sizes: on the shipped H100 profile a 512-token backward measured slower than a
    2048-token one), and a lookup must stay monotone."""
    groups: dict[tuple, list[tuple]] = {}
    for row in rows:
        groups.setdefault(row[:5], []).append(row)
    out = []
    for group in groups.values():
        # By increasing q, the largest time so far at each kv in a Fenwick tree of prefix maxima
        # over kv: O(rows log kv). Comparing every pair took 610,858 steps at each profile load;
        # a running maximum over every kv per q, O(q x kv), 33 s on a 3 MiB table.
        rank = {kv: i for i, kv in enumerate(sorted({row[6] for row in group}))}
        tree = [float("-inf")] * (len(rank) + 1)
        lifted = [0.0] * len(group)
        order = sorted(range(len(group)), key=lambda i: group[i][5])
        for _, same in groupby(order, key=lambda i: group[i][5]):
            same = list(same)
            for i in same:
                k, time_s = rank[group[i][6]] + 1, group[i][7]
                while k < len(tree):
                    if tree[k] < time_s:
                        tree[k] = time_s
                    k += k & -k
            for i in same:
                k, most = rank[group[i][6]] + 1, float("-inf")
                while k:
                    if tree[k] > most:
                        most = tree[k]
                    k -= k & -k
                lifted[i] = most
        out += [(*row[:7], time_s) for row, time_s in zip(group, lifted)]
    return out
