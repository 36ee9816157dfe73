"""TableCostModel: op-local queries, monotone in tokens and context, consistent buffers, static
memory from the device alone, per-run warnings, errors for bad profiles."""

from __future__ import annotations

import json

import pytest

from ltsim.cli import main
from ltsim.costs.table import TableCostModel
from ltsim.errors import ConfigError, ProfileError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.plan import Buffer, Comm, Device, Keep, OpKind, Slice, Split, Work

CONFIGS = [("qwen2.5-7b", "h100-sxm5-80gb", Split(tp=4)),
           ("qwen2.5-14b", "a100-sxm4-80gb", Split(tp=8, cp=2)),
           ("llama-3.1-8b", "h200", Split(tp=2, cp=4, cp_kind="ulysses")),
           ("gpt-13b", "h100-sxm5-80gb", Split(tp=4))]


def _model(name, device):
    cluster = ClusterSpec(device=get_device(device), num_nodes=4, gpus_per_node=8)
    return TableCostModel(get_model(name), cluster)


def _work(tokens, split, layers=(0, 4), context=0, head=False):
    return Work(chunk=0, slices=(Slice(0, context, context + tokens),), layers=layers, split=split,
                head=head)


@pytest.mark.parametrize("name,device,split", CONFIGS)
@pytest.mark.parametrize("kind", [OpKind.F, OpKind.B, OpKind.R])
def test_more_tokens_never_cost_less(name, device, split, kind):
    cost = _model(name, device)
    previous = 0.0
    for tokens in (1, 7, 64, 500, 2048, 8192, 32768, 131072, 262144):
        value = cost.compute_s(kind, _work(tokens, split, head=True))
        assert value >= previous, (tokens, value, previous)
        previous = value


@pytest.mark.parametrize("name,device,split", CONFIGS)
def test_context_costs_more_and_backward_costs_more(name, device, split):
    cost = _model(name, device)
    fresh, later = _work(8192, split), _work(8192, split, context=65536)
    assert cost.compute_s(OpKind.F, later) > cost.compute_s(OpKind.F, fresh)
    assert cost.compute_s(OpKind.B, fresh) > 1.5 * cost.compute_s(OpKind.F, fresh)


def test_a_slice_with_context_and_a_layer_range_is_priced_without_a_plan():
    """Capability (e): the planner's query face. Parts add up; layers scale it linearly."""
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb")
    split = Split(tp=4, cp=2)
    two = _work(4096, split, layers=(0, 2), context=28672)
    six = _work(4096, split, layers=(0, 6), context=28672)
    whole = cost.compute_s(OpKind.F, two)
    assert whole == pytest.approx(cost.compute_s(OpKind.F, two, part="attn")
                                  + cost.compute_s(OpKind.F, two, part="dense"))
    assert cost.compute_s(OpKind.F, six) == pytest.approx(3 * whole)
    ring = Comm("send_recv", "kv", two, group_size=2, gpus=(0, 7), steps=1)
    assert cost.comm_s(ring) > 0
    assert cost.buffer_bytes(Buffer("act", six)) == pytest.approx(
        3 * cost.buffer_bytes(Buffer("act", two)), rel=1e-6)


def test_buffers_scale_with_tokens_and_kv_is_smaller_than_activations():
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb")
    small, big = _work(1000, Split(tp=4)), _work(4000, Split(tp=4))
    for kind in ("act", "ckpt", "input", "kv", "kv_grad"):
        a, b = cost.buffer_bytes(Buffer(kind, small)), cost.buffer_bytes(Buffer(kind, big))
        assert b == pytest.approx(4 * a, rel=1e-3)
    assert cost.buffer_bytes(Buffer("kv", big)) < cost.buffer_bytes(Buffer("act", big)) / 10
    assert (cost.buffer_bytes(Buffer("act", big, Keep.SELECTIVE))
            <= cost.buffer_bytes(Buffer("act", big, Keep.ALL)))


def _by_kernel(spec, field: str, kernels: tuple[str, ...], gpus: int = 8) -> dict:
    """A cost model of ``spec`` on H100s for each value of the ClusterSpec ``field``."""
    return {kernel: TableCostModel(spec, ClusterSpec(device=get_device("h100-sxm5-80gb"),
                                                     gpus_per_node=gpus, **{field: kernel}))
            for kernel in kernels}


