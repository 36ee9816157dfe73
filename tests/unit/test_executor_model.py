"""Executor model and state store: attention against a naive reference, and chunked schedules
(ChunkFlow Algorithm 2, SeCO, pipeline stages) against whole-sequence training, in float64."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from ltsim.errors import ConfigError, PlanError  # noqa: E402
from ltsim.executor.model import PackedBatch, Transformer, attention, pack_chunk  # noqa: E402
from ltsim.executor.state import (StateStore, backward_chunk, forward_chunk,  # noqa: E402
                                  recompute_chunk, run_chunkflow_group, run_seco_group,
                                  run_spaco_group)
from ltsim.model import get_model  # noqa: E402

SPEC = dataclasses.replace(get_model("llama-tiny"), hidden_size=64, ffn_hidden_size=128,
                           vocab_size=256)  # 4 layers, 8 heads, 4 KV heads (GQA), head_dim 8
LONG, SHORT = 96, {1: 7, 2: 12, 3: 5}
TOL = 1e-10


def make_tokens(seed: int = 0) -> dict[int, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = {0: LONG, **SHORT}
    return {s: torch.randint(0, SPEC.vocab_size, (n,), generator=gen) for s, n in lengths.items()}


def take_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def rel_err(got: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """Max over parameters of max |got - ref| / max |ref|."""
    return max(((g - r).abs().max() / r.abs().max()).item() for g, r in zip(got, ref))


@pytest.fixture(scope="module")
def setup():
    tokens = make_tokens()
    model = Transformer(SPEC, seed=3, dtype=torch.float64)
    whole = pack_chunk([(s, 0, len(t)) for s, t in tokens.items()], tokens)
    loss = model(whole)
    loss.backward()
    return model, tokens, loss.item(), take_grads(model)


def split(seq: int, length: int, chunk_size: int) -> list[tuple[int, int, int]]:
    return [(seq, a, min(a + chunk_size, length)) for a in range(0, length, chunk_size)]


def naive_attention(q, k, v, batch: PackedBatch, past) -> torch.Tensor:
    """Dense softmax attention over all packed keys with an explicit (slice, position) mask."""
    keys, values, key_slice, key_pos = [], [], [], []
    for i, (_, start, stop) in enumerate(batch.slices):
        a, b = batch.offsets[i], batch.offsets[i + 1]
        keys += [past[i][0], k[a:b]] if past[i] is not None else [k[a:b]]
        values += [past[i][1], v[a:b]] if past[i] is not None else [v[a:b]]
        first = 0 if past[i] is not None else start
        key_slice += [i] * (stop - first)
        key_pos += list(range(first, stop))
    query_slice = torch.repeat_interleave(torch.arange(len(batch.slices)),
                                          torch.tensor(batch.offsets).diff())
    mask = (query_slice[:, None] == torch.tensor(key_slice)[None, :]) & (
        torch.tensor(key_pos)[None, :] <= batch.positions[:, None])
    rep = q.shape[1] // k.shape[1]
    k_all = torch.cat(keys).repeat_interleave(rep, dim=1)
    v_all = torch.cat(values).repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k_all) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v_all)


@pytest.mark.parametrize("backend", ["auto", "sdpa_boolmask"])
def test_sdpa_attention_matches_naive_reference(backend):
    # "sdpa_boolmask" (a boolean mask for slices with context) computes the same function
    tokens = {0: torch.zeros(40, dtype=torch.long), 1: torch.zeros(9, dtype=torch.long),
              2: torch.zeros(30, dtype=torch.long)}
    batch = pack_chunk([(0, 24, 40), (1, 0, 9), (2, 10, 13)], tokens)  # past, none, past
    gen = torch.Generator().manual_seed(1)
    shape = lambda n, h: torch.randn(n, h, 8, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k, v = shape(batch.num_tokens, 8), shape(batch.num_tokens, 2), shape(batch.num_tokens, 2)
    past = [(shape(24, 2), shape(24, 2)), None, (shape(10, 2), shape(10, 2))]
    leaves = [q, k, v] + [t for p in past if p is not None for t in p]
    results = []
    for fn in (lambda *a: attention(*a, backend), naive_attention):
        for t in leaves:
            t.grad = None
            t.requires_grad_()
        out = fn(q, k, v, batch, past)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        results.append([out.detach()] + [t.grad.clone() for t in leaves])
    assert rel_err(results[0], results[1]) < TOL


@pytest.mark.parametrize("chunk_size,k", [(16, 1), (16, 2), (32, 1), (32, 3), (96, 1), (16, 6)])
def test_chunkflow_matches_whole_sequence(setup, chunk_size, k):
    model, tokens, ref_loss, ref_grads = setup
    dependent = [pack_chunk([s], tokens) for s in split(0, LONG, chunk_size)]
    loss = run_chunkflow_group(model, dependent, k)
    packed = pack_chunk([(s, 0, n) for s, n in SHORT.items()], tokens)
    loss += run_chunkflow_group(model, [packed], k)
    assert abs(loss - ref_loss) / abs(ref_loss) < TOL
    assert rel_err(take_grads(model), ref_grads) < TOL


def test_seco_matches_whole_sequence(setup):
    model, tokens, ref_loss, ref_grads = setup
    store = StateStore()
    loss = run_seco_group(model, [pack_chunk([s], tokens) for s in split(0, LONG, 24)], store)
    assert len(store) == 0 and store.nbytes == 0  # every entry released after its backward
    for s, n in SHORT.items():
        loss += run_seco_group(model, [pack_chunk([(s, 0, n)], tokens)])
    assert abs(loss - ref_loss) / abs(ref_loss) < TOL
    assert rel_err(take_grads(model), ref_grads) < TOL


def _spaco_expectation(model, batches, weights, loss_scale, kv_scale):
    """Exact expectation of SpaCO's gradient: sum over index sets I of P(I) x gradient(I)."""
    total = None
    for selected, weight in weights:
        run_spaco_group(model, batches, set(selected), loss_scale=loss_scale, kv_scale=kv_scale)
        grads = [(torch.zeros_like(p) if p.grad is None else p.grad.clone()) * weight
                 for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
    return total


@pytest.fixture(scope="module")
def spaco_case():
    """One sequence of k = 4 chunks, t = 2; the reference is whole-sequence training of it."""
    tokens = make_tokens()
    model = Transformer(SPEC, seed=3, dtype=torch.float64)
    model(pack_chunk([(0, 0, LONG)], tokens)).backward()
    return model, [pack_chunk([s], tokens) for s in split(0, LONG, 24)], take_grads(model)


def test_spaco_bernoulli_compensated_gradient_is_exactly_unbiased(spaco_case):
    """Each chunk selected with p = t/k independently: every path through p relays survives with
    probability (t/k)^(p+1), which loss x k/t and k/t per relay undo exactly (all 16 sets)."""
    import itertools

    model, batches, ref = spaco_case
    k, p = 4, 0.5
    weights = [(tuple(i for i in range(k) if bits[i]), p ** sum(bits) * (1 - p) ** (k - sum(bits)))
               for bits in itertools.product((0, 1), repeat=k)]
    assert rel_err(_spaco_expectation(model, batches, weights, 1 / p, 1 / p), ref) < TOL
    capped = _spaco_expectation(model, batches, weights, 1 / p, 1.5)  # a cap below k/t biases it
    assert rel_err(capped, ref) > 1e-3


def test_spaco_fixed_t_factor_is_approximate_for_paths_through_relays(spaco_case):
    """Algorithm 2 as printed (exactly t = 2 of 4, each set 1/6): the direct terms are unbiased but
    a path through one relay survives with probability t(t-1)/(k(k-1)) = 1/6, not (t/k)^2 = 1/4,
    so k/t per relay gives it 2/3 of its weight (documented in strategies/spaco.py)."""
    import itertools

    model, batches, ref = spaco_case
    weights = [(pair, 1 / 6) for pair in itertools.combinations(range(4), 2)]
    fixed = _spaco_expectation(model, batches, weights, 2.0, 2.0)
    assert rel_err(fixed, ref) > 1e-3
    # with no chunk before it to relay to, the last chunk alone is exact: t = k = 1 per sequence
    single = _spaco_expectation(model, batches, [((0, 1, 2, 3), 1.0)], 1.0, 1.0)
    assert rel_err(single, ref) < TOL


def test_hybrid_chunks_match_whole_sequence(setup):
    """A long sequence's tail slice packed with short sequences (ChunkFlow's hybrid chunk)."""
    model, tokens, ref_loss, ref_grads = setup
    chunks = [[(0, 0, 40)], [(0, 40, 80)], [(0, 80, 96), (1, 0, 7), (2, 0, 12), (3, 0, 5)]]
    loss = run_chunkflow_group(model, [pack_chunk(c, tokens) for c in chunks], 1)
    assert abs(loss - ref_loss) / abs(ref_loss) < TOL
    assert rel_err(take_grads(model), ref_grads) < TOL


def test_packed_short_sequences_match_one_by_one():
    tokens = make_tokens(seed=5)
    model = Transformer(SPEC, seed=1, dtype=torch.float64)
    packed = model(pack_chunk([(s, 0, n) for s, n in SHORT.items()], tokens))
    packed.backward()
    ref = take_grads(model)
    single = 0.0
    for s, n in SHORT.items():
        loss = model(pack_chunk([(s, 0, n)], tokens))
        loss.backward()
        single += loss.item()
    assert abs(packed.item() - single) / abs(single) < TOL
    assert rel_err(take_grads(model), ref) < TOL


def test_pipeline_stages_match_whole_model(setup):
    """Two stages with their own stores: hidden forward, output grad backward, K=1 recompute."""
    model, tokens, ref_loss, ref_grads = setup
    stages = [Transformer(SPEC, layers=(0, 2), seed=3, dtype=torch.float64),
              Transformer(SPEC, layers=(2, 4), seed=3, dtype=torch.float64)]
    params = [p for stage in stages for p in stage.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters()))
    assert not stages[0].has_head and stages[1].has_head and not stages[1].has_embedding
    stores = [StateStore(), StateStore()]
    chunks = [pack_chunk([s], tokens) for s in split(0, LONG, 32)]
    chunks.append(pack_chunk([(s, 0, n) for s, n in SHORT.items()], tokens))
    handles = []
    for i, batch in enumerate(chunks):  # keep only the last dependent chunk and the standalone one
        keep = i >= 2
        first = forward_chunk(stages[0], batch, stores[0], keep_graph=keep, chunk_id=i)
        handles.append((first, forward_chunk(stages[1], batch, stores[1], keep_graph=keep,
                                             chunk_id=i, hidden=first.output)))
    for first, last in reversed(handles):
        for stage, handle, store in ((stages[1], last, stores[1]), (stages[0], first, stores[0])):
            if not handle.has_graph:
                recompute_chunk(stage, handle, store)
        grad = backward_chunk(last, stores[1])
        assert backward_chunk(first, stores[0], output_grad=grad) is None
    loss = sum(last.loss for _, last in handles)
    assert abs(loss - ref_loss) / abs(ref_loss) < TOL
    grads = [p.grad for p in params]
    for stage in stages:
        stage.zero_grad(set_to_none=True)
    assert rel_err(grads, ref_grads) < TOL


