"""Time of one comm op (ltsim.plan.Comm) from the profile's collectives table and the hardware.

Bytes per GPU, e = dtype bytes, T = the work's tokens, h hidden, kv_h the K/V width:
- "act" / "act_grad" (P2P between stages): T/cp x h x e, /tp with sequence parallelism;
- "kv" (ring CP): per layer and step, the K/V shard T/cp x 2 kv_h/min(tp, kv heads) x e (a rank
  holds at least one whole K/V head: they are replicated past the model's), one P2P per step
  (cp - 1 steps forward, twice that backward as dK/dV travel too), times the work's layers;
- "qkvo" (Ulysses): per layer, all-to-alls of Q, K, V in and the output back,
  T/cp x (2h + 2 kv_h)/tp x e, times the layers, with K/V heads replicated up to tp x cp when the
  model has fewer (ALST's rule, PAPERS.md 6.4: (s/SP)(h_q + 2 max(h_kv, SP) d) 2 B with h_q + out),
  priced as the four calls they are (``_calls``);
- "grads": the layers' trained parameters (all, or LoRA's adapters) in fp32 (Megatron's main
  gradients), reduce-scatter (ZeRO >= 1) or all-reduce; "model_grads": the same in the model dtype (``parallel.grad_dtype = "model"``);
  "params": the parameters in the model dtype, all-gather (ZeRO's gathers);
- "d2h" / "h2d" copies: the buffer's bytes (buffer_bytes of a Buffer of that kind) over the host
  link, pageable or pinned (``comm.pinned``), as the profile measured it (costs/host.py).
The group spans GPUs ``comm.gpus``: one node's GPUs -> the "intra" rows, else "inter".

An inter-node collective is never faster than its ranks' network cards allow. A group of n ranks
over N nodes has g = ceil(n / N) ranks, so g cards, per node, and a ring moves bus_factor x
bytes through every node's cards (nccl-tests' bus bandwidth; an all-to-all (n - g) / n x bytes,
what leaves the node): at least one card's point-to-point time (the profile's inter-node
send_recv rows) for 1/g of that. The tables hold one group's measurement (Skrull's Table 5: 32
ranks, 8 a node) and other sizes keep its bus bandwidth (collectives.CollectiveLookup), which a group
of one rank a node, whose traffic all goes through one card (tp = 8 and the data-parallel group
across nodes), cannot reach.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ltsim.costs.host import HostLink
from ltsim.hardware import ClusterSpec
from ltsim.memory import stage_parameters_per_gpu, trainable_parameters_per_gpu
from ltsim.model import ModelSpec
from ltsim.plan import Buffer, Comm
from ltsim.collectives import bus_factor
from ltsim.profiles import Profile
from ltsim.units import dtype_bytes

FP32_BYTES = 4


def cards_s(profile: Profile, op: str, n: int, nodes: int, nbytes: float,
            per_node: int | None = None) -> float:
    """The least time of an inter-node collective of ``n`` ranks over ``nodes`` nodes: one card's
    point-to-point time for its share of what leaves each node (module docstring), the node
    with the fewest of the ranks (``per_node``; ceil(n / nodes) when spread evenly) carrying the
    most per card; 0 when the profile has no inter-node send_recv rows."""
    if not profile.has_collective_rows("send_recv", "inter"):
        return 0.0
    per_node = per_node or -(-n // nodes)
    leaving = (n - per_node) / n if op == "all_to_all" else bus_factor(op, n)
    return profile.collective_time_s("send_recv", group_size=2, scope="inter",
                                     num_bytes=int(leaving * nbytes / per_node))


def group_spread(size: int, cluster: ClusterSpec) -> tuple[int, int]:
    """(the most nodes one group of ``size`` consecutive GPU ranks spans, the fewest of a
    group's ranks on one of its nodes), over the groups [k size, (k + 1) size): tensor-parallel
    groups, whose ranks come first in the layout's order. When ``size`` and gpus_per_node do not
    divide one another a group straddles a node boundary unevenly (tp 4 on nodes of 3: 3 + 1),
    and its node of one rank sends through one card."""
    gpn = cluster.gpus_per_node
    period = math.lcm(size, gpn) // size  # the groups repeat their placement after this many
    nodes, fewest = 1, min(size, gpn)
    for k in range(min(max(cluster.num_devices // size, 1), period)):
        low, high = k * size, (k + 1) * size - 1
        spans = high // gpn - low // gpn + 1
        if spans > 1:
            first, last = gpn - low % gpn, high % gpn + 1  # its ranks on its first and last node
            nodes, fewest = max(nodes, spans), min(fewest, first, last)
    return nodes, fewest


class CommCosts:
    def __init__(self, model: ModelSpec, cluster: ClusterSpec, profile: Profile,
                 buffer_bytes: Callable[[Buffer], int]) -> None:
        self.model, self.cluster, self.profile = model, cluster, profile
        self.buffer_bytes = buffer_bytes
        self.e = dtype_bytes(model.dtype)
        self.host = HostLink(profile.host_copies if profile is not None else {},
                             cluster.device.host_link_bytes_per_s,
                             profile.note if profile is not None else None)

    def scope(self, comm: Comm) -> str:
        gpn = self.cluster.gpus_per_node
        return "intra" if comm.gpus[0] // gpn == comm.gpus[1] // gpn else "inter"

    def nodes(self, comm: Comm) -> int:
        """How many nodes the GPUs ``comm.gpus`` span (1: intra-node)."""
        gpn = self.cluster.gpus_per_node
        return comm.gpus[1] // gpn - comm.gpus[0] // gpn + 1

    def scopes(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """What ``key`` reads of comms spanning GPUs ``low``..``high``: the nodes spanned less
        one (0: intra-node)."""
        gpn = self.cluster.gpus_per_node
        return (high // gpn - low // gpn).astype(np.int64)

    def key(self, comm: Comm) -> tuple:
        """What time_s reads: a copy its buffer's work (shape, not chunk number), any other comm its
        payload's terms and whether it stays in one node (not which GPUs)."""
        work = comm.work
        if comm.collective in ("d2h", "h2d"):
            return comm.collective, comm.tensor, work.cost_shape(), comm.steps, comm.pinned
        if comm.tensor in ("act", "act_grad"):  # the same bytes either way, from tokens alone
            return (comm.collective, "act", work.num_tokens, work.split, comm.group_size,
                    comm.steps, self.scope(comm))
        return (comm.collective, comm.tensor, work.num_tokens, work.num_layers, work.split,
                work.embed, work.head, comm.group_size, comm.steps, self.nodes(comm))

    def time_s(self, comm: Comm) -> float:
        if comm.collective in ("d2h", "h2d"):
            return self.copy_s(comm)
        nbytes, repeats = self.payload(comm)
        size = 2 if comm.collective == "send_recv" else comm.group_size
        scope = self.scope(comm)
        one = 0.0
        for part in self._calls(comm, nbytes):
            call = self.profile.collective_time_s(comm.collective, group_size=size, scope=scope,
                                                  num_bytes=int(part))
            if scope == "inter" and comm.collective != "send_recv":
                call = max(call, cards_s(self.profile, comm.collective, size, self.nodes(comm),
                                         part))
            one += call
        return repeats * one

    def _calls(self, comm: Comm, nbytes: float) -> tuple[float, ...]:
        """The bytes of each collective call one exchange makes: Ulysses' four all-to-alls
        (Q, K, V in and the output back, each its own call with its own latency: DeepSpeed's
        and ALST's layers call them one by one), else one call of every byte."""
        if comm.tensor != "qkvo":
            return (nbytes,)
        m, split = self.model, comm.work.split
        kv = max(m.num_kv_heads, split.tp * split.cp) * m.head_dim
        q = m.hidden_size / (2 * m.hidden_size + 2 * kv) * nbytes
        return q, (nbytes - 2 * q) / 2, (nbytes - 2 * q) / 2, q

    def payload(self, comm: Comm) -> tuple[float, int]:
        """(bytes of one collective call, number of calls)."""
        m, work, split = self.model, comm.work, comm.work.split
        tokens = work.num_tokens / split.cp
        if comm.tensor in ("act", "act_grad"):
            sp = split.tp if split.sp and split.tp > 1 else 1
            return tokens * m.hidden_size * self.e / sp, comm.steps
        if comm.tensor == "kv":  # K/V heads over tp, replicated past num_kv_heads (memory.py)
            width = 2 * m.kv_hidden_size / min(split.tp, m.num_kv_heads)
            return tokens * width * self.e, comm.steps * work.num_layers
        if comm.tensor == "qkvo":  # K/V heads replicated up to the tp x cp ranks when fewer
            kv_hidden = max(m.num_kv_heads, split.tp * split.cp) * m.head_dim
            width = (2 * m.hidden_size + 2 * kv_hidden) / split.tp
            return tokens * width * self.e, comm.steps * work.num_layers
        if comm.tensor in ("grads", "model_grads", "params"):
            count = stage_parameters_per_gpu if comm.tensor == "params" else trainable_parameters_per_gpu
            params = count(m, split.tp, num_layers=work.num_layers, has_embedding=work.embed,
                           has_head=work.head)
            return params * (FP32_BYTES if comm.tensor == "grads" else self.e), comm.steps
        raise ValueError(f"no cost for moving tensor {comm.tensor!r} by {comm.collective}")

    def copy_s(self, comm: Comm) -> float:
        nbytes = self.buffer_bytes(Buffer(comm.tensor, comm.work))
        return comm.steps * self.host.time_s(comm.collective, nbytes, pinned=comm.pinned)