def test_the_sdpa_kernel_keeps_the_attention_output_twice_and_flash_once():
    # the executor's SDPA path concatenates the slices' outputs; fa2's varlen call does not
    spec = get_model("llama-2-7b")
    costs = _by_kernel(spec, "attention_kernel", ("torch_sdpa", "fa2"))
    work = _work(1000, Split(tp=2), layers=(0, 4))
    copy = 4 * 1000 * 2 * spec.num_attention_heads * spec.head_dim / 2  # layers, tokens, bf16, tp
    for keep in (Keep.ALL, Keep.SELECTIVE):
        sdpa, fa2 = (costs[k].buffer_bytes(Buffer("act", work, keep)) for k in ("torch_sdpa", "fa2"))
        assert sdpa - fa2 == copy
    assert (costs["torch_sdpa"].buffer_bytes(Buffer("ckpt", work))
            == costs["fa2"].buffer_bytes(Buffer("ckpt", work)))


def test_the_boolean_mask_kernel_prices_context_slices_apart_and_keeps_their_mask_bias():
    # torch_sdpa_boolmask (the executor up to 1acdf9d): the same SDPA call on the diagonal; with
    # context, the boolean-mask rows measured on 2026-11-22 and a model-dtype bias of q x kv per
    # layer kept for the backward
    spec = get_model("llama-2-7b")
    costs = _by_kernel(spec, "attention_kernel", ("torch_sdpa", "torch_sdpa_boolmask"), gpus=1)
    plain, masked = costs["torch_sdpa"], costs["torch_sdpa_boolmask"]
    whole, later = _work(4096, Split()), _work(4096, Split(), context=12288)
    for kind in (OpKind.F, OpKind.B):
        assert masked.compute_s(kind, whole) == plain.compute_s(kind, whole)
        assert masked.compute_s(kind, later) > 1.1 * plain.compute_s(kind, later)
    for keep in (Keep.ALL, Keep.SELECTIVE):
        assert (masked.buffer_bytes(Buffer("act", whole, keep))
                == plain.buffer_bytes(Buffer("act", whole, keep)))
        assert (masked.buffer_bytes(Buffer("act", later, keep))
                - plain.buffer_bytes(Buffer("act", later, keep))) == 4 * 2 * 4096 * 16384
    assert masked.buffer_bytes(Buffer("ckpt", later)) == plain.buffer_bytes(Buffer("ckpt", later))


def test_zero_shards_static_memory_and_limit_leaves_allocator_allowance():
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb")

    def device(shards):
        return Device(index=0, stage=0, replica=0, layers=(0, 28), embed=True, head=True, tp=4,
                      zero_stage=1, num_shards=shards)

    assert cost.static_memory_bytes(device(8)) < 0.5 * cost.static_memory_bytes(device(1))
    assert cost.memory_limit_bytes < 80 * 2**30 - 2**30


def test_warnings_belong_to_one_run():
    """A run reports only its own out-of-range lookups, not an earlier run's."""
    first, second = _model("qwen2.5-7b", "h100-sxm5-80gb"), _model("qwen2.5-7b", "h100-sxm5-80gb")
    first.compute_s(OpKind.F, _work(1_200_000, Split()))
    assert first.warnings()
    second.compute_s(OpKind.F, _work(4096, Split()))
    assert second.warnings() == []


def test_unknown_profile_is_a_clear_error(tmp_path, capsys, repo):
    with pytest.raises(ProfileError, match="unknown profile 'no-such-gpu'"):
        TableCostModel(get_model("qwen2.5-7b"),
                       ClusterSpec(device=get_device("h100-sxm5-80gb"), profile="no-such-gpu"))
    scenario = repo / "scenarios" / "quickstart.toml"
    assert main(["simulate", str(scenario), "--set", 'hardware.profile="no-such-gpu"']) == 2
    err = capsys.readouterr().err
    assert "hardware.profile" in err and "no-such-gpu" in err and "Traceback" not in err


@pytest.mark.parametrize("preset, profile, kind", [("h100-sxm5-80gb", "cpu-ci", "a GPU"),
                                                   ("cpu", "h100-sxm5-80gb", "a CPU")])
