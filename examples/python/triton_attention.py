"""Triton's fused-attention tutorial (06-fused-attention.py, the forward
pass in its block-pointer form), with `kl` for `tl`: a helper for the key
loop run once (STAGE 1: dense) or twice (STAGE 3: the blocks before the
diagonal, then the diagonal block with its causal mask), block pointers over
`Q + off_z * stride_qz + off_h * stride_qh`, K read transposed through a
block pointer of shape (HEAD_DIM, N_CTX), exp2 with the scale folded in.
Kiln makes each block pointer a view with the batch and head offsets as
dimensions of their own, reads K's transposed blocks as rows (its unit
stride) and transposes them into the dot, so on sm_90a every key and value
block is a TMA box in the 128B swizzle (docs/gpu.md). Two changes, for
lengths that are not a multiple of the block (upstream requires one): keys
past N_CTX are masked in the last block, and the log-sum-exp store is
masked. The device check (test/gpu/check.py) runs and times it against
scaled_dot_product_attention."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale,
                    BLOCK_M: kl.constexpr, HEAD_DIM: kl.constexpr, BLOCK_N: kl.constexpr,
                    STAGE: kl.constexpr, offs_m, offs_n, N_CTX, MASK_TAIL: kl.constexpr):
    # range of values handled by this stage
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = kl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    K_block_ptr = kl.advance(K_block_ptr, (0, lo))
    V_block_ptr = kl.advance(V_block_ptr, (lo, 0))
    for start_n in range(lo, hi, BLOCK_N):
        start_n = kl.multiple_of(start_n, BLOCK_N)
        k = kl.load(K_block_ptr)
        qk = kl.dot(q, k)
        # (Not upstream: keys past N_CTX in the last block, and the causal
        # mask, are -inf, not -1e6, which a row whose scores were all below
        # -1e6 (or a future key 1e6 above a visible one) let through. Each
        # row sees its block's first key, so its maximum stays finite.)
        if MASK_TAIL:
            qk = kl.where((start_n + offs_n)[None, :] < N_CTX, qk, float("-inf"))
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + kl.where(mask, 0, float("-inf"))
            m_ij = kl.maximum(m_i, kl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = kl.maximum(m_i, kl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = kl.exp2(qk)
        l_ij = kl.sum(p, 1)
        alpha = kl.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = kl.load(V_block_ptr)
        p = p.to(v.dtype)
        acc = kl.dot(p, v, acc)
        m_i = m_ij
        V_block_ptr = kl.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = kl.advance(K_block_ptr, (0, BLOCK_N))
    return acc, l_i, m_i


@kiln.jit
def _attn_fwd(Q, K, V, sm_scale, M, Out,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vk, stride_vn,
              stride_oz, stride_oh, stride_om, stride_on,
              Z, H, N_CTX, HEAD_DIM: kl.constexpr, BLOCK_M: kl.constexpr,
              BLOCK_N: kl.constexpr, STAGE: kl.constexpr, MASK_TAIL: kl.constexpr):
    start_m = kl.program_id(0)
    off_hz = kl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    qvk_offset = off_z.to(kl.int64) * stride_qz + off_h.to(kl.int64) * stride_qh

    Q_block_ptr = kl.make_block_ptr(base=Q + qvk_offset, shape=(N_CTX, HEAD_DIM),
                                    strides=(stride_qm, stride_qk),
                                    offsets=(start_m * BLOCK_M, 0),
                                    block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    V_block_ptr = kl.make_block_ptr(base=V + qvk_offset, shape=(N_CTX, HEAD_DIM),
                                    strides=(stride_vk, stride_vn), offsets=(0, 0),
                                    block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    K_block_ptr = kl.make_block_ptr(base=K + qvk_offset, shape=(HEAD_DIM, N_CTX),
                                    strides=(stride_kk, stride_kn), offsets=(0, 0),
                                    block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
    O_block_ptr = kl.make_block_ptr(base=Out + qvk_offset, shape=(N_CTX, HEAD_DIM),
                                    strides=(stride_om, stride_on),
                                    offsets=(start_m * BLOCK_M, 0),
                                    block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    offs_m = start_m * BLOCK_M + kl.arange(0, BLOCK_M)
    offs_n = kl.arange(0, BLOCK_N)
    m_i = kl.zeros([BLOCK_M], dtype=kl.float32) - float("inf")
    l_i = kl.zeros([BLOCK_M], dtype=kl.float32) + 1.0
    acc = kl.zeros([BLOCK_M, HEAD_DIM], dtype=kl.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1/log(2)
    q = kl.load(Q_block_ptr)
    # stage 1: off-band (all blocks when not causal)
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                        qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE,
                                        offs_m, offs_n, N_CTX, MASK_TAIL)
    # stage 2: on-band
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                        qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, 2,
                                        offs_m, offs_n, N_CTX, MASK_TAIL)
    m_i += kl.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    kl.store(m_ptrs, m_i, mask=offs_m < N_CTX)
    kl.store(O_block_ptr, acc.to(Out.dtype.element_ty))


def launch_args(q, k, v, o, lse, Z, H, N_CTX, HEAD_DIM, causal, BLOCK_M=64, BLOCK_N=64,
                num_warps=4, num_stages=2):
    """(grid, positional arguments, keyword arguments) of a launch on
    contiguous [Z, H, N_CTX, HEAD_DIM] q, k, v, o and [Z * H, N_CTX] lse
    (any arrays the kernel takes). Causal needs BLOCK_N to divide BLOCK_M
    (the diagonal stage walks one query block's keys)."""
    if causal and BLOCK_M % BLOCK_N:
        raise ValueError("the causal stages need BLOCK_N to divide BLOCK_M")
    strides = (H * N_CTX * HEAD_DIM, N_CTX * HEAD_DIM, HEAD_DIM, 1)
    grid = (kiln.cdiv(N_CTX, BLOCK_M), Z * H)
    args = (q, k, v, 1.0 / np.sqrt(HEAD_DIM), lse, o, *strides * 4, Z, H, N_CTX)
    kw = dict(HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGE=3 if causal else 1,
              MASK_TAIL=N_CTX % BLOCK_N != 0, num_warps=num_warps, num_stages=num_stages)
    return grid, args, kw


def attention(q, k, v, causal=False):
    """q, k, v: float32 [Z, H, N, D]; returns (out, log2-sum-exp [Z * H, N])."""
    Z, H, N, D = q.shape
    o = np.empty_like(q)
    lse = np.empty((Z * H, N), np.float32)
    grid, args, kw = launch_args(q, k, v, o, lse, Z, H, N, D, causal)
    _attn_fwd[grid](*args, **kw)
    return o, lse


def reference(q, k, v, causal=False):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    lse = (mx[..., 0] + np.log(e.sum(-1))) / np.log(2.0)
    return (e / e.sum(-1, keepdims=True)) @ v, lse.reshape(-1, s.shape[-1])


def main():
    q, k, v = (np.random.randn(2, 3, 200, 64).astype(np.float32) for _ in range(3))
    ok = True
    for causal in (False, True):
        o, lse = attention(q, k, v, causal)
        ro, rl = reference(q, k, v, causal)
        ok &= np.allclose(o, ro, rtol=1e-4, atol=1e-4) and np.allclose(lse, rl, atol=1e-4)
    print(f"Triton tutorial attention {q.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
