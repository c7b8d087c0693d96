"""Triton-style pointer arithmetic that names rows by a tile of indices
(`table + ids[:, None] * D + cols[None, :]`, a paged cache's `blocks[:, None] *
stride + ...`) is a gather or scatter of rows (kiln.gather / kiln.scatter of a
view), not of single elements (docs/python.md, "Pointers"): checked against
numpy on every target the suite runs on, with masks on the rows and the
columns, a base offset, indices outside the table, stores, and the rows of a
paged cache read in a loop as a dot operand. The IR test checks the form."""
import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits


@kiln.jit
def embed(w, ids, out, n, d, H, V: kl.constexpr, BN: kl.constexpr, BD: kl.constexpr):
    """out[r, h, :d] = w[h, ids[r], :d] for r < n (each head h a table of V
    rows, BD >= d columns, the tail masked)."""
    pid = kl.program_id(0)
    h = kl.program_id(1)
    rows = pid * BN + kl.arange(0, BN)
    cols = kl.arange(0, BD)
    i = kl.load(ids + rows, mask=rows < n, other=0)
    m = (rows[:, None] < n) & (cols[None, :] < d)
    x = kl.load(w + h * (V * BD) + i[:, None] * BD + cols[None, :], mask=m, other=0.0)
    kl.store(out + rows[:, None] * (H * BD) + h * BD + cols[None, :], x, mask=m)


@kiln.jit
def embed_heads(w, ids, out, n, stride_h, base, BN: kl.constexpr, BD: kl.constexpr):
    """out[h, r, :] = w[base + h * stride_h + ids[r] * BD, :BD]: the offset
    added to the row offsets, `base + h * stride_h` (values the kernel is
    given, not known not to be negative), takes view dimensions of its own."""
    pid = kl.program_id(0)
    h = kl.program_id(1)
    rows = pid * BN + kl.arange(0, BN)
    cols = kl.arange(0, BD)
    i = kl.load(ids + rows, mask=rows < n, other=0)
    x = kl.load(w + i[:, None] * BD + (base + h * stride_h) + cols[None, :],
                mask=rows[:, None] < n, other=0.0)
    kl.store(out + h * (n * BD) + rows[:, None] * BD + cols[None, :], x,
             mask=rows[:, None] < n)


@pytest.mark.parametrize("shift", [5, -4])
def test_row_gather_with_a_scalar_offset(rng, shift):
    # ids count rows from `shift` rows before the table when shift < 0 (the
    # kernel's offset `base` is then negative, and the launch's value of it
    # is not known not to be negative: view dimensions of their own).
    H, V, n, BN, BD = 3, 13, 21, 8, 32
    lo = max(0, -shift)
    w = rng.standard_normal((max(shift, 0) * BD + H * V * BD,)).astype(np.float32)
    ids = rng.integers(lo, lo + V, n).astype(np.int32)
    out = np.full((H, n, BD), np.nan, np.float32)
    embed_heads[(kiln.cdiv(n, BN), H)](w, ids, out, n, V * BD, shift * BD, BN=BN, BD=BD)
    table = w[max(shift, 0) * BD:].reshape(H, V, BD)
    assert_close(out, table[:, ids - lo, :], 0, 0)
    ir = embed_heads.ir("kiln")
    assert ir.count("kiln.gather") == 1, ir


@kiln.jit
def scatter_rows(x, ids, out, n, BN: kl.constexpr, BD: kl.constexpr):
    """out[ids[r], :] = x[r, :] for r < n."""
    pid = kl.program_id(0)
    rows = pid * BN + kl.arange(0, BN)
    cols = kl.arange(0, BD)
    i = kl.load(ids + rows, mask=rows < n, other=0)
    t = kl.load(x + rows[:, None] * BD + cols[None, :], mask=rows[:, None] < n, other=0.0)
    kl.store(out + i[:, None] * BD + cols[None, :], t, mask=rows[:, None] < n)