def test_a_profile_of_the_other_kind_of_device_is_refused(preset, profile, kind):
    # a CPU's times against an H100 preset's peak FLOP/s read MFU 0.02% without a word
    with pytest.raises(ConfigError, match=rf"'hardware.profile' must be a profile measured on {kind}"):
        TableCostModel(get_model("llama-tiny"), ClusterSpec(device=get_device(preset),
                                                            profile=profile,
                                                            attention_kernel="torch_sdpa"))


@pytest.mark.parametrize("preset, profile, noted", [("h100-sxm5-80gb", "rtx-3090", True),
                                                    ("h100-sxm5-80gb", "a800-40gb", True),
                                                    ("a100-sxm4-80gb", "rtx-3090", True),
                                                    ("a100-sxm4-80gb", "a800-40gb", True),
                                                    ("rtx-3090", "rtx-3090", False),
                                                    ("h200", "h200", False),
                                                    ("a800-40gb", "a800-40gb", False)])
def test_a_profile_of_another_gpu_is_noted(preset, profile, noted):
    """A fuzzing review: the RTX 3090's times under the H100 preset (its memory limit, its peak
    for MFU) ran without a word."""
    cost = TableCostModel(get_model("qwen2.5-7b"), ClusterSpec(device=get_device(preset),
                                                               profile=profile))
    assert any("measured on another GPU" in w for w in cost.warnings()) == noted


def test_backward_gemms_come_from_the_measured_dgrad_and_wgrad_rows() -> None:
    import pandas as pd

    from ltsim.profiles import load_profile
    profile = load_profile("h100-sxm5-80gb")
    rows = pd.read_csv(profile.path / "gemm_bwd.csv")
    dgrad = rows[(rows["pass"] == "dgrad") & (rows["op"] == "llama-2-7b/tp1/qkv.dgrad")
                 & (rows["m"] == 4096)].iloc[0]
    wgrad = rows[(rows["pass"] == "wgrad") & (rows["op"] == "llama-2-7b/tp1/qkv.wgrad")
                 & (rows["k"] == 4096)].iloc[0]
    # the forward Y[T, N] = X[T, K] W^T with T = 4096 tokens, N = 3 x 4096 (Q, K, V), K = 4096
    assert (dgrad["m"], dgrad["n"], dgrad["k"]) == (4096, 4096, 12288)
    assert (wgrad["m"], wgrad["n"], wgrad["k"]) == (12288, 4096, 4096)
    assert profile.gemm_backward_time_s(4096, 12288, 4096) == pytest.approx(
        (dgrad["time_s"], wgrad["time_s"]))


def test_model_dtype_gradients_pay_their_accumulation_in_every_backward() -> None:
    from ltsim.memory import trainable_parameters_per_gpu
    spec = get_model("llama-2-7b")
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), gpus_per_node=1)
    fp32 = TableCostModel(spec, cluster, grad_dtype="fp32")
    model = TableCostModel(spec, cluster, grad_dtype="model")
    work = _work(8192, Split(), layers=(1, 5))
    params = trainable_parameters_per_gpu(spec, 1, num_layers=4, has_embedding=False,
                                          has_head=False)
    expected = 3 * params * 2 / cluster.device.hbm_bytes_per_s  # read both, write one, bf16
    assert 1.3e-3 < expected < 1.7e-3  # 1.69 ms measured on the H100 (gpu_notes.md, item 12)
    assert model.compute_s(OpKind.B, work) - fp32.compute_s(OpKind.B, work) == pytest.approx(expected)
    assert model.compute_s(OpKind.F, work) == fp32.compute_s(OpKind.F, work)


def test_comms_with_equal_keys_take_equal_time_and_the_key_tells_nodes_apart():
    """The engine prices once per comm_key: sends between other GPUs of one node share a price,
    a send across nodes does not."""
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb")
    split = Split(tp=4)
    work = _work(4096, split, layers=(0, 7))
    moved = _work(4096, split, layers=(7, 14))  # other layers, same count: the same tensor size
    sends = [Comm("send_recv", "act", w, group_size=2, gpus=gpus)
             for w, gpus in ((work, (0, 4)), (moved, (1, 5)), (work, (4, 8)))]
    assert cost.comm_key(sends[0]) == cost.comm_key(sends[1])
    assert cost.comm_s(sends[0]) == cost.comm_s(sends[1])
    assert cost.comm_key(sends[2]) != cost.comm_key(sends[0])  # GPUs 4 and 8: two nodes
    assert cost.comm_s(sends[2]) > cost.comm_s(sends[0])
    # an activation and a gradient of the same tokens are the same bytes, whatever the layers
    # (so one price serves the sends of every stage boundary); other tokens are not
    last = _work(4096, split, layers=(21, 28), head=True)
    grads = [Comm("send_recv", "act_grad", w, group_size=2, gpus=(2, 6)) for w in (last, work)]
    for grad in grads:
        assert cost.comm_key(grad) == cost.comm_key(sends[0])
        assert cost.comm_s(grad) == cost.comm_s(sends[0])
    longer = Comm("send_recv", "act", _work(4097, split), group_size=2, gpus=(0, 4))
    assert cost.comm_key(longer) != cost.comm_key(sends[0])
    assert cost.comm_s(longer) > cost.comm_s(sends[0])