def test_gpt_arch_chunkflow_matches_whole_sequence():
    spec = dataclasses.replace(SPEC, name="gpt-tiny", arch="gpt", num_kv_heads=8,
                               max_position_embeddings=128)
    tokens = make_tokens(seed=2)
    model = Transformer(spec, seed=0, dtype=torch.float64)
    whole = model(pack_chunk([(0, 0, LONG)], tokens))
    whole.backward()
    ref = take_grads(model)
    loss = run_chunkflow_group(model, [pack_chunk([s], tokens) for s in split(0, LONG, 32)], 1)
    assert abs(loss - whole.item()) / abs(whole.item()) < TOL
    assert rel_err(take_grads(model), ref) < TOL


def test_backward_out_of_order_raises(setup):
    model, tokens, _, _ = setup
    store = StateStore()
    handles = [forward_chunk(model, pack_chunk([s], tokens), store) for s in split(0, 48, 16)]
    with pytest.raises(PlanError, match=r"ran backward before chunks \[1, 2\] that read its K/V"):
        backward_chunk(handles[0], store)
    with pytest.raises(PlanError, match="needs K/V of seq 0 tokens \\[0, 32\\)"):
        forward_chunk(model, pack_chunk([(0, 32, 48)], tokens), StateStore())
    discarded = forward_chunk(model, pack_chunk([(1, 0, 7)], tokens), store, keep_graph=False)
    with pytest.raises(PlanError, match="has no graph"):
        backward_chunk(discarded, store)
    recompute_chunk(model, discarded, store)
    with pytest.raises(PlanError, match="only after a discarding forward"):
        recompute_chunk(model, discarded, store)
    model.zero_grad(set_to_none=True)


