"""FlexAttention-style masks and score modifiers at random, against float64.

Each run draws a few random `mask_mod(b, h, q_idx, kv_idx)` predicates
(causal with offsets, windows, prefixes, dilations and chunks with Python's
`%` and `//` of negative differences, per-head and per-batch terms, joined
by `&` and `|`) and `score_mod(score, b, h, q_idx, kv_idx)` rewrites (ALiBi-
and distance-style biases, scales, soft caps, selects), written as
`@kiln.jit` functions. For each:

- the block mask built by the kernel that evaluates the @kiln.jit
  predicate must equal the one numpy builds from the same source;
- block_sparse_attention with both fused must match a dense float64
  reference that applies the same source's functions, run by numpy, to the
  scores (rows that see no key: out 0, lse -inf).

Sizes are ragged (queries and keys of different lengths), blocks and key
blocks of 16 to 64, GQA, f32 and bf16. A wrong block classification (a
block taken as full that is partial, or skipped that has a visible key)
shows up as a wrong row. The seed is printed (KILN_TEST_SEED replays a
run); KILN_FUZZ_MASKS sets how many a run draws.
"""
import importlib.util
import os
import types

import numpy as np
import pytest

import kernel_fuzz
import kiln
import kiln.ops
from conftest import assert_close, dense_reference, from_bf16_bits, to_bf16_bits

CONFIGS = int(os.environ.get("KILN_FUZZ_MASKS", "6"))
BASE = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 30)))


def mask_atom(r, tile_only=False):
    """One term: a comparison of positions (a tile), or of b / h (a scalar)."""
    c = lambda *v: int(r.choice(v))
    tiles = [f"kv_idx <= q_idx + {c(-3, 0, 5, 40)}",
             f"kv_idx <= q_idx + {c(4, 16)} * h",
             f"q_idx - kv_idx < {c(1, 7, 33, 100)}",
             f"kv_idx < {c(0, 3, 20)}",
             f"(q_idx - kv_idx) % {c(2, 3, 5)} == {c(0, 1)}",
             f"kv_idx // {c(8, 16, 50)} == q_idx // {c(8, 16, 50)}",
             f"kv_idx % {c(3, 4)} != {c(0, 2)}",
             f"(q_idx + kv_idx) % {c(2, 7)} == 0",
             f"(kv_idx - q_idx) // {c(4, 9)} >= {c(-2, -1, 0)}"]
    scalars = [f"h % 2 == {c(0, 1)}", "b == 0", "h < 1"]
    return str(r.choice(tiles if tile_only else tiles + scalars))


def mask_expr(r, depth):
    if depth == 0:
        return mask_atom(r)
    return f"({mask_expr(r, depth - 1)}) {r.choice(['&', '|'])} ({mask_expr(r, depth - 1)})"


def score_expr(r, depth):
    if depth == 0:
        return "score"
    inner = score_expr(r, depth - 1)
    forms = [f"({inner}) * {r.choice(['0.5', '2.0'])}",
             f"({inner}) - 0.05 * (h + 1) * (q_idx - kv_idx)",
             f"({inner}) + kl.where(kv_idx % 2 == 0, 0.0, -1.0)",
             f"{r.choice(['4.0', '20.0'])} * kl.tanh(({inner}) / {r.choice(['4.0', '20.0'])})",
             f"({inner}) - 0.01 * kl.abs(q_idx - kv_idx)",
             f"({inner}) + (b + 1) * 0.25"]
    return str(r.choice(forms))


def functions(r):
    """The source of mask_mod (always) and score_mod (or None)."""
    expr = mask_expr(r, int(r.integers(0, 3)))
    # (A predicate of b and h alone is a scalar: give it a tile.)
    expr = f"({expr}) & ({mask_atom(r, tile_only=True)})"
    src = f"@kiln.jit\ndef mask_mod(b, h, q_idx, kv_idx):\n    return {expr}\n"
    score = score_expr(r, int(r.integers(1, 3))) if r.random() < 0.6 else None
    if score:
        src += f"\n\n@kiln.jit\ndef score_mod(score, b, h, q_idx, kv_idx):\n    return {score}\n"
    return src, score is not None


@pytest.mark.parametrize("i", range(CONFIGS))
def test_random_mask_and_score_mods(i, tmp_path):
    seed = BASE + i
    r = np.random.default_rng(seed)
    src, has_score = functions(r)
    dtype = str(r.choice(["f32", "bf16"]))
    bq, bkv = int(r.choice([16, 32, 64])), int(r.choice([16, 32, 64]))
    D = int(r.choice([32, 64]))
    B, Hkv, g = int(r.integers(1, 3)), int(r.integers(1, 3)), int(r.choice([1, 2]))
    H = Hkv * g
    S, Skv = int(r.integers(1, 150)), int(r.integers(1, 200))
    softcap = float(r.choice([0.0, 0.0, 5.0]))
    print(f"seed {BASE} (configuration {i}): {dtype}, block {bq}x{bkv}, D {D}, B {B}, "
          f"H {H} (group {g}), S {S}, Skv {Skv}, softcap {softcap}\n{src}")

    path = tmp_path / f"fuzz_mods_{seed}.py"
    path.write_text("import kiln\nimport kiln.language as kl\n\n\n" + src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # The same source run by numpy.
    ns = {"kl": kernel_fuzz._namespace({}), "kiln": types.SimpleNamespace(jit=lambda f: f)}
    exec(compile(src, f"<mods {seed}>", "exec"), ns)
    np_mask = lambda b, h, qi, ki: np.broadcast_to(np.asarray(ns["mask_mod"](b, h, qi, ki)),
                                                   np.broadcast(qi, ki).shape)

    device = kiln.ops.block_mask(mod.mask_mod, B, H, S, Skv, block=bq, block_kv=bkv)
    host = kiln.ops.block_mask(np_mask, B, H, S, Skv, block=bq, block_kv=bkv)
    for key in ("kv_num", "kv_idx", "full_num", "full_idx", "hides_keys"):
        assert np.array_equal(device[key], host[key]), key

    x = [r.standard_normal((B, H if n == 0 else Hkv, S if n == 0 else Skv, D))
         .astype(np.float32) for n in range(3)]
    if dtype == "bf16":
        bits = [to_bf16_bits(a) for a in x]
        x = [from_bf16_bits(a) for a in bits]
        args = [kiln.bf16(a) for a in bits]
    else:
        args = x
    out, lse = kiln.ops.block_sparse_attention(
        *args, device, mask_mod=mod.mask_mod,
        score_mod=mod.score_mod if has_score else None, softcap=softcap)

    def modify(s, b, h, qi, ki):   # score_mod (the same source, in numpy), then the cap
        if has_score:
            s = np.asarray(ns["score_mod"](kernel_fuzz._t(s), b, h, qi, ki), np.float64)
        return softcap * np.tanh(s / softcap) if softcap else s

    ro, rl = dense_reference(*x, np_mask, 1 / np.sqrt(D), modify=modify)
    tol = (2e-4, 2e-5) if dtype == "f32" else (2e-2, 1e-2)
    assert_close(out, ro, *tol)
    assert_close(lse, rl, 1e-4, 1e-4)