def test_the_ring_exchange_moves_the_kv_heads_a_rank_holds():
    """tp past the K/V heads replicates them (the memory model's rule): qwen2.5-1.5b has 2, so at
    tp 4 each rank holds and exchanges one whole head, not half of one (a probe found 2x too few
    bytes)."""
    cost = _model("qwen2.5-1.5b", "h100-sxm5-80gb")
    m = cost.model
    for tp, heads in ((1, 2), (2, 1), (4, 1), (8, 1)):
        work = _work(8192, Split(tp=tp, cp=2), layers=(0, 1))
        nbytes, calls = cost._comm.payload(Comm("send_recv", "kv", work, group_size=2,
                                                gpus=(0, 1), steps=1))
        assert calls == 1
        assert nbytes == 8192 / 2 * 2 * heads * m.head_dim * 2  # T/cp tokens, K and V, bf16


def test_an_inter_node_collective_is_no_faster_than_its_ranks_network_cards():
    # the H100 tables' inter-node collectives are Skrull's 32 ranks, 8 a node (about 172 GB/s
    # bus bandwidth); rescaled to two ranks, one a node, they read 6 ms for a 1 GiB all-reduce,
    # which the one card each rank has moves in 30 ms (the profile's own inter-node send_recv).
    # A group is priced at least one card's time for its share of what leaves each node
    spec = get_model("qwen2.5-7b")
    cost = TableCostModel(spec, ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=4,
                                            gpus_per_node=8))
    profile = cost._comm.profile
    params = Work(chunk=0, slices=(), layers=(0, spec.num_layers), split=Split(tp=8))
    nbytes, _ = cost._comm.payload(Comm("all_reduce", "grads", params, group_size=2))

    def comm_s(op, n, gpus):
        return cost.comm_s(Comm(op, "grads", params, group_size=n, gpus=gpus))

    def card_s(moved):
        return profile.collective_time_s("send_recv", group_size=2, scope="inter",
                                         num_bytes=int(moved))

    table = profile.collective_time_s("all_reduce", group_size=2, scope="inter",
                                      num_bytes=int(nbytes))
    one_a_node = comm_s("all_reduce", 2, (0, 15))  # tp 8: a rank on each of two nodes
    assert one_a_node == pytest.approx(card_s(nbytes)) and one_a_node > 3 * table
    four = comm_s("reduce_scatter", 4, (0, 15))  # two a node: each card carries 3/4 x B / 2
    assert four == pytest.approx(card_s(0.75 * nbytes / 2))
    everyone = comm_s("all_reduce", 32, (0, 31))  # Skrull's own group: its rows stand
    assert everyone == pytest.approx(profile.collective_time_s(
        "all_reduce", group_size=32, scope="inter", num_bytes=int(nbytes)))
    assert everyone > card_s(2 * 31 / 32 * nbytes / 8)
    # the price key tells the spans apart (one node, two, four)
    keys = {cost.comm_key(Comm("all_reduce", "grads", params, group_size=n, gpus=gpus))
            for n, gpus in ((8, (0, 7)), (2, (0, 15)), (4, (0, 31)))}
    assert len(keys) == 3


@pytest.mark.parametrize("gpus_per_node,nodes,fewest", [(8, 1, 4), (1, 4, 1), (2, 2, 2),
                                                        (6, 2, 2), (3, 2, 1)])