def test_input_errors():
    tokens = make_tokens()
    model = Transformer(SPEC, dtype=torch.float64)
    with pytest.raises(ConfigError, match="'chunk.slice.start' must be 0 without a state store"):
        model(pack_chunk([(0, 16, 32)], tokens))
    with pytest.raises(ConfigError, match="'chunk' must be at most one slice per sequence"):
        pack_chunk([(0, 0, 16), (0, 16, 32)], tokens)
    with pytest.raises(ConfigError, match="'executor.layers' must be a range"):
        Transformer(SPEC, layers=(2, 9))
    with pytest.raises(ConfigError, match="'strategy.k' must be an integer >= 1"):
        run_chunkflow_group(model, [], 0)


def test_deterministic_init_and_dtype():
    a, b = Transformer(SPEC, seed=7), Transformer(SPEC, seed=7)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert next(a.parameters()).dtype == torch.float32  # llama-tiny's dtype is fp32
    c = Transformer(SPEC, seed=8, dtype=torch.float64)
    assert next(c.parameters()).dtype == torch.float64
    assert not torch.equal(a.embed.weight, c.embed.weight.float())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flash_path_matches_sdpa_on_gpu():
    pytest.importorskip("flash_attn")
    tokens = {s: t.cuda() for s, t in make_tokens().items()}
    results = []
    for backend in ("flash", "sdpa"):
        model = Transformer(SPEC, seed=0, dtype=torch.bfloat16, attention_backend=backend).cuda()
        chunks = [[s] for s in split(0, LONG, 32)] + [[(s, 0, n) for s, n in SHORT.items()]]
        loss = run_chunkflow_group(model, [pack_chunk(c, tokens) for c in chunks[:3]], 1)
        loss += run_chunkflow_group(model, [pack_chunk(chunks[3], tokens)], 1)
        results.append((loss, [p.grad.float() for p in model.parameters()]))
    assert abs(results[0][0] - results[1][0]) / abs(results[1][0]) < 1e-2
    assert rel_err(results[0][1], results[1][1]) < 5e-2