@kiln.jit
def paged_scores(q, cache, table, out, n, PAGE: kl.constexpr, D: kl.constexpr,
                 BH: kl.constexpr, BN: kl.constexpr, STEPS: kl.constexpr,
                 SUM: kl.constexpr):
    """Scores of q against the first n tokens of a paged cache, BN tokens
    (several pages) per step, each token's slot from the block table
    (cache[table[t // PAGE] * PAGE + t % PAGE], as vLLM's Triton paged
    attention reads its keys): stored per step, or (SUM) summed over the
    steps and stored after the loop, which then writes no memory (on a GPU
    its rows are fetched iterations ahead, each row's block-table entry read
    at issue; docs/gpu.md, "Pipelined gathers")."""
    hq = kl.arange(0, BH)
    dd = kl.arange(0, D)
    qt = kl.load(q + hq[:, None] * D + dd[None, :])
    acc = kl.zeros((BH, BN), kl.float32)
    for j in range(0, STEPS):
        tok = j * BN + kl.arange(0, BN)
        blk = kl.load(table + tok // PAGE, mask=tok < n, other=0)
        slot = blk * PAGE + tok % PAGE
        k = kl.load(cache + slot[:, None] * D + dd[None, :], mask=tok[:, None] < n, other=0.0)
        if SUM:
            acc = kl.dot(qt, kl.trans(k), acc)
        else:
            kl.store(out + hq[:, None] * (STEPS * BN) + tok[None, :], kl.dot(qt, kl.trans(k)))
    if SUM:
        kl.store(out + hq[:, None] * BN + kl.arange(0, BN)[None, :], acc)


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
@pytest.mark.parametrize("n,d", [(37, 29), (16, 32), (5, 1)])
def test_embedding_through_pointers(rng, dtype, n, d):
    V, H, BN, BD = 11, 2, 16, 32
    wf = rng.standard_normal((H, V, BD)).astype(np.float32)
    if dtype == "bf16":
        bits = to_bf16_bits(wf)
        w, wv = kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64)
        out = kiln.bf16(np.full((n, H, BD), 0x7FC0, np.uint16))
    else:
        w, wv = wf, wf.astype(np.float64)
        out = np.full((n, H, BD), np.nan, np.float32)
    ids = rng.integers(0, V, n).astype(np.int32)
    embed[(kiln.cdiv(n, BN), H)](w, ids, out, n, d, H, V=V, BN=BN, BD=BD)
    got = from_bf16_bits(out.array).astype(np.float64) if dtype == "bf16" else out
    ref = np.transpose(wv[:, ids, :], (1, 0, 2))
    assert_close(got[..., :d], ref[..., :d], 0, 0)
    # The masked-off columns were not written (still the poison).
    assert np.isnan(got[..., d:]).all()
    # One gather of [BN, BD] rows, no gather of single elements.
    ir = embed.ir("kiln")
    assert f"-> tensor<{BN}x{BD}x" in ir and ir.count("kiln.gather") == 1, ir


def test_scatter_through_pointers(rng):
    n, R, BN, BD = 29, 40, 8, 16
    x = rng.standard_normal((n, BD)).astype(np.float32)
    ids = rng.permutation(R)[:n].astype(np.int32)
    out = np.full((R, BD), np.nan, np.float32)
    scatter_rows[(kiln.cdiv(n, BN),)](x, ids, out, n, BN=BN, BD=BD)
    ref = np.full((R, BD), np.nan)
    ref[ids] = x
    written = np.zeros(R, bool)
    written[ids] = True
    assert_close(out[written], ref[written], 0, 0)
    assert np.isnan(out[~written]).all()
    ir = scatter_rows.ir("kiln")
    assert ir.count("kiln.scatter") == 1 and f"tensor<{BN}x{BD}xf32>, tensor<{BN}xi32>" in ir, ir