def test_a_tensor_parallel_layer_collective_is_no_faster_than_its_ranks_cards(gpus_per_node,
                                                                             nodes, fewest):
    # tp = 4: one node of 8 reads the intra-node rows; a group across nodes the inter-node
    # rows, floored by the cards as the other collectives are (a review: 4 ranks on 4 nodes
    # read 0.341 ms for a 58.7 MB all-gather, which one card each moves in 1.333 ms). With 6 or
    # 3 GPUs a node some group of 4 consecutive ranks straddles two nodes unevenly (2 + 2 at
    # ranks 4-7 of 6 a node; 3 + 1 at ranks 0-3 of 3 a node), and its node of the fewest ranks
    # has the fewest cards for its traffic (a commit review: 3 + 1 was priced as 2 + 2, 0.696
    # ms against 1.333)
    from ltsim.costs.comm import cards_s, group_spread

    spec = get_model("qwen2.5-7b")
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=12 // gpus_per_node
                          if gpus_per_node in (6, 3) else 8 // gpus_per_node,
                          gpus_per_node=gpus_per_node)
    assert group_spread(4, cluster) == (nodes, fewest)
    cost = TableCostModel(spec, cluster)
    compute = cost._compute
    profile = compute.profile
    tokens = 8192
    nbytes = tokens * spec.hidden_size * 2
    comm = compute._layer_s(tokens, 4, True)[3]
    scope = "intra" if nodes == 1 else "inter"

    def call(op):
        table = profile.collective_time_s(op, group_size=4, scope=scope, num_bytes=nbytes)
        return table if nodes == 1 else max(table, cards_s(profile, op, 4, nodes, nbytes, fewest))

    assert comm == pytest.approx(2 * (call("all_gather") + call("reduce_scatter")))
    if nodes > 1:  # the cards bind
        assert cards_s(profile, "all_gather", 4, nodes, nbytes, fewest) > (
            profile.collective_time_s("all_gather", group_size=4, scope="inter", num_bytes=nbytes))
    if gpus_per_node == 3:  # one card carries the one-rank node's share: as 1 a node
        assert cards_s(profile, "all_gather", 4, nodes, nbytes, fewest) == pytest.approx(
            cards_s(profile, "all_gather", 4, 4, nbytes))
    straddles = [w for w in cost.warnings() if "do not divide one another" in w]
    assert bool(straddles) == (gpus_per_node in (6, 3))


def test_ulysses_makes_four_all_to_alls_a_layer_each_with_its_latency():
    # DeepSpeed's and ALST's Ulysses layers call all-to-all for Q, K and V and the output back,
    # one by one: four latencies a layer, not one (a review: at 8K tokens over 32 layers one
    # call of every byte read 2.2 ms against 3.6)
    spec = get_model("llama-3.1-8b")
    cost = TableCostModel(spec, ClusterSpec(device=get_device("h100-sxm5-80gb"), gpus_per_node=8))
    profile = cost._comm.profile
    work = _work(8192, Split(cp=8, cp_kind="ulysses"), layers=(0, 32))
    comm = Comm("all_to_all", "qkvo", work, group_size=8, gpus=(0, 7))
    nbytes, calls = cost._comm.payload(comm)
    q = 8192 / 8 * spec.hidden_size * 2  # bf16 Q (and output) of the rank's tokens
    kv = (nbytes - 2 * q) / 2  # K and V heads, replicated up to the 8 ranks
    assert kv == 8192 / 8 * max(spec.num_kv_heads, 8) * spec.head_dim * 2

    def one(size):
        return profile.collective_time_s("all_to_all", group_size=8, scope="intra",
                                         num_bytes=int(size))

    assert calls == 32
    assert cost.comm_s(comm) == pytest.approx(calls * (2 * one(q) + 2 * one(kv)))
    assert cost.comm_s(comm) > 1.5 * calls * one(nbytes)  # latency-bound at this size


def test_ring_cp_keeps_a_slices_context_on_every_rank():
    # keys rounded to blocks alone, 15,231 queries after 1 token of context made blocks of 7,616
    # and 7,616 at cp 2: priced as a slice without context, half the time of 15,230 queries
    # (a review); each rank's context is rounded up instead
    spec = get_model("qwen2.5-7b")
    cost = TableCostModel(spec, ClusterSpec(device=get_device("h100-sxm5-80gb"), gpus_per_node=8))
    split = Split(cp=2)
    times = [cost._compute._kernels_s(OpKind.B, _work(q, split, layers=(0, 1), context=1), "attn")
             for q in (15229, 15230, 15231, 15232)]
    assert times == sorted(times) and times[-1] < 1.01 * times[0]


