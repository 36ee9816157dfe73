"""Text tables and JSON for results, comparisons and sweeps (what the CLI prints)."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from ltsim.units import NO_LIMIT_BYTES, fmt_bytes, fmt_seconds


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _unit_time(x: float) -> str:
    return f"{x:,.6g} units"


def _unit_memory(x: float) -> str:
    return f"{x:,.0f} tokens"


def _formats(rows: Sequence[dict[str, Any]]) -> tuple[Any, Any]:
    """How times and memory print: seconds and bytes, or, for the ``unit`` preset (unit_costs:
    the seed papers' figures), units of work and tokens of activation."""
    if rows and all(r.get("unit_costs") for r in rows):
        return _unit_time, _unit_memory
    return fmt_seconds, fmt_bytes


def format_result(d: dict[str, Any]) -> str:
    """A short human-readable summary of one Result.to_dict()."""
    time, memory = _formats([d])
    unit = d.get("unit_costs")
    lines = [
        f"scenario        {d['scenario']}",
        f"strategy        {d['strategy']} {_options(d['strategy_options'])}",
        f"batches         {d['num_batches']} on {d['num_gpus']} GPUs"
        + (" (unit preset: time in units of work, memory in tokens of activation)" if unit else ""),
        f"iteration time  {time(d['iteration_time_s'])} (p50 "
        f"{time(d['iteration_time_s_p50'])}, p95 {time(d['iteration_time_s_p95'])})",
        f"bubble ratio    {_fmt_pct(d['bubble_ratio'])}",
        f"recompute       {_fmt_pct(d['recompute_ratio'])} of busy time",
        f"peak memory     {memory(d['peak_memory_bytes'])} per GPU "
        f"(limit {_limit(d['memory_limit_bytes'], memory)}): "
        f"{'fits' if d['fits'] else 'DOES NOT FIT'}",
        f"static memory   {memory(d['static_memory_bytes'])} per GPU (weights, gradients, "
        "optimizer state; the rest grows with tokens)",
        f"throughput      {_rate(d['tokens_per_s'])} tokens/{'unit' if unit else 's'}",
        f"MFU             {_fmt_pct(d['mfu'])}",
    ]
    if not d["fits"]:
        lines.append(f"                {d['fit_reason']}")
    for warning in d["warnings"][:10]:
        lines.append(f"warning: {warning}")
    if len(d["warnings"]) > 10:
        lines.append(f"warning: ... and {len(d['warnings']) - 10} more (see --json)")
    return "\n".join(lines)


def _limit(num_bytes: int, memory=fmt_bytes) -> str:
    return "none" if num_bytes >= NO_LIMIT_BYTES else memory(num_bytes)


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.4g}"