@pytest.mark.parametrize("summed", [False, True])
@pytest.mark.parametrize("n", [20, 75, 128])
def test_paged_cache_rows_as_dot_operand(rng, n, summed):
    PAGE, D, BH, BN, STEPS, NP = 16, 64, 16, 32, 4, 20
    qb = to_bf16_bits(rng.standard_normal((BH, D)).astype(np.float32))
    cb = to_bf16_bits(rng.standard_normal((NP * PAGE, D)).astype(np.float32))
    table = rng.permutation(NP)[:STEPS * BN // PAGE].astype(np.int32)
    out = np.full((BH, BN if summed else STEPS * BN), np.nan, np.float32)
    paged_scores[(1,)](kiln.bf16(qb), kiln.bf16(cb), table, out, n,
                       PAGE=PAGE, D=D, BH=BH, BN=BN, STEPS=STEPS, SUM=summed)
    q = from_bf16_bits(qb).astype(np.float64)
    c = from_bf16_bits(cb).astype(np.float64)
    tok = np.arange(STEPS * BN)
    slots = table[tok // PAGE] * PAGE + tok % PAGE
    s = q @ np.where((tok < n)[:, None], c[slots], 0.0).T
    ref = s.reshape(BH, STEPS, BN).sum(1) if summed else s
    assert_close(out, ref, 1e-4, 1e-4)
    ir = paged_scores.ir("kiln")
    assert f"-> tensor<{BN}x{D}xbf16>" in ir and "kiln.gather" in ir, ir


@kiln.jit
def valid_rows(table, ids, out, n, rows_n, d, FORM: kl.constexpr, BN: kl.constexpr,
               BD: kl.constexpr):
    """out[r, :d] = table[ids[r], :d] where ids[r] names a row of the table,
    else -7: the mask's row part is the loaded index's own validity (any
    values per row), written in several forms."""
    rows = kl.program_id(0) * BN + kl.arange(0, BN)
    cols = kl.program_id(1) * BD + kl.arange(0, BD)
    i = kl.load(ids + rows, mask=rows < n, other=-1)
    ok = (i >= 0) & (i < rows_n)
    if FORM == 0:
        m = ok[:, None] & (cols[None, :] < d)
    elif FORM == 1:
        m = (cols[None, :] < d) & ok[:, None]
    else:
        m = (rows[:, None] < n) & ok[:, None] & (cols[None, :] < d)
    x = kl.load(table + i[:, None] * d + cols[None, :], mask=m, other=-7.0)
    kl.store(out + rows[:, None] * d + cols[None, :], x,
             mask=(rows[:, None] < n) & (cols[None, :] < d))


@pytest.mark.parametrize("form", [0, 1, 2])
def test_row_gather_under_a_row_mask(rng, form):
    """A mask that is a per-row boolean of any values (`ok[:, None]`) and
    bounds on the columns: one gather of rows, the rows where it is false
    given the index -1 (they read the padding)."""
    n, rows_n, d, BN, BD = 37, 23, 50, 8, 32
    table = rng.standard_normal((rows_n, d)).astype(np.float32)
    ids = rng.integers(-3, rows_n + 3, n).astype(np.int32)
    out = np.full((n, d), np.nan, np.float32)
    valid_rows[(kiln.cdiv(n, BN), kiln.cdiv(d, BD))](table, ids, out, n, rows_n, d,
                                                     FORM=form, BN=BN, BD=BD)
    ok = (ids >= 0) & (ids < rows_n)
    ref = np.where(ok[:, None], table[np.where(ok, ids, 0)], -7.0)
    assert_close(out, ref, 0, 0)
    ir = valid_rows.ir("kiln")
    assert ir.count("kiln.gather") == 1 and f"tensor<{BN}xi32> -> tensor<{BN}x{BD}xf32>" in ir, ir


@kiln.jit
def scatter_valid_rows(x, ids, out, n, rows_n, BN: kl.constexpr, BD: kl.constexpr):
    rows = kl.program_id(0) * BN + kl.arange(0, BN)
    cols = kl.arange(0, BD)
    i = kl.load(ids + rows, mask=rows < n, other=-1)
    ok = (i >= 0) & (i < rows_n)
    v = kl.load(x + rows[:, None] * BD + cols[None, :], mask=rows[:, None] < n, other=0.0)
    kl.store(out + i[:, None] * BD + cols[None, :], v, mask=ok[:, None])


def test_row_scatter_under_a_row_mask(rng):
    """The same mask on a store: the rows where it is false are not written."""
    n, R, BN, BD = 29, 40, 8, 16
    x = rng.standard_normal((n, BD)).astype(np.float32)
    ids = rng.permutation(R + 10)[:n].astype(np.int32) - 5
    guarded = np.full((R + 8, BD), np.nan, np.float32)  # rows past the table: not written
    out = guarded[:R]
    scatter_valid_rows[(kiln.cdiv(n, BN),)](x, ids, out, n, R, BN=BN, BD=BD)
    assert np.isnan(guarded[R:]).all()
    ok = (ids >= 0) & (ids < R)
    ref = np.full((R, BD), np.nan)
    ref[ids[ok]] = x[ok]
    written = np.zeros(R, bool)
    written[ids[ok]] = True
    assert_close(out[written], ref[written], 0, 0)
    assert np.isnan(out[~written]).all()
    ir = scatter_valid_rows.ir("kiln")
    assert ir.count("kiln.scatter") == 1 and f"tensor<{BN}x{BD}xf32>, tensor<{BN}xi32>" in ir, ir


@kiln.jit
def strided_row_mask(x, flags, o, acc, n, m, FORM: kl.constexpr, R: kl.constexpr,
                     C: kl.constexpr):
    """Plain strided accesses (not row gathers) under a per-row boolean and
    a bound on the columns: the rows whose flag is 0 are not read, written
    or added to."""
    r = kl.program_id(0) * R + kl.arange(0, R)
    c = kl.arange(0, C)
    offs = r[:, None] * C + c[None, :]
    ok = kl.load(flags + r, mask=r < m, other=0) != 0
    if FORM == 0:
        mask = ok[:, None] & (c[None, :] < n)
    elif FORM == 1:
        mask = (c[None, :] < n) & ok[:, None]
    elif FORM == 2:  # two per-row booleans
        mask = ok[:, None] & (r < m)[:, None]
    else:  # a flag of one row broadcast over the tile's rows
        one = kl.load(flags + kl.arange(0, 1)) != 0
        mask = one[:, None] & (c[None, :] < n)
    t = kl.load(x + offs, mask=mask, other=-1.0)
    kl.store(o + offs, t, mask=(r[:, None] < m) & (c[None, :] < C))
    kl.store(x + offs, t * 0.0 + 5.0, mask=mask)
    kl.atomic_add(acc + offs, 1.0, mask=mask)


@pytest.mark.parametrize("form", [0, 1, 2, 3])
def test_strided_access_under_a_row_mask(rng, form):
    """`ok[:, None] & (cols[None, :] < n)` on a strided load, store or
    atomic took the column bound as the view's and dropped the rows' flags:
    rows whose flag was false were read, written and added to."""
    m, n, R, C = 13, 5, 4, 8
    flags = rng.integers(0, 2, m).astype(np.int32)
    flags[0] = 0  # form 3's broadcast flag is false
    x0 = rng.standard_normal((m, C)).astype(np.float32)
    x, o = x0.copy(), np.full((m, C), np.nan, np.float32)
    acc = np.zeros((m, C), np.float32)
    strided_row_mask[(kiln.cdiv(m, R),)](x, flags, o, acc, n, m, FORM=form, R=R, C=C)
    cols = np.arange(C)[None, :] < (C if form == 2 else n)
    mask = (flags[:, None] != 0) & cols if form != 3 else np.zeros((m, C), bool)
    assert_close(o, np.where(mask, x0, -1.0), 0, 0)
    assert_close(x, np.where(mask, 5.0, x0), 0, 0)
    assert_close(acc, mask.astype(np.float32), 0, 0)
