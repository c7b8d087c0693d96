"""Kiln on an NVIDIA GPU: runs bundles compiled beforehand (test/gpu/build-bundles.sh)
with the runtime-only module against PyTorch references, then benchmarks against
PyTorch, printing a table last. Needs a GPU, PyTorch and the runtime-only build
(run_gpu_checks.sh builds it); no LLVM.

Every output is poisoned with NaN before its launch; references are float64;
sizes are not multiples of the tile sizes.
"""

import math
import os
import sys
import time

import torch

import kiln

BUNDLES = sys.argv[1] if len(sys.argv) > 1 else "build/gpu-bundles"
dev = torch.device("cuda")
torch.manual_seed(1234)
failures, rows = [], []


def load(name):
    return kiln.load_bundle(os.path.join(BUNDLES, name + ".kiln"))


def poisoned(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device=dev)


def check(name, got, ref, rtol, atol):
    got = got.double().cpu()
    ref = ref.double().cpu()
    ok = bool(torch.isfinite(got).all()) and torch.allclose(got, ref, rtol=rtol, atol=atol)
    err = (got - ref).abs().max().item() if got.shape == ref.shape else float("inf")
    print(f"{'PASS' if ok else 'FAIL'} {name}: max abs error {err:.3g}", flush=True)
    if not ok:
        failures.append(name)


def cdiv(a, b):
    return (a + b - 1) // b


def bench(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2] / 1e3  # median, seconds


# -- correctness ---------------------------------------------------------------------

n = 1_000_003
x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
out = poisoned(n)
load("vector_add")[(cdiv(n, 1024),)](x, y, out, n)
torch.cuda.synchronize()
check("vector_add", out, x.double() + y.double(), 1e-6, 1e-6)

m, k = 37, 1000
xs = torch.randn(m, k, device=dev) * 4
out = poisoned(m, k)
load("softmax")[(m,)](xs, out, m, k)
torch.cuda.synchronize()
check("softmax", out, torch.softmax(xs.double(), dim=1), 1e-4, 1e-6)

w, b = torch.randn(k, device=dev), torch.randn(k, device=dev)
out = poisoned(m, k)
load("layernorm")[(m,)](xs, w, b, out, m, k, 1e-5)
torch.cuda.synchronize()
ref = torch.nn.functional.layer_norm(xs.double(), (k,), w.double(), b.double(), 1e-5)
check("layernorm", out, ref, 1e-4, 1e-4)

M, N, K = 200, 130, 300
a, bb = torch.randn(M, K, device=dev), torch.randn(K, N, device=dev)
c = poisoned(M, N)
load("matmul")[(cdiv(N, 64), cdiv(M, 64))](a, bb, c, M, N, K)
torch.cuda.synchronize()
check("matmul f32", c, a.double() @ bb.double(), 1e-4, 1e-3)

a16, b16 = a.bfloat16(), bb.bfloat16()
c = poisoned(M, N)
load("matmul_bf16")[(cdiv(N, 64), cdiv(M, 64))](a16, b16, c, M, N, K)
torch.cuda.synchronize()
check("matmul bf16 (mma.sync)", c, a16.double() @ b16.double(), 1e-4, 1e-2)

vocab, dim, rows_n = 1000, 300, 77
weight = torch.randn(vocab, dim, device=dev)
ids = torch.randint(0, vocab, (rows_n,), device=dev, dtype=torch.int32)
ids[5] = vocab + 3  # out of range: zeros, counted
out, errors = poisoned(rows_n, dim), torch.zeros(1, dtype=torch.int32, device=dev)
load("embedding")[(cdiv(rows_n, 8), cdiv(dim, 1024))](weight, ids, out, errors, rows_n, vocab, dim)
torch.cuda.synchronize()
ref = weight.double()[ids.clamp(0, vocab - 1).long()]
ref[5] = 0
check("embedding", out, ref, 0, 0)
if errors.item() != 1:
    print(f"FAIL embedding: errors = {errors.item()}, expected 1")
    failures.append("embedding errors")

# -- benchmarks against PyTorch --------------------------------------------------------

S = int(os.environ.get("KILN_GPU_GEMM", "8192"))
a16 = torch.randn(S, S, device=dev).bfloat16()
b16 = torch.randn(S, S, device=dev).bfloat16()
c32 = torch.zeros(S, S, device=dev)
mm = load("matmul_bf16")
t_kiln = bench(lambda: mm[(cdiv(S, 64), cdiv(S, 64))](a16, b16, c32, S, S, S), reps=3)
t_torch = bench(lambda: torch.matmul(a16, b16), reps=10)
flops = 2 * S ** 3
rows.append((f"bf16 GEMM {S}^3 (f32 out)", flops / t_kiln / 1e12, flops / t_torch / 1e12,
             "TFLOP/s", "torch.matmul (bf16 out)"))

m, k = 8192, 4096
xs = torch.randn(m, k, device=dev)
out = torch.empty_like(xs)
sm = load("softmax")
t_kiln = bench(lambda: sm[(m,)](xs, out, m, k))
t_torch = bench(lambda: torch.softmax(xs, dim=1))
byts = 2 * m * k * 4
rows.append((f"softmax {m}x{k} f32", byts / t_kiln / 1e9, byts / t_torch / 1e9, "GB/s",
             "torch.softmax"))

n = 1 << 26
x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
out = torch.empty_like(x)
va = load("vector_add")
t_kiln = bench(lambda: va[(cdiv(n, 1024),)](x, y, out, n))
t_torch = bench(lambda: torch.add(x, y, out=out))
byts = 3 * n * 4
rows.append((f"vector add {n} f32", byts / t_kiln / 1e9, byts / t_torch / 1e9, "GB/s",
             "torch.add"))

print()
print(f"GPU: {torch.cuda.get_device_name()}, bundles for {open(os.path.join(BUNDLES, 'TARGET')).read().strip()}")
print("Kiln launches are synchronous (the runtime waits for each kernel); timings are")
print("CUDA-event medians.")
print(f"| {'case':34} | {'kiln':>10} | {'torch':>10} | unit     | ratio | peer")
print(f"|{'-' * 36}|{'-' * 12}|{'-' * 12}|----------|-------|------")
for name, kv, tv, unit, peer in rows:
    print(f"| {name:34} | {kv:10.1f} | {tv:10.1f} | {unit:8} | {kv / tv:5.2f} | {peer}")
if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
