"""The operator library at random configurations, against float64.

Each run draws configurations of the operators new models need, other than
block-sparse attention (test_fuzz_attention.py): N-D convolutions (groups,
strides, padding and dilation per dimension, bias, block sizes, kernels
specialized to the shapes), depthwise conv2d, patch embedding (with and
without whole patches), embedding, the paged KV gather, MoE routing with
its permute and unpermute, and DeepSeek sparse attention's indexer, top-k
and token-sparse attention. Sizes are ragged, dtypes f32, bf16 and f16
where the operator takes them, and every output the library allocates is
poisoned (NaN, bf16 NaN bits, an int32 pattern) before the launch. The
seed is printed (KILN_TEST_SEED replays a run); KILN_FUZZ_OPS sets how
many configurations a run draws.
"""
import os

import numpy as np
import pytest

import kiln
import kiln.ops
from conftest import assert_close, from_bf16_bits, to_bf16_bits

CONFIGS = int(os.environ.get("KILN_FUZZ_OPS", "10"))
BASE = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 30)))
GPU = os.environ.get("KILN_TARGET", "host") != "host"

_empty = np.empty


def poisoned_empty(shape, dtype=float, *args, **kwargs):
    """np.empty, filled with a value no operator writes: NaN, bf16 NaN bits
    (0x7FC0 in uint16 arrays), or 0x5A5A5A5A in int32."""
    a = _empty(shape, dtype, *args, **kwargs)
    if a.dtype.kind == "f":
        a.fill(np.nan)
    elif a.dtype == np.uint16:
        a.fill(0x7FC0)
    elif a.dtype.kind in "iu":
        a.fill(0x5A5A5A5A if a.dtype.itemsize >= 4 else 0x5A)
    return a


def data(r, shape, dtype):
    """(the operator's argument, its float64 values): values rounded to
    dtype, so conversions inside the kernel are exact."""
    x = r.standard_normal(shape).astype(np.float32)
    if dtype == "bf16":
        bits = to_bf16_bits(x)
        return kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    return x, x.astype(np.float64)


def values(out):
    """An output as float64 (bf16 wrappers decoded)."""
    if isinstance(out, kiln.bf16):
        return from_bf16_bits(out.array).astype(np.float64)
    return np.asarray(out, np.float64)