def _context_case(device: str, dtype: torch.dtype, kv_heads: int):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 24, 16, generator=gen).to(device, dtype).requires_grad_()
    k = torch.randn(1, kv_heads, 64, 16, generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn(1, kv_heads, 64, 16, generator=gen).to(device, dtype).requires_grad_()
    return q, k, v


def _masked_reference(q, k, v):
    rep = q.shape[1] // k.shape[1]
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(
        k.shape[2] - q.shape[2])
    wide = torch.promote_types(q.dtype, torch.float32)  # the reference in fp32 or fp64
    return torch.nn.functional.scaled_dot_product_attention(
        q.to(wide), k.to(wide).repeat_interleave(rep, 1), v.to(wide).repeat_interleave(rep, 1),
        attn_mask=mask)


@pytest.mark.parametrize("device,dtype,tol", [
    ("cpu", torch.float64, 1e-10),
    pytest.param("cuda", torch.float32, 1e-4, marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA")]),
    pytest.param("cuda", torch.bfloat16, 3e-2, marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA")])])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_context_attention_is_bottom_right_causal_with_its_gradients(device, dtype, tol,
                                                                      kv_heads):
    from ltsim.executor.kernels import context_attention
    q, k, v = _context_case(device, dtype, kv_heads)
    out = context_attention(q, k, v)
    ref = _masked_reference(q, k, v)
    grad = torch.ones_like(ref)
    got = torch.autograd.grad(out.to(ref.dtype), (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    assert rel_err([out.to(ref.dtype)], [ref]) < tol
    assert rel_err([g.to(ref.dtype) for g in got], [g.to(ref.dtype) for g in want]) < tol


@pytest.mark.parametrize("slices", [((0, 0, 256),), ((0, 0, 160), (1, 0, 96))])
def test_a_layer_keeps_what_the_memory_model_counts_for_the_sdpa_path(slices) -> None:
    # the executor's layer, counted by the saved-tensor hooks memory.csv uses: ltsim.memory's
    # activations plus the concatenated attention output the SDPA path keeps (table costs charge
    # it for the torch_sdpa kernel), less nothing but two fp32 norm statistics and int64 positions
    from ltsim.memory import activation_bytes_per_token, attention_output_copy_bytes_per_token
    from ltsim.parallel import ParallelConfig
    from ltsim.profiler.activations import saved_bytes

    spec = get_model("llama-tiny")
    model = Transformer(spec, layers=(1, 2), attention_backend="sdpa")
    block = model.blocks[0]
    gen = torch.Generator().manual_seed(0)
    batch = pack_chunk(slices, {s: torch.randint(0, spec.vocab_size, (257,), generator=gen)
                                for s in (0, 1)})
    x = torch.randn(batch.num_tokens, spec.hidden_size, requires_grad=True)
    kept = saved_bytes(lambda h: block(h, batch, None), x, list(block.parameters()))
    per_token = (activation_bytes_per_token(spec, ParallelConfig(), num_layers=1, recompute="none")
                 + attention_output_copy_bytes_per_token(spec, ParallelConfig()))
    assert kept / batch.num_tokens - per_token == 2 * 4 + 8