def test_the_fused_loss_keeps_model_dtype_logits_and_writes_one_gradient():
    # flash-attn's CrossEntropyLoss (v1.0.3, llm-foundry's MPT default) saves its bf16 input
    # logits and the fp32 log-sum-exp, and returns the logits' gradient in bf16: 2 + 2 B per
    # entry at the backward's peak, against torch's 4 kept + 8 transient
    spec = get_model("llama-2-7b")
    costs = _by_kernel(spec, "loss_kernel", ("torch", "fused"))
    torch_loss, fused = costs["torch"], costs["fused"]
    tokens, tp, vocab = 1000, 2, spec.vocab_size
    head = _work(tokens, Split(tp=tp), layers=(30, 32), head=True)
    entries = tokens * vocab / tp
    kept = (torch_loss.buffer_bytes(Buffer("act", head))
            - fused.buffer_bytes(Buffer("act", head)))
    assert kept == pytest.approx(entries * (4 - 2) - tokens * 4, abs=1)  # fp32 logits, LSE
    assert fused.working_bytes(OpKind.F, head) == torch_loss.working_bytes(
        OpKind.F, _work(tokens, Split(tp=tp), layers=(30, 32)))  # only the layers' working set
    assert fused.working_bytes(OpKind.B, head) == int(entries * 2)
    assert torch_loss.working_bytes(OpKind.B, head) == int(entries * 8)
    # time: the loss reads 2 B per logit in forward, reads and writes 2 + 2 in backward, against
    # 12 B a pass on fp32 (enough tokens that the kernels, not the eager floor, set the time)
    hbm, tokens = get_device("h100-sxm5-80gb").hbm_bytes_per_s, 32768
    head = _work(tokens, Split(tp=tp), layers=(30, 32), head=True)
    for kind, moved in ((OpKind.F, 2), (OpKind.B, 4)):
        saved = torch_loss.compute_s(kind, head) - fused.compute_s(kind, head)
        assert saved == pytest.approx(tokens * vocab / tp * (12 - moved) / hbm, rel=1e-6)
    body = _work(tokens, Split(tp=tp), layers=(30, 32))  # no head: the kernels are alike
    assert fused.compute_s(OpKind.B, body) == torch_loss.compute_s(OpKind.B, body)


@pytest.mark.parametrize("loss_kernel", ["torch", "fused"])
def test_full_recompute_runs_the_loss_backward_before_it_rebuilds_a_layer(loss_kernel):
    # Megatron's full recompute on the head stage: the backward runs the loss first, then
    # rebuilds and backwards the layers one at a time, so the peak above static is every
    # layer's input, the embedding input and kept logits, and the larger of the loss's
    # backward and (one layer's activations + its gradients). ltsim had held that layer's
    # activations beside the loss: 1.3 GB (7.8%) too much at 8K tokens (a closed-form review)
    import ltsim.memory as mem
    from ltsim.parallel import ParallelConfig
    from ltsim.sim.engine import Engine
    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import PlanContext

    spec, tokens = get_model("qwen2.5-7b"), 8192
    cost = _by_kernel(spec, "loss_kernel", (loss_kernel,), gpus=1)[loss_kernel]
    par = ParallelConfig(recompute="full")
    megatron = get_strategy("megatron-1f1b")
    plan = megatron.plan((tokens,), PlanContext(model=spec, parallel=par, cost=cost),
                         megatron.parse({}))
    trace = Engine(cost).run(plan)
    inputs = mem.activation_bytes_per_token(spec, par, num_layers=spec.num_layers,
                                            recompute="full")
    kept = (mem.embedding_bytes_per_token(spec, par)
            + mem.logits_bytes_per_token(spec, par, loss_kernel=loss_kernel))
    layer = (mem.activation_bytes_per_token(spec, par, num_layers=1, recompute="none")
             + mem.backward_working_bytes_per_token(spec, par))
    loss = mem.loss_working_bytes_per_token(spec, par, backward=True, loss_kernel=loss_kernel)
    expected = tokens * (inputs + kept + max(layer, loss))
    assert trace.peak_memory_bytes()[0] - trace.static_bytes[0] == pytest.approx(expected, abs=64)