def conv_reference(x, w, b, stride, pad, dil, groups):
    """Grouped N-D convolution in float64: x [N, T, H, W, C], w [KT, KH, KW,
    C/groups, OC]."""
    N, C = x.shape[0], x.shape[4]
    K, OC = w.shape[:3], w.shape[4]
    xp = np.pad(x, [(0, 0)] + [(p, p) for p in pad] + [(0, 0)])
    O = [(xp.shape[1 + i] - dil[i] * (K[i] - 1) - 1) // stride[i] + 1 for i in range(3)]
    out = np.zeros((N, *O, OC)) + (0 if b is None else b)
    cg, og = C // groups, OC // groups
    for kt in range(K[0]):
        for kh in range(K[1]):
            for kw in range(K[2]):
                at = [k * d for k, d in zip((kt, kh, kw), dil)]
                patch = xp[:, at[0]:at[0] + stride[0] * (O[0] - 1) + 1:stride[0],
                           at[1]:at[1] + stride[1] * (O[1] - 1) + 1:stride[1],
                           at[2]:at[2] + stride[2] * (O[2] - 1) + 1:stride[2]]
                for g in range(groups):
                    out[..., g * og:(g + 1) * og] += (patch[..., g * cg:(g + 1) * cg] @
                                                      w[kt, kh, kw, :, g * og:(g + 1) * og])
    return out


def run_conv(r):
    dims = int(r.choice([2, 3]))   # conv2d-like (T = 1) or 3-D
    groups = int(r.choice([1, 1, 2, 3]))
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    N = int(r.integers(1, 3))
    C, OC = groups * int(r.integers(1, 9)), groups * int(r.integers(1, 9))
    K = [int(r.integers(1, 3)) if dims == 3 else 1] + [int(r.integers(1, 4)) for _ in range(2)]
    stride = [int(r.integers(1, 3)) if dims == 3 else 1] + [int(r.integers(1, 4))
                                                            for _ in range(2)]
    dil = [1 if dims == 2 else int(r.integers(1, 3))] + [int(r.integers(1, 3)) for _ in range(2)]
    pad = [int(r.integers(0, 2)) if dims == 3 else 0] + [int(r.integers(0, 3)) for _ in range(2)]
    # Spatial sizes at least the dilated kernel (every output size >= 1).
    S = [dil[i] * (K[i] - 1) + 1 - 2 * pad[i] + int(r.integers(0, 12 if i else 3))
         for i in range(3)]
    S = [max(s, 1) for s in S]
    blocks = dict(block_m=int(r.choice([16, 32, 64])), block_n=int(r.choice([16, 32, 64])),
                  block_c=int(r.choice([16, 32])))
    specialize = bool(r.random() < 0.3)
    bias = r.standard_normal(OC).astype(np.float32) if r.random() < 0.5 else None
    cfg = dict(op="conv", dims=dims, groups=groups, dtype=dtype, N=N, C=C, OC=OC, K=K,
               stride=stride, dil=dil, pad=pad, S=S, bias=bias is not None,
               specialize=specialize, **blocks)
    print(cfg)
    x, xv = data(r, (N, *S, C), dtype)
    w, wv = data(r, (*K, C // groups, OC), dtype)
    ref = conv_reference(xv, wv, bias, stride, pad, dil, groups)
    if dims == 2:
        xa = kiln.bf16(x.array[:, 0]) if dtype == "bf16" else x[:, 0]
        wa = kiln.bf16(w.array[0]) if dtype == "bf16" else w[0]
        out = kiln.ops.conv2d(xa, wa, bias, stride=tuple(stride[1:]), padding=tuple(pad[1:]),
                              dilation=tuple(dil[1:]), groups=groups, specialize=specialize,
                              **blocks)
        ref = ref[:, 0]
    else:
        out = kiln.ops.conv(x, w, bias, stride=tuple(stride), padding=tuple(pad),
                            dilation=tuple(dil), groups=groups, specialize=specialize, **blocks)
    assert out.dtype == np.float32
    assert_close(out, ref, 1e-4, 1e-4 * max(1.0, np.abs(ref).max()))


def run_depthwise(r):
    N, C = int(r.integers(1, 3)), int(r.integers(1, 70))
    K = [int(r.integers(1, 8)), int(r.integers(1, 8))]
    stride, dil = [int(r.integers(1, 3)) for _ in range(2)], [int(r.integers(1, 3))
                                                              for _ in range(2)]
    pad = [int(r.integers(0, 4)) for _ in range(2)]
    S = [max(1, dil[i] * (K[i] - 1) + 1 - 2 * pad[i] + int(r.integers(0, 15))) for i in range(2)]
    # (None: kiln.ops' defaults, which follow the image on the host.)
    blocks = dict(block_w=r.choice([None, 8, 16, 32]), block_c=r.choice([None, 16, 32, 64]))
    blocks = {k: int(v) for k, v in blocks.items() if v is not None}
    bias = r.standard_normal(C).astype(np.float32) if r.random() < 0.5 else None
    print(dict(op="depthwise_conv2d", N=N, C=C, K=K, stride=stride, dil=dil, pad=pad, S=S,
               bias=bias is not None, **blocks))
    x = r.standard_normal((N, *S, C)).astype(np.float32)
    w = r.standard_normal((*K, C)).astype(np.float32)
    out = kiln.ops.depthwise_conv2d(x, w, bias, stride=tuple(stride), padding=tuple(pad),
                                    dilation=tuple(dil), **blocks)
    # A grouped conv with one channel per group.
    ref = conv_reference(x[:, None].astype(np.float64), w[None, :, :, None, :].astype(np.float64),
                         bias, [1] + stride, [0] + pad, [1] + dil, C)[:, 0]
    assert_close(out, ref, 1e-5, 1e-5 * max(1.0, np.abs(ref).max()))


def run_patch_embed(r):
    patch, tp = int(r.choice([2, 4, 8, 14])), int(r.choice([1, 1, 2]))
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    N, C, OC = int(r.integers(1, 3)), int(r.choice([1, 3, 4])), int(r.integers(1, 40))
    whole = r.random() < 0.6   # whole patches (the wide-pixel path) or a ragged edge
    T = tp * int(r.integers(1, 3)) + (0 if whole else int(r.integers(0, tp)))
    H = patch * int(r.integers(1, 4)) + (0 if whole else int(r.integers(0, patch)))
    W = patch * int(r.integers(1, 4)) + (0 if whole else int(r.integers(1, patch)))
    bias = r.standard_normal(OC).astype(np.float32) if r.random() < 0.5 else None
    print(dict(op="patch_embed", patch=patch, tp=tp, dtype=dtype, shape=(N, T, H, W, C), OC=OC,
               bias=bias is not None))
    x, xv = data(r, (N, T, H, W, C), dtype)
    w, wv = data(r, (tp, patch, patch, C, OC), dtype)
    out = kiln.ops.patch_embed(x, w, bias, patch=patch, temporal_patch=tp)
    ref = conv_reference(xv, wv, bias, [tp, patch, patch], [0, 0, 0], [1, 1, 1], 1)
    assert_close(out, ref, 1e-4, 1e-4 * max(1.0, np.abs(ref).max()))


def with_bad_indices(r, call, count, message):
    """`call(errors)` where `count` indices are out of range: half the time
    with an `errors` word (which must get the count, nothing raised), else
    without (IndexError naming the count, the output as `e.partial`). With
    count 0, nothing is raised and the word stays 0. Returns the output."""
    if r.random() < 0.5:
        errors = np.zeros(1, np.int32)
        out = call(errors)
        assert errors[0] == count
        return out
    if not count:
        return call(None)
    with pytest.raises(IndexError, match=message(count)) as e:
        call(None)
    return e.value.partial


def run_embedding(r):
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    V, D = int(r.integers(1, 300)), int(r.integers(1, 300))
    shape = tuple(int(s) for s in r.integers(0, 9, int(r.integers(1, 3))))
    blocks = dict(block_n=int(r.choice([1, 2, 8, 16])), block_d=int(r.choice([16, 64, 1024])))
    w, wv = data(r, (V, D), dtype)
    ids = r.integers(0, V, shape).astype(r.choice([np.int32, np.int64]))
    bad = np.zeros(ids.shape, bool)
    if ids.size and r.random() < 0.4:   # ids outside [0, V): zeros, counted
        pos = r.choice(ids.size, int(r.integers(1, ids.size + 1)), replace=False)
        ids.flat[pos] = r.choice([-1, -V - 3, V, V + 100], pos.size)
        bad.flat[pos] = True
    print(dict(op="embedding", dtype=dtype, V=V, D=D, ids=shape, bad=int(bad.sum()), **blocks))
    out = with_bad_indices(r, lambda errors: kiln.ops.embedding(w, ids, errors=errors, **blocks),
                           int(bad.sum()), lambda n: rf"embedding: {n} id\(s\) outside")
    ref = np.where(bad[..., None], 0.0, wv[np.where(bad, 0, ids)])
    assert_close(values(out), ref, 0, 0)


def run_paged_kv(r):
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    B, BS, pages = int(r.integers(1, 4)), int(r.choice([1, 4, 16])), int(r.integers(1, 5))
    rest = tuple(int(s) for s in r.integers(1, 9, int(r.integers(1, 3))))
    NB = B * pages + int(r.integers(0, 4))
    lens = r.integers(0, pages * BS + 1, B).astype(np.int32)
    max_len = int(lens.max()) + int(r.integers(0, 5)) if r.random() < 0.3 else None
    blocks = dict(block_t=int(r.choice([1, 8, 16])), block_w=int(r.choice([16, 128, 1024])))
    print(dict(op="paged_kv_gather", dtype=dtype, B=B, BS=BS, pages=pages, rest=rest, NB=NB,
               lens=lens.tolist(), max_len=max_len, **blocks))
    # (The table's bad pages, if any, are drawn below.)
    cache, cv = data(r, (NB, BS) + rest, dtype)
    table = r.permutation(NB)[:B * pages].reshape(B, pages).astype(np.int32)
    if r.random() < 0.4:   # pages outside the cache: their tokens read zeros, counted
        pos = r.choice(table.size, int(r.integers(1, table.size + 1)), replace=False)
        table.flat[pos] = r.choice([-1, NB, NB + 7], pos.size)
    bad = (table < 0) | (table >= NB)
    count = sum(int(bad[b, t // BS]) for b in range(B) for t in range(lens[b]))
    out = with_bad_indices(
        r, lambda errors: kiln.ops.paged_kv_gather(cache, table, lens, max_len=max_len,
                                                   errors=errors, **blocks),
        count, lambda n: rf"{n} token")
    L = int(lens.max()) if max_len is None else max_len
    ref = np.zeros((B, L) + rest)
    for b in range(B):
        for t in range(lens[b]):
            if not bad[b, t // BS]:
                ref[b, t] = cv[table[b, t // BS], t % BS]
    assert_close(values(out), ref, 0, 0)


def run_moe(r):
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    T, k, E, Hd = int(r.integers(1, 80)), int(r.integers(1, 4)), int(r.integers(1, 9)), \
        int(r.integers(1, 200))
    topk = r.integers(0, E, (T, k))
    blocks = dict(block_r=int(r.choice([1, 8, 16])), block_h=int(r.choice([16, 128, 1024])))
    ublocks = dict(block_t=int(r.choice([1, 16, 32])), block_h=int(r.choice([16, 64, 128])))
    print(dict(op="moe", dtype=dtype, T=T, k=k, E=E, H=Hd, **blocks, unpermute=ublocks))
    src, slots, offsets = kiln.ops.moe_route(topk, E)
    flat = topk.reshape(-1)
    order = np.argsort(flat, kind="stable")
    assert offsets.tolist() == [0] + np.cumsum(np.bincount(flat, minlength=E)).tolist()
    assert (flat[order] == np.repeat(np.arange(E), np.bincount(flat, minlength=E))).all()
    # Each expert's rows are its tokens in order; slots invert src.
    assert (src == order // k).all()
    assert (src[slots.reshape(-1)] == np.arange(T * k) // k).all()
    x, xv = data(r, (T, Hd), dtype)
    if r.random() < 0.4:   # -1 (an empty row: zeros) and rows outside [-1, T) (zeros, counted)
        src = src.copy()
        pos = r.choice(src.size, int(r.integers(1, src.size + 1)), replace=False)
        src[pos] = r.choice([-1, -1, -2, T, T + 9], pos.size)
    bad = (src < -1) | (src >= T)
    y = with_bad_indices(r, lambda errors: kiln.ops.moe_permute(x, src, errors=errors, **blocks),
                         int(bad.sum()), lambda n: rf"moe_permute: {n} source row\(s\)")
    yv = np.where(((src < 0) | (src >= T))[:, None], 0.0, xv[np.clip(src, 0, T - 1)])
    assert_close(values(y), yv, 0, 0)
    wts = r.random((T, k)).astype(np.float32)
    if r.random() < 0.4:   # slots -1 (none: nothing added) and outside [-1, T k) (counted)
        slots = slots.copy()
        pos = r.choice(slots.size, int(r.integers(1, slots.size + 1)), replace=False)
        slots.flat[pos] = r.choice([-1, -1, -5, T * k, T * k + 3], pos.size)
    keep = (slots >= 0) & (slots < T * k)
    out = with_bad_indices(
        r, lambda errors: kiln.ops.moe_unpermute(y, slots, wts, errors=errors, **ublocks),
        int(((slots < -1) | (slots >= T * k)).sum()),
        lambda n: rf"moe_unpermute: {n} slot\(s\)")
    ref = (np.where(keep, wts.astype(np.float64), 0)[:, :, None] *
           yv[np.where(keep, slots, 0)]).sum(1)
    if dtype == "f32":
        assert_close(out, ref, 1e-5, 1e-5)
    else:   # rounded once to the data's type
        assert_close(values(out), ref, 2 ** -7, 1e-2)


def run_dsa(r):
    dtype = str(r.choice(["f32", "bf16", "f16"]))
    T, S, H = int(r.integers(1, 40)), int(r.integers(1, 300)), int(r.choice([1, 4, 8]))
    Di = int(r.choice([16, 32, 64]))
    causal = bool(r.random() < 0.7)
    q_off = int(r.integers(-5, S + 5))
    narrow = dtype != "f32"
    block_t = int(r.choice([16, 64] if narrow else [16, 32]))
    block_s = int(r.choice([32, 64]))
    k = int(r.integers(1, 80))
    block = int(r.choice([16, 64, 256]))
    Hq, Dqk = int(r.choice([16, 32])), int(r.choice([32, 64, 96]))
    d_v = int(r.choice([16, Dqk // 2, Dqk]))
    hb, bk = int(r.choice([16, 32])), int(r.choice([16, 32, 64]))
    print(dict(op="dsa", dtype=dtype, T=T, S=S, H=H, Di=Di, causal=causal, q_offset=q_off,
               block_t=block_t, block_s=block_s, k=k, block=block, Hq=Hq, Dqk=Dqk, d_v=d_v,
               heads_block=hb, block_k=bk))
    q, qv = data(r, (T, H, Di), dtype)
    keys, kv_ = data(r, (S, Di), dtype)
    w = r.standard_normal((T, H)).astype(np.float32)
    I = kiln.ops.dsa_indexer(q, w, keys, q_offset=q_off, causal=causal, block_t=block_t,
                             block_s=block_s)
    ref = np.einsum("th,tsh->ts", w.astype(np.float64),
                    np.maximum(np.einsum("thd,sd->tsh", qv, kv_), 0))
    if causal:
        ref = np.where(np.arange(S)[None, :] <= q_off + np.arange(T)[:, None], ref, -np.inf)
    assert_close(I, ref, 1e-5, 1e-5 * max(1.0, np.abs(ref[np.isfinite(ref)]).max(initial=0)))
    idx = kiln.ops.dsa_topk(I, k, block=block)
    for t in range(T):
        # The kernel's own float32 scores (float64 could reorder near-ties);
        # ties to the lower index.
        valid = np.flatnonzero(np.isfinite(I[t]) | (I[t] == np.inf))
        top = valid[np.argsort(-I[t][valid], kind="stable")[:k]]
        assert idx[t].tolist() == np.sort(top).tolist() + [-1] * (k - len(top)), t
    qq, qqv = data(r, (T, Hq, Dqk), dtype)
    kv, kvv = data(r, (S, Dqk), dtype)
    if r.random() < 0.4:   # indices outside [-1, S): skipped, counted
        idx = idx.copy()
        pos = r.choice(idx.size, int(r.integers(1, idx.size + 1)), replace=False)
        idx.flat[pos] = r.choice([-2, S, S + 50], pos.size)
    nbad = int(((idx < -1) | (idx >= S)).sum())
    if nbad and r.random() < 0.5:
        with pytest.raises(IndexError, match=rf"{nbad} index\(es\) outside \[-1, {S}\)"):
            kiln.ops.dsa_sparse_attention(qq, kv, idx, d_v, heads_block=hb, block_k=bk)
    errors = np.zeros(1, np.int32)
    out, lse = kiln.ops.dsa_sparse_attention(qq, kv, idx, d_v, heads_block=hb, block_k=bk,
                                             errors=errors)
    assert errors[0] == nbad
    for t in range(T):
        sel = idx[t][(idx[t] >= 0) & (idx[t] < S)]
        if sel.size == 0:
            assert (out[t] == 0).all() and np.isneginf(lse[t]).all()
            continue
        s = qqv[t] @ kvv[sel].T / np.sqrt(Dqk)
        m = s.max(1, keepdims=True)
        p = np.exp(s - m)
        pr = values(kiln.bf16(to_bf16_bits(p.astype(np.float32)))) if dtype == "bf16" else \
            p.astype(np.float16).astype(np.float64) if dtype == "f16" else p
        assert_close(out[t], pr @ kvv[sel, :d_v] / p.sum(1, keepdims=True),
                     2e-2 if narrow else 1e-4, 1e-2 if narrow else 1e-5)
        assert_close(lse[t], (m + np.log(p.sum(1, keepdims=True)))[:, 0], 1e-4, 1e-4)


OPS = dict(conv=run_conv, depthwise=run_depthwise, patch_embed=run_patch_embed,
           embedding=run_embedding, paged_kv=run_paged_kv, moe=run_moe, dsa=run_dsa)


@pytest.mark.parametrize("i", range(CONFIGS))
def test_random_op_config(i, monkeypatch):
    seed = BASE + i
    r = np.random.default_rng(seed)
    op = list(OPS)[i % len(OPS)] if i < len(OPS) else str(r.choice(list(OPS)))
    print(f"seed {BASE} (configuration {i}: {op}); replay with KILN_TEST_SEED={BASE}")
    monkeypatch.setattr(np, "empty", poisoned_empty)
    OPS[op](r)
