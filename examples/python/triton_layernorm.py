"""Triton's layer-norm tutorial (05-layer-norm.py), forward and backward, as it
reads upstream with `kl` for `tl`. The backward pass accumulates partial
weight and bias gradients of GROUP_SIZE_M row groups under spin locks
(`kl.atomic_cas` / `kl.atomic_xchg`): each program adds its row's partials to
its group's buffer while it holds the group's lock, and a last kernel sums the
groups. The sums' order between programs varies from run to run, so dw and db
agree with float64 to rounding, not bit for bit."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps,
                          BLOCK_SIZE: kl.constexpr):
    # Map the program id to the row of X and Y it should compute.
    row = kl.program_id(0)
    Y += row * stride
    X += row * stride
    # Compute mean
    mean = 0
    _mean = kl.zeros([BLOCK_SIZE], dtype=kl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + kl.arange(0, BLOCK_SIZE)
        a = kl.load(X + cols, mask=cols < N, other=0.).to(kl.float32)
        _mean += a
    mean = kl.sum(_mean, axis=0) / N
    # Compute variance
    _var = kl.zeros([BLOCK_SIZE], dtype=kl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + kl.arange(0, BLOCK_SIZE)
        x = kl.load(X + cols, mask=cols < N, other=0.).to(kl.float32)
        x = kl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = kl.sum(_var, axis=0) / N
    rstd = 1 / kl.sqrt(var + eps)
    # Write mean / rstd
    kl.store(Mean + row, mean)
    kl.store(Rstd + row, rstd)
    # Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE):
        cols = off + kl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = kl.load(W + cols, mask=mask)
        b = kl.load(B + cols, mask=mask)
        x = kl.load(X + cols, mask=mask, other=0.).to(kl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        kl.store(Y + cols, y, mask=mask)


@kiln.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N,
                             GROUP_SIZE_M: kl.constexpr, BLOCK_SIZE_N: kl.constexpr):
    # Map the program id to the elements of X, DX, and DY it should compute.
    row = kl.program_id(0)
    cols = kl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    # Offset locks and weights/biases gradient pointer for parallel reduction
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    # Load data to SRAM
    x = kl.load(X + cols, mask=mask, other=0).to(kl.float32)
    dy = kl.load(DY + cols, mask=mask, other=0).to(kl.float32)
    w = kl.load(W + cols, mask=mask).to(kl.float32)
    mean = kl.load(Mean + row)
    rstd = kl.load(Rstd + row)
    # Compute dx
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = kl.where(mask, xhat, 0.)
    wdy = kl.where(mask, wdy, 0.)
    c1 = kl.sum(xhat * wdy, axis=0) / N
    c2 = kl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    # Write dx
    kl.store(DX + cols, dx, mask=mask)
    # Accumulate partial sums for dw/db
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while kl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = kl.load(Count)
    # First store doesn't accumulate
    if count == 0:
        kl.atomic_xchg(Count, 1)
    else:
        partial_dw += kl.load(DW, mask=mask)
        partial_db += kl.load(DB, mask=mask)
    kl.store(DW, partial_dw, mask=mask)
    kl.store(DB, partial_db, mask=mask)
    # need a barrier to ensure all threads finished before
    # releasing the lock
    kl.debug_barrier()
    # Release the lock
    kl.atomic_xchg(Lock, 0)


@kiln.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: kl.constexpr,
                         BLOCK_SIZE_N: kl.constexpr):
    # Map the program id to the elements of DW and DB it should compute.
    pid = kl.program_id(0)
    cols = pid * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    dw = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
    db = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
    # Iterate through the rows of DW and DB to sum the partial sums.
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + kl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += kl.load(DW + offs, mask=mask, other=0.)
        db += kl.load(DB + offs, mask=mask, other=0.)
    # Write the final sum to the output.
    sum_dw = kl.sum(dw, axis=0)
    sum_db = kl.sum(db, axis=0)
    kl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    kl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def forward(x, w, b, eps=1e-5, block=256):
    """y, mean, rstd of float32 x [M, N]."""
    M, N = x.shape
    y = np.empty_like(x)
    mean, rstd = np.empty(M, np.float32), np.empty(M, np.float32)
    _layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, N, N, eps, BLOCK_SIZE=block)
    return y, mean, rstd


def backward(dy, x, w, mean, rstd, group_size_m=8, block_m=32, block_n=64):
    """dx, dw, db (float32), the tutorial's two kernels."""
    M, N = x.shape
    bn = next_pow2(N)
    locks = np.zeros(2 * group_size_m, np.int32)  # the locks, then the counts
    dw_part = np.zeros((group_size_m, N), np.float32)
    db_part = np.zeros((group_size_m, N), np.float32)
    dx = np.empty_like(x)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, dw_part, db_part, x, w, mean, rstd, locks, N, N,
                                   GROUP_SIZE_M=group_size_m, BLOCK_SIZE_N=bn)
    dw, db = np.empty(N, np.float32), np.empty(N, np.float32)
    _layer_norm_bwd_dwdb[(kiln.cdiv(N, block_n),)](dw_part, db_part, dw, db,
                                                   min(group_size_m, M), N,
                                                   BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n)
    return dx, dw, db


def reference(x, w, b, dy, eps=1e-5):
    """float64 y, dx, dw, db."""
    x, w, b, dy = (t.astype(np.float64) for t in (x, w, b, dy))
    mu = x.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(x.var(1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    y = xhat * w + b
    wdy = w * dy
    c1 = (xhat * wdy).mean(1, keepdims=True)
    c2 = wdy.mean(1, keepdims=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    return y, dx, (dy * xhat).sum(0), dy.sum(0)


def main():
    x = np.random.randn(300, 700).astype(np.float32)
    w, b = np.random.randn(700).astype(np.float32), np.random.randn(700).astype(np.float32)
    dy = np.random.randn(300, 700).astype(np.float32)
    y, mean, rstd = forward(x, w, b)
    dx, dw, db = backward(dy, x, w, mean, rstd)
    ry, rdx, rdw, rdb = reference(x, w, b, dy)
    ok = all(np.allclose(g, r, rtol=1e-4, atol=1e-3)
             for g, r in ((y, ry), (dx, rdx), (dw, rdw), (db, rdb)))
    print(f"Triton tutorial layer norm {x.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
