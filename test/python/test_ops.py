"""kiln.ops from Python, against numpy float64 references (the C++ tests in
test/e2e/OpsTest.cpp cover more configurations)."""
import os

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, dense_reference, from_bf16_bits, to_bf16_bits


def test_list_ops():
    names = [n for n, _, _ in kiln.ops.list_ops()]
    for n in ("embedding", "paged_kv_gather", "moe_permute", "moe_unpermute",
              "block_sparse_attention", "dsa_indexer", "dsa_topk", "dsa_sparse_attention",
              "conv", "depthwise_conv2d"):
        assert n in names


def test_embedding(rng):
    w = rng.standard_normal((500, 70)).astype(np.float32)
    ids = rng.integers(0, 500, 33)
    assert_close(kiln.ops.embedding(w, ids), w[ids].astype(np.float64), 0, 0)
    # Any shape of ids: out has ids.shape + (dim,), as w[ids].
    ids2 = rng.integers(0, 500, (3, 7))
    assert_close(kiln.ops.embedding(w, ids2), w[ids2].astype(np.float64), 0, 0)
    with pytest.raises(IndexError, match="2 id"):
        kiln.ops.embedding(w, np.array([1, -1, 500, 4]))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32, np.complex64, bool, object])
def test_gathers_refuse_tables_they_would_change(dtype):
    # A gather copies elements (out has the table's type): a table of
    # another type was converted to float32 (int64 33554433 came back as
    # 33554432.0, complex lost its imaginary part).
    w = np.full((4, 8), 33554433).astype(dtype)
    for call in (lambda: kiln.ops.embedding(w, np.array([1, 2])),
                 lambda: kiln.ops.moe_permute(w, np.array([1, 2]))):
        with pytest.raises(TypeError, match="must be float32, float16 or kiln.bf16"):
            call()
    # The computing operators convert real numbers (a uint8 image) and refuse
    # the rest.
    x = np.ones((1, 6, 6, 8), dtype)
    if np.dtype(dtype).kind in "fiub":
        kiln.ops.depthwise_conv2d(x, np.ones((3, 3, 8), np.float32))
    else:
        with pytest.raises(TypeError, match="x must hold real numbers"):
            kiln.ops.depthwise_conv2d(x, np.ones((3, 3, 8), np.float32))


@pytest.mark.parametrize("dim,expect", [(768, 768), (1000, 1000), (70, 72), (4100, 1368),
                                         (2048, 2048)])
