"""Triton's matrix-multiplication tutorial (03-matrix-multiplication.py), as
it reads upstream, with `kl` for `tl`: grouped program ordering, pointers
advanced by `a_ptrs += BLOCK_SIZE_K * stride_ak`, masks against the K that
is left, and the tutorial's `assume`s. One change: upstream wraps the rows
(`offs_am = (...) % M`) so that it needs no row mask; Kiln masks them
instead (`% M` offsets are element gathers in Kiln, docs/python.md). Kiln
sees the loads as views of (M, K) and (K, N): pipelined, and TMA boxes on
sm_90a (docs/gpu.md). The device check (test/gpu/check.py) runs and times it
against torch.matmul."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_SIZE_M: kl.constexpr, BLOCK_SIZE_N: kl.constexpr,
                  BLOCK_SIZE_K: kl.constexpr, GROUP_SIZE_M: kl.constexpr):
    pid = kl.program_id(axis=0)
    num_pid_m = kl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = kl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    kl.assume(pid_m >= 0)
    kl.assume(pid_n >= 0)
    kl.assume(stride_am > 0)
    kl.assume(stride_ak > 0)
    kl.assume(stride_bn > 0)
    kl.assume(stride_bk > 0)
    kl.assume(stride_cm > 0)
    kl.assume(stride_cn > 0)

    offs_am = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    offs_k = kl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
    for k in range(0, kl.cdiv(K, BLOCK_SIZE_K)):
        a = kl.load(a_ptrs, mask=(offs_am[:, None] < M) &
                    (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = kl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) &
                    (offs_bn[None, :] < N), other=0.0)
        accumulator = kl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    kl.store(c_ptrs, c, mask=c_mask)


# Upstream's best CUDA configuration for fp16 on H100-class GPUs, and a
# smaller one for CPUs and small problems.
GPU_CONFIG = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                  num_warps=8, num_stages=3)
CPU_CONFIG = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)


def launch_args(a, b, c, M, N, K, config):
    """(grid, positional arguments, keyword arguments) of a launch on
    row-major a [M, K], b [K, N], c [M, N] (any arrays the kernel takes)."""
    grid = (kiln.cdiv(M, config["BLOCK_SIZE_M"]) * kiln.cdiv(N, config["BLOCK_SIZE_N"]),)
    return grid, (a, b, c, M, N, K, K, 1, N, 1, N, 1), dict(config)


def matmul(a, b, config=CPU_CONFIG):
    M, K = a.shape
    _, N = b.shape
    c = np.empty((M, N), np.float32)
    grid, args, kw = launch_args(a, b, c, M, N, K, config)
    matmul_kernel[grid](*args, **kw)
    return c


def main():
    a = np.random.randn(301, 257).astype(np.float32)
    b = np.random.randn(257, 129).astype(np.float32)
    ok = np.allclose(matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    print(f"Triton tutorial matmul {a.shape} x {b.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
