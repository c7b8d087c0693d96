"""Random tile programs and a float64 interpreter of the same source.

`generate(seed)` writes one `@kiln.jit` kernel as Python source, in one of
six families: a GEMM-like loop (`gemm`), an attention-like one
(`attention`: online softmax, one or two loops), rows gathered by index
(`gather`: DSA-like or bag-like), whole rows in column blocks (`rows`:
softmax's two passes, `cumsum`, `atomic_add`) or rows scattered to a
permutation under a loaded count (`scatter`: `for` or `while`, integer `//`
and `%` of negative values, a histogram by `atomic_add`), or the elementwise
and row library (`zoo`: math functions, integer and bit operations, float to
int conversions, reductions, scans and sorts along a row). Random choices
fall where the GPU lowering has special cases:

- index tiles (`arange` + program id, the loop's offsets) in masks inside
  loops and `if`s (recomputed, not buffered, on the GPU);
- row and column vectors loaded before a loop and read in it;
- running row statistics carried by the loop (kept in registers when a
  dot's tiling gives each warp whole rows);
- an `if` inside the loop on the loop variable, yielding the scores (the
  fragments stay in registers through it);
- dots on bf16, f16 or f32 operands, with and without an accumulator,
  straight from 16-bit memory or through f32; attention's second dot on
  the rounded probabilities;
- pointer, block-pointer and tensor-descriptor loads; `kl.range(...,
  num_stages=, overlap=)`; ragged sizes; masked loads with non-zero
  `other` values; a global store between the prologue's loads and the
  loop; a store over what the program has just loaded;
- random elementwise tails, row and column reductions, bf16 outputs;
- int8 dots into int32, e4m3 fp8 dots, K-major A tiles, dots on K halves
  through slices;
- (`arguments`) every array one element past a 64-byte boundary, for a
  fifth of the kernels: the unaligned paths out of TMA and chunked copies.

`reference(source, name, grid, args, constexprs)` runs the same source
with `kl` bound to a numpy float64 implementation, one program at a time,
so the reference cannot drift from the kernel. Inputs are bf16-exact, so
casts of loaded values round the same on both sides; values computed in
f32 and rounded to 16 bits (attention's probabilities, the DSA-like
gather's, bf16 outputs) are where the two can differ by more than f32
rounding (the tolerances, EXACT and ROUNDED below).
"""
import builtins
import math
import types

import numpy as np

# ---------------------------------------------------------------- generator

class _Gen:
    def __init__(self, seed):
        self.r = np.random.default_rng(seed)
        self.lines = []
        self.depth = 1

    def pick(self, seq):
        return seq[int(self.r.integers(len(seq)))]

    def chance(self, p):
        return bool(self.r.random() < p)

    def emit(self, line):
        self.lines.append("    " * self.depth + line)

    def emit_if(self, cond, line):
        self.emit(f"if {cond}:")
        self.lines.append("    " * (self.depth + 1) + line)


# Tolerances (relative, and absolute against the output's largest magnitude):
# EXACT where every rounding the kernel does is an f32 one (dots of
# bf16-exact operands, f32 accumulation, the reference's float64 differing by
# the order of sums and ex2/tanh approximations: 1e-6 seen); PROBS for an f32
# output of a dot on probabilities computed in f32 and rounded to 16 bits
# (each may round the other way in float64: 2^-8 relative, averaged over
# the keys); ROUNDED for such an output rounded to bf16 as well. A bf16
# output of an EXACT computation is checked bit by bit instead
# (`bf16_outputs`: the correctly rounded value, or its neighbour where the
# float64 value lies within EXACT of the midpoint).
EXACT, PROBS, ROUNDED = 1e-4, 2e-3, 1e-2

CONSTS = ("0.5", "-1.5", "2.0", "0.125", "-0.75")


def _ew(g, x, vecs, conds, depth):
    """A bounded elementwise function of tile expression x."""
    if depth == 0:
        return x
    c = g.pick(CONSTS)
    forms = [f"({x}) * {c}", f"({x}) + {c}", f"kl.maximum({x}, {c})",
             f"kl.minimum({x}, {c})", f"kl.abs({x})", f"-({x})",
             f"kl.exp(-kl.abs({x}))", f"kl.tanh({x}) * {c}"]
    forms += [f"({x}) * {v}" for v in vecs] + [f"({x}) + {v}" for v in vecs]
    forms += [f"({x}) / (1.0 + kl.abs({v}))" for v in vecs]
    forms += [f"kl.where({cd}, {x}, {c})" for cd in conds]
    return _ew(g, g.pick(forms), vecs, conds, depth - 1)


def _exact(g, x, conds):
    """A transform of loaded values that keeps them bf16/f16-exact."""
    return g.pick([f"-({x})", f"kl.abs({x})", f"kl.maximum({x}, 0.0)", f"({x}) * 2.0"] +
                  [f"kl.where({cd}, {x}, 0.0)" for cd in conds])


def _tile_load(mode, dst, ptr, shape, at, at0, step, block, other):
    """A load of `dst`: the `block` of the row-major `shape` at `ptr` whose
    (row, column) offsets are `at` in the loop; `at0` before it, advanced
    by `step` per iteration. As pointer arithmetic (`ptr`), a tensor
    descriptor (`desc`) or a block pointer advanced by the loop (`bp`); the
    two views pad with zeros, `other` is for pointers. Returns (lines
    before the loop, the load, the advance at the body's end or None)."""
    (R, C), (rows, cols) = shape, at
    if mode == "ptr":
        r = f"(({rows}) + kl.arange(0, {block[0]}))"
        c = f"(({cols}) + kl.arange(0, {block[1]}))"
        return [], (f"{dst} = kl.load({ptr} + {r}[:, None] * {C} + {c}[None, :], "
                    f"mask=({r}[:, None] < {R}) & ({c}[None, :] < {C}), other={other})"), None
    if mode == "desc":
        return ([f"{dst}_d = kl.make_tensor_descriptor({ptr}, [{R}, {C}], [{C}, 1], "
                 f"[{block[0]}, {block[1]}])"], f"{dst} = {dst}_d.load([{rows}, {cols}])", None)
    return ([f"{dst}_bp = kl.make_block_ptr({ptr}, ({R}, {C}), ({C}, 1), ({at0[0]}, {at0[1]}), "
             f"({block[0]}, {block[1]}), (1, 0))"],
            f"{dst} = kl.load({dst}_bp, boundary_check=(0, 1), padding_option=\"zero\")",
            f"{dst}_bp = kl.advance({dst}_bp, ({step[0]}, {step[1]}))")


def _loop(g, var, lo, hi, step, overlap=False):
    """A loop header: `range`, or `kl.range` with a stage count, or (when
    `overlap`, sometimes) with `overlap=True` (sm_90a: the next iteration's
    first dot issued during this one's softmax)."""
    if overlap and g.chance(0.25):
        return f"for {var} in kl.range({lo}, {hi}, {step}, overlap=True):"
    if g.chance(0.3):
        return f"for {var} in kl.range({lo}, {hi}, {step}, num_stages={g.pick((1, 2, 3))}):"
    return f"for {var} in range({lo}, {hi}, {step}):"


def _operand(g, x, stor, dt, exact_conds):
    """`x` (loaded, stored as `stor`) as a dot operand of type `dt`: as
    loaded where the types agree, else through f32 (and maybe an exact
    transform)."""
    if stor != "f32":
        if stor == STORED[dt] and not g.chance(0.3):
            return x
        x = f"{x}.to(kl.float32)"
    if g.chance(0.4):
        x = _exact(g, x, exact_conds)
    return f"({x}).to({dt})"


