"""Plan IR: tokens round-trip, validation errors print the grid with the bad op marked."""

from __future__ import annotations

import dataclasses

import pytest

from ltsim.errors import PlanError
from ltsim.plan import KINDS, STREAMS, Buffer, Chunk, Op, OpKind, Slice, Work, op_key, parse_token
from ltsim.strategies import get_strategy
from tests.conftest import unit_ctx


@pytest.mark.parametrize("token", ["s2F3", "s0B0", "s10R12", "s1W4", "s0SEND_F1", "s3SEND_B0",
                                   "s0COLL[dp-grad]", "s2OPT", "s1COLL3[cp-F]", "s0F2[attn]",
                                   "s0COPY4[d2h-ckpt-L0]"])
def test_token_round_trip(token):
    stage, kind, chunk, name = parse_token(token)
    assert Op(kind=kind, device=0, stage=stage, chunk=chunk, name=name).token == token


def test_bad_token_rejected():
    with pytest.raises(ValueError, match="not an op token"):
        parse_token("2F3")


def test_slice_and_chunk_kinds():
    lengths = {0: 8, 1: 2}
    assert Chunk(0, (Slice(0, 0, 8),)).kind(lengths) == "standalone"
    assert Chunk(1, (Slice(0, 4, 8),)).kind(lengths) == "dependent"
    assert Chunk(2, (Slice(0, 4, 8), Slice(1, 0, 2))).kind(lengths) == "hybrid"
    assert Slice(0, 4, 8).context_tokens == 4


def _plan():
    strategy = get_strategy("megatron-1f1b")
    return strategy.plan((4, 2, 1, 1), unit_ctx(pp=2), strategy.parse({}))


def _replace_op(plan, where, token, **changes):
    programs = []
    for prog in plan.programs:
        ops = tuple(op.evolve(**changes) if (op.device, op.token) == (where, token)
                    else op for op in prog.ops)
        programs.append(dataclasses.replace(prog, ops=ops))
    return plan.with_programs(tuple(programs))


def test_validate_missing_dependency_marks_op():
    bad = _replace_op(_plan(), 1, "s1F2", deps=(op_key(0, 0, OpKind.SEND_F, 9),))
    with pytest.raises(PlanError, match=r"depends on missing op 0:s0SEND_F9") as info:
        bad.validate()
    assert ">>s1F2<<" in str(info.value)


def test_validate_cycle_detected():
    bad = _replace_op(_plan(), 0, "s0F0", deps=(op_key(1, 1, OpKind.SEND_B, 0),))
    with pytest.raises(PlanError, match="dependency cycle"):
        bad.validate()


def test_validate_missing_backward():
    plan = _plan()
    programs = tuple(dataclasses.replace(p, ops=tuple(o for o in p.ops if o.token != "s1B3"))
                     for p in plan.programs)
    with pytest.raises(PlanError, match="chunk 3 has 0 of 14 token-layers of B on stage 1"):
        plan.with_programs(programs).validate()


@pytest.mark.parametrize("device,token,changes,message", [
    (1, "s1F2", {"chunk": 1}, r"op s1F1 appears twice on device 1"),
    (1, "s1F2", {"stage": 0}, r"op s0F2 runs on device 1, which does not hold stage 0"),
    (1, "s1F2", {"device": 0}, r"op s1F2 of device 0 is in device 1's program"),
    (1, "s1F2", {"stream": "comm"}, r"op s1F2 is in the compute program but says comm"),
    (1, "s1F2", {"work": None}, r"compute op s1F2 has no work"),
    (0, "s0SEND_F2", {"comm": None}, r"comm op s0SEND_F2 says nothing about what it moves"),
])
def test_validate_placement_names_the_op(device, token, changes, message):
    bad = _replace_op(_plan(), device, token, **changes)
    with pytest.raises(PlanError, match=message) as info:
        bad.validate()
    assert ">>" in str(info.value)


def test_validate_layers_outside_the_device():
    plan = _plan()
    op = next(o for o in plan.program(1).ops if o.token == "s1F2")
    bad = _replace_op(plan, 1, "s1F2", work=dataclasses.replace(op.work, layers=(0, 28)))
    with pytest.raises(PlanError, match=r"op s1F2 covers layers \(0, 28\), outside device 1's 14-28"):
        bad.validate()


def test_validate_leaked_buffer():
    bad = _replace_op(_plan(), 0, "s0B1", frees=())
    with pytest.raises(PlanError, match=r"buffer act:c1L0-14 on device 0 is never freed"):
        bad.validate()


def test_buffer_name():
    work = Work(chunk=3, slices=(Slice(0, 0, 8),), layers=(14, 28))
    assert Buffer("kv", work).name == "kv:c3L14-28"
    assert Buffer("ckpt", work, host=True).name == "ckpt:c3L14-28@host"


def test_every_kind_has_a_known_stream():
    assert {info.stream for info in KINDS.values()} <= set(STREAMS)
    assert {k for k, info in KINDS.items() if info.busy} == {OpKind.F, OpKind.B, OpKind.W, OpKind.R,
                                                              OpKind.OPT}