def test_row_gathers_take_the_row_as_their_column_block(rng, monkeypatch, dim, expect):
    # On the host a row gather's columns per program are the row (in even
    # blocks of at most 2048, whole vectors of 8): the fixed 1024 ran a
    # 768-wide embedding through its checked path (1.9x the time). Exact
    # copies, rows that are not multiples of the block.
    taken = record_setting(monkeypatch, lambda cfg: cfg.get(
        "block_d", cfg.get("block_h", cfg.get("block_w"))))
    w = rng.standard_normal((40, dim)).astype(np.float32)
    ids = rng.integers(0, 40, 19)
    assert np.array_equal(kiln.ops.embedding(w, ids), w[ids])
    src, _, _ = kiln.ops.moe_route(rng.integers(0, 3, (20, 2)), 3)
    assert np.array_equal(kiln.ops.moe_permute(w[:20], src), w[:20][src])
    cache = w.reshape(10, 4, dim)
    table = rng.permutation(10)[:6].reshape(2, 3).astype(np.int32)
    out = kiln.ops.paged_kv_gather(cache, table, np.array([9, 12], np.int32))
    for b, n in enumerate((9, 12)):
        for t in range(n):
            assert np.array_equal(out[b, t], cache[table[b, t // 4], t % 4])
        assert not out[b, n:].any()
    assert taken == [expect] * 3
    taken.clear()
    kiln.ops.embedding(w, ids, block_d=256)
    assert taken == [256]


@pytest.mark.parametrize("hidden,expect", [(7168, (4, 3584)), (2880, (4, 2880)),
                                            (1000, (16, 1000)), (1500, (8, 1504)),
                                            (70, (16, 72)), (9000, (4, 3000))])
def test_moe_unpermute_default_blocks(rng, monkeypatch, hidden, expect):
    # On the host: the row in the fewest blocks of at most 4096 columns
    # (whole vectors of 8), over 16, 8 or 4 tokens (16 x 128 read each row
    # in 512-byte pieces: 2.0-2.2x the time). Against float64: tokens not a
    # multiple of the block, -1 slots, and rows that are not multiples of a
    # vector or of the block.
    taken = record_setting(monkeypatch, lambda cfg: (cfg["block_t"], cfg["block_h"]))
    tokens, k = 11, 3
    y = rng.standard_normal((tokens * k, hidden)).astype(np.float32)
    slots = rng.permutation(tokens * k).reshape(tokens, k).astype(np.int32)
    slots[rng.random((tokens, k)) < 0.2] = -1
    w = rng.random((tokens, k)).astype(np.float32)
    out = kiln.ops.moe_unpermute(y, slots, w)
    ref = (w[:, :, None] * np.where(slots[:, :, None] >= 0, y.astype(np.float64)[slots], 0)
           ).sum(axis=1)
    assert_close(out, ref, 1e-5, 1e-5)
    assert taken == [expect]


def test_gathers_in_bf16_and_f16_copy_bits(rng):
    bits = rng.integers(0, 1 << 16, (300, 77)).astype(np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] = 0x3F80  # no NaN/inf patterns: compare exactly
    ids = rng.integers(0, 300, 41)
    out = kiln.ops.embedding(kiln.bf16(bits), ids)
    assert isinstance(out, kiln.bf16) and np.array_equal(out.array, bits[ids])
    half = rng.standard_normal((300, 77)).astype(np.float16)
    got = kiln.ops.embedding(half, ids)
    assert got.dtype == np.float16 and np.array_equal(got, half[ids])
    cache = kiln.bf16(bits[:288].reshape(18, 16, 77))
    table = rng.permutation(18)[:6].reshape(2, 3).astype(np.int32)
    out = kiln.ops.paged_kv_gather(cache, table, np.array([33, 7], np.int32))
    for b, n in enumerate((33, 7)):
        for t in range(n):
            assert np.array_equal(out.array[b, t], cache.array[table[b, t // 16], t % 16])
        assert not out.array[b, n:].any()
    src, _, _ = kiln.ops.moe_route(rng.integers(0, 4, (300, 2)), 4)
    y = kiln.ops.moe_permute(kiln.bf16(bits), src)
    assert np.array_equal(y.array, bits[src])


def test_paged_kv(rng):
    cache = rng.standard_normal((12, 16, 4, 8)).astype(np.float32)
    table = rng.permutation(12)[:9].reshape(3, 3).astype(np.int32)
    lens = np.array([5, 40, 0], np.int32)
    out = kiln.ops.paged_kv_gather(cache, table, lens)
    ref = np.zeros((3, 40, 4, 8))
    for b in range(3):
        for t in range(lens[b]):
            ref[b, t] = cache[table[b, t // 16], t % 16]
    assert_close(out, ref, 0, 0)


def test_moe_roundtrip(rng):
    x = rng.standard_normal((37, 50)).astype(np.float32)
    topk = rng.integers(0, 5, (37, 2))
    w = rng.random((37, 2)).astype(np.float32)
    src, slots, offsets = kiln.ops.moe_route(topk, 5)
    assert offsets[-1] == 74
    y = kiln.ops.moe_permute(x, src)
    assert_close(y, x[src].astype(np.float64), 0, 0)
    out = kiln.ops.moe_unpermute(y * 2, slots, w)
    assert_close(out, 2 * (w.sum(1, keepdims=True) * x.astype(np.float64)), 1e-5, 1e-5)
    # f16 data: out in f16 (f32 accumulation, rounded once).
    half = kiln.ops.moe_unpermute(y.astype(np.float16), slots, w, block_h=32)
    ref = (w.astype(np.float64)[:, :, None] * y.astype(np.float16)[slots]).sum(1)
    assert half.dtype == np.float16
    # (The f32 sum and the float64 one may round to neighbouring halves.)
    assert_close(half.astype(np.float32), ref.astype(np.float16).astype(np.float64), 2**-10,
                 1e-3)


def test_bad_indices_raise_or_are_counted(rng):
    """Indices outside their range read (or contribute) zeros and raise
    IndexError, or, with `errors`, are added to errors[0] and nothing is
    raised; -1 (an empty row, slot or key) is not an error."""
    x = rng.standard_normal((37, 50)).astype(np.float32)
    topk = rng.integers(0, 5, (37, 2))
    topk[3, 1], topk[30, 0] = 5, -2
    with pytest.raises(IndexError, match=r"moe_route: 2 expert id\(s\) outside \[0, 5\)"):
        kiln.ops.moe_route(topk, 5)
    errors = np.full(3, 7, np.int32)
    src, slots, offsets = kiln.ops.moe_route(topk.tolist(), 5, errors=errors)
    assert errors.tolist() == [9, 7, 7]
    # The bad ids' rows lie outside offsets[0]..offsets[5].
    assert offsets[0] == 1 and offsets[-1] == 73
    flat = topk.reshape(-1)
    for e in range(5):
        assert (flat[np.argsort(flat, kind="stable")][offsets[e]:offsets[e + 1]] == e).all()
    assert (src[slots.reshape(-1)] == np.arange(74) // 2).all()
    bad_src = src.copy()
    bad_src[[2, 9, 40]] = [-4, 37, -1]
    with pytest.raises(IndexError, match=r"moe_permute: 2 source row\(s\) outside \[-1, 37\)"):
        kiln.ops.moe_permute(x, bad_src, block_h=16)
    errors = np.zeros(1, np.int32)
    y = kiln.ops.moe_permute(x, bad_src, block_h=16, errors=errors)
    ref = x[np.clip(bad_src, 0, 36)].astype(np.float64)
    ref[[2, 9, 40]] = 0
    assert errors[0] == 2
    assert_close(y, ref, 0, 0)
    w = rng.random((37, 2)).astype(np.float32)
    bad_slots = slots.copy()
    bad_slots[5, 0], bad_slots[36, 1], bad_slots[7, 1] = 74, -9, -1
    errors = np.zeros(1, np.int32)
    out = kiln.ops.moe_unpermute(y, bad_slots, w, block_h=16, errors=errors)
    keep = (bad_slots >= 0) & (bad_slots < 74)
    ref = (np.where(keep, w, 0)[:, :, None] * y.astype(np.float64)[np.where(keep, bad_slots, 0)]).sum(1)
    assert errors[0] == 2
    assert_close(out, ref, 1e-5, 1e-5)
    with pytest.raises(IndexError, match=r"moe_unpermute: 2 slot\(s\) outside \[-1, 74\)") as e:
        kiln.ops.moe_unpermute(y, bad_slots, w, block_h=16)
    assert_close(e.value.partial, ref, 1e-5, 1e-5)   # what errors= would have returned
    cache = rng.standard_normal((6, 16, 8)).astype(np.float32)
    table = np.array([[0, 5, 6], [2, -1, 1]], np.int32)
    errors = np.zeros(1, np.int32)
    kiln.ops.paged_kv_gather(cache, table, np.array([40, 20], np.int32), errors=errors)
    assert errors[0] == 8 + 4  # page 6 holds tokens 32..39, page -1 tokens 16..19
    with pytest.raises(IndexError, match="12 token") as e:
        kiln.ops.paged_kv_gather(cache, table, np.array([40, 20], np.int32))
    assert e.value.partial.shape == (2, 40, 8) and not e.value.partial[0, 32:].any()
    assert_close(e.value.partial[0, :16], cache[0].astype(np.float64), 0, 0)
    # An int64 id past int32's range is not wrapped into it: counted.
    with pytest.raises(IndexError, match="1 id"):
        kiln.ops.embedding(x, np.array([1, 2**32 + 5, 2], np.int64))
    for bad in (np.zeros(1, np.int64), np.zeros(0, np.int32), [0]):
        with pytest.raises(TypeError, match="errors must be a writable contiguous int32"):
            kiln.ops.embedding(x, [1], errors=bad)
    with pytest.raises(ValueError, match=r"weights has shape \(37, 3\)"):
        kiln.ops.moe_unpermute(y, slots, np.zeros((37, 3), np.float32))




@pytest.mark.parametrize("S,block", [(1, 1), (3, 4), (17, 32), (64, 64), (100, 64)])
@pytest.mark.parametrize("kind", ["blocks", "causal", "document", "per_head"])
def test_decoding_attention_takes_small_query_blocks(rng, monkeypatch, S, block, kind):
    """Few queries (decoding) on the host: block_mask's query block is the
    next power of two (keys in blocks of 64), not 64 rows of padding per
    query; with block x group <= 64 and the same block lists for a GQA
    group's heads, one program takes the group's heads (pack_gqa: its keys
    and values read once). GQA 4 query heads per KV head, 300 keys (a
    ragged last block), against float64: key blocks skipped, the causal
    and document masks (per row's query position, within each packed head),
    and block lists that differ between heads (not packed)."""
    B, Hq, Hkv, Skv, D = 2, 8, 2, 300, 64
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    docs = np.repeat(np.arange(3, dtype=np.int32), 100)[None, :].repeat(B, 0)  # 0, 1, 2
    mods = {"blocks": lambda b, h, qi, ki: (ki < 64) | (ki >= 128),
            "causal": lambda b, h, qi, ki: ki <= qi,
            # (block_mask asks past the keys too, up to a whole key block.)
            "document": lambda b, h, qi, ki: docs[b][np.minimum(qi, Skv - 1)] ==
            docs[b][np.minimum(ki, Skv - 1)],
            "per_head": lambda b, h, qi, ki: ki < 64 * (1 + h % 3)}
    mask = kiln.ops.block_mask(mods[kind], B, Hq, S, Skv)
    # (GPU targets, emulated ones included, keep their block of 64.)
    gpu = kiln.ops._gpu_target(None)
    assert (mask["block"], mask["block_kv"]) == ((64, 64) if gpu else (block, 64))
    target = os.environ.get("KILN_TARGET")
    packed = record_setting(monkeypatch, "pack_gqa", 0)
    if target:  # (record_setting unsets it: the mask was built for it)
        monkeypatch.setenv("KILN_TARGET", target)
    builtin = {"blocks": "none", "causal": "causal", "document": "document", "per_head": "none"}
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, builtin[kind],
                                               doc_ids=docs if kind == "document" else None)
    assert packed == [int(not gpu and block * 4 <= 64 and kind != "per_head")]
    ro, rl = dense_reference(q, k, v, mods[kind], 1 / np.sqrt(D))
    assert np.isfinite(out).all()
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("S,Hq", [(1, 2), (1, 6), (1, 8), (2, 8), (5, 4)])
def test_decoding_attention_on_narrow_keys_and_values(rng, monkeypatch, dtype, S, Hq):
    """Decoding on bf16 / f16 keys and values (a packed GQA group's 1-4 rows
    against each key tile: the dots widen a tile read once as they read it,
    one read more than once into an f32 copy first), against float64 on the
    rounded values; 2 KV heads, 300 keys (a ragged last block), the second
    key block skipped. The
    kernel rounds P to the input type before P @ V (as FlashAttention does):
    out's tolerance is that of test_block_sparse_attention_in_low_precision,
    lse's (the scores' dot alone) tight."""
    B, Hkv, Skv, D = 1, 2, 300, 64
    q, k, v = (rng.standard_normal((B, h, n, D)).astype(np.float32)
               for h, n in ((Hq, S), (Hkv, Skv), (Hkv, Skv)))
    if dtype == "bf16":
        q, k, v = (from_bf16_bits(to_bf16_bits(x)) for x in (q, k, v))
        args = [kiln.bf16(to_bf16_bits(x)) for x in (q, k, v)]
    else:
        q, k, v = (x.astype(np.float16).astype(np.float32) for x in (q, k, v))
        args = [x.astype(np.float16) for x in (q, k, v)]
    visible = lambda b, h, qi, ki: (ki < 64) | (ki >= 128)
    mask = kiln.ops.block_mask(visible, B, Hq, S, Skv)
    gpu = kiln.ops._gpu_target(None)
    target = os.environ.get("KILN_TARGET")
    packed = record_setting(monkeypatch, "pack_gqa", 0)
    if target:  # (record_setting unsets it: the mask was built for it)
        monkeypatch.setenv("KILN_TARGET", target)
    out, lse = kiln.ops.block_sparse_attention(*args, mask)
    assert packed == [int(not gpu and Hq > Hkv)]
    ro, rl = dense_reference(q, k, v, visible, 1 / np.sqrt(D))
    assert_close(out, ro, 2e-2, 1e-2 if dtype == "bf16" else 2e-3)
    assert_close(lse, rl, 2e-5, 2e-5)


def test_pack_gqa_refuses_what_depends_on_the_head():
    """pack_gqa reads the group's first head's block lists for all its rows:
    a mask_mod, a user's score_mod or profile stamps (per head) are refused
    where each arrives; the built-in softcap does not depend on the head."""
    for mask_mod, score_mod, profile in ((shifted_causal, None, False), (None, alibi, False),
                                         (None, None, True)):
        with pytest.raises(kiln._kiln.IRError, match="pack_gqa takes no mask_mod, score_mod "
                                                     "or profile"):
            kiln.ops._attention_kernel(1, 64, 64, "none", 256, 0, 4, 0.0, "f32", False, "f32",
                                       mask_mod, score_mod, profile=profile, pack_gqa=True)
    kiln.ops._attention_kernel(1, 64, 64, "none", 256, 0, 4, 5.0, "f32", False, "f32", None,
                               None, pack_gqa=True)


@pytest.mark.parametrize("kind", ["causal", "sliding_window", "prefix_lm"])
def test_block_sparse_attention_from_a_mask_mod(rng, kind):
    B, Hq, Hkv, S, D = 1, 4, 1, 130, 64
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    mods = {"causal": lambda b, h, qi, ki: ki <= qi,
            "sliding_window": lambda b, h, qi, ki: (ki <= qi) & (qi - ki < 50),
            "prefix_lm": lambda b, h, qi, ki: (ki < 20) | (ki <= qi)}
    mask = kiln.ops.block_mask(mods[kind], B, Hq, S, S)
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, kind, window=50, prefix=20)
    ro, rl = dense_reference(q, k, v, mods[kind], 1 / np.sqrt(D))
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)




@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_block_sparse_attention_in_low_precision(rng, dtype):
    # The reference uses the same rounded inputs; the kernel accumulates in
    # f32 and rounds P to the input type before P @ V (as FlashAttention does).
    B, Hq, Hkv, S, D = 2, 4, 2, 150, 64
    shapes = [(B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)]
    x = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    if dtype == "bf16":
        bits = [to_bf16_bits(a) for a in x]
        args = [kiln.bf16(b) for b in bits]
        x = [from_bf16_bits(b) for b in bits]
    else:
        args = [a.astype(np.float16) for a in x]
        x = [a.astype(np.float32) for a in args]
    causal = lambda b, h, qi, ki: ki <= qi
    mask = kiln.ops.block_mask(causal, B, Hq, S, S)
    out, lse = kiln.ops.block_sparse_attention(*args, mask, "causal")
    assert out.dtype == np.float32
    ro, rl = dense_reference(*x, causal, 1 / np.sqrt(D))
    assert_close(out, ro, 2e-2, 1e-2 if dtype == "bf16" else 2e-3)
    assert_close(lse, rl, 1e-4, 1e-4)
    with pytest.raises(TypeError, match="all be kiln.bf16"):
        kiln.ops.block_sparse_attention(kiln.bf16(to_bf16_bits(x[0])), x[1], x[2], mask)


@pytest.mark.parametrize("dtype,out_dtype", [("bf16", "bf16"), ("f16", "f16"), ("f32", "bf16")])
def test_block_sparse_attention_low_precision_output(rng, dtype, out_dtype):
    # out_dtype rounds the normalized f32 output once: bit for bit the f32
    # output's rounding (round to nearest even), and close to the float64
    # reference. lse stays f32.
    B, Hq, Hkv, S, D = 1, 4, 2, 150, 64
    shapes = [(B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)]
    x = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    if dtype == "bf16":
        args = [kiln.bf16(to_bf16_bits(a)) for a in x]
        x = [from_bf16_bits(a.array) for a in args]
    elif dtype == "f16":
        args = [a.astype(np.float16) for a in x]
        x = [a.astype(np.float32) for a in args]
    else:
        args = x
    causal = lambda b, h, qi, ki: ki <= qi
    mask = kiln.ops.block_mask(causal, B, Hq, S, S)
    out32, lse32 = kiln.ops.block_sparse_attention(*args, mask, "causal")
    out, lse = kiln.ops.block_sparse_attention(*args, mask, "causal", out_dtype=out_dtype)
    if out_dtype == "bf16":
        assert isinstance(out, kiln.bf16)
        np.testing.assert_array_equal(out.array, to_bf16_bits(out32))
        got = from_bf16_bits(out.array)
    else:
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out, out32.astype(np.float16))
        got = out.astype(np.float32)
    np.testing.assert_array_equal(lse, lse32)
    ro, rl = dense_reference(*x, causal, 1 / np.sqrt(D))
    assert_close(got, ro, 2e-2, 1e-2)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        kiln.ops.block_sparse_attention(*args, mask, "causal", out_dtype="f64")


def topk_reference(scores, k):
    """Per row: the k largest scores that are finite or +inf, ties to the
    lower index, in ascending index order, -1 padding."""
    out = []
    for row in scores:
        valid = np.flatnonzero((row > -np.inf) & ~np.isnan(row))
        top = valid[np.argsort(-row[valid].astype(np.float64), kind="stable")[:k]]
        out.append(np.sort(top).tolist() + [-1] * (k - len(top)))
    return np.array(out, np.int32)


@pytest.mark.parametrize("S,k,block", [(300, 16, 64), (777, 300, 128), (5000, 40, 256),
                                       (5000, 2500, 256), (200, 450, 64)])
def test_dsa_topk_special_values(rng, S, k, block):
    # Rows that steer the search through each of its paths: the narrowing
    # passes (k far below S), the candidates compacted into the output row
    # (k near S), no search (k above S); thresholds among zeros of both
    # signs and subnormals (counted by keys), NaN, infinities, ties, huge
    # magnitudes.
    tiny = np.finfo(np.float32).tiny
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, tiny / 8,
                         -tiny / 8, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32)
    mixed = rng.choice(specials, S)
    mixed[::5] = rng.standard_normal(len(mixed[::5]))
    rows = [rng.choice(specials, S), mixed,
            (rng.standard_normal(S) * 1e-39).astype(np.float32),  # subnormal
            np.where(rng.random(S) < 0.5, 0.0, -0.0), rng.integers(-3, 3, S),
            np.full(S, np.nan), rng.standard_normal(S) * 1e30, rng.standard_normal(S)]
    scores = np.stack(rows).astype(np.float32)
    got = kiln.ops.dsa_topk(scores, k, block=block)
    assert got.dtype == np.int32 and got.shape == (len(rows), k)
    np.testing.assert_array_equal(got, topk_reference(scores, k))


def test_dsa_pipeline(rng):
    T, S, H, Di = 20, 90, 4, 32
    q = rng.standard_normal((T, H, Di)).astype(np.float32)
    w = rng.standard_normal((T, H)).astype(np.float32)
    keys = rng.standard_normal((S, Di)).astype(np.float32)
    I = kiln.ops.dsa_indexer(q, w, keys, q_offset=60)
    ref = np.einsum("th,tsh->ts", w.astype(np.float64),
                    np.maximum(np.einsum("thd,sd->tsh", q.astype(np.float64), keys), 0))
    ref = np.where(np.arange(S)[None, :] <= 60 + np.arange(T)[:, None], ref, -np.inf)
    assert_close(I, ref, 1e-5, 1e-5)
    idx = kiln.ops.dsa_topk(I, 70)
    for t in range(T):
        # Top-k of the kernel's own float32 scores (float64 rounding could
        # reorder near-ties); ties go to the lower index.
        valid = np.flatnonzero(np.isfinite(I[t]))
        top = valid[np.argsort(-I[t][valid], kind="stable")[:70]]
        want = np.sort(top).tolist() + [-1] * (70 - len(top))
        assert idx[t].tolist() == want
    Sq, Hq, Dqk, Dv = 3, 16, 64, 48
    qq = rng.standard_normal((Sq, Hq, Dqk)).astype(np.float32)
    kv = rng.standard_normal((S, Dqk)).astype(np.float32)
    out, lse = kiln.ops.dsa_sparse_attention(qq, kv, idx[:Sq], Dv)
    for t in range(Sq):
        sel = idx[t][idx[t] >= 0]
        s = qq[t].astype(np.float64) @ kv[sel].T / np.sqrt(Dqk)
        p = np.exp(s - s.max(1, keepdims=True))
        assert_close(out[t], p @ kv[sel, :Dv] / p.sum(1, keepdims=True), 1e-4, 1e-5)


# The lightning indexer on narrow q and k (f32 sums): e4m3 fp8 bytes with a
# per-key scale (DeepSeek-V3.2's form; on sm_90a wgmma's e4m3 form reads
# both in place), bf16 and f16. T, S and the heads' rows not multiples of the
# blocks; the reference is float64 of the same values.
@pytest.mark.parametrize("dtype", ["e4m3", "bf16", "f16"])
@pytest.mark.parametrize("shape", [(70, 4, 64, 130), (5, 8, 128, 300)])
def test_dsa_indexer_narrow_types(rng, dtype, shape):
    from kiln.frontend import fp8_value
    T, H, D, S = shape
    w = rng.standard_normal((T, H)).astype(np.float32)
    ks = None
    if dtype == "e4m3":
        table = np.array([fp8_value(c, "e4m3") for c in range(256)])
        qc = rng.integers(0, 256, (T, H, D)).astype(np.uint8)
        kc = rng.integers(0, 256, (S, D)).astype(np.uint8)
        qc[(qc & 0x7F) == 0x7F] = 0x38
        kc[(kc & 0x7F) == 0x7F] = 0x38
        ks = (rng.random(S) + 0.5).astype(np.float32)
        qa, ka, qv, kv = kiln.fp8(qc, "e4m3"), kiln.fp8(kc, "e4m3"), table[qc], table[kc]
    elif dtype == "bf16":
        qb = to_bf16_bits(rng.standard_normal((T, H, D)))
        kb = to_bf16_bits(rng.standard_normal((S, D)))
        qa, ka = kiln.bf16(qb), kiln.bf16(kb)
        qv, kv = from_bf16_bits(qb).astype(np.float64), from_bf16_bits(kb).astype(np.float64)
    else:
        qa = rng.standard_normal((T, H, D)).astype(np.float16)
        ka = rng.standard_normal((S, D)).astype(np.float16)
        qv, kv = qa.astype(np.float64), ka.astype(np.float64)
    I = kiln.ops.dsa_indexer(qa, w, ka, q_offset=3, k_scale=ks)
    scores = np.einsum("thd,sd->ths", qv, kv)
    ref = np.einsum("th,ths->ts", w.astype(np.float64), np.maximum(scores, 0))
    mag = np.einsum("th,ths->ts", np.abs(w.astype(np.float64)),
                    np.einsum("thd,sd->ths", np.abs(qv), np.abs(kv)))
    if ks is not None:
        ref, mag = ref * ks[None, :], mag * ks[None, :]
    visible = np.arange(S)[None, :] <= 3 + np.arange(T)[:, None]
    assert not np.isnan(I).any()
    assert np.array_equal(np.isneginf(I), ~visible)
    assert (np.abs(I[visible] - ref[visible]) <= 1e-6 * mag[visible] + 1e-30).all()


def test_dsa_indexer_type_errors(rng):
    q8 = kiln.fp8(np.zeros((2, 4, 32), np.uint8), "e4m3")
    k8 = kiln.fp8(np.zeros((8, 32), np.uint8), "e4m3")
    w = np.ones((2, 4), np.float32)
    for call, what, exc in (
            (lambda: kiln.ops.dsa_indexer(kiln.fp8(np.zeros((2, 4, 32), np.uint8), "e5m2"), w,
                                          kiln.fp8(np.zeros((8, 32), np.uint8), "e5m2")),
             "fp8 q and k must both be e4m3", TypeError),
            (lambda: kiln.ops.dsa_indexer(q8, w, kiln.bf16(np.zeros((8, 32), np.uint16))),
             "fp8 q and k must both be e4m3", TypeError),
            (lambda: kiln.ops.dsa_indexer(np.zeros((2, 4, 32), np.float32), w,
                                          np.zeros((8, 32), np.float32), k_scale=np.ones(8)),
             "k_scale goes with e4m3", TypeError),
            (lambda: kiln.ops.dsa_indexer(q8, w, k8, k_scale=np.ones(7)),
             r"k_scale must be \[S\] = \[8\]", ValueError)):
        with pytest.raises(exc, match=what):
            call()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_dsa_sparse_attention_in_low_precision(rng, dtype):
    # DeepSeek's MLA shape (d_qk 576, d_v 512 = the first 512 columns of kv)
    # at 64 heads per program, ragged top-k lists with -1 padding and an
    # out-of-range index (skipped). The reference uses the same rounded
    # inputs and rounds P to the input type before P @ V, as the kernel does.
    # The emulated GPU targets take a smaller head (576 x 64 heads needs
    # more shared memory than a block has).
    Sq, Hq, Skv, Dqk, Dv, topk, hb = 3, 64, 200, 576, 512, 100, 64
    if os.environ.get("KILN_TARGET", "host").startswith("emu-"):
        Hq, Dqk, Dv, hb = 32, 192, 128, 16
    q = rng.standard_normal((Sq, Hq, Dqk)).astype(np.float32)
    kv = rng.standard_normal((Skv, Dqk)).astype(np.float32)
    idx = np.full((Sq, topk), -1, np.int32)
    for t, n in enumerate((100, 37, 0)):
        idx[t, :n] = rng.choice(Skv, n, replace=False)
    idx[1, 37] = Skv + 5
    if dtype == "bf16":
        qb, kvb = to_bf16_bits(q), to_bf16_bits(kv)
        args = (kiln.bf16(qb), kiln.bf16(kvb))
        q, kv = from_bf16_bits(qb), from_bf16_bits(kvb)
        round_p = lambda p: from_bf16_bits(to_bf16_bits(p.astype(np.float32)))
    else:
        args = (q.astype(np.float16), kv.astype(np.float16))
        q, kv = (a.astype(np.float32) for a in args)
        round_p = lambda p: p.astype(np.float16)
    # The out-of-range index is counted once per query, however many head
    # blocks read it (two on the emulated targets).
    errors = np.zeros(1, np.int32)
    out, lse = kiln.ops.dsa_sparse_attention(*args, idx, Dv, heads_block=hb, block_k=32,
                                             errors=errors)
    assert errors[0] == 1
    with pytest.raises(IndexError, match=r"1 index\(es\) outside \[-1, 200\)"):
        kiln.ops.dsa_sparse_attention(*args, idx, Dv, heads_block=hb, block_k=32)
    assert out.dtype == np.float32 and out.shape == (Sq, Hq, Dv)
    for t in range(Sq):
        sel = idx[t][(idx[t] >= 0) & (idx[t] < Skv)]
        if sel.size == 0:
            assert (out[t] == 0).all() and np.isneginf(lse[t]).all()
            continue
        s = q[t].astype(np.float64) @ kv[sel].T.astype(np.float64) / np.sqrt(Dqk)
        m = s.max(1, keepdims=True)
        p = np.exp(s - m)
        ref = round_p(p).astype(np.float64) @ kv[sel, :Dv] / p.sum(1, keepdims=True)
        assert_close(out[t], ref, 2e-2, 1e-2)
        assert_close(lse[t], (m + np.log(p.sum(1, keepdims=True)))[:, 0], 1e-4, 1e-4)
    with pytest.raises(TypeError, match="must both be kiln.bf16"):
        kiln.ops.dsa_sparse_attention(kiln.bf16(to_bf16_bits(q)), kv, idx, Dv)


def test_conv2d_and_depthwise(rng):
    x = rng.standard_normal((2, 11, 9, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    out = kiln.ops.conv2d(x, w, b, stride=2, padding=1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    OH, OW = (11 + 2 - 3) // 2 + 1, (9 + 2 - 3) // 2 + 1
    ref = np.zeros((2, OH, OW, 6)) + b
    for ky in range(3):
        for kx in range(3):
            ref += xp[:, ky:ky + 2 * OH:2, kx:kx + 2 * OW:2] @ w[ky, kx]
    assert_close(out, ref, 1e-4, 1e-4)
    dw = rng.standard_normal((7, 7, 4)).astype(np.float32)
    out = kiln.ops.depthwise_conv2d(x, dw, None, padding=3)
    xp = np.pad(x.astype(np.float64), ((0, 0), (3, 3), (3, 3), (0, 0)))
    ref = sum(xp[:, ky:ky + 11, kx:kx + 9] * dw[ky, kx] for ky in range(7) for kx in range(7))
    assert_close(out, ref, 1e-5, 1e-5)
    # Mis-shaped operands are refused before the kernel would read past them.
    with pytest.raises(ValueError, match=r"bias has shape \(5,\), expected \(6,\)"):
        kiln.ops.conv2d(x, w, b[:5])
    with pytest.raises(ValueError, match="w \\[KH, KW, C\\] expected"):
        kiln.ops.depthwise_conv2d(x, dw[:, :, :3])
    with pytest.raises(ValueError, match=r"bias has shape \(3,\), expected \(4,\)"):
        kiln.ops.depthwise_conv2d(x, dw, b[:3])


def depthwise_reference(x, w, bias, stride, padding, dilation):
    """Depthwise convolution in float64 (NHWC, w [KH, KW, C])."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    KH, KW, C = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    OH = (xp.shape[1] - dh * (KH - 1) - 1) // sh + 1
    OW = (xp.shape[2] - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], OH, OW, C)) + (0 if bias is None else bias)
    for ky in range(KH):
        for kx in range(KW):
            out += (xp[:, ky * dh:ky * dh + sh * (OH - 1) + 1:sh,
                       kx * dw:kx * dw + sw * (OW - 1) + 1:sw] * w[ky, kx].astype(np.float64))
    return out


@pytest.mark.parametrize("N,H,W,C,K,stride,padding,dilation,expect", [
    # (block_w, block_c, row_taps) kiln.ops takes on the host.
    (1, 14, 14, 144, 3, (1, 1), (1, 1), (1, 1), (14, 48, 1)),
    (2, 17, 23, 100, 3, (2, 2), (1, 0), (1, 1), (11, 56, 1)),
    (1, 9, 70, 64, 3, (1, 1), (2, 2), (2, 2), (35, 64, 1)),
    (1, 11, 130, 32, 3, (1, 1), (1, 1), (1, 1), (44, 32, 0)),
    (1, 12, 13, 200, 5, (1, 1), (2, 2), (1, 1), (13, 56, 0)),
    (1, 6, 5, 3, 2, (1, 2), (0, 1), (1, 1), (3, 8, 0)),
    # Multiples of 48 channels: blocks of 48 with 256-bit vectors (steps of
    # two pixels x 6 vectors), even blocks of at most 64 with 512-bit ones.
    (1, 15, 14, 192, 3, (1, 1), (1, 1), (1, 1), (14, (48, 64), 1)),
    (2, 16, 19, 96, 3, (2, 2), (1, 1), (1, 1), (10, (48, 48), 1)),
    (1, 9, 30, 576, 3, (1, 1), (1, 1), (2, 2), (28, (48, 64), 1)),
])
def test_depthwise_default_blocks_follow_the_image(rng, monkeypatch, N, H, W, C, K, stride,
                                                   padding, dilation, expect):
    # The host's default blocks: an output row and the channels each in even
    # blocks of at most 64 (whole vectors of channels), and a kernel column's
    # taps of every row in one step for 3 rows or fewer over blocks of 48
    # channels or more. Against float64, with row and channel counts that
    # are not multiples of the blocks, strides (the gathered taps),
    # dilations and padding.
    taken = record_setting(monkeypatch,
                           lambda cfg: (cfg["block_w"], cfg["block_c"], cfg["row_taps"]))
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = rng.standard_normal((K, K, C)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    out = kiln.ops.depthwise_conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)
    if isinstance(expect[1], tuple):  # (256-bit vectors, 512-bit ones)
        expect = (expect[0], expect[1][kiln.ops._host_vector_bits() >= 512], expect[2])
    assert taken == [expect]
    assert out.ctypes.data % 64 == 0  # kiln.ops' outputs start on a cache line
    assert np.isfinite(out).all()
    assert_close(out, depthwise_reference(x, w, b, stride, padding, dilation), 1e-5, 1e-5)
    # Explicit blocks are kept.
    taken.clear()
    kiln.ops.depthwise_conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                              block_w=8, block_c=16)
    assert taken[0][:2] == (8, 16)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_conv2d_in_low_precision(rng, dtype):
    x = rng.standard_normal((2, 11, 9, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    if dtype == "bf16":
        xb, wb = to_bf16_bits(x), to_bf16_bits(w)
        args = kiln.bf16(xb), kiln.bf16(wb)
        x, w = from_bf16_bits(xb), from_bf16_bits(wb)
    else:
        args = x.astype(np.float16), w.astype(np.float16)
        x, w = args[0].astype(np.float32), args[1].astype(np.float32)
    out = kiln.ops.conv2d(*args, None, stride=2, padding=1)
    assert out.dtype == np.float32
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    OH, OW = (11 + 2 - 3) // 2 + 1, (9 + 2 - 3) // 2 + 1
    ref = np.zeros((2, OH, OW, 6))
    for ky in range(3):
        for kx in range(3):
            ref += xp[:, ky:ky + 2 * OH:2, kx:kx + 2 * OW:2] @ w[ky, kx].astype(np.float64)
    assert_close(out, ref, 1e-4, 1e-4)
    with pytest.raises(TypeError, match="both be kiln.bf16"):
        kiln.ops.conv2d(kiln.bf16(to_bf16_bits(x)), w)


def test_patch_embed(rng):
    x = rng.standard_normal((1, 2, 32, 48, 3)).astype(np.float32)
    w = rng.standard_normal((2, 16, 16, 3, 8)).astype(np.float32)
    out = kiln.ops.patch_embed(x, w, patch=16, temporal_patch=2)
    assert out.shape == (1, 1, 2, 3, 8)
    patches = x.reshape(1, 1, 2, 2, 16, 3, 16, 3).transpose(0, 1, 3, 5, 2, 4, 6, 7)
    ref = patches.reshape(1, 1, 2, 3, -1).astype(np.float64) @ w.reshape(-1, 8)
    assert_close(out, ref, 1e-4, 1e-4)


def conv_operands(x, w, dtype):
    """x and w as `dtype` ("f32" or "bf16") operands, and as the float32 values
    the kernel sees (bf16: rounded)."""
    if dtype == "bf16":
        xb, wb = to_bf16_bits(x), to_bf16_bits(w)
        return (kiln.bf16(xb), kiln.bf16(wb)), from_bf16_bits(xb), from_bf16_bits(wb)
    return (x, w), x, w


def record_setting(monkeypatch, setting, default=None):
    """The list that every later kiln.ops.kernel call appends its `setting`
    to (a config name, or a function of the config; on the host:
    KILN_TARGET unset)."""
    monkeypatch.delenv("KILN_TARGET", raising=False)
    taken = []
    real = kiln.ops.kernel
    pick = setting if callable(setting) else lambda cfg: cfg.get(setting, default)
    monkeypatch.setattr(kiln.ops, "kernel", lambda name, *a, **cfg: (
        taken.append(pick(cfg)), real(name, *a, **cfg))[1])
    return taken


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_conv_default_channel_block_follows_the_channels(rng, monkeypatch, dtype):
    # The host's default channels per step: all of a group's channels up to
    # 64, else even blocks of at most 64 (a 3-channel stem padded to 32 did
    # 10.7x its work); a patch embedding's whole patch row. Each against
    # float64, with channel counts that are neither multiples of a vector nor
    # of the block.
    taken = record_setting(monkeypatch, "block_c")
    for C, groups, expect in ((3, 1, 3), (65, 1, 33), (130, 1, 44), (12, 2, 6)):
        args, x, w = conv_operands(rng.standard_normal((2, 9, 7, C)).astype(np.float32),
                                   rng.standard_normal((3, 3, C // groups, 10)).astype(np.float32),
                                   dtype)
        b = rng.standard_normal(10).astype(np.float32)
        taken.clear()
        out = kiln.ops.conv2d(*args, b, stride=2, padding=1, groups=groups)
        assert taken == [expect], (C, groups)
        xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
        ref = np.zeros((2, 5, 4, 10)) + b
        cg, og = C // groups, 10 // groups
        for g in range(groups):
            for ky in range(3):
                for kx in range(3):
                    ref[..., g * og:(g + 1) * og] += (
                        xp[:, ky:ky + 9:2, kx:kx + 7:2, g * cg:(g + 1) * cg]
                        @ w[ky, kx, :, g * og:(g + 1) * og].astype(np.float64))
        assert np.isfinite(out).all()
        assert_close(out, ref, 1e-4, 1e-4)
    x = rng.standard_normal((1, 1, 28, 42, 3)).astype(np.float32)
    w = rng.standard_normal((1, 14, 14, 3, 9)).astype(np.float32)
    taken.clear()
    out = kiln.ops.patch_embed(x, w, patch=14)
    assert taken == [42]
    patches = x.reshape(1, 1, 2, 14, 3, 14, 3).transpose(0, 1, 2, 4, 3, 5, 6)
    assert_close(out, patches.reshape(1, 1, 2, 3, -1).astype(np.float64) @ w.reshape(-1, 9),
                 1e-4, 1e-4)
    # Output pixels per program: the least padding, 64 or a multiple of the
    # micro-kernel's 6 rows.
    assert [kiln.ops._conv_block_m(m) for m in (196, 3136, 49, 784, 6)] == [66, 64, 54, 66, 48]
    # An explicit block is kept.
    taken.clear()
    kiln.ops.conv2d(x[0, 0, None, :9, :9], w[0, :3, :3], padding=1, block_c=16)
    assert taken == [16]


@pytest.mark.parametrize("OC,groups,expect", [(24, 1, 32), (72, 1, 48), (144, 1, 48),
                                               (10, 1, 16), (130, 1, 48), (12, 2, 16)])
def test_conv_default_output_block_follows_the_channels(rng, monkeypatch, OC, groups, expect):
    # The host's output channels per program: the fewest blocks of at most
    # 64 per group, split evenly, rounded up to 16. Against float64, with
    # output channel counts that are not multiples of the block.
    taken = record_setting(monkeypatch, "block_n")
    C = 6
    x = rng.standard_normal((2, 9, 7, C)).astype(np.float32)
    w = rng.standard_normal((3, 3, C // groups, OC)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    out = kiln.ops.conv2d(x, w, b, padding=1, groups=groups)
    assert taken == [expect]
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((2, 9, 7, OC)) + b
    cg, og = C // groups, OC // groups
    for g in range(groups):
        for ky in range(3):
            for kx in range(3):
                ref[..., g * og:(g + 1) * og] += (
                    xp[:, ky:ky + 9, kx:kx + 7, g * cg:(g + 1) * cg]
                    @ w[ky, kx, :, g * og:(g + 1) * og].astype(np.float64))
    assert np.isfinite(out).all()
    assert_close(out, ref, 1e-4, 1e-4)
    taken.clear()
    kiln.ops.conv2d(x, w, b, padding=1, groups=groups, block_n=64)
    assert taken == [64]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("C,K,S,P,KT", [(3, 7, 2, 3, 1), (8, 3, 1, 1, 1), (3, 5, 2, 0, 1),
                                        (4, 3, 1, 1, 2), (3, 3, 1, 1, 1)])
def test_conv_wide_taps(rng, monkeypatch, dtype, C, K, S, P, KT):
    # Few channels: a kernel row's taps are one step of K C contiguous
    # channels, on an input padded along the width first (3 channels at 3x3,
    # 9 a step, stay one tap a step). Against float64, with ragged sizes;
    # KT 2 is a video convolution.
    taken = record_setting(monkeypatch, lambda cfg: (cfg.get("wide_taps", 0),
                                                     cfg.get("row_block", 1)))
    T, H, W, OC = 3, 13, 11, 10
    args, x, w = conv_operands(rng.standard_normal((2, T, H, W, C)).astype(np.float32),
                               rng.standard_normal((KT, K, K, C, OC)).astype(np.float32), dtype)
    b = rng.standard_normal(OC).astype(np.float32)
    out = kiln.ops.conv(*args, b, stride=(1, S, S), padding=(0, P, P))
    # Wide taps take every kernel row in one step (at most 192 channels),
    # on an input padded along the height too.
    wide = 12 <= K * C <= 48
    assert taken == [(int(wide), K if wide else 1)]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (P, P), (P, P), (0, 0)))
    OT, OH, OW = T - KT + 1, (H + 2 * P - K) // S + 1, (W + 2 * P - K) // S + 1
    ref = np.zeros((2, OT, OH, OW, OC)) + b
    for kt in range(KT):
        for ky in range(K):
            for kx in range(K):
                ref += xp[:, kt:kt + OT, ky:ky + S * OH:S, kx:kx + S * OW:S] @ w[kt, ky, kx]
    assert out.shape == ref.shape and np.isfinite(out).all()
    assert_close(out, ref, 1e-4, 1e-4)


def test_conv_with_a_padding_far_larger_than_the_image(rng, monkeypatch):
    # 4 channels at 3x3 take wide taps, whose input is padded by a copy:
    # a padding of 2^20 asked numpy for 64 TiB. Such a padding keeps the
    # kernel's own (no copy).
    taken = record_setting(monkeypatch, lambda cfg: cfg.get("wide_taps", 0))
    x = rng.standard_normal((1, 8, 8, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    P = 2**20
    out = kiln.ops.conv2d(x, w, b, stride=P, padding=P)
    assert taken == [0] and out.shape == (1, 3, 3, 5)
    ref = np.zeros((1, 3, 3, 5)) + b
    for oh in range(3):
        for ow in range(3):
            for ky in range(3):
                for kx in range(3):
                    iy, ix = oh * P - P + ky, ow * P - P + kx
                    if 0 <= iy < 8 and 0 <= ix < 8:
                        ref[0, oh, ow] += x[0, iy, ix].astype(np.float64) @ w[ky, kx]
    assert_close(out, ref, 1e-5, 1e-5)


@pytest.mark.parametrize("wide,KT,K,S,D,C,BC,BM", [
    (True, 1, 7, 2, 1, 3, 21, 50),   # a stem's rows in one step, 50-pixel blocks
    (True, 1, 6, 1, 1, 3, 8, 64),    # 18 channels a row in blocks of 8 (3 blocks)
    (False, 2, 4, 4, 1, 5, 5, 48),   # a video patch (kw 1): 2 frames x 4 rows
    (False, 1, 4, 1, 2, 3, 3, 64),   # dilated rows
])
def test_conv_steps_of_several_kernel_rows(rng, wide, KT, K, S, D, C, BC, BM):
    # row_block R: a step gathers R kernel rows of each pixel, each a run of
    # contiguous channels (wide taps, or a kernel one pixel wide), and
    # multiplies them with R rows of weights in one dot. Against float64,
    # ragged sizes, the output poisoned; R 2 and all the rows.
    KW = K if wide else 1
    N, T, H, W, OC = 2, 3, 15 + K * D, 11 + KW, 19
    x = rng.standard_normal((N, T, H, W, C)).astype(np.float32)
    w = rng.standard_normal((KT, K, KW, C, OC)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    OT, OH, OW = T - KT + 1, (H - D * (K - 1) - 1) // S + 1, W - KW + 1
    ref = np.zeros((N, OT, OH, OW, OC)) + b
    for kt in range(KT):
        for ky in range(K):
            for kx in range(KW):
                ref += (x[:, kt:kt + OT, ky * D:ky * D + S * OH:S, kx:kx + OW].astype(np.float64)
                        @ w[kt, ky, kx])
    for R in sorted({r for r in (2, K) if K % r == 0}):
        kern = kiln.ops.kernel("conv", kt=KT, kh=K, kw=KW, sh=S, dh=D, ph=0, pw=0, block_m=BM,
                               block_n=16, block_c=BC, wide_taps=int(wide), row_block=R)
        out = np.full(ref.shape, np.nan, np.float32)
        M = N * OT * OH * OW
        kern.launch([x, w, b, out, N, T, H, W, C, OC, OT, OH, OW],
                    [-(-M // BM), -(-OC // 16)])
        assert np.isfinite(out).all(), R
        assert_close(out, ref, 1e-4, 1e-4)


@pytest.mark.parametrize("cfg,why", [
    (dict(kh=3, kw=3, row_block=3), "one tap per kernel row"),
    (dict(kh=4, kw=1, row_block=3), "kh a multiple of it"),
    (dict(kh=3, kw=1, ph=1, row_block=3), "no padding along the height"),
    (dict(kh=3, kw=1, groups=2, row_block=3), "one group"),
])
def test_conv_row_block_needs_contiguous_rows(cfg, why):
    with pytest.raises(kiln._kiln.IRError, match=r"conv: row_block > 1 needs " + why):
        kiln.ops.kernel("conv", **cfg)


@kiln.jit
def dilated_causal(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (kv_idx % 2 == h % 2)


@kiln.jit
def alibi(score, b, h, q_idx, kv_idx):
    return score - 0.05 * (h + 1) * (q_idx - kv_idx)


def test_python_mask_mod_and_score_mod_are_fused(rng):
    B, H, S, D = 2, 2, 150, 64
    q = rng.standard_normal((B, H, S, D)).astype(np.float32)
    k = rng.standard_normal((B, H, S, D)).astype(np.float32)
    v = rng.standard_normal((B, H, S, D)).astype(np.float32)
    np_mod = lambda b, h, qi, ki: (ki <= qi) & (ki % 2 == h % 2)
    device = kiln.ops.block_mask(dilated_causal, B, H, S, S)
    host = kiln.ops.block_mask(np_mod, B, H, S, S)
    for key in ("kv_num", "kv_idx", "full_num", "full_idx"):
        assert (device[key] == host[key]).all(), key
    out, lse = kiln.ops.block_sparse_attention(q, k, v, device, mask_mod=dilated_causal,
                                               score_mod=alibi)
    scale = 1 / np.sqrt(D)
    ro = np.zeros(q.shape)
    rl = np.full((B, H, S), -np.inf)
    for b in range(B):
        for h in range(H):
            qi, ki = np.arange(S)[:, None], np.arange(S)[None, :]
            s = q[b, h].astype(np.float64) @ k[b, h].T.astype(np.float64) * scale
            s = s - 0.05 * (h + 1) * (qi - ki)
            s = np.where(np_mod(b, h, qi, ki), s, -np.inf)
            for i in range(S):
                if not np.isfinite(s[i]).any():
                    continue  # a row that sees no key: out 0, lse -inf
                m = s[i].max()
                p = np.exp(s[i] - m)
                ro[b, h, i] = p @ v[b, h] / p.sum()
                rl[b, h, i] = m + np.log(p.sum())
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)


@kiln.jit
def shifted_causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx + 8 * h


@pytest.mark.parametrize("block,block_kv", [(32, 16), (16, 48)])
def test_rectangular_blocks(rng, block, block_kv):
    # Query blocks of `block` rows, key blocks of `block_kv` keys: the block
    # mask (built by the @kiln.jit mask_mod on the device and by numpy on the
    # host, which must agree), the fused mask_mod and score_mod and the
    # kernel's tiles all take both sizes. Sequences are not multiples of
    # either; GQA.
    B, Hq, Hkv, S, Skv, D = 1, 2, 1, 75, 101, 32
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    np_mod = lambda b, h, qi, ki: ki <= qi + 8 * h
    device = kiln.ops.block_mask(shifted_causal, B, Hq, S, Skv, block=block, block_kv=block_kv)
    host = kiln.ops.block_mask(np_mod, B, Hq, S, Skv, block=block, block_kv=block_kv)
    assert device["nqb"] == -(-S // block) and device["maxb"] == -(-Skv // block_kv)
    for key in ("kv_num", "kv_idx", "full_num", "full_idx"):
        assert (device[key] == host[key]).all(), key
    assert host["full_num"].sum() > 0 and host["kv_num"].sum() > 0
    out, lse = kiln.ops.block_sparse_attention(q, k, v, device, mask_mod=shifted_causal,
                                               score_mod=alibi)
    ro, rl = dense_reference(q, k, v, np_mod, 1 / np.sqrt(D),
                             bias=lambda h, qi, ki: -0.05 * (h + 1) * (qi - ki))
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)


def test_document_mask_with_more_keys_than_queries(rng):
    # doc_ids [B, max(S, Skv)] indexes queries and keys alike; batch 1's row
    # starts at max(S, Skv), not at S or Skv.
    B, Hq, Hkv, S, Skv, D = 2, 2, 1, 70, 130, 32
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    docs = np.sort(rng.integers(0, 4, (B, Skv)), axis=1).astype(np.int32)
    docs[1] += 10  # no document shared across the batch
    # (block_mask evaluates the rule on whole blocks: positions past the
    # sequences, clipped here, are masked anyway.)
    rule = lambda b, h, qi, ki: docs[b][np.minimum(qi, Skv - 1)] == docs[b][np.minimum(ki, Skv - 1)]
    mask = kiln.ops.block_mask(rule, B, Hq, S, Skv, block=32, block_kv=32)
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, "document", doc_ids=docs)
    ro, rl = dense_reference(q, k, v, rule, 1 / np.sqrt(D))
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)
    with pytest.raises(ValueError, match="doc_ids has shape"):
        kiln.ops.block_sparse_attention(q, k, v, mask, "document", doc_ids=docs[:, :S])
    # Without doc_ids the document mask would see one document; with
    # another mask they would be ignored.
    with pytest.raises(ValueError, match="mask_kind 'document' needs doc_ids"):
        kiln.ops.block_sparse_attention(q, k, v, mask, "document")
    with pytest.raises(ValueError, match="doc_ids is read by mask_kind 'document' only"):
        kiln.ops.block_sparse_attention(q, k, v, mask, "causal", doc_ids=docs)


def test_operator_kernels_check_their_arrays():
    # kiln.ops.kernel(...).launch takes numpy arrays for pointers, checked
    # as a Bundle's are: a strided view or int64 ids would otherwise be read
    # as contiguous int32 data, silently.
    W = np.arange(32, dtype=np.float32).reshape(4, 8)
    k = kiln.ops.kernel("embedding", dtype="f32", block_n=8, block_d=8)
    ids = np.array([1, 3], np.int32)
    out = np.full((2, 4), np.nan, np.float32)
    errors = np.zeros(1, np.int32)
    Wc = np.ascontiguousarray(W[:, :4])
    cases = [([W[:, ::2], ids, out], ValueError, "'weight' is not contiguous"),
             ([Wc, ids.astype(np.int64), out], TypeError,
              "'ids' of kernel 'embedding' points to i32 elements, got an array of int64"),
             ([Wc.astype(">f4"), ids, out], TypeError, "'weight'.*got an array of >f4"),
             ([Wc, ids, out[:, :3]], ValueError, "'out'.*not contiguous")]
    for arrays, error, match in cases:
        with pytest.raises(error, match=match):
            k.launch(arrays + [errors, 2, 4, 4], [1, 1])
    with pytest.raises(TypeError, match="'n' of kernel 'embedding' is a scalar"):
        k.launch([Wc, ids, out, errors, np.array(2), 4, 4], [1, 1])
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only array"):
        k.launch([Wc, ids, frozen, errors, 2, 4, 4], [1, 1])
    k.launch([Wc, ids, out, errors, 2, 4, 4], [1, 1])
    assert np.array_equal(out, W[[1, 3], :4]) and errors[0] == 0


def test_block_mask_must_match_the_launch(rng):
    q = rng.standard_normal((1, 2, 70, 16)).astype(np.float32)
    causal = lambda b, h, qi, ki: ki <= qi
    with pytest.raises(ValueError, match="block_kv must be a positive integer"):
        kiln.ops.block_mask(causal, 1, 2, 70, 70, block=32, block_kv=0)
    with pytest.raises(ValueError, match="built for another shape"):
        kiln.ops.block_sparse_attention(q, q, q, kiln.ops.block_mask(causal, 1, 2, 40, 70))
    with pytest.raises(ValueError, match="built for another shape"):
        kiln.ops.block_sparse_attention(
            q, q, q, kiln.ops.block_mask(causal, 1, 2, 70, 70, block=32, block_kv=64)
            | {"maxb": 1})
    # The sizes block_mask() records are compared: another split of batch x
    # heads, or another sequence length with as many blocks, has arrays of
    # the right shapes and the wrong lists.
    one_head = kiln.ops.block_mask(causal, 1, 1, 70, 70)
    with pytest.raises(ValueError, match="built for another shape .*heads 1.*heads 2"):
        kiln.ops.block_sparse_attention(q, q, q, one_head)
    with pytest.raises(ValueError, match="built for another shape .*batch 2, heads 1"):
        kiln.ops.block_sparse_attention(q, q, q, kiln.ops.block_mask(causal, 2, 1, 70, 70))
    with pytest.raises(ValueError, match="built for another shape .*seq_q 65"):
        kiln.ops.block_sparse_attention(q, q, q, kiln.ops.block_mask(causal, 1, 2, 65, 70))
    # A dict made by hand, without them: its arrays' shapes are checked.
    hand = {n: v for n, v in one_head.items() if n not in ("batch", "heads", "seq_q", "seq_kv")}
    with pytest.raises(ValueError, match=r"mask\['kv_num'\] has shape"):
        kiln.ops.block_sparse_attention(q, q, q, hand)
    bad = kiln.ops.block_mask(causal, 1, 2, 70, 70, block=16, block_kv=32)
    bad["full_idx"] = bad["full_idx"].copy()
    bad["full_idx"][1, 3, 0] = 3  # key blocks of 32: 0..2
    with pytest.raises(ValueError, match="outside 0..2"):
        kiln.ops.block_sparse_attention(q, q, q, bad)
    # A mask for 96 keys (block 2 full) used with 70: block 2 ends past them.
    longer = kiln.ops.block_mask(lambda b, h, qi, ki: ki >= 0, 1, 2, 70, 96, block=16,
                                 block_kv=32)
    with pytest.raises(ValueError, match="built for another shape .*seq_kv 96"):
        kiln.ops.block_sparse_attention(q, q, q, longer)
    del longer["seq_kv"]  # (by hand: the lists are checked)
    with pytest.raises(ValueError, match="ends past seq_kv 70"):
        kiln.ops.block_sparse_attention(q, q, q, longer)
    # Each array's entries checked (in one pass, in C++): counts outside
    # 0..maxb, listed blocks outside the keys, values past int32 (not
    # wrapped into range), non-integers; entries past a row's count are not
    # read, so not checked.
    good = kiln.ops.block_mask(causal, 1, 2, 70, 70, block=16, block_kv=32)
    edits = [("kv_num", (0, 4), 4, "'kv_idx'.*outside 0..2"),
             ("kv_num", (1, 0), -1, "'kv_idx'.*outside 0..2"),
             ("full_num", (1, 2), 4, "'full_idx'.*outside 0..2"),
             ("kv_idx", (1, 4, 0), -1, "'kv_idx'.*outside 0..2"),
             ("kv_idx", (0, 4, 0), 2**32 + 1, "'kv_idx'.*outside 0..2")]
    for key, at, value, match in edits:
        bad = {**good, key: good[key].astype(np.int64)}
        assert good["kv_num"][0, 4] >= 1 and good["kv_num"][1, 4] >= 1
        bad[key][at] = value
        with pytest.raises(ValueError, match=match):
            kiln.ops.block_sparse_attention(q, q, q, bad)
    with pytest.raises(TypeError, match=r"mask\['kv_idx'\] must be integers"):
        kiln.ops.block_sparse_attention(q, q, q, {**good, "kv_idx": good["kv_idx"] + 0.5})
    # A key block listed twice for a query block would count twice in the
    # softmax: in both lists, or twice in one.
    assert good["kv_num"][1, 2] >= 1 and good["full_num"][1, 2] >= 1
    for key, at, value in [("kv_idx", (1, 2, 0), good["full_idx"][1, 2, 0]),
                           ("full_idx", (1, 2, 0), good["kv_idx"][1, 2, 0])]:
        bad = {**good, key: good[key].copy()}
        bad[key][at] = value
        with pytest.raises(ValueError, match="lists a key block twice"):
            kiln.ops.block_sparse_attention(q, q, q, bad, "causal")
    assert good["full_num"][1, 4] >= 2
    bad = {**good, "full_idx": good["full_idx"].copy()}
    bad["full_idx"][1, 4, 1] = bad["full_idx"][1, 4, 0]
    with pytest.raises(ValueError, match="lists a key block twice"):
        kiln.ops.block_sparse_attention(q, q, q, bad, "causal")
    tail = {**good, "kv_idx": good["kv_idx"].copy()}
    assert good["kv_num"][0, 0] < good["maxb"]
    tail["kv_idx"][0, 0, good["kv_num"][0, 0]:] = 99  # past the count: never read
    out, _ = kiln.ops.block_sparse_attention(q, q, q, tail, "causal")
    ref, _ = kiln.ops.block_sparse_attention(q, q, q, good, "causal")
    assert np.array_equal(out, ref)


def test_check_block_mask_refuses_shapes_whose_products_overflow():
    # rows x nqb x maxb overflowed int64 to 0, matched the empty index
    # arrays, and the checks read past them (a crash).
    from kiln.runtime import _ext
    empty, counts = np.zeros(0, np.int32), np.zeros(8, np.int32)
    counts[1] = 1
    with pytest.raises(ValueError, match="do not have the shapes given"):
        _ext.check_block_mask(counts, empty, np.zeros(8, np.int32), empty, 1, 8, 2**61, 10, 1,
                              10)


def test_block_mask_carries_its_rule(rng):
    """A block mask remembers the rule it was built from. Given neither
    mask_kind nor mask_mod, block_sparse_attention applies the mask's own
    @kiln.jit rule inside partial blocks (as flex_attention applies
    block_mask.mask_mod); a plain Python rule that hides keys inside a
    partial block is refused, not computed unmasked. A rule that hides
    none (partial blocks only at the sequence end) needs nothing."""
    B, Hq, Hkv, S, D = 1, 2, 1, 150, 32
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    scale = 1 / np.sqrt(D)
    np_mod = lambda b, h, qi, ki: (ki <= qi) & (ki % 2 == h % 2)  # noqa: E731
    mask = kiln.ops.block_mask(dilated_causal, B, Hq, S, S)
    assert mask["hides_keys"]
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask)
    ro, rl = dense_reference(q, k, v, np_mod, scale)
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)
    named, _ = kiln.ops.block_sparse_attention(q, k, v, mask, mask_mod=dilated_causal)
    assert np.array_equal(out, named)
    # With a mask_kind too, the mask's own rule still applies (a kind alone
    # dropped the rule's other terms: dilated causal run as "causal" was off
    # by 2.2).
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, "causal")
    ro, rl = dense_reference(q, k, v, np_mod, scale)
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)
    # The same rule in numpy: it cannot be fused, so it must be passed.
    host = kiln.ops.block_mask(np_mod, B, Hq, S, S)
    assert host["hides_keys"]
    with pytest.raises(ValueError, match="hides keys inside its partial blocks"):
        kiln.ops.block_sparse_attention(q, k, v, host)
    causal, _ = kiln.ops.block_sparse_attention(q, k, v, kiln.ops.block_mask(
        lambda b, h, qi, ki: ki <= qi, B, Hq, S, S), "causal")
    assert_close(causal, dense_reference(q, k, v, lambda b, h, qi, ki: ki <= qi, scale)[0],
                 2e-4, 2e-5)
    # Whole key blocks of 64, by query block (150 keys: the last block is
    # partial only because the sequence ends there): nothing to apply.
    blocky = lambda b, h, qi, ki: (ki // 64 + qi // 64 + h) % 2 == 0  # noqa: E731
    for rule in (blocky, lambda b, h, qi, ki: ki >= 0):
        m = kiln.ops.block_mask(rule, B, Hq, S, S)
        assert not m["hides_keys"] and m["kv_num"].sum() > 0
        out, lse = kiln.ops.block_sparse_attention(q, k, v, m)
        ro, rl = dense_reference(q, k, v, rule, scale)
        assert_close(out, ro, 2e-4, 2e-5)
        assert_close(lse, rl, 2e-5, 2e-5)


@kiln.jit
def every_fifth_blind(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (q_idx % 5 != 0) & (kv_idx != 10)


def test_rows_that_see_no_key_are_zero_whatever_the_hidden_values(rng):
    """A NaN value at a key hidden inside a computed block made every row of
    that block NaN, those that see no key included (0 x NaN in P V), where
    they must give out 0 and lse -inf."""
    B, H, S, D = 1, 1, 70, 16
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
    v[..., 10, :] = np.nan
    rule = lambda b, h, qi, ki: (ki <= qi) & (qi % 5 != 0) & (ki != 10)  # noqa: E731
    mask = kiln.ops.block_mask(rule, B, H, S, S)
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, mask_mod=every_fifth_blind)
    blind = np.arange(S) % 5 == 0
    assert (out[0, 0, blind] == 0).all() and (lse[0, 0, blind] == -np.inf).all()


@kiln.jit
def wrong_arity(b, h, q_idx):
    return q_idx > 0


@kiln.jit
def returns_pointer_math(b, h, q_idx, kv_idx):
    return kl.dot(q_idx, kv_idx)  # error: dot needs


def test_bad_mods_raise():
    with pytest.raises(TypeError, match="takes 4 parameters"):
        kiln.ops.block_mask(wrong_arity, 1, 1, 64, 64)
    with pytest.raises(kiln.CompilationError):
        kiln.ops.block_mask(returns_pointer_math, 1, 1, 64, 64)
    # A declaration of the right signature, no body: refused (the build
    # crashed inlining it).
    for decl in ("func.func private @mask_mod(i32, i32, tensor<64x1xi32>, tensor<1x64xi32>) "
                 "-> tensor<64x64xi1>",
                 "func.func private @score_mod(tensor<64x64xf32>, i32, i32, tensor<64x1xi32>, "
                 "tensor<1x64xi32>) -> tensor<64x64xf32>"):
        with pytest.raises(kiln._kiln.IRError, match="must be a func.func with one block"):
            kiln.ops.kernel("block_sparse_attention", mods=decl)


def test_operator_configs_that_would_not_finish_are_refused():
    # row_taps unrolls the kernel's rows: kh 600000000 compiled until memory
    # ran out.
    with pytest.raises(kiln._kiln.IRError, match="row_taps unrolls the kernel's rows, at most "
                                                 "16, got kh 600000000"):
        kiln.ops.kernel("depthwise_conv2d", kh=600000000, kw=1, row_taps=1)


def test_a_jit_lives_as_long_as_its_kernels():
    # A kernel launches on its JIT's thread pool: deleting the JIT under it
    # freed the pool (a use after free).
    import sys
    from kiln import _kiln
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = open(os.path.join(root, "examples", "vector_add.mlir")).read()
    jit = _kiln.JIT.create(num_threads=2)
    before = sys.getrefcount(jit)
    k = jit.compile(src, "vector_add")
    assert sys.getrefcount(jit) == before + 1
    del jit
    x, y = np.arange(3000, dtype=np.float32), np.ones(3000, np.float32)
    out = np.full(3000, np.nan, np.float32)
    k.launch([x.ctypes.data, y.ctypes.data, out.ctypes.data, 3000], [3])
    assert np.array_equal(out, x + 1)


def test_specialized_shapes_match_the_generic_kernel(rng):
    x = rng.standard_normal((1, 17, 13, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    generic = kiln.ops.conv2d(x, w, padding=1)
    buckets = [(1, 17, 13, 8), (1, 32, 32, 8)]

    def specialized():
        return sum(any(k.startswith("static.") for k, _ in key[-1]) for key in kiln.ops._kernels)

    before = specialized()
    special = kiln.ops.conv2d(x, w, padding=1, specialize=buckets)
    assert specialized() == before + 1  # a kernel for this bucket
    assert_close(special, generic.astype(np.float64), 1e-6, 1e-6)
    # Not a bucket: a generic kernel (the host's default block_m follows the
    # pixel count, so it may be another of the generic kernels).
    other = rng.standard_normal((1, 9, 9, 8)).astype(np.float32)
    kiln.ops.conv2d(other, w, padding=1, specialize=buckets)
    assert specialized() == before + 1
    with pytest.raises(kiln._kiln.IRError, match="no integer argument named 'bogus'"):
        kiln.ops.kernel("conv", **{"static.bogus": 3})


def test_operator_kernels_follow_kiln_target_and_tma(rng, monkeypatch):
    # The operator kernel cache is keyed by what the code depends on: after
    # $KILN_TARGET, $KILN_TMA, $KILN_SWIZZLE or another compile option in the
    # environment changes, the kernel is compiled again (a
    # stale key once ran one target's kernels for another in tests that
    # switch targets), and the results stay right.
    w = rng.standard_normal((40, 24)).astype(np.float32)
    ids = rng.integers(0, 40, 33)
    cfg = dict(block_n=8, block_d=16, dtype="f32")
    monkeypatch.setenv("KILN_TARGET", "host")
    k_host = kiln.ops.kernel("embedding", **cfg)
    assert_close(kiln.ops.embedding(w, ids, 8, 16), w[ids].astype(np.float64), 0, 0)
    monkeypatch.setenv("KILN_TARGET", "emu-sm_90a")
    k_emu = kiln.ops.kernel("embedding", **cfg)
    assert k_emu is not k_host
    assert_close(kiln.ops.embedding(w, ids, 8, 16), w[ids].astype(np.float64), 0, 0)
    # Each compile option in the environment, one more at a time. (KILN_FP8_WGMMA
    # was missing from the fast path's key until the thirty-second session:
    # the kernel compiled before it changed came back.)
    options = ("KILN_TMA", "KILN_SWIZZLE", "KILN_OVERLAP", "KILN_PIPELINE_GATHERS",
               "KILN_FP8_WGMMA", "KILN_PINGPONG")
    previous = k_emu
    for name in options:
        monkeypatch.setenv(name, "0")
        k = kiln.ops.kernel("embedding", **cfg)
        assert k is not previous, name
        previous = k
    monkeypatch.setenv("KILN_TARGET", "host")
    for name in options:
        monkeypatch.delenv(name)
    assert kiln.ops.kernel("embedding", **cfg) is k_host


def test_attention_without_overlap(rng, monkeypatch):
    # overlap=True marks attention's full-block loop (sm_90a), and
    # KILN_OVERLAP=0 drops the mark; the results are the same either way, on
    # every target.
    B, H, S, D = 1, 2, 200, 64
    bits = [to_bf16_bits(rng.standard_normal((B, H, S, D)).astype(np.float32))
            for _ in range(3)]
    x = [from_bf16_bits(b) for b in bits]
    mask = kiln.ops.block_mask(lambda b, h, qi, ki: ki <= qi, B, H, S, S)
    ro, _ = dense_reference(*x, lambda b, h, qi, ki: ki <= qi, 1 / np.sqrt(D))
    outs = []
    for overlap, env in ((True, "1"), (True, "0"), (False, "1")):
        monkeypatch.setenv("KILN_OVERLAP", env)
        out, _ = kiln.ops.block_sparse_attention(*[kiln.bf16(b) for b in bits], mask, "causal",
                                                 overlap=overlap)
        assert_close(out, ro, 2e-2, 1e-2)
        outs.append(out)
    # The same dots in the same order, only issued earlier: bit for bit.
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def launch_attention(kern, qkv, mask, docs, scale):
    """Launches a block_sparse_attention kernel directly on q, k, v [B, H, S,
    D] (self-attention) with `mask`'s lists; returns (out, lse), poisoned
    (NaN) before the launch."""
    B, H, S, D = qkv[0].shape
    arrays = [np.ascontiguousarray(mask[n], np.int32)
              for n in ("kv_num", "kv_idx", "full_num", "full_idx")]
    out = np.full((B, H, S, D), np.nan, np.float32)
    lse = np.full((B, H, S), np.nan, np.float32)
    kern.launch([a.ctypes.data for a in qkv] + [out.ctypes.data, lse.ctypes.data] +
                [a.ctypes.data for a in arrays] +
                [docs.ctypes.data, B, H, S, S, mask["nqb"], mask["maxb"], scale],
                [mask["nqb"], B * H])
    return out, lse


@pytest.mark.parametrize("kind", ["none", "sliding_window"])
def test_attention_block_128_two_warpgroups(rng, monkeypatch, kind):
    # Query blocks of 128 rows at 8 warps: on sm_90a two warpgroups of 64 rows
    # each, which take turns issuing their wgmma groups (docs/gpu.md,
    # "Pingpong"); KILN_PINGPONG=0 issues them together, and overlap=1 takes
    # turns with the next block's scores issued a softmax ahead. The same dots
    # on the same registers either way: bit for bit, and close to float64. S is
    # not a multiple of the block (a partial last block of keys and queries).
    B, H, S, D, window = 1, 2, 300, 64, 100
    bits = [to_bf16_bits(rng.standard_normal((B, H, S, D)).astype(np.float32))
            for _ in range(3)]
    x = [from_bf16_bits(b) for b in bits]
    mods = {"none": lambda b, h, qi, ki: ki >= 0,
            "sliding_window": lambda b, h, qi, ki: (ki <= qi) & (qi - ki < window)}
    mask = kiln.ops.block_mask(mods[kind], B, H, S, S, block=128)
    ro, rl = dense_reference(*x, mods[kind], 1 / np.sqrt(D))
    docs = np.zeros((B, S), np.int32)
    outs = []
    for env, overlap in (("1", {}), ("0", {}), ("1", {"overlap": 1})):
        monkeypatch.setenv("KILN_PINGPONG", env)
        kern = kiln.ops.kernel("block_sparse_attention", _num_warps=8, head_dim=D, block=128,
                               mask=kind, window=window, prefix=0, gqa_group=1, softcap=0.0,
                               dtype="bf16", **overlap)
        out, lse = launch_attention(kern, bits, mask, docs, 1 / np.sqrt(D))
        assert_close(out, ro, 2e-2, 1e-2)
        assert_close(lse, rl, 1e-4, 1e-4)
        outs.append((out, lse))
    for other in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], other))


def mask_rules(docs, window, prefix):
    """The built-in masks as mask_mods (b, h, q_idx, kv_idx) -> visible, for
    self-attention over docs' [B, S] document ids."""
    last = docs.shape[1] - 1
    return {"none": lambda b, h, qi, ki: ki >= 0,
            "causal": lambda b, h, qi, ki: ki <= qi,
            "sliding_window": lambda b, h, qi, ki: (ki <= qi) & (qi - ki < window),
            "prefix_lm": lambda b, h, qi, ki: (ki <= qi) | (ki < prefix),
            "document": lambda b, h, qi, ki: (docs[b][np.minimum(qi, last)] ==
                                              docs[b][np.minimum(ki, last)])}


@pytest.mark.parametrize("block,warps,kind,dtype,softcap", [
    (128, 8, "sliding_window", "bf16", 0.0), (128, 8, "none", "bf16", 0.0),
    (64, None, "causal", "bf16", 30.0), (64, None, "document", "f32", 0.0),
    (64, None, "prefix_lm", "f16", 0.0)])
def test_attention_one_loop(rng, block, warps, kind, dtype, softcap):
    # one_loop 1: the partial and the full blocks in one loop, the mask under a
    # branch (on GPUs an scf.if whose scores stay in the dot's registers:
    # wgmma's or mma.sync's). The same blocks in the same order as the two
    # loops: the same bits on every target, and close to float64. S is not a
    # multiple of the block; the document mask has three documents, prefix_lm a
    # prefix of 40.
    B, H, S, D, window, prefix = 1, 2, 300, 64, 100, 40
    x32 = [rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3)]
    if dtype == "bf16":
        arrs = [to_bf16_bits(a) for a in x32]
        x = [from_bf16_bits(a) for a in arrs]
    elif dtype == "f16":
        arrs = [a.astype(np.float16) for a in x32]
        x = [a.astype(np.float32) for a in arrs]
    else:
        arrs = x = x32
    docs = np.zeros((B, S), np.int32)
    docs[:, 130:], docs[:, 220:] = 1, 2
    rules = mask_rules(docs, window, prefix)
    mask = kiln.ops.block_mask(rules[kind], B, H, S, S, block=block)
    outs = []
    for one_loop in (0, 1):
        kern = kiln.ops.kernel("block_sparse_attention", _num_warps=warps, head_dim=D,
                               block=block, mask=kind, window=window, prefix=prefix,
                               gqa_group=1, softcap=softcap, dtype=dtype, one_loop=one_loop)
        out, lse = launch_attention(kern, arrs, mask, docs, 1 / np.sqrt(D))
        assert not np.isnan(out).any() and not np.isnan(lse).any()
        outs.append((out, lse))
    assert all(np.array_equal(a, b) for a, b in zip(*outs))
    if not softcap:  # (softcap's float64 check: the two loops' tests)
        tol = (1e-4, 1e-5) if dtype == "f32" else (2e-2, 1e-2)
        ro, rl = dense_reference(*x, rules[kind], 1 / np.sqrt(D))
        assert_close(outs[1][0], ro, *tol)
        assert_close(outs[1][1], rl, 1e-4, 1e-4)


def test_attention_one_loop_from_kiln_ops(rng):
    # kiln.ops' one_loop=True: the same bits as the two loops, with a mask_mod
    # fused into the branch.
    B, H, S, D = 1, 2, 150, 64
    bits = [to_bf16_bits(rng.standard_normal((B, H, S, D)).astype(np.float32))
            for _ in range(3)]

    @kiln.jit
    def stripes(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & ((q_idx - kv_idx) % 3 != 1)

    rule = lambda b, h, qi, ki: (ki <= qi) & ((qi - ki) % 3 != 1)  # noqa: E731
    mask = kiln.ops.block_mask(rule, B, H, S, S)
    args = [kiln.bf16(b) for b in bits]
    two = kiln.ops.block_sparse_attention(*args, mask, mask_mod=stripes)
    one = kiln.ops.block_sparse_attention(*args, mask, mask_mod=stripes, one_loop=True)
    assert all(np.array_equal(a, b) for a, b in zip(two, one))
    ro, _ = dense_reference(*[from_bf16_bits(b) for b in bits], rule, 1 / np.sqrt(D))
    assert_close(one[0], ro, 2e-2, 1e-2)


def test_attention_one_loop_refuses_overlap():
    with pytest.raises(Exception, match="one_loop and overlap cannot be combined"):
        kiln.ops.kernel("block_sparse_attention", head_dim=64, block=64, mask="causal",
                        window=256, prefix=0, gqa_group=1, softcap=0.0, dtype="bf16",
                        one_loop=1, overlap=1)


def test_attention_profile_stamps(rng):
    # profile=True: the same kernel plus five clock readings per program
    # (entry, around the partial blocks' loop, after the full blocks', after
    # lse's store, before out's). The results are the same bits; each program's readings
    # are written (not the -1 they start as) and go forward. Sliding window:
    # both loops run. S not a multiple of the block.
    B, H, S, D, window = 1, 2, 200, 64, 70
    bits = [to_bf16_bits(rng.standard_normal((B, H, S, D)).astype(np.float32))
            for _ in range(3)]
    rule = lambda b, h, qi, ki: (ki <= qi) & (qi - ki < window)  # noqa: E731
    mask = kiln.ops.block_mask(rule, B, H, S, S)
    args = [kiln.bf16(b) for b in bits]
    out, lse = kiln.ops.block_sparse_attention(*args, mask, "sliding_window", window=window)
    pout, plse, stamps = kiln.ops.block_sparse_attention(*args, mask, "sliding_window",
                                                         window=window, profile=True)
    assert np.array_equal(out, pout) and np.array_equal(lse, plse)
    ro, rl = dense_reference(*[from_bf16_bits(b) for b in bits], rule, 1 / np.sqrt(D))
    assert_close(pout, ro, 2e-2, 1e-2)
    assert stamps.shape == (mask["nqb"] * B * H, 6) and stamps.dtype == np.int64
    assert (stamps >= 0).all(), stamps
    assert (np.diff(stamps[:, :5], axis=1) >= 0).all(), stamps
    assert (stamps[:, 4] > stamps[:, 0]).all(), stamps
    # Column 5: the processor (a core of this machine here).
    assert (stamps[:, 5] < os.cpu_count()).all(), stamps
    # Both loops ran somewhere: the partial blocks' loop takes time in the
    # programs that have partial blocks.
    nqb, order = mask["nqb"], np.arange(stamps.shape[0])
    partial = np.asarray(mask["kv_num"]).reshape(B * H, nqb)[order % (B * H),
                                                             nqb - 1 - order // (B * H)]
    assert (partial > 0).any()
    assert (stamps[partial > 0, 2] > stamps[partial > 0, 1]).all(), stamps


def test_attention_scale_must_be_positive(rng):
    # The bf16 kernel takes the row maximum of the unscaled scores (as
    # FlashAttention does), which is right for a positive scale only: kiln.ops
    # refuses others, and the kernel launched directly turns them into NaN.
    B, H, S, D = 1, 1, 70, 64
    bits = [to_bf16_bits(rng.standard_normal((B, H, S, D)).astype(np.float32))
            for _ in range(3)]
    mask = kiln.ops.block_mask(lambda b, h, qi, ki: ki <= qi, B, H, S, S)
    # 1e-50, 1e39: 0, inf in f32; 2.5e38: inf times log2(e) (NaN rows before).
    for bad in (-0.125, 0.0, float("nan"), float("inf"), 1e-50, 1e39, 2.5e38):
        with pytest.raises(ValueError, match="scale must be a positive"):
            kiln.ops.block_sparse_attention(*[kiln.bf16(b) for b in bits], mask, "causal",
                                            scale=bad)
    for bad in ("0.5", np.array([0.5]), True):   # ("0.5" was taken as 0.5)
        with pytest.raises(TypeError, match="scale must be a number"):
            kiln.ops.block_sparse_attention(*[kiln.bf16(b) for b in bits], mask, "causal",
                                            scale=bad)
    for key, bad in (("block", 0), ("block_kv", -64), ("block", 2.0)):
        with pytest.raises(ValueError, match="must be a positive integer"):
            kiln.ops.block_sparse_attention(*[kiln.bf16(b) for b in bits],
                                            {**mask, key: bad}, "causal")
    with pytest.raises(TypeError, match="mask_mod must be"):
        kiln.ops.block_mask(None, B, H, S, S)
    kern = kiln.ops.kernel("block_sparse_attention", head_dim=D, block=64, mask="causal",
                           window=256, prefix=0, gqa_group=1, softcap=0.0, dtype="bf16")
    docs = np.zeros((B, S), np.int32)
    for scale, finite in ((0.125, True), (-0.125, False)):
        out, _ = launch_attention(kern, bits, mask, docs, scale)
        assert np.isfinite(out).all() if finite else np.isnan(out).all()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_block_sparse_attention_softcap(rng, dtype):
    # Gemma-style soft capping, cap tanh(s / cap), on every target the suite
    # runs (on GPUs the kernel folds log2 e into the cap's multiply and keeps
    # its full-block loop without overlap).
    B, H, S, D, cap = 1, 2, 150, 64, 5.0
    x = [rng.standard_normal((B, H, S, D)).astype(np.float32) * 2 for _ in range(3)]
    if dtype == "bf16":
        bits = [to_bf16_bits(a) for a in x]
        args = [kiln.bf16(b) for b in bits]
        x = [from_bf16_bits(b) for b in bits]
    else:
        args = x
    causal = lambda b, h, qi, ki: ki <= qi
    mask = kiln.ops.block_mask(causal, B, H, S, S)
    out, lse = kiln.ops.block_sparse_attention(*args, mask, "causal", softcap=cap)
    q, k, v = (a.astype(np.float64) for a in x)
    s = cap * np.tanh(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) / cap)
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    ro = p @ v / p.sum(-1, keepdims=True)
    rl = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    assert_close(out, ro, 2e-2 if dtype == "bf16" else 2e-4, 1e-2 if dtype == "bf16" else 2e-5)
    assert_close(lse, rl, 1e-4, 1e-4)


@pytest.mark.parametrize("kind,window,prefix", [("sliding_window", 1, 0), ("prefix_lm", 0, 0),
                                                ("causal", 0, 0)])
def test_mask_edges(rng, kind, window, prefix):
    # The built-in masks' edge parameters (window 1: the diagonal only;
    # prefix 0: causal), with fewer keys than queries (seq_kv < seq_q).
    B, H, S, Skv, D = 1, 2, 100, 70, 32
    q = rng.standard_normal((B, H, S, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, H, Skv, D)).astype(np.float32) for _ in range(2))
    rule = {"sliding_window": lambda b, h, qi, ki: (ki <= qi) & (qi - ki < window),
            "prefix_lm": lambda b, h, qi, ki: (ki < prefix) | (ki <= qi),
            "causal": lambda b, h, qi, ki: ki <= qi}[kind]
    mask = kiln.ops.block_mask(rule, B, H, S, Skv)
    out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, kind, window=max(window, 1),
                                               prefix=prefix)
    ro, rl = dense_reference(q, k, v, rule, 1 / np.sqrt(D))
    assert_close(out, ro, 2e-4, 2e-5)
    assert_close(lse, rl, 2e-5, 2e-5)


def test_mask_parameters_are_checked(rng):
    q = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    mask = kiln.ops.block_mask(lambda b, h, qi, ki: ki <= qi, 1, 1, 8, 8)
    for kwargs, what in [(dict(mask_kind="sliding_window", window=0), "window must be in"),
                         (dict(mask_kind="sliding_window", window=2**31),
                          "'window' of 'block_sparse_attention' must lie within"),
                         (dict(mask_kind="prefix_lm", prefix=-1), "prefix must be in"),
                         (dict(mask_kind="causal", softcap=-1.0), "softcap must be 0"),
                         (dict(mask_kind="causal", softcap=float("inf")), "softcap must be 0")]:
        with pytest.raises(ValueError, match=what):
            kiln.ops.block_sparse_attention(q, q, q, mask, **kwargs)


def test_empty_inputs_give_empty_outputs(rng):
    """A batch, head count, sequence or channel count of zero is a valid
    input, as in PyTorch: the output is empty (or, for keys, fully masked),
    not a launch error. Kernel sizes larger than the input are refused."""
    causal = lambda b, h, qi, ki: ki <= qi  # noqa: E731
    for B, H, S, Skv in [(1, 2, 0, 0), (0, 2, 10, 10), (1, 0, 10, 10), (1, 2, 0, 10)]:
        q = rng.standard_normal((B, H, S, 16)).astype(np.float32)
        k = rng.standard_normal((B, H, Skv, 16)).astype(np.float32)
        mask = kiln.ops.block_mask(causal, B, H, S, Skv, block=16)
        out, lse = kiln.ops.block_sparse_attention(q, k, k, mask, "causal")
        assert out.shape == (B, H, S, 16) and lse.shape == (B, H, S)
    # No keys: every row sees nothing, as flex_attention (out 0, lse -inf).
    q = rng.standard_normal((1, 2, 10, 16)).astype(np.float32)
    k = np.zeros((1, 2, 0, 16), np.float32)
    out, lse = kiln.ops.block_sparse_attention(
        q, k, k, kiln.ops.block_mask(causal, 1, 2, 10, 0, block=16), "causal")
    assert (out == 0).all() and (lse == -np.inf).all()
    with pytest.raises(ValueError, match=r"query heads \(2\) must be a multiple of key/value "
                                         r"heads \(0\)"):
        kiln.ops.block_sparse_attention(q, q[:, :0], q[:, :0],
                                        kiln.ops.block_mask(causal, 1, 2, 10, 10, block=16))
    with pytest.raises(ValueError, match="head dim must be positive"):
        kiln.ops.block_sparse_attention(q[..., :0], q[..., :0], q[..., :0],
                                        kiln.ops.block_mask(causal, 1, 2, 10, 10, block=16))

    x = rng.standard_normal((2, 8, 8, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    assert kiln.ops.conv2d(x[:0], w, None, padding=1).shape == (0, 8, 8, 5)
    assert kiln.ops.conv2d(x, w[..., :0], None, padding=1).shape == (2, 8, 8, 0)
    # No input channels: the bias alone.
    b = rng.standard_normal(5).astype(np.float32)
    out = kiln.ops.conv2d(x[..., :0], w[:, :, :0], b, padding=1)
    assert_close(out, np.broadcast_to(b.astype(np.float64), (2, 8, 8, 5)), 0, 0)
    dw = rng.standard_normal((3, 3, 4)).astype(np.float32)
    assert kiln.ops.depthwise_conv2d(x[:0], dw, None, padding=1).shape == (0, 8, 8, 4)
    assert kiln.ops.depthwise_conv2d(x[..., :0], dw[..., :0], None,
                                     padding=1).shape == (2, 8, 8, 0)
    with pytest.raises(ValueError, match="output would be empty"):
        kiln.ops.depthwise_conv2d(x[:, :2, :2], dw)
    with pytest.raises(ValueError, match="output would be empty"):
        kiln.ops.conv2d(x[:, :2, :2], w)
    # No index heads or channels: every score is an empty sum, 0 (-inf
    # past the causal limit). (The kernel refused them: "index_heads must
    # be positive".)
    kv = rng.standard_normal((5, 8)).astype(np.float32)
    for q, kk in ((np.zeros((3, 0, 8), np.float32), kv), (np.zeros((3, 2, 0), np.float32),
                                                          kv[:, :0])):
        w8 = np.ones(q.shape[:2], np.float32)
        assert (kiln.ops.dsa_indexer(q, w8, kk, causal=False) == 0).all()
        got = kiln.ops.dsa_indexer(q, w8, kk, q_offset=1)
        ref = np.where(np.arange(5)[None, :] > 1 + np.arange(3)[:, None], -np.inf, 0)
        assert np.array_equal(got, ref)


def test_bad_parameters_are_named(rng):
    """Shapes, ranks, block sizes, strides and index types that do not fit an
    operator raise a ValueError or TypeError naming the argument, before a
    kernel reads past an array or a grid divides by zero (a review found
    out-of-bounds reads in attention, silent wrong answers in dsa_topk and
    dsa_sparse_attention with a block of 0, and bare unpacking errors)."""
    ops = kiln.ops
    q = rng.standard_normal((1, 1, 64, 16)).astype(np.float32)
    m = ops.block_mask(lambda b, h, qi, ki: ki <= qi, 1, 1, 64, 64, block=16)
    for k, v in [(q, q[:, :, :1].copy()), (q[..., :8].copy(), q), (q, q[..., :8].copy()),
                 (np.concatenate([q, q]), np.concatenate([q, q]))]:
        with pytest.raises(ValueError, match=r"k and v \[B, Hkv, Skv, D\] expected"):
            ops.block_sparse_attention(q, k, v, m, "causal")
    with pytest.raises(ValueError, match="the mask lacks nqb"):
        ops.block_sparse_attention(q, q, q, {n: a for n, a in m.items() if n != "nqb"})
    with pytest.raises(TypeError, match="mask must be block_mask\\(\\)'s dict, got NoneType"):
        ops.block_sparse_attention(q, q, q, None)
    s = rng.standard_normal((2, 50)).astype(np.float32)
    qq = rng.standard_normal((2, 4, 16)).astype(np.float32)
    kv = rng.standard_normal((10, 16)).astype(np.float32)
    idx = np.array([[0, 1], [2, 3]])
    W = rng.standard_normal((10, 5)).astype(np.float32)
    x = rng.standard_normal((2, 8, 8, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    for call, what in [
            (lambda: ops.dsa_topk(s, 4, block=0), "block must be a positive integer"),
            (lambda: ops.dsa_topk(s, -1), "k must be an integer >= 0"),
            (lambda: ops.dsa_topk(s[0], 4), r"scores must be \[T, S\]"),
            (lambda: ops.dsa_sparse_attention(qq, kv, idx, 16, block_k=0), "block_k must be"),
            (lambda: ops.dsa_sparse_attention(qq, kv, idx, 16, heads_block=0), "heads_block"),
            (lambda: ops.dsa_sparse_attention(qq, kv, idx, 16, scale=float("nan")),
             "scale must be finite"),
            (lambda: ops.dsa_sparse_attention(qq, kv, idx[0], 16), r"indices \[Sq, topk\]"),
            (lambda: ops.dsa_indexer(qq, np.ones((2, 4), np.float32), kv, q_offset=2**31),
             "q_offset must be an integer"),
            (lambda: ops.dsa_indexer(qq, np.ones((2, 4), np.float32), kv, block_s=0),
             "block_s must be"),
            (lambda: ops.embedding(W, [1, 2], block_d=0), "block_d must be"),
            (lambda: ops.embedding(W[None], [1]), r"weight must be \[rows, columns\]"),
            (lambda: ops.moe_permute(W, [1], block_r=0), "block_r must be"),
            (lambda: ops.moe_unpermute(W, [[0]], [[1.0]], block_h=0), "block_h must be"),
            (lambda: ops.moe_unpermute(W, [0], [1.0]), r"slot_rows must be \[tokens, k\]"),
            (lambda: ops.moe_route([[0, 1]], 2.5), "num_experts must be an integer"),
            (lambda: ops.paged_kv_gather(np.zeros((4, 8, 2), np.float32),
                                         np.zeros((2, 1), np.int32), [-1, -2]),
             "seq_lens must be >= 0"),
            (lambda: ops.paged_kv_gather(np.zeros((4, 8, 2), np.float32),
                                         np.zeros(2, np.int32), [1, 2]),
             r"block_table must be \[batch, max_blocks\]"),
            (lambda: ops.conv2d(x, w, stride=0), "stride must be an integer >= 1"),
            (lambda: ops.conv2d(x, w, padding=-1), "padding must be an integer >= 0"),
            # (numpy's bare "Maximum allowed dimension exceeded" before.)
            (lambda: ops.conv2d(x, w, padding=2**31), "padding must be .* below 2\\^31"),
            (lambda: ops.depthwise_conv2d(x, w[..., 0, :4], padding=2**31),
             "padding must be .* below 2\\^31"),
            # (numpy's MemoryError building 2^40 offsets before.)
            (lambda: ops.moe_route([[0, 1]], 2**40), "num_experts must be .* below 2\\^31"),
            # Pixel indices are int32: past 2^31 pixels they wrapped and read
            # another pixel (conv, conv2d, patch_embed and the PyTorch path
            # share _conv_dims).
            (lambda: ops._conv_dims("conv", (1, 1, 65536, 32776, 1), (1, 1, 1, 1, 1), 1,
                                    (1, 65535, 32768), 0, 1), "must be below 2\\^31"),
            (lambda: ops.conv(x[:, None], w[None], padding=[1, 1]), "or 3 of them"),
            (lambda: ops.conv2d(x[..., :0], w[:, :, :0], groups=0), "groups must be"),
            (lambda: ops.depthwise_conv2d(x, w[..., 0, :4], stride=(1, 0)), "stride must be"),
            (lambda: ops.patch_embed(x[:, None], w[None], patch=0), "patch must be"),
            (lambda: ops.patch_embed(rng.standard_normal((1, 1, 32, 32, 3)),
                                     rng.standard_normal((1, 16, 16, 6, 4)), patch=16),
             r"w \[temporal_patch, patch, patch, C, OC\] expected"),
            (lambda: ops.block_mask(lambda b, h, qi, ki: ki <= qi, 1, 1, -1, 4),
             "seq_q must be an integer >= 0")]:
        with pytest.raises(ValueError, match=what):
            call()
    for call, what in [
            (lambda: ops.embedding(W, np.array([1.9])), "ids must be integers, got float64"),
            (lambda: ops.moe_route(np.array([[0.5, 1.2]]), 4), "topk_ids must be integers"),
            (lambda: ops.block_sparse_attention(q, q, q, m, "document",
                                                doc_ids=np.zeros((1, 64))), "doc_ids must be "
                                                                            "integers")]:
        with pytest.raises(TypeError, match=what):
            call()
    # Document labels past int32 would merge documents: refused.
    with pytest.raises(ValueError, match="doc_ids must fit in int32"):
        ops.block_sparse_attention(q, q, q, m, "document",
                                   doc_ids=np.repeat([[2**33, 2**34]], 32, axis=1))


def test_edge_inputs_that_are_valid(rng):
    ops = kiln.ops
    W = rng.standard_normal((10, 5)).astype(np.float32)
    # A 0-d id gives one row of shape (dim,), as weight[3]; an empty list none.
    assert_close(ops.embedding(W, np.int64(3)), W[3].astype(np.float64), 0, 0)
    assert ops.embedding(W, []).shape == (0, 5)
    # A NaN or inf weight on a skipped slot (-1) contributes nothing.
    y = rng.standard_normal((2, 3)).astype(np.float32)
    out = ops.moe_unpermute(y, np.array([[0, -1], [-1, 1]]),
                            np.array([[0.5, np.nan], [np.inf, 2.0]], np.float32))
    assert_close(out, np.stack([0.5 * y[0], 2.0 * y[1]]).astype(np.float64), 1e-6, 1e-6)
    # kiln.bf16 data where float32 is computed: decoded, not refused.
    bits = to_bf16_bits(rng.standard_normal((2, 8)).astype(np.float32))
    vals = from_bf16_bits(bits).astype(np.float64)
    got = ops.dsa_topk(kiln.bf16(bits), 3)
    assert (got == np.sort(np.argsort(-vals, axis=1, kind="stable")[:, :3], axis=1)).all()
    xb = to_bf16_bits(rng.standard_normal((1, 1, 32, 32, 3)).astype(np.float32))
    wb = to_bf16_bits(rng.standard_normal((1, 16, 16, 3, 4)).astype(np.float32) * 0.1)
    ref = np.einsum("nthpwqc,tpqco->nthwo",
                    from_bf16_bits(xb).astype(np.float64).reshape(1, 1, 2, 16, 2, 16, 3),
                    from_bf16_bits(wb).astype(np.float64))
    assert_close(ops.patch_embed(kiln.bf16(xb), kiln.bf16(wb), patch=16), ref, 1e-4, 1e-4)
    # A @kiln.jit mask_mod on empty sizes: the empty mask, no kernel launch.
    @kiln.jit
    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx
    for sizes in [(1, 1, 0, 16), (0, 1, 16, 16), (1, 1, 16, 0)]:
        jm = ops.block_mask(causal, *sizes, block=16)
        hm = ops.block_mask(lambda b, h, qi, ki: ki <= qi, *sizes, block=16)
        for n in ("kv_num", "kv_idx", "full_num", "full_idx"):
            assert np.array_equal(jm[n], hm[n]), (sizes, n)


def topk_reference(scores, k):
    """dsa_topk's definition: per row, the indices of the k largest scores
    that are finite or +inf (NaN and -inf never count; -0.0 equals 0.0), ties
    to the lower index, in ascending order, -1 padding."""
    out = np.full((scores.shape[0], k), -1, np.int32)
    for t, row in enumerate(scores.astype(np.float64)):
        ok = np.flatnonzero(row > -np.inf)          # (NaN compares false)
        order = ok[np.lexsort((ok, -row[ok]))][:k]  # score descending, index ascending
        out[t, :len(order)] = np.sort(order)
    return out


@pytest.mark.parametrize("S,k,block", [(90, 70, 16), (90, 70, 256), (300, 7, 64),
                                       (257, 300, 256), (33, 33, 8), (1000, 512, 128)])
def test_dsa_topk_ties_and_specials(rng, S, k, block):
    """The compaction by prefix sums: many ties at the k-th value (integer
    scores), NaN, +-inf, -0.0 and 0.0, rows with fewer than k that count,
    a row of only -inf, k above S; S not a multiple of the block."""
    T = 6
    s = rng.integers(-4, 5, (T, S)).astype(np.float32)
    s[0, rng.choice(S, S // 5, replace=False)] = np.nan
    s[1, rng.choice(S, S // 4, replace=False)] = -np.inf
    s[1, rng.choice(S, 3, replace=False)] = np.inf
    s[2] = np.where(rng.random(S) < 0.5, -0.0, 0.0)
    s[3] = -np.inf
    s[4] = rng.standard_normal(S).astype(np.float32)
    s[5, : S // 2] = -np.inf
    got = kiln.ops.dsa_topk(s, k, block=block)
    assert np.array_equal(got, topk_reference(s, k))


def test_zero_width_gathers_still_check_indices():
    """With no columns (an embedding of width 0, a cache of rows of no
    elements, no hidden units, no heads) the kernels were not launched, and
    an index outside the table returned an empty output with no IndexError.
    One column block runs now, to count them."""
    with pytest.raises(IndexError, match="1 id"):
        kiln.ops.embedding(np.zeros((4, 0), np.float32), np.array([9, 1]))
    assert kiln.ops.embedding(np.zeros((4, 0), np.float32), np.array([0, 3])).shape == (2, 0)
    cache = np.zeros((3, 4, 0), np.float32)
    with pytest.raises(IndexError, match="2 token"):
        kiln.ops.paged_kv_gather(cache, np.array([[0, 7]], np.int32), np.array([6], np.int32))
    assert kiln.ops.paged_kv_gather(cache, np.array([[0, 2]], np.int32),
                                    np.array([6], np.int32)).shape == (1, 6, 0)
    y, w = np.zeros((3, 0), np.float32), np.ones((1, 2), np.float32)
    with pytest.raises(IndexError, match="1 slot"):
        kiln.ops.moe_unpermute(y, np.array([[0, 5]], np.int32), w)
    assert kiln.ops.moe_unpermute(y, np.array([[0, -1]], np.int32), w).shape == (1, 0)
    q, kv = np.zeros((2, 0, 4), np.float32), np.zeros((3, 4), np.float32)
    with pytest.raises(IndexError, match="1 index"):
        kiln.ops.dsa_sparse_attention(q, kv, np.array([[0], [7]]), 4)
    out, lse = kiln.ops.dsa_sparse_attention(q, kv, np.array([[0], [1]]), 4)
    assert out.shape == (2, 0, 4) and lse.shape == (2, 0)
    with pytest.raises(TypeError, match="scale must be a number"):
        kiln.ops.dsa_sparse_attention(q, kv, np.array([[0], [1]]), 4, scale="0.5")
