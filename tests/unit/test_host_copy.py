"""Copies between device and host memory (costs/host.py, host_copy.csv): the lookup against its
closed forms, the table's checks, and which rows ALST's synchronous and asynchronous offloads read."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from ltsim.costs.host import HostLink
from ltsim.costs.table import TableCostModel
from ltsim.errors import ProfileError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.plan import OpKind
from ltsim.profiles import read_host_copies, read_rows
from ltsim.strategies import get_strategy
from ltsim.strategies.base import PlanContext

H100 = Path("profiles/h100-sxm5-80gb")
MIB = 2**20
HEADER = "direction,host_memory,bytes,time_s\n"


def _write(directory: Path, rows: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "host_copy.csv").write_text(HEADER + rows)
    return directory


def test_lookup_is_exact_at_measured_sizes_linear_between_and_at_the_end_bandwidth_beyond(tmp_path):
    # (repeats of a size within 1.5x of each other: further apart the table is refused)
    _write(tmp_path, "d2h,pageable,16777216,0.01\nd2h,pageable,67108864,0.03\n"
                     "d2h,pageable,67108864,0.04\nh2d,pinned,16777216,0.001\n")
    link = HostLink(read_host_copies(tmp_path), 1e9)
    assert link.time_s("d2h", 16 * MIB, pinned=False) == 0.01
    assert link.time_s("d2h", 64 * MIB, pinned=False) == pytest.approx(0.035)  # the median
    assert link.time_s("d2h", 40 * MIB, pinned=False) == pytest.approx(0.01 + 0.025 * 24 / 48)
    assert link.time_s("d2h", 256 * MIB, pinned=False) == pytest.approx(0.035 * 4)
    assert link.time_s("d2h", 4 * MIB, pinned=False) == pytest.approx(0.01 / 4)
    assert link.time_s("h2d", 32 * MIB, pinned=True) == pytest.approx(0.002)
    # a pair the table lacks takes the preset's bandwidth
    assert not link.measured("h2d", pinned=False)
    assert link.time_s("h2d", 1e9, pinned=False) == pytest.approx(1.0)
    assert HostLink({}, 2e9).time_s("d2h", 1e9, pinned=True) == pytest.approx(0.5)
    no_table = HostLink(read_host_copies(tmp_path / "elsewhere"), 2e9)  # a profile without it
    assert no_table.time_s("h2d", 1e9, pinned=False) == pytest.approx(0.5)
    assert link.time_s("d2h", 0, pinned=False) == 0.0


def test_a_copy_priced_outside_the_measured_rows_says_so_once_per_kind(tmp_path):
    """As the other tables' lookups outside their ranges do: below the smallest measured size (no
    fixed latency), above the largest, and a pair the table lacks (the preset's link)."""
    _write(tmp_path, "d2h,pageable,16777216,0.01\nd2h,pageable,67108864,0.03\n")
    notes = []
    link = HostLink(read_host_copies(tmp_path), 2e9, notes.append)
    link.time_s("d2h", 32 * MIB, pinned=False)
    assert notes == []
    for size in (4 * MIB, 1 * MIB, 128 * MIB, 256 * MIB):
        link.time_s("d2h", size, pinned=False)
    link.time_s("h2d", 1e9, pinned=True)
    assert sorted(set(notes)) == [
        "host_copy: d2h (pageable) copies above the measured max 64 MiB priced at its bandwidth",
        "host_copy: d2h (pageable) copies below the measured min 16 MiB priced at its bandwidth, "
        "without a fixed latency",
        "host_copy: no measured h2d copies through pinned memory; priced at the hardware preset's "
        "host link, 2 GB/s"]


@pytest.mark.parametrize("row, rule", [
    ("up,pageable,1024,0.1", "column 'direction' must hold one of d2h, h2d"),
    ("d2h,locked,1024,0.1", "column 'host_memory' must hold one of pageable, pinned"),
    ("d2h,pinned,0,0.1", "column 'bytes' must hold whole numbers of at least 1"),
    ("d2h,pinned,1024,-1", "time_s values that are not numbers of seconds from 1e-09"),
])
def test_a_bad_host_copy_row_is_refused_by_its_rule(tmp_path, row, rule):
    _write(tmp_path, row + "\n")
    with pytest.raises(ProfileError, match=rule):
        read_rows(tmp_path, "host_copy")


def test_the_shipped_h100_profile_measured_both_kinds_of_host_memory():
    link = HostLink(read_host_copies(H100), 1.0)
    for direction in ("d2h", "h2d"):
        for pinned in (False, True):
            assert link.measured(direction, pinned=pinned)
        # pinned copies run near the link's bandwidth; pageable ones, through the driver's
        # staging buffers, slower (validation/profiles/h100-2026-11-24/host_copy.csv)
        assert link.time_s(direction, 2**30, pinned=True) < link.time_s(direction, 2**30,
                                                                        pinned=False)


def _offload_copies(profile: Path, **options) -> tuple[dict[str, float], TableCostModel]:
    model = replace(get_model("llama-3.1-8b"), num_layers=2)
    device = replace(get_device("h100-sxm5-80gb"), profile=str(profile.resolve()))
    cost = TableCostModel(model, ClusterSpec(device=device, gpus_per_node=1))
    par = ParallelConfig(recompute="full")
    alst = get_strategy("alst")
    opts = alst.parse({"ulysses": False, "tiled_mlp": False, "tiled_loss": False,
                       "offload_checkpoints": True, **options})
    plan = alst.plan((65536,), PlanContext(model=model, parallel=par, cost=cost), opts)
    return {op.comm.collective: cost.comm_s(op.comm) for program in plan.programs
            for op in program.ops if op.kind is OpKind.COPY}, cost


def test_alst_offload_reads_pageable_rows_when_synchronous_and_pinned_when_asynchronous(tmp_path):
    profile = tmp_path / "h100"
    shutil.copytree(H100, profile)
    link = HostLink(read_host_copies(profile), 1.0)
    sync, cost = _offload_copies(profile)
    assert set(sync) == {"d2h", "h2d"}
    checkpoint = 65536 * 4096 * 2  # one layer's input, bf16
    for direction, seconds in sync.items():
        assert seconds == pytest.approx(link.time_s(direction, checkpoint, pinned=False))
    asynchronous, _ = _offload_copies(profile, offload_async=True)
    for direction, seconds in asynchronous.items():
        assert seconds == pytest.approx(link.time_s(direction, checkpoint, pinned=True))
    bare_profile = tmp_path / "h100-without-host-copies"  # the preset's link
    shutil.copytree(H100, bare_profile, ignore=shutil.ignore_patterns("host_copy.csv"))
    bare, cost = _offload_copies(bare_profile)
    assert set(bare) == {"d2h", "h2d"}
    for seconds in bare.values():
        assert seconds == pytest.approx(checkpoint / cost.cluster.device.host_link_bytes_per_s)