def test_a_preset_with_other_widths_takes_no_whole_op_times_of_its_namesake():
    # cpu-ci's whole-op rows timed llama-tiny; llama-tiny with a 256K vocabulary kept the name,
    # and its residual (the measured time less this shape's kernels) cancelled most of the LM
    # head: MFU 5.7 (a fuzzer). It is priced as a custom model of that shape is
    from dataclasses import replace

    cluster = ClusterSpec(device=get_device("cpu"), gpus_per_node=1)
    wide = get_model("llama-tiny", vocab_size=256_000)
    costs = [TableCostModel(m, cluster) for m in (wide, replace(wide, name="custom"))]
    head = Work(chunk=0, slices=(Slice(0, 0, 1472),), layers=(0, wide.num_layers), split=Split(),
                embed=True, head=True)
    for kind in (OpKind.F, OpKind.B):
        assert costs[0].compute_s(kind, head) == pytest.approx(costs[1].compute_s(kind, head))
    assert any("timed its catalog shape" in w for w in costs[0].warnings())
    exact = TableCostModel(get_model("llama-tiny"), cluster)  # its own rows still apply
    assert not any("catalog shape" in w for w in exact.warnings())


def test_mfu_is_taken_against_at_least_what_the_profile_measured(capsys, repo):
    # the cpu preset's 0.1 TFLOP/s was below cpu-ci's own GEMMs (0.16 at one thread): a
    # one-layer model, its LM head most of the work, read MFU 1.13 (a fuzzer). The cpu preset
    # has no peak of its own; a GPU preset keeps its datasheet peak, above what its profile
    # measured
    from ltsim.profiles import load_profile

    cpu = TableCostModel(get_model("llama-tiny"), ClusterSpec(device=get_device("cpu"),
                                                              gpus_per_node=1))
    assert cpu.peak_flops_per_s == load_profile("cpu-ci").best_gemm_flops_per_s("fp32") > 0.1e12
    h100 = get_device("h100-sxm5-80gb")
    gpu = TableCostModel(get_model("llama-2-7b"), ClusterSpec(device=h100, gpus_per_node=8))
    assert gpu.peak_flops_per_s == h100.peak_flops_per_s
    assert gpu.profile.best_gemm_flops_per_s("bf16") < h100.peak_flops_per_s
    assert main(["simulate", str(repo / "scenarios/seco/cpu-llama-tiny-seco.toml"), "--set",
                 'strategy.name="seq1f1b"', "--set", 'model.preset="llama-small"', "--set",
                 "model.num_layers=1", "--set", "workload.lengths=[4096, 4096]", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["mfu"] < 1
    # and InfiniPipe's capacity probe (a million tokens, memory only) leaves no lookup warnings
    assert not [w for w in result["warnings"] if "1.04858e+06" in w]


def test_a_gpt_position_table_keeps_its_catalog_shape():
    """maxlen grows a GPT's learned position table with the length; a profile's per-layer
    whole-op rows of that GPT still apply (a review: the whole model was compared)."""
    import dataclasses

    from ltsim.costs.eager import _catalog_shape
    from ltsim.model import CATALOG

    gpt = CATALOG["gpt-7b"]
    assert _catalog_shape(dataclasses.replace(gpt, max_position_embeddings=1 << 20))
    assert not _catalog_shape(dataclasses.replace(gpt, hidden_size=4224))


def test_gemm_times_a_thousand_times_slow_are_said(tmp_path):
    """A fuzzing review: gemm.csv in milliseconds read as seconds ran at 0.15% MFU without a
    word (such rows are too slow, not too fast, for the 10 PFLOP/s check). The largest GEMMs
    of a GPU profile run near its preset's peak (the bundled ones at 80-92%); below 2% is
    said."""
    import shutil

    from ltsim.profiles import PROFILES_DIR, read_table

    spec = get_model("qwen2.5-7b")
    device = get_device("h100-sxm5-80gb")

    def notes(profile):
        cost = TableCostModel(spec, ClusterSpec(device=device, profile=str(profile)))
        return [w for w in cost.warnings() if "large GEMMs reach at most" in w]

    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    assert not notes(directory)
    frame = read_table(directory, "gemm")
    frame["time_s"] = frame["time_s"] * 1000
    frame.to_csv(directory / "gemm.csv", index=False)
    (note,) = notes(directory)
    assert "0.08% of the h100-sxm5-80gb preset's peak" in note