def _options(options: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")" if options else ""


def _one_line(text: str) -> str:
    """A cell on one line: a newline or control character (a sweep's grid value for a key it
    then refuses) escaped, as Python writes it in a string."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, Any]]) -> str:
    """Align ``rows`` under ``columns`` = (key, header, formatter)."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append([_one_line(fmt(row.get(key))) if row.get(key) is not None else "-"
                      for key, _, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


COMPARE_COLUMNS = (
    ("label", "strategy", str),
    ("iteration_time_s", "iter time", fmt_seconds),
    ("speedup", "speedup", lambda x: f"{x:.2f}x"),
    ("bubble_ratio", "bubble", _fmt_pct),
    ("recompute_ratio", "recompute", _fmt_pct),
    ("peak_memory_bytes", "peak mem", fmt_bytes),
    ("static_memory_bytes", "static mem", fmt_bytes),
    ("fits", "fits", lambda x: "yes" if x else "NO"),
    ("mfu", "MFU", _fmt_pct),
    ("tokens_per_s", "tokens/s", _rate),
)


def compare_rows(results: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Attach a label and the speedup over the first result (tokens per second, ltsim.sim.metrics
    .speedup) to each result dict."""
    from ltsim.sim.metrics import speedup

    return [{**d, "label": label, "speedup": speedup(results[0][1], d)} for label, d in results]


def _with_units(columns: Sequence[tuple[str, str, Any]], rows: Sequence[dict[str, Any]]) -> list:
    """``columns`` with the time and memory formatters the rows call for (_formats)."""
    time, memory = _formats(rows)
    if time is fmt_seconds:
        return list(columns)
    swap = {fmt_seconds: time, fmt_bytes: memory}
    return [(k, "tokens/unit" if k == "tokens_per_s" else h, swap.get(f, f)) for k, h, f in columns]


_COMPARE_WARNINGS = 3  # per strategy under compare's table (simulate prints ten)


def _warning_lines(where: str, warnings: Sequence[str]) -> list[str]:
    """A few of a run's warnings under a table of several (compare, maxlen), the rest counted."""
    lines = [f"warning: {where}: {w}" for w in warnings[:_COMPARE_WARNINGS]]
    if len(warnings) > _COMPARE_WARNINGS:
        lines.append(f"warning: {where}: ... and {len(warnings) - _COMPARE_WARNINGS} more "
                     "(see --json)")
    return lines


def format_compare(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    rows = compare_rows(results)
    lines = [format_table(rows, _with_units(COMPARE_COLUMNS, rows))]
    base_time = results[0][1].get("iteration_time_s") or 0.0
    for row in rows:  # what the table cannot say (a new user's pass, 2026-11-29)
        time, speedup = row.get("iteration_time_s") or 0.0, row.get("speedup") or 0.0
        if base_time and time and speedup and abs(speedup * time / base_time - 1) > 0.01:
            lines.append(f"note: {row['label']}: speedup is tokens/s over the first row's; its "
                         "batches are its own (not the first row's), so its iteration time is "
                         "not comparable")
        if row.get("fits") is False and row.get("fit_reason"):
            lines.append(f"note: {row['label']} does not fit: {row['fit_reason']}")
    for label, d in results:  # what simulate would print under each result, a few per strategy
        lines += _warning_lines(label, d.get("warnings", []))
    return "\n".join(lines)


def to_json(data: Any) -> str:
    """``--json`` output: strict JSON (RFC 8259 has no NaN or Infinity, which Python writes and
    jq, JavaScript and most parsers refuse), so a number that is not finite is null: an
    unbounded option (SpaCO's ``cap = inf``), a metric a rejected sweep point has none of."""
    return json.dumps(_finite(data), indent=2, sort_keys=False, default=str, allow_nan=False)


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def format_sweep(rows: Sequence[dict[str, Any]], keys: Sequence[str], *, top: int = 20) -> str:
    """The ranked sweep: grid values, time, speedup over the slowest fitting plan, memory, fits."""
    fitting = [r for r in rows if r.get("fits") and "error" not in r]
    worst = max((r["iteration_time_s"] for r in fitting), default=0.0)
    fit_ids = {id(r) for r in fitting}  # "-" for plans that do not fit
    shown = [{**r, "speedup": worst / r["iteration_time_s"]
              if r.get("iteration_time_s") and id(r) in fit_ids else None}
             for r in rows[:top]]
    columns = [(k, k.split(".")[-1], str) for k in keys] + [
        c for c in COMPARE_COLUMNS if c[0] not in ("label", "recompute_ratio")]
    columns = [(k, "vs slowest" if k == "speedup" else h, f) for k, h, f in columns]
    text = format_table(shown, _with_units(columns, fitting or rows))
    errors = [r for r in rows if "error" in r]
    text += f"\n{len(rows)} plans, {len(fitting)} fit"
    if errors:
        text += f", {len(errors)} rejected (first: {errors[0]['error']})"
    return text


def format_maxlen(scenario: str, answers: Sequence[Any]) -> str:
    """``ltsim maxlen``: per strategy the longest fitting sequence, its time per token, its peak and
    the largest terms there, and what stops the next step."""
    rows = []
    dicts = [a.to_dict() for a in answers]
    time, memory = _formats(dicts)
    for answer, d in zip(answers, dicts):
        # the device's terms (what "binds" names), host memory after them, apart
        host = d["terms_bytes"].get("host", 0)
        terms = sorted(((k, v) for k, v in d["terms_bytes"].items() if k != "host"),
                       key=lambda kv: -kv[1])
        d["top_terms"] = ", ".join(f"{k} {memory(v)}" for k, v in terms[:3] if v) + (
            f"; host {memory(host)}" if host else "")
        d["label"] = answer.strategy + (" " + _options(answer.options) if answer.options else "")
        rows.append(d)
    columns = (("label", "strategy", str), ("max_length", "max length", lambda x: f"{x:,}"),
               ("time_per_token_s", "time/token", time),
               ("iteration_time_s", "iter time", time),
               ("peak_memory_bytes", "peak mem", memory), ("binds", "binds", str),
               ("grows", "grows most", str),
               ("top_terms", "largest terms at max", str))
    what = ("its workload cut at workload.max_length (longer sequences truncated; every sampled "
            "batch must fit)"
            if answers[0].mode == "workload" else "one sequence per DP replica")
    lines = [f"scenario {scenario}: {what}, lengths in steps of {answers[0].step:,} tokens",
             format_table(rows, columns)]
    for d in rows:
        if d["next_length"] is not None:
            lines.append(f"{d['label']}: {d['next_length']:,} tokens do not fit: {d['next_reason']}")
    lines += [f"{d['label']}: {d['note']}" for d in rows if d.get("note")]
    for d in rows:  # the run at the answer's, as simulate would print them (a review: dropped)
        lines += _warning_lines(f"{d['label']} at {d['max_length']:,}", d.get("warnings", []))
    return "\n".join(lines)