DOT_TYPES = ("kl.bfloat16", "kl.float16", "kl.float32")
STORED = {"kl.bfloat16": "bf16", "kl.float16": "f16", "kl.float32": "f32", "kl.int8": "i8",
          "kl.float8e4nv": "e4m3"}


def _ragged(g, block, limit_blocks):
    """A size that is rarely a multiple of `block`; half the time a multiple
    of 8 (16-byte rows for 16-bit elements: TMA's stride condition)."""
    n = int(g.r.integers(1, limit_blocks * block))
    if g.chance(0.5):
        n = max(8, n - n % 8)
    return n


def _gemm(g):
    # 64 and 128 rows let sm_90a's dots take wgmma (a warpgroup per 64 rows).
    BM, BN, BK = g.pick((16, 32, 64, 64, 128)), g.pick((16, 32, 64)), g.pick((16, 32))
    # int8 dots (W8A8) need K steps of 32 for the tensor cores; 16 sums
    # without them. fp8 (e4m3) dots: wgmma's e4m3 form on sm_90a, decoded
    # to bf16 elsewhere.
    dt = g.pick(DOT_TYPES + ("kl.int8", "kl.float8e4nv"))
    if dt == "kl.float32" and BM == 128:
        # f32 dots are FMA chains on GPUs, their tiles in shared memory: at
        # 128 x 64 such a kernel can need more than an A100's 163 KiB (a
        # clear refusal, "use smaller tiles").
        BM = 64
    # 16-bit storage matching the dot's type half the time (operands
    # straight from memory: ldmatrix, TMA, wgmma from shared memory).
    stor = g.pick(("f32", STORED[dt] if dt != "kl.float32" else "bf16"))
    if dt == "kl.int8":
        stor = "i8"
    M, N, K = _ragged(g, BM, 3), _ragged(g, BN, 3), _ragged(g, BK, 6)
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(a_ptr, b_ptr, v_ptr, w_ptr, out_ptr, red_ptr, M, N, K, flag, "
                   "split, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):")
    inplace = []
    g.emit("pid_m = kl.program_id(0)")
    g.emit("pid_n = kl.program_id(1)")
    g.emit("rm = pid_m * BM + kl.arange(0, BM)")
    g.emit("rn = pid_n * BN + kl.arange(0, BN)")
    g.emit("rk = kl.arange(0, BK)")
    vecs = []
    if g.chance(0.5):
        g.emit(f"rv = kl.load(v_ptr + rm, mask=rm < M, other={g.pick(('0.0', '1.0'))})")
        vecs.append("rv[:, None]")
        if -(-N // BN) == 1 and g.chance(0.3):
            # Overwrite what was just loaded (each program owns its rows):
            # the loop must still see the old values.
            g.emit("kl.store(v_ptr + rm, kl.full((BM,), 0.25, kl.float32), mask=rm < M)")
            inplace.append("v")
    if g.chance(0.5):
        g.emit(f"cv = kl.load(w_ptr + rn, mask=rn < N, other={g.pick(('0.0', '-2.0'))})")
        vecs.append("cv[None, :]")
    out_conds = ["rm[:, None] >= rn[None, :]", "(rm[:, None] + rn[None, :]) % 3 != 1",
                 "rn[None, :] < split"]
    int8 = dt == "kl.int8"
    g.emit(f"acc = kl.zeros((BM, BN), {'kl.int32' if int8 else 'kl.float32'})")
    stat = g.pick((None, "max", "sum")) if not int8 else None
    red = g.pick(("stat", "sum1", "max0")) if stat else g.pick(("sum1", "max0", None, None))
    if red is None and g.chance(0.6):
        red = "early"   # a global store between the prologue's loads and the loop
    if stat == "max":
        g.emit("st = kl.full((BM,), -1000.0, kl.float32)")
    elif stat == "sum":
        g.emit("st = kl.zeros((BM,), kl.float32)")
    ma, mb = g.pick(("ptr", "ptr", "desc", "bp", "kt")), g.pick(("ptr", "ptr", "desc", "bp"))
    if ma == "kt":   # A stored K-major ([K, M]): its tile read transposed
        pre_a, load_a, adv_a = [], ("a = kl.load(a_ptr + kk[None, :] * M + rm[:, None], "
                                    "mask=(kk[None, :] < K) & (rm[:, None] < M), "
                                    f"other={g.pick(('0.0', '-2.0')) if not int8 else 0})"), None
    else:
        pre_a, load_a, adv_a = _tile_load(ma, "a", "a_ptr", ("M", "K"), ("pid_m * BM", "k0"),
                                          ("pid_m * BM", "0"), ("0", "BK"), ("BM", "BK"),
                                          g.pick(("0.0", "1.0", "-2.0")) if not int8 else "0")
    pre_b, load_b, adv_b = _tile_load(mb, "b", "b_ptr", ("K", "N"), ("k0", "pid_n * BN"),
                                      ("0", "pid_n * BN"), ("BK", "0"), ("BK", "BN"),
                                      g.pick(("0.0", "0.5")) if not int8 else "0")
    for line in pre_a + pre_b:
        g.emit(line)
    if red == "early":
        g.emit("kl.store(red_ptr + pid_n * M + rm, " +
               _ew(g, "(rm * 0.5)", [v[:2] for v in vecs if v.startswith("rv")], [], 1) +
               ", mask=rm < M)")
    g.emit(_loop(g, "k0", "0", "K", "BK"))
    g.depth += 1
    g.emit("kk = k0 + rk")
    g.emit(load_a)
    g.emit(load_b)
    if int8:   # exact int32 sums (W8A8), straight from the loaded bytes
        opa, opb = "a", "b"
    else:
        opa = _operand(g, "a", stor, dt, ["rm[:, None] >= kk[None, :]", "kk[None, :] < split"])
        opb = _operand(g, "b", stor, dt, ["kk[:, None] <= rn[None, :]"])
    loop_conds = ["rm[:, None] >= rn[None, :] + k0", "rn[None, :] < split + k0",
                  "(rm[:, None] + k0) % 2 == 0"]
    if not stat and not inplace and g.chance(0.25):
        # Two dots on halves of the K step (tile slices; K of 8 or 16 each).
        g.emit(f"ao = {opa}")
        g.emit(f"bo = {opb}")
        h = {16: 8, 32: 16}[BK] if not g.chance(0.3) else {16: 8, 32: 8}[BK]
        g.emit(f"acc = kl.dot(ao[:, :{h}], bo[:{h}, :], acc)")
        g.emit(f"acc = kl.dot(ao[:, {h}:], bo[{h}:, :], acc)")
    elif int8 or (not stat and not inplace and g.chance(0.4)):
        g.emit(f"acc = kl.dot({opa}, {opb}, acc)")
    else:
        g.emit(f"s = kl.dot({opa}, {opb})")
        if inplace:  # read the overwritten rows' old values in the loop
            g.emit("s = s * rv[:, None]")
        if g.chance(0.6):
            g.emit("s = " + _ew(g, "s", vecs, loop_conds, int(g.r.integers(1, 3))))
        if g.chance(0.4):
            g.emit_if("k0 >= split", "s = " + _ew(g, "s", vecs, loop_conds, 1))
        if stat == "max":
            g.emit("st = kl.maximum(st, kl.max(s, axis=1))")
        elif stat == "sum":
            g.emit("st = st + kl.sum(s, axis=1)")
        g.emit(g.pick(("acc = acc + s", "acc = acc * 0.5 + s", "acc = kl.maximum(acc, s)")))
    for adv in (adv_a, adv_b):
        if adv:
            g.emit(adv)
    g.depth -= 1
    if int8:
        g.emit("acc = acc.to(kl.float32)")
    if g.chance(0.4):
        g.emit_if("flag > 0", "acc = " + _ew(g, "acc", vecs, out_conds, 1))
    if g.chance(0.5):
        g.emit("acc = " + _ew(g, "acc", vecs, out_conds, int(g.r.integers(1, 3))))
    g.emit("ok = (rm[:, None] < M) & (rn[None, :] < N)")
    out_stor = g.pick(("f32", "f32", "bf16"))
    # A bf16 output takes the f32 values as they are (the store converts):
    # the reference keeps them unrounded, and the check rounds them.
    val = "acc"
    mo = g.pick(("ptr", "ptr", "desc"))
    if mo == "desc":
        g.emit("o_d = kl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])")
        g.emit(f"o_d.store([pid_m * BM, pid_n * BN], {val})")
    else:
        g.emit(f"kl.store(out_ptr + rm[:, None] * N + rn[None, :], {val}, mask=ok)")
    if red == "stat":
        g.emit("kl.store(red_ptr + pid_n * M + rm, st, mask=rm < M)")
    elif red == "sum1":
        g.emit("kl.store(red_ptr + pid_n * M + rm, kl.sum(kl.where(ok, acc, 0.0), axis=1), "
               "mask=rm < M)")
    elif red == "max0":
        g.emit("kl.store(red_ptr + pid_m * N + rn, kl.max(kl.where(ok, acc, -1000.0), axis=0), "
               "mask=rn < N)")
    gm, gn = -(-M // BM), -(-N // BN)
    # Inputs: a, b, v, w; outputs: out (M x N), red (gn x M or gm x N; unused
    # when no reduction is stored).
    shapes = dict(a=(K, M) if ma == "kt" else (M, K), b=(K, N), v=(M,), w=(N,), out=(M, N),
                  red=(gn * M,) if red in ("stat", "sum1", "early") else (gm * N,))
    scalars = dict(M=M, N=N, K=K, flag=int(g.r.integers(0, 2)),
                   split=int(g.r.integers(0, max(K, N) + 1)))
    return dict(grid=(gm, gn), constexprs=dict(BM=BM, BN=BN, BK=BK), shapes=shapes,
                inputs=("a", "b", "v", "w"),
                outputs=("out",) + (("red",) if red else ()) + tuple(inplace),
                storage=dict(a=stor, b=stor, out=out_stor), scalars=scalars,
                order=("a", "b", "v", "w", "out", "red", "M", "N", "K", "flag", "split"),
                tol=dict(out=EXACT), bf16_outputs=("out",) if out_stor == "bf16" else ())


def _attention(g):
    BM, BN, D = g.pick((16, 32, 64, 64, 128)), g.pick((16, 32, 64)), g.pick((16, 32, 64))
    dt = g.pick(("kl.bfloat16", "kl.float16"))
    stor = g.pick(("f32", STORED[dt]))
    M, N = _ragged(g, BM, 3), _ragged(g, BN, 6)
    causal = g.chance(0.5)
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(q_ptr, k_ptr, v_ptr, c_ptr, out_ptr, lse_ptr, M, N, flag, split, "
                   "BM: kl.constexpr, BN: kl.constexpr, D: kl.constexpr):")
    g.emit("pid = kl.program_id(0)")
    g.emit("rm = pid * BM + kl.arange(0, BM)")
    g.emit("rd = kl.arange(0, D)")
    vecs = []
    if g.chance(0.4):
        g.emit("rv = kl.load(c_ptr + rm, mask=rm < M, other=0.0)")
        vecs.append("rv[:, None]")
    g.emit("q = kl.load(q_ptr + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)")
    inplace = ()
    if g.chance(0.2):   # overwrite q once loaded: the loops must see the old values
        cast = "" if stor == "f32" else f".to({dt})"   # (16-bit q is stored as dt)
        g.emit("kl.store(q_ptr + rm[:, None] * D + rd[None, :], "
               f"kl.full((BM, D), 0.5, kl.float32){cast}, mask=rm[:, None] < M)")
        inplace = ("q",)
    g.emit("q = " + _operand(g, "q", stor, dt, []))
    g.emit("m_i = kl.full((BM,), -1.0e4, kl.float32)")
    g.emit("l_i = kl.zeros((BM,), kl.float32)")
    g.emit("acc = kl.zeros((BM, D), kl.float32)")
    # Key 0 is visible to every row, and m_i starts finite: masked scores may
    # be -inf without a NaN (no row's maximum stays -inf).
    hi = "kl.minimum((pid + 1) * BM, N)" if causal else "N"
    bounds = [("0", hi)]
    if g.chance(0.4):  # two loops, as block-sparse attention's partial and full blocks
        g.emit(f"mid = kl.minimum(BN * (split // BN), {hi})")
        bounds = [("0", "mid"), ("mid", hi)]
    mk, mv = g.pick(("ptr", "ptr", "kt", "desc", "bp")), g.pick(("ptr", "ptr", "desc", "bp"))
    scale = f"{1.0 / math.sqrt(D):.6f}"
    neg = g.pick(("-1.0e4", "float(\"-inf\")"))
    for li, (lo, up) in enumerate(bounds):
        if mk == "kt":
            pre_k, load_k, adv_k = [], ("k = kl.load(k_ptr + rn[None, :] * D + rd[:, None], "
                                        "mask=rn[None, :] < N, other=0.0)"), None
        else:
            pre_k, load_k, adv_k = _tile_load(mk, "k", "k_ptr", ("N", "D"), ("j", "0"),
                                              (lo, "0"), ("BN", "0"), ("BN", "D"), "0.0")
        pre_v, load_v, adv_v = _tile_load(mv, "v", "v_ptr", ("N", "D"), ("j", "0"), (lo, "0"),
                                          ("BN", "0"), ("BN", "D"), "0.0")
        for line in pre_k + pre_v:
            g.emit(line)
        g.emit(_loop(g, "j", lo, up, "BN", overlap=True))
        g.depth += 1
        g.emit("rn = j + kl.arange(0, BN)")
        g.emit(load_k)
        kop = _operand(g, "k", stor, dt, [])
        g.emit(f"s = kl.dot(q, {kop if mk == 'kt' else f'kl.trans({kop})'}) * {scale}")
        conds = ["rm[:, None] >= rn[None, :]", "rn[None, :] < split",
                 "(rm[:, None] + rn[None, :]) % 3 != 2"]
        tail = g.chance(0.5)
        if tail:
            g.emit("s = " + _ew(g, "s", vecs, conds, 1))
        if g.chance(0.3):
            g.emit_if("j >= split", "s = " + _ew(g, "s", vecs, conds, 1))
        mask = "rn[None, :] < N"
        if causal:
            mask = f"({mask}) & (rm[:, None] >= rn[None, :])"
        if li == 0 or g.chance(0.5):
            g.emit(f"s = kl.where({mask}, s, {neg})")
        else:  # the same mask, as two selects
            g.emit(f"s = kl.where(rn[None, :] < N, s, {neg})")
            if causal:
                g.emit(f"s = kl.where(rm[:, None] >= rn[None, :], s, {neg})")
        g.emit("m_new = kl.maximum(m_i, kl.max(s, axis=1))")
        g.emit("p = kl.exp(s - m_new[:, None])")
        g.emit("alpha = kl.exp(m_i - m_new)")
        g.emit("l_i = l_i * alpha + kl.sum(p, axis=1)")
        g.emit(load_v)
        g.emit(f"acc = acc * alpha[:, None] + kl.dot(p.to({dt}), {_operand(g, 'v', stor, dt, [])})")
        g.emit("m_i = m_new")
        for adv in (adv_k, adv_v):
            if adv:
                g.emit(adv)
        g.depth -= 1
    if g.chance(0.3):
        g.emit_if("flag > 0", "acc = acc * 2.0")
    g.emit("o = acc / l_i[:, None]")
    out_stor = g.pick(("f32", "f32", "bf16"))
    g.emit("kl.store(out_ptr + rm[:, None] * D + rd[None, :], "
           "o, mask=rm[:, None] < M)")
    g.emit("kl.store(lse_ptr + rm, m_i + kl.log(l_i), mask=rm < M)")
    shapes = dict(q=(M, D), k=(N, D), v=(N, D), c=(M,), out=(M, D), lse=(M,))
    scalars = dict(M=M, N=N, flag=int(g.r.integers(0, 2)), split=int(g.r.integers(0, N + 1)))
    return dict(grid=(-(-M // BM),), constexprs=dict(BM=BM, BN=BN, D=D), shapes=shapes,
                inputs=("q", "k", "v", "c"), outputs=("out", "lse") + inplace,
                storage=dict(q=stor, k=stor, v=stor, out=out_stor), scalars=scalars,
                order=("q", "k", "v", "c", "out", "lse", "M", "N", "flag", "split"),
                tol=dict(out=PROBS if out_stor == "f32" else ROUNDED))


def _gather(g):
    """Rows gathered by index: a DSA-like loop (one index per key, shared by
    the block's rows, two dots) or a bag-like one (one index per row and
    step, elementwise sums). Indices loaded from memory or computed from
    the loop's offsets (conv-like)."""
    BM, BN, D = g.pick((16, 32, 64)), g.pick((16, 32)), g.pick((16, 32, 64))
    dt = g.pick(DOT_TYPES)
    stor = g.pick(("f32", "bf16"))
    M, N, T = _ragged(g, BM, 3), _ragged(g, BN, 6), int(g.r.integers(1, 200))
    dsa = g.chance(0.6)
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(q_ptr, kv_ptr, idx_ptr, out_ptr, M, N, T, split, "
                   "BM: kl.constexpr, BN: kl.constexpr, D: kl.constexpr):")
    g.emit("pid = kl.program_id(0)")
    g.emit("rm = pid * BM + kl.arange(0, BM)")
    g.emit("rd = kl.arange(0, D)")
    computed = g.chance(0.4)
    as_f32 = "" if stor == "f32" else ".to(kl.float32)"
    if dsa:
        g.emit("q = kl.load(q_ptr + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, "
               "other=0.0)")
        g.emit("q = " + _operand(g, "q", stor, dt, []))
    g.emit("acc = kl.zeros((BM, D), kl.float32)")
    g.emit(_loop(g, "j", "0", "N", "BN" if dsa else "1"))
    g.depth += 1
    if dsa:
        g.emit("rn = j + kl.arange(0, BN)")
        if computed:
            g.emit("ids = (rn * 5 + split) % T")
        else:
            g.emit("ids = kl.load(idx_ptr + rn, mask=rn < N, other=0)")
        g.emit("kv = kl.load(kv_ptr + ids[:, None] * D + rd[None, :], mask=rn[:, None] < N, "
               f"other={g.pick(('0.0', '1.0'))})")
        g.emit(f"s = kl.dot(q, kl.trans({_operand(g, 'kv', stor, dt, [])}))")
        g.emit("s = kl.where(rn[None, :] < N, s, 0.0)")
        if g.chance(0.5):
            g.emit("s = " + _ew(g, "s", [], ["rm[:, None] >= rn[None, :]", "rn[None, :] < split"],
                                1))
        # The probabilities' stand-in: bounded, rounded to the dot's type.
        g.emit(f"p = (kl.tanh(s) * 0.5).to({dt})")
        g.emit(f"acc = acc + kl.dot(p, {_operand(g, 'kv', stor, dt, [])})")
    else:
        if computed:
            g.emit("ids = (rm * 3 + j * 7 + split) % T")
        else:
            g.emit("ids = kl.load(idx_ptr + rm * N + j, mask=rm < M, other=0)")
        g.emit("row = kl.load(kv_ptr + ids[:, None] * D + rd[None, :], mask=rm[:, None] < M, "
               f"other=0.0){as_f32}")
        g.emit(g.pick(("acc = acc + row", "acc = kl.maximum(acc, row * 0.5)",
                       "acc = acc + kl.where(j < split, row, -row)")))
    g.depth -= 1
    if g.chance(0.5):
        g.emit("acc = " + _ew(g, "acc", [], ["rd[None, :] < split"], 1))
    g.emit("kl.store(out_ptr + rm[:, None] * D + rd[None, :], acc, mask=rm[:, None] < M)")
    shapes = dict(q=(M, D), kv=(T, D), idx=(N,) if dsa else (M * N,), out=(M, D))
    scalars = dict(M=M, N=N, T=T, split=int(g.r.integers(0, max(N, D) + 1)))
    return dict(grid=(-(-M // BM),), constexprs=dict(BM=BM, BN=BN, D=D), shapes=shapes,
                inputs=("q", "kv"), indices=dict(idx=T), outputs=("out",),
                storage=dict(q=stor, kv=stor), scalars=scalars,
                order=("q", "kv", "idx", "out", "M", "N", "T", "split"),
                tol=dict(out=PROBS if dsa and dt != "kl.float32" else EXACT))


def _rows(g):
    """Whole rows in blocks of columns, two passes: a running maximum and
    sum (softmax's statistics), then the normalized values, maybe scanned
    (`cumsum`), scaled by a column vector, stored, and summed over rows into
    a column vector with `atomic_add` across programs."""
    BM, BN = g.pick((1, 2, 4, 16, 32)), g.pick((16, 32, 64, 128))
    M, N = _ragged(g, max(BM, 4), 3), _ragged(g, BN, 4)
    stor = g.pick(("f32", "bf16"))
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(x_ptr, w_ptr, out_ptr, col_ptr, M, N, split, "
                   "BM: kl.constexpr, BN: kl.constexpr):")
    g.emit("pid = kl.program_id(0)")
    g.emit("rm = pid * BM + kl.arange(0, BM)")
    neg = g.pick(("-1.0e4", "float(\"-inf\")"))
    g.emit(f"m = kl.full((BM,), {neg}, kl.float32)")
    g.emit("l = kl.zeros((BM,), kl.float32)")
    conds = ["rn[None, :] < split", "(rm[:, None] + rn[None, :]) % 3 != 2"]
    f = _ew(g, "x", [], conds, int(g.r.integers(0, 3)))
    load = ("x = kl.load(x_ptr + rm[:, None] * N + rn[None, :], "
            "mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)" +
            ("" if stor == "f32" else ".to(kl.float32)"))
    # Column 0 is always visible: every valid row has a finite maximum.
    for p in (1, 2):
        g.emit(_loop(g, "j", "0", "N", "BN"))
        g.depth += 1
        g.emit("rn = j + kl.arange(0, BN)")
        g.emit(load)
        g.emit(f"x = kl.where(rn[None, :] < N, {f}, {neg})")
        if p == 1:
            g.emit("m_new = kl.maximum(m, kl.max(x, axis=1))")
            g.emit("l = l * kl.exp(m - m_new) + kl.sum(kl.exp(x - m_new[:, None]), axis=1)")
            g.emit("m = m_new")
        else:
            g.emit("y = kl.exp(x - m[:, None]) / l[:, None]")
            if g.chance(0.3):
                g.emit("y = kl.cumsum(y, axis=1)")
            if g.chance(0.4):
                g.emit("w = kl.load(w_ptr + rn, mask=rn < N, other=0.0)")
                g.emit("y = y * w[None, :]")
            g.emit("ok = (rm[:, None] < M) & (rn[None, :] < N)")
            g.emit("kl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=ok)")
            g.emit("kl.atomic_add(col_ptr + rn, kl.sum(kl.where(ok, y, 0.0), axis=0), "
                   "mask=rn < N)")
        g.depth -= 1
    shapes = dict(x=(M, N), w=(N,), out=(M, N), col=(N,))
    scalars = dict(M=M, N=N, split=int(g.r.integers(1, N + 1)))
    return dict(grid=(-(-M // BM),), constexprs=dict(BM=BM, BN=BN), shapes=shapes,
                inputs=("x", "w"), outputs=("out", "col"), zeroed=("col",),
                storage=dict(x=stor), scalars=scalars,
                order=("x", "w", "out", "col", "M", "N", "split"), tol={})


def _scatter(g):
    """Rows (or elements) of each program's segment scattered to computed or
    loaded destinations, a permutation of the segment, under a count loaded
    per program (a `for` up to it or a `while` loop); integer `//` and `%`
    of negative values by constants and runtime divisors of either sign,
    stored as floats; a histogram by `atomic_add` whose bins repeat within a
    tile. Elements past each program's count stay poisoned, and must."""
    BN = g.pick((16, 32, 64, 128))
    D = g.pick((1, 1, 4, 16, 32, 64))
    stor = g.pick(("f32", "bf16"))
    L, G, H = _ragged(g, BN, 4), int(g.r.integers(1, 5)), int(g.r.integers(2, 40))
    out_stor = g.pick(("f32", stor))
    rows = D > 1
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(x_ptr, cnt_ptr, perm_ptr, out_ptr, q_ptr, hist_ptr, L, H, "
                   "split, m, BN: kl.constexpr, D: kl.constexpr):")
    g.emit("pid = kl.program_id(0)")
    g.emit("n = kl.load(cnt_ptr + pid)")
    if rows:
        g.emit("rd = kl.arange(0, D)")
    loop = g.pick(("for", "while"))
    if loop == "for":
        g.emit(_loop(g, "j", "0", "n", "BN"))
    else:
        g.emit("j = 0")
        g.emit("while j < n:")
    g.depth += 1
    g.emit("rn = j + kl.arange(0, BN)")
    g.emit("ok = rn < n")
    # (x * p + c) mod L is a permutation of [0, L) where p and L are coprime.
    p = g.pick([v for v in (1, 3, 5, 7, 11, 13) if math.gcd(v, L) == 1])
    computed = g.chance(0.5)
    if computed:
        g.emit(f"dst = (rn * {p} + pid * {g.pick((0, 1, 9))} - split) % L")
    else:
        g.emit("dst = kl.load(perm_ptr + pid * L + rn, mask=ok, other=0)")
    g.emit("src = pid * L + rn")
    g.emit("to = pid * L + dst")
    as_f32 = "" if stor == "f32" else ".to(kl.float32)"
    conds = ["dst[:, None] < split" if rows else "dst < split",
             "(rn[:, None] % 3 == 1)" if rows else "rn % 3 == 1"]
    if rows:
        g.emit("x = kl.load(x_ptr + src[:, None] * D + rd[None, :], mask=rn[:, None] < n, "
               f"other=0.0){as_f32}")
        g.emit("y = " + _ew(g, "x", [], conds, int(g.r.integers(0, 2))))
        g.emit("kl.store(out_ptr + to[:, None] * D + rd[None, :], y, mask=rn[:, None] < n)")
        h = "kl.sum(y, axis=1)"
    else:
        g.emit(f"x = kl.load(x_ptr + src, mask=ok, other=0.0){as_f32}")
        g.emit("y = " + _ew(g, "x", [], conds, int(g.r.integers(0, 2))))
        g.emit("kl.store(out_ptr + to, y, mask=ok)")
        h = "y"
    c1, c2 = g.pick((3, -3, 7, -2, 16)), g.pick((5, -4, 2, -7))
    g.emit(f"q = ((rn - split) // {c1}).to(kl.float32) + ((rn * 3 - split) % {c2}).to(kl.float32)"
           " * 0.25 + ((split - rn) // m).to(kl.float32) * 0.0625 + "
           "((rn - split) % m).to(kl.float32) * 0.5")
    g.emit("kl.store(q_ptr + src, q, mask=ok)")
    if g.chance(0.6):
        g.emit(f"kl.atomic_add(hist_ptr + (rn * {g.pick((1, 7, 13))} + split) % H, {h}, mask=ok)")
    if loop == "while":
        g.emit("j += BN")
    g.depth -= 1
    shapes = dict(x=(G * L, D), cnt=(G,), perm=(G, L), out=(G * L, D), q=(G * L,), hist=(H,))
    scalars = dict(L=L, H=H, split=int(g.r.integers(0, 2 * L + 1)),
                   m=int(g.pick((-9, -5, -3, -1, 1, 2, 4, 6))))
    return dict(grid=(G,), constexprs=dict(BN=BN, D=D), shapes=shapes,
                inputs=("x",), indices=dict(cnt=L + 1), perms=("perm",),
                outputs=("out", "q", "hist"), zeroed=("hist",),
                storage=dict(x=stor, out=out_stor), scalars=scalars,
                order=("x", "cnt", "perm", "out", "q", "hist", "L", "H", "split", "m"),
                tol=dict(out=EXACT, q=0.0, hist=EXACT),
                bf16_outputs=("out",) if out_stor == "bf16" else ())


def _exact_f(g, leaves, depth):
    """A float expression whose f32 value is exact (bf16-exact leaves of
    modest size: sums, products, halvings, floors stay representable)."""
    if depth == 0:
        return g.pick(leaves)
    a, b = _exact_f(g, leaves, depth - 1), _exact_f(g, leaves, depth - 1)
    return g.pick([f"-({a})", f"kl.abs({a})", f"({a}) * 2.0", f"({a}) * 0.5",
                   f"({a}) + ({b})", f"({a}) * ({b})", f"kl.maximum({a}, {b})",
                   f"kl.minimum({a}, {b})", f"kl.where({a} > {b}, {a}, {b} * 0.5)",
                   f"kl.floor({a})", f"kl.ceil({a})", f"kl.clamp({a}, -1.0, 1.5)"])


def _approx_f(g, leaves, depth):
    """A float expression through the math library (f32 roundings and the
    target's approximations: compared with EXACT)."""
    if depth == 0:
        return g.pick(leaves)
    a, b = _approx_f(g, leaves, depth - 1), _approx_f(g, leaves, depth - 1)
    return g.pick([f"kl.exp(-kl.abs({a}))", f"kl.tanh({a})", f"kl.sigmoid({a})",
                   f"kl.erf({a})", f"kl.sqrt(kl.abs({a}))", f"kl.rsqrt(kl.abs({a}) + 1.0)",
                   f"kl.log(kl.abs({a}) + 1.0)", f"kl.log2(kl.abs({a}) + 0.5)",
                   f"kl.exp2(kl.minimum({a}, 4.0))", f"kl.sin(kl.tanh({a}) * 3.0)",
                   f"kl.cos(kl.clamp({a}, -8.0, 8.0))", f"kl.fma({a}, {b}, 0.5)",
                   f"({a}) / (1.0 + kl.abs({b}))", f"({a}) - ({b})",
                   f"kl.maximum({a}, {b})", f"({a}) ** 2"])


def _int_e(g, leaves, depth):
    """An int32 expression (values stay far from overflow): Python's // and
    % by constants of either sign, bitwise operations of negative values,
    arithmetic shifts, the high half of unsigned products."""
    if depth == 0:
        return g.pick(leaves)
    a, b = _int_e(g, leaves, depth - 1), _int_e(g, leaves, depth - 1)
    c = g.pick((3, -3, 7, -5, 16))
    return g.pick([f"({a}) // {c}", f"({a}) % {c}", f"({a}) & {g.pick((7, 255, -16))}",
                   f"({a}) | {g.pick((1, 6, -256))}", f"({a}) ^ ({b})",
                   f"({a}) >> {g.pick((1, 3))}", f"(({a}) % 64) << {g.pick((1, 4))}",
                   f"({a}) + ({b})", f"({a}) - ({b})", f"kl.abs({a})",
                   f"kl.maximum({a}, {b})", f"kl.minimum({a}, {b})",
                   f"kl.where({a} > {b}, {a}, -({b}))",
                   f"kl.umulhi({a}, {g.pick((65537, 1 << 20, 123456789))})"])


def _zoo(g):
    """Whole rows (one column block) through the elementwise and reduction
    library: exact float expressions, math functions, integer arithmetic and
    bit operations, float-to-int conversions, and a reduction, scan or sort
    along the row (sums, maxima, argmax/argmin of exact values, cumulative
    sums, maxima and minima either way, associative_scan with a combiner
    function, xor_sum, a bitonic sort either way)."""
    BM, BN = g.pick((1, 2, 4, 8, 16)), g.pick((16, 32, 64, 128))
    M, N = _ragged(g, max(BM, 4), 3), int(g.r.integers(1, BN + 1))
    combine = g.chance(0.2)
    if combine:
        g.lines.append("@kiln.jit")
        g.lines.append("def {name}_combine(a, b):")
        g.lines.append("    return " + g.pick(("a + b", "kl.maximum(a, b)", "kl.minimum(a, b)")))
        g.lines.append("")
        g.lines.append("")
    g.lines.append("@kiln.jit")
    g.lines.append("def {name}(x_ptr, y_ptr, i_ptr, out_ptr, iout_ptr, red_ptr, M, N, s, "
                   "BM: kl.constexpr, BN: kl.constexpr):")
    g.emit("rm = kl.program_id(0) * BM + kl.arange(0, BM)")
    g.emit("rn = kl.arange(0, BN)")
    g.emit("ok = (rm[:, None] < M) & (rn[None, :] < N)")
    g.emit("at = rm[:, None] * N + rn[None, :]")
    g.emit(f"x = kl.load(x_ptr + at, mask=ok, other={g.pick(('0.0', '1.0', '-2.0'))})")
    g.emit("y = kl.load(y_ptr + at, mask=ok, other=0.5)")
    g.emit("i = kl.load(i_ptr + at, mask=ok, other=0)")
    g.emit("e = " + _exact_f(g, ["x", "y", "(x * 4.0)"], int(g.r.integers(1, 3))))
    g.emit("f = " + _approx_f(g, ["x", "y", "e"], int(g.r.integers(1, 3))))
    # (Python ints are int64 scalars: `rn - s` is converted back to int32, so
    # every leaf is int32 and umulhi is the 32-bit one the reference models.)
    ileaves = ["i", "(rn[None, :] - s).to(kl.int32)", "(rm[:, None] * 3 - i)",
               "(e * 8.0).to(kl.int32)"]
    g.emit("k = " + _int_e(g, ileaves, int(g.r.integers(1, 3))))
    g.emit("kl.store(out_ptr + at, f + k.to(kl.float32) * 0.25, mask=ok)")
    g.emit("kl.store(iout_ptr + at, k, mask=ok)")
    # Along the row: on all BN columns (the masked ones hold what the loads'
    # `other` gave; the reference loads the same).
    red = g.pick(("sum", "max", "argmax", "argmin", "xor", "cumsum", "cummax", "cummin",
                  "sort", "combine" if combine else "sum"))
    rev = g.pick(("", ", reverse=True"))
    tol = {}
    if red in ("sum", "max"):
        g.emit(f"r = kl.{red}(f, axis=1)")
        g.emit("kl.store(red_ptr + rm, r, mask=rm < M)")
    elif red in ("argmax", "argmin"):
        g.emit(f"r = kl.{red}(e, axis=1)")
        g.emit("kl.store(red_ptr + rm, r.to(kl.float32), mask=rm < M)")
    elif red == "xor":
        g.emit("r = kl.xor_sum(k, axis=1)")
        g.emit("kl.store(red_ptr + rm, r.to(kl.float32), mask=rm < M)")
    else:
        what = g.pick(("e", "f"))
        if red == "sort":
            g.emit(f"r = kl.sort({what}, dim=1{g.pick(('', ', descending=True'))})")
        elif red == "combine":
            g.emit(f"r = kl.associative_scan({what}, 1, {{name}}_combine{rev})")
        else:
            g.emit(f"r = kl.{red}({what}, axis=1{rev})")
        g.emit("kl.store(red_ptr + at, r, mask=ok)")
    shapes = dict(x=(M, N), y=(M, N), i=(M, N), out=(M, N), iout=(M, N),
                  red=(M, N) if red in ("cumsum", "cummax", "cummin", "sort", "combine")
                  else (M,))
    return dict(grid=(-(-M // BM),), constexprs=dict(BM=BM, BN=BN), shapes=shapes,
                inputs=("x", "y"), indices=dict(i=(-1000, 1000)), outputs=("out", "iout", "red"),
                storage=dict(iout="i32"), scalars=dict(M=M, N=N, s=int(g.r.integers(-40, 40))),
                order=("x", "y", "i", "out", "iout", "red", "M", "N", "s"),
                tol=dict(iout=0.0, **tol))


FAMILIES = ("gemm", "attention", "gather", "rows", "scatter", "zoo")


def generate(seed, family=None):
    """(the kernel's source, with `{name}` where its function's name goes;
    its spec: grid, constexprs, shapes, inputs, outputs, tolerances). One of
    `family` (a name in FAMILIES, or several separated by commas) when
    given."""
    g = _Gen(seed)
    drawn = g.pick(("gemm", "gemm", "attention", "attention", "gather", "rows", "scatter",
                    "zoo"))
    family = family.split(",")[seed % len(family.split(","))] if family else drawn
    spec = dict(gemm=_gemm, attention=_attention, gather=_gather, rows=_rows,
                scatter=_scatter, zoo=_zoo)[family](g)
    spec["family"] = family
    return "\n".join(g.lines) + "\n", spec


def inputs(spec, rng):
    """bf16-exact float32 inputs (values of N(0, 1) rounded to bf16; int8
    values for int8 storage), int32 indices below each index input's bound,
    and int32 permutations of each row of a `perms` input."""
    out = {}
    for name in spec["inputs"]:
        if spec["storage"].get(name) == "i8":
            out[name] = rng.integers(-128, 128, spec["shapes"][name]).astype(np.int8)
            continue
        if spec["storage"].get(name) == "e4m3":
            x = rng.standard_normal(spec["shapes"][name]) * 2.0
            out[name] = e4m3_round(x).astype(np.float32)
            continue
        x = rng.standard_normal(spec["shapes"][name]).astype(np.float32)
        out[name] = _round(x, "bf16").astype(np.float32)
    for name, bound in spec.get("indices", {}).items():
        lo, hi = bound if isinstance(bound, tuple) else (0, bound)
        out[name] = rng.integers(lo, hi, spec["shapes"][name]).astype(np.int32)
    for name in spec.get("perms", ()):
        rows, cols = spec["shapes"][name]
        out[name] = np.stack([rng.permutation(cols) for _ in range(rows)]).astype(np.int32)
    return out


def _misaligned(x):
    """`x` copied to an address one element past a 64-byte boundary (numpy
    aligns its buffers: TMA's 16-byte base condition, the chunked gathers'
    and stores' row alignment fail for such an array)."""
    buf = np.empty(x.size + 64 // x.itemsize + 1, x.dtype)
    start = (-(buf.ctypes.data // x.itemsize)) % (64 // x.itemsize) + 1
    out = buf[start:start + x.size].reshape(x.shape)
    out[...] = x
    return out


def arguments(spec, rng, bf16, fp8=None):
    """The kernel's arguments and the reference's, in `spec["order"]`: inputs
    (float32, f16 arrays, `bf16(bits)` or `fp8(bits, "e4m3")` wrappers as
    stored; float64 or int for the reference), outputs poisoned (NaN; bf16
    NaN bits) or zeroed where atomics add to them, and the scalars."""
    values = inputs(spec, rng)
    # A fifth of the kernels get every array one element past an aligned
    # address.
    place = _misaligned if rng.random() < 0.2 else (lambda x: x)
    args, ref_args = dict(spec["scalars"]), dict(spec["scalars"])
    for n, shape in spec["shapes"].items():
        stor = spec["storage"].get(n, "f32")
        if n in values:
            x = values[n].astype(np.float16) if stor == "f16" else values[n]
            ref_args[n] = x if x.dtype.kind == "i" else x.astype(np.float64)
            if stor == "e4m3":
                args[n] = fp8(place(e4m3_bits(x)), "e4m3")
            else:
                args[n] = bf16(place(bf16_bits(x))) if stor == "bf16" else place(x)
        elif n in spec.get("zeroed", ()):
            ref_args[n], args[n] = np.zeros(shape), place(np.zeros(shape, np.float32))
        elif stor == "i32":
            ref_args[n], args[n] = np.full(shape, np.nan), place(np.full(shape, POISON_I32,
                                                                         np.int32))
        else:
            ref_args[n] = np.full(shape, np.nan)
            args[n] = (bf16(place(np.full(shape, 0x7FC0, np.uint16))) if stor == "bf16" else
                       place(np.full(shape, np.nan, np.float32)))
    return [args[n] for n in spec["order"]], [ref_args[n] for n in spec["order"]]


POISON_I32 = 0x5A5A5A5A   # an int32 output's poison (the reference's is NaN)


def load_kernel(folder, name, source):
    """Writes the kernel's module into `folder` and imports it: the
    @kiln.jit function (inspect needs its source in a file)."""
    import importlib.util
    import os
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write("import kiln\nimport kiln.language as kl\n\n\n" + source.replace("{name}", name))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def check_outputs(spec, args, ref, bf16):
    """[(output, None or what is wrong)] for the kernel's arguments after
    its launch against the reference's; `bf16` is the wrapper type whose
    bits are decoded."""
    out = []
    for o in spec["outputs"]:
        i = spec["order"].index(o)
        got = bf16_values(args[i].array) if isinstance(args[i], bf16) else args[i]
        if got.dtype == np.int32:
            got = np.where(got == POISON_I32, np.nan, got)
        out.append((o, compare(spec, o, got, ref[i].reshape(spec["shapes"][o]))))
    return out


def compare(spec, name, got, ref):
    """Output `name` (float values) against the reference's: None, or what
    is wrong. Tolerances: EXACT, PROBS or ROUNDED (relative, and absolute
    against the output's largest magnitude); a bf16 output of an f32-exact
    computation bit by bit: the nearest bf16 value, or its neighbour where
    the float64 value lies within EXACT of the midpoint between them."""
    got = np.asarray(got, np.float64).reshape(ref.shape)
    # Elements the reference leaves poisoned (a scatter's unnamed rows) must
    # stay so: a write there is wrong.
    untouched = np.isnan(ref)
    if (~np.isnan(got[untouched])).any():
        return f"{(~np.isnan(got[untouched])).sum()} elements written that nothing names"
    got, ref = got[~untouched], ref[~untouched]
    if got.size == 0:
        return None
    if np.isnan(got).any():
        return f"{np.isnan(got).sum()} NaN elements"
    scale = max(1.0, float(np.abs(ref).max()))
    tol = spec["tol"].get(name, EXACT)
    err = np.abs(got - ref)
    if name in spec.get("bf16_outputs", ()):
        half_ulp = np.ldexp(1.0, np.frexp(ref)[1] - 9)   # |ref| in [2^(e-1), 2^e)
        bad = err > half_ulp + tol * (np.abs(ref) + scale)
        what = "not rounded to nearest"
    else:
        bad = err > tol * (np.abs(ref) + scale)
        what = f"off by more than {tol:g}"
    if bad.any():
        return (f"{bad.sum()} of {bad.size} {what}; worst {err.max():.3g}, e.g. "
                f"{got[bad][:3]} for {ref[bad][:3]}")
    return None


# ------------------------------------------------------- float64 interpreter

def bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even). (conftest's, here
    too: the device check imports this module where pytest is not.)"""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _e4m3_value(code):
    e, m = (code >> 3) & 15, code & 7
    return m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


# The finite non-negative e4m3 (OCP E4M3FN) values, by code: 0x00 .. 0x7E.
E4M3 = np.array([_e4m3_value(c) for c in builtins.range(0x7F)])


def e4m3_round(x):
    """The nearest e4m3 values (ties to the even code, saturating at 448,
    as `.to(kl.float8e4nv)` rounds)."""
    x = np.asarray(x, np.float64)
    ax = np.minimum(np.abs(x), E4M3[-1])
    hi = np.clip(np.searchsorted(E4M3, ax), 1, len(E4M3) - 1)
    lo = hi - 1
    dlo, dhi = ax - E4M3[lo], E4M3[hi] - ax
    code = np.where((dlo < dhi) | ((dlo == dhi) & (lo % 2 == 0)), lo, hi)
    return np.copysign(E4M3[code], x)


def e4m3_bits(values):
    """e4m3 values (exact) -> their codes as int8."""
    v = np.asarray(values, np.float64)
    code = np.searchsorted(E4M3, np.abs(v))
    assert (E4M3[np.minimum(code, len(E4M3) - 1)] == np.abs(v)).all(), "not e4m3 values"
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8).view(np.int8)


def _round(x, kind):
    if kind == "e4m3":
        return e4m3_round(x)
    if kind in ("i8", "i32"):   # toward zero (not wrapped: values stay in range here)
        return np.trunc(np.asarray(x, np.float64)).astype(np.int64)
    x = np.asarray(x, np.float64)
    if kind == "f16":
        return x.astype(np.float16).astype(np.float64)
    if kind == "bf16":
        return bf16_values(bf16_bits(x.astype(np.float32))).astype(np.float64)
    return x


class T(np.ndarray):
    """A tile: a float64/int64/bool array with Triton's `.to`."""

    def to(self, dtype):
        return _t(_round(self, dtype))


def _t(x):
    return np.asarray(x).view(T)


class Ptr:
    def __init__(self, buf, off=0):
        self.buf, self.off = buf, off

    def __add__(self, o):
        return Ptr(self.buf, self.off + np.asarray(o))

    __radd__ = __add__


class _View:
    """A block pointer (offsets, advanced) or a tensor descriptor (offsets
    per access) over a row-major buffer: zeros outside on loads, nothing
    written outside on stores."""

    def __init__(self, buf, shape, strides, block, at=(0, 0)):
        self.buf, self.shape, self.strides = buf, [int(x) for x in shape], strides
        self.block, self.at = [int(x) for x in block], [int(x) for x in at]

    def _index(self, at):
        r = int(at[0]) + np.arange(self.block[0])[:, None]
        c = int(at[1]) + np.arange(self.block[1])[None, :]
        ok = (r >= 0) & (r < self.shape[0]) & (c >= 0) & (c < self.shape[1])
        return np.where(ok, r * int(self.strides[0]) + c * int(self.strides[1]), 0), ok

    def load(self, at=None):
        off, ok = self._index(self.at if at is None else at)
        return _t(np.where(ok, self.buf[off], 0.0))

    def store(self, at, v):
        off, ok = self._index(at)
        self.buf[off[ok]] = np.broadcast_to(np.asarray(v, np.float64), ok.shape)[ok]


class _NumpyKl(types.SimpleNamespace):
    pass


def _namespace(state):
    kl = _NumpyKl()
    kl.constexpr = "constexpr"
    kl.float32, kl.bfloat16, kl.float16 = "f32", "bf16", "f16"
    kl.int8, kl.int32, kl.float8e4nv = "i8", "i32", "e4m3"
    kl.program_id = lambda axis=0: state["pid"][axis]
    kl.arange = lambda a, b: _t(np.arange(a, b))
    kl.zeros = lambda shape, dtype="f32": _t(np.zeros(shape))
    kl.full = lambda shape, v, dtype="f32": _t(np.full(shape, float(v)))

    def load(p, mask=None, other=0.0, boundary_check=(), padding_option="zero"):
        if isinstance(p, _View):
            return p.load()
        off = np.asarray(p.off)
        m = np.broadcast_to(True if mask is None else np.asarray(mask), off.shape)
        assert (off[m] >= 0).all() and (off[m] < p.buf.size).all(), "load out of bounds"
        return _t(np.where(m, p.buf[np.where(m, off, 0)], other))

    def store(p, v, mask=None):
        off = np.asarray(p.off)
        m = np.broadcast_to(True if mask is None else np.asarray(mask), off.shape)
        v = np.broadcast_to(np.asarray(v, np.float64), off.shape)
        assert (off[m] >= 0).all() and (off[m] < p.buf.size).all(), "store out of bounds"
        p.buf[off[m]] = v[m]

    def dot(a, b, acc=None):
        r = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
        return _t(r if acc is None else r + acc)

    kl.load, kl.store, kl.dot = load, store, dot
    kl.make_tensor_descriptor = lambda p, shape, strides, block: _View(p.buf, shape, strides,
                                                                       block)
    kl.make_block_ptr = lambda p, shape, strides, at, block, order: _View(p.buf, shape, strides,
                                                                          block, at)
    kl.advance = lambda v, d: _View(v.buf, v.shape, v.strides, v.block,
                                    (v.at[0] + int(d[0]), v.at[1] + int(d[1])))
    def atomic_add(p, v, mask=None):
        off = np.asarray(p.off)
        m = np.broadcast_to(True if mask is None else np.asarray(mask), off.shape)
        v = np.broadcast_to(np.asarray(v, np.float64), off.shape)
        np.add.at(p.buf, off[m], v[m])

    kl.atomic_add = atomic_add
    f64 = lambda x: np.asarray(x, np.float64)
    kl.sigmoid = lambda x: _t(1.0 / (1.0 + np.exp(-f64(x))))
    kl.erf = lambda x: _t(np.vectorize(math.erf, otypes=[np.float64])(f64(x)))
    kl.sqrt = lambda x: _t(np.sqrt(f64(x)))
    kl.rsqrt = lambda x: _t(1.0 / np.sqrt(f64(x)))
    kl.log2 = lambda x: _t(np.log2(f64(x)))
    kl.exp2 = lambda x: _t(np.exp2(f64(x)))
    kl.sin = lambda x: _t(np.sin(f64(x)))
    kl.cos = lambda x: _t(np.cos(f64(x)))
    kl.floor = lambda x: _t(np.floor(f64(x)))
    kl.ceil = lambda x: _t(np.ceil(f64(x)))
    kl.clamp = lambda x, lo, hi: _t(np.clip(f64(x), lo, hi))
    kl.fma = lambda x, y, z: _t(f64(x) * f64(y) + f64(z))
    kl.argmax = lambda x, axis: _t(np.argmax(np.asarray(x), axis=axis))
    kl.argmin = lambda x, axis: _t(np.argmin(np.asarray(x), axis=axis))
    kl.xor_sum = lambda x, axis=None: _t(np.bitwise_xor.reduce(np.asarray(x), axis=axis))

    def scan(ufunc):
        def run(x, axis=0, reverse=False):
            x = np.asarray(x)
            if reverse:
                return _t(np.flip(ufunc.accumulate(np.flip(x, axis), axis=axis), axis))
            return _t(ufunc.accumulate(x, axis=axis))
        return run

    kl.cummax, kl.cummin = scan(np.maximum), scan(np.minimum)

    def associative_scan(x, axis, combine, reverse=False):
        x = np.moveaxis(np.array(x, np.float64), axis, 0)
        order = builtins.range(x.shape[0] - 1, -1, -1) if reverse else builtins.range(x.shape[0])
        out, acc = np.empty_like(x), None
        # The running value is the left operand (reverse: the forward scan of
        # the flipped axis, as Triton's).
        for j in order:
            acc = x[j] if acc is None else combine(_t(acc), _t(x[j]))
            out[j] = acc
        return _t(np.moveaxis(out, 0, axis))

    kl.associative_scan = associative_scan

    def sort(x, dim=None, descending=False):
        r = np.sort(np.asarray(x), axis=-1)
        return _t(np.flip(r, -1) if descending else r)

    kl.sort = sort

    def umulhi(x, y):
        ux = (np.asarray(x, np.int64) & 0xFFFFFFFF).astype(np.uint64)
        uy = (np.asarray(y, np.int64) & 0xFFFFFFFF).astype(np.uint64)
        hi = ((ux * uy) >> np.uint64(32)).astype(np.int64)
        return _t(np.where(hi >= 1 << 31, hi - (1 << 32), hi))

    kl.umulhi = umulhi
    kl.cumsum = scan(np.add)
    kl.sum = lambda x, axis=None: _t(np.sum(x, axis=axis))
    kl.max = lambda x, axis=None: _t(np.max(x, axis=axis))
    kl.min = lambda x, axis=None: _t(np.min(x, axis=axis))
    kl.exp = lambda x: _t(np.exp(np.asarray(x, np.float64)))
    kl.log = lambda x: _t(np.log(np.asarray(x, np.float64)))
    kl.tanh = lambda x: _t(np.tanh(np.asarray(x, np.float64)))
    kl.abs = lambda x: _t(np.abs(x))
    kl.maximum = lambda x, y: _t(np.maximum(x, y))
    kl.minimum = lambda x, y: _t(np.minimum(x, y))
    kl.where = lambda c, x, y: _t(np.where(c, x, y))
    kl.trans = lambda x: _t(np.asarray(x).T)
    kl.range = lambda a, b, c=1, num_stages=None, overlap=False: builtins.range(int(a), int(b),
                                                                                 int(c))
    return kl


def reference(source, name, grid, args, constexprs):
    """Run the kernel's source in float64, program by program. `args` are the
    kernel's arguments in order, numpy arrays (pointers) or Python scalars;
    returns the arrays' final contents (float64), in order."""
    state = {"pid": (0, 0, 0)}
    kl = _namespace(state)
    ns = {"kl": kl, "kiln": types.SimpleNamespace(jit=lambda f: f), "range": _range}
    exec(compile(source.replace("{name}", name), f"<{name}>", "exec"), ns)
    fn = ns[name]
    bufs = [np.array(v, np.int64 if v.dtype.kind == "i" else np.float64).ravel()
            if isinstance(v, np.ndarray) else None for v in args]
    call = [Ptr(b) if b is not None else v for b, v in zip(bufs, args)]
    gx, gy = (tuple(grid) + (1, 1))[:2]
    for x in builtins.range(gx):
        for y in builtins.range(gy):
            state["pid"] = (x, y, 0)
            fn(*call, **constexprs)
    return bufs


def _range(a, b=None, c=1):
    if b is None:
        a, b = 0, a
    return builtins.range(int(a), int(b), int(c))


if __name__ == "__main__":   # python test/python/kernel_fuzz.py SEED [FAMILY]: print one kernel
    import sys
    text, kernel_spec = generate(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
    print(text.replace("{name}", f"fuzz_{kernel_spec['family']}_{sys.argv[1]}"))
    print(kernel_spec)
