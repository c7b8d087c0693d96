//===- Passes.td - Kiln's passes ---------------------------*- tablegen -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertKilnToCPU : Pass<"convert-kiln-to-cpu", "::mlir::ModuleOp"> {
  let summary = "Lowers kiln kernels to loops over native-width vectors";
  let description = [{
    Turns every `kiln.func` into two `func.func`s: the kernel body
    `@NAME(memref<?xT>..., scalars..., pid_x, pid_y, pid_z, grid_x, grid_y,
    grid_z)` and the launch entry `@kiln_entry_NAME(!llvm.ptr args, i32 x 6)`
    that the runtime calls once per program id (docs/bundle-format.md).

    Inside the body, each tile value gets its own statically shaped buffer,
    allocated once on the stack at the function entry, and each tile op
    becomes a loop nest over that buffer whose innermost loop works on
    vectors of the native width (`vector-bits` / element bits, or the widest
    power of two that divides the tile's last dimension):

    * `kiln.load`/`kiln.store`/`kiln.gather`/`kiln.scatter` become masked
      vector loads and stores when the view's last stride is 1 at run time
      and the chunk starts inside the view, and exact per-element code at
      the edges otherwise;
    * `kiln.dot` becomes a register-blocked FMA micro-kernel (accumulators
      in vector registers across the contraction loop, starting from
      registers for a splat accumulator), computed in place into a
      loop-carried accumulator; narrow float operands are widened to f32
      once per dot; an lhs tile loaded for the dot alone is read in place
      from the view when interior; with `bf16-dot`, a bf16 x bf16 dot
      accumulating in f32 (or bf16) runs on `vdpbf16ps` instead: B's rows
      are interleaved in pairs along K once per dot, and each step adds the
      two products of a pair per lane (input and output subnormals flush to
      zero, as the instruction defines);
    * elementwise `arith`/`math` ops on tiles are applied to vectors;
    * a 2-D `kiln.trans` goes in square blocks of vector shuffles;
    * `scf.for`/`scf.if` carrying tiles are rebuilt to carry only scalars,
      with the tiles living in their buffers;
    * except a register loop: an `scf.for` carrying only tiles of one shape,
      computed element by element in a body that writes no memory (loads,
      gathers, broadcasts, elementwise ops, scalar code), runs inside the
      walk over the elements, its tiles carried as vectors and its body's
      tiles computed inline, with no buffer (docs/architecture.md).
  }];
  let options = [
    Option<"vectorBits", "vector-bits", "unsigned", /*default=*/"512",
           "Width in bits of the target's vector registers (512: AVX-512, "
           "256: AVX2)">,
    Option<"bf16Dot", "bf16-dot", "bool", /*default=*/"false",
           "Lower bf16 x bf16 dots with f32 accumulation to AVX512-BF16's "
           "vdpbf16ps (pairs of products along K per lane)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def ConvertKilnToGPU : Pass<"convert-kiln-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Lowers kiln kernels to SIMT code in a gpu.module (NVIDIA)";
  let description = [{
    Moves every `kiln.func` into `gpu.module @kiln_gpu` as a
    `gpu.func @NAME(memref<1xT>..., scalars...) kernel`: pointer arguments
    are bare device pointers (one `.u64` parameter each), and one thread
    block of `32 * num-warps` threads runs each program id (the block id is
    the program id, the grid size is `num_programs`).

    It shares the buffer-per-tile lowering of `convert-kiln-to-cpu` in SIMT
    mode (docs/gpu.md): each tile lives in a buffer carved out of the
    block's dynamic shared memory (`@__kiln_smem`, the total recorded as
    `kiln.shared_bytes` on the kernel), each tile op's elements are
    distributed over the threads (thread t takes the row-major elements t,
    t + T, ...) and followed by `gpu.barrier`. Loads of interior tiles are
    `cp.async` copies of the widest aligned chunk (16, 8 or 4 bytes); in an
    `scf.for`, loads whose offsets follow the induction variable are
    software-pipelined `num-stages` deep (issued `num-stages - 1` iterations
    ahead into rotating stage buffers, `cp.async.wait_group` before use);
    `kiln.dot` on bf16/f16 tiles with M % 16, N % 8 and
    K % 16 all zero runs on tensor cores: `mma.sync.m16n8k16` (warp-tiled,
    fragments loaded with `ldmatrix`), or on sm_90a, when M % 64 == 0 and
    the warps form whole warpgroups, `wgmma.mma_async.m64nNk16` with both
    operands in the no-swizzle core-matrix layout (pipelined loads of
    128-byte rows: the 128B-swizzled one) and read through matrix
    descriptors; other dots run as one FMA chain per output element;
    `kiln.reduce` combines partial results of lane groups with butterfly
    warp shuffles. On sm_90a, pipelined loads of views made before their
    loop load by TMA (`cp.async.bulk.tensor` completing on a per-stage
    `mbarrier`) when the view allows it at run time: the tensor maps are
    built on the device, in a per-program global scratch the runtime passes
    as a hidden last argument (`kiln.scratch_bytes` per program). Also on
    sm_90a, an `scf.for` marked `kiln.overlap` computes its first wgmma dot
    from a constant accumulator one iteration ahead, carried in registers
    and not waited for until the iteration's next wgmma dot (attention's
    scores overlap its softmax; docs/gpu.md, "Overlap"); elsewhere the mark
    is dropped.
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_80\"",
           "Target architecture (sm_80, sm_90a, ...): bounds shared memory">,
    Option<"numWarps", "num-warps", "unsigned", /*default=*/"4",
           "Warps per thread block (1 to 32)">,
    Option<"tensorCores", "tensor-cores", "bool", /*default=*/"true",
           "Lower eligible kiln.dot to mma.sync">,
    Option<"wgmma", "wgmma", "bool", /*default=*/"true",
           "On sm_90a, run eligible dots (M % 64 == 0, num-warps % 4 == 0) "
           "as warpgroup wgmma.mma_async">,
    Option<"tma", "tma", "bool", /*default=*/"true",
           "On sm_90a, load pipelined tiles with TMA where the view allows it">,
    Option<"hostMaps", "host-maps", "bool", /*default=*/"true",
           "sm_90a: tensor maps of views made from arguments are encoded by "
           "the runtime at launch and passed as kernel parameters (else "
           "thread 0 of every program builds them)">,
    Option<"overlap", "overlap", "bool", /*default=*/"true",
           "sm_90a: compute the first dot of loops marked kiln.overlap an "
           "iteration ahead (else the marks are dropped)">,
    Option<"swizzle", "swizzle", "bool", /*default=*/"true",
           "On sm_90a, lay out pipelined wgmma operand tiles whose rows are "
           "whole 128-byte lines in the 128B-swizzled layout">,
    Option<"pingpong", "pingpong", "bool", /*default=*/"true",
           "sm_90a: warpgroups take turns issuing the wgmma groups of loops "
           "with a register-A dot (attention's key-block loops), ordered by "
           "named barriers (docs/gpu.md, \"Pingpong\")">,
    Option<"fp8Wgmma", "fp8-wgmma", "bool", /*default=*/"true",
           "sm_90a: fp8 dots whose operands are a load and the transpose of "
           "a load on wgmma's e4m3 / e5m2 forms (else decoded to bf16)">,
    Option<"pipelineGathers", "pipeline-gathers", "bool", /*default=*/"true",
           "Pipeline gathers of rows in loops whose indices a pipelined load "
           "of the loop gives (docs/gpu.md, \"Pipelined gathers\")">,
    Option<"numStages", "num-stages", "unsigned", /*default=*/"2",
           "Software pipelining depth: loads in loops are issued num-stages "
           "- 1 iterations ahead (1: off; lowered without it when the stage "
           "buffers do not fit in shared memory)">,
    Option<"asyncCopy", "async-copy", "bool", /*default=*/"true",
           "Load interior 4-byte tiles with cp.async">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::cf::ControlFlowDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def EmulateGPU : Pass<"kiln-emulate-gpu", "::mlir::ModuleOp"> {
  let summary = "Turns the GPU lowering's kernels into CPU code run by the "
                "SIMT emulator (a testing target)";
  let description = [{
    Runs after `convert-kiln-to-gpu`. Each `gpu.func` kernel of
    `gpu.module @kiln_gpu` becomes a host function with the CPU launch ABI,
    so the exact SIMT code the GPU pipeline emits (thread distribution,
    shared-memory plan, barriers, cp.async, warp shuffles, mma.sync
    fragments) runs on the CPU under `lib/Target/GPUEmu/kiln_gpu_emu.c`:

      * `gpu.thread_id`, `gpu.barrier`, `gpu.shuffle xor`,
        `nvgpu.device_async_copy`, `nvvm.cp.async.commit.group`,
        `nvvm.cp.async.wait.group`, `nvgpu.ldmatrix` and `nvvm.mma.sync`
        become calls into
        the emulator, which runs the block's threads as fibers;
      * `gpu.block_id` and `gpu.grid_dim` come from the launch's program id
        and grid;
      * the dynamic shared-memory window is the emulator's per-host-thread
        buffer (poisoned with NaN bytes before each block), and, with
        `check-shared`, every shared-memory load and store is reported to
        the emulator, which refuses out-of-window accesses and data races
        (two threads touching the same byte between barriers, one writing).

    The kernel entry `kiln_entry_NAME` runs one block: the CPU runtime
    launches emulated bundles like CPU ones.
  }];
  let options = [
    Option<"checkShared", "check-shared", "bool", /*default=*/"true",
           "Report every shared-memory access to the emulator's checker">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

def KilnGPUPingpong : Pass<"kiln-gpu-pingpong"> {
  let summary = "Warpgroups take turns issuing the wgmma groups of "
                "attention-shaped loops (the step convert-kiln-to-gpu runs)";
  let description = [{
    FlashAttention 3's pingpong on lowered sm_90a kernels: in a loop whose
    body issues a wgmma with A in registers (an `llvm.inline_asm` marked
    `kiln.wgmma_rs`), has at least two wgmma groups and a `gpu.barrier` of
    its own, in a `gpu.func` of two or more warpgroups (`nvvm.maxntid`),
    warpgroup `w` waits at named barrier `1 + w` before each group's first
    issue and arrives at the next warpgroup's after the group's commit;
    the last warpgroup arrives at barrier 1 before the loop and warpgroup 0
    waits there after it. A loop with a group whose issue contains a CTA
    barrier or an mbarrier wait is left alone. `convert-kiln-to-gpu` runs
    this step on sm_90a unless `pingpong=false`; the pass exposes it for
    tests on hand-written lowered IR (the thread index is the function
    entry's `gpu.thread_id x`). docs/gpu.md, "Pingpong".
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect"
  ];
}

def KilnHoistInvariants : Pass<"kiln-hoist-invariants"> {
  let summary = "Hoists loop-invariant views and scalar arithmetic out of loops";
  let description = [{
    Moves `kiln.make_view`, `kiln.program_id`, `kiln.num_programs` and pure
    scalar `arith` ops whose operands are defined outside an `scf.for` or
    `scf.while` out of it, innermost loops first (tile ops stay where they
    are: a tile defined before a loop would hold its buffer across it).

    The Python front end makes the view of a pointer access where the access
    is, which is inside the loop for a K loop's loads
    (`kl.load(a + rm[:, None] * k + (kk + rk)[None, :], mask=...)`). A view
    made inside the loop is a new view each iteration to the GPU lowering:
    its loads can be pipelined by cp.async, but not by TMA, whose tensor map
    is built once before the loop. Hoisted, the view is the one a
    hand-written kernel would make (`kl.make_view` before the loop).

    Then an `scf.for` iter_arg of integer type that each iteration advances
    by a loop-invariant amount (`scf.yield %arg + %c`: Triton's
    `a_ptrs += BLOCK_K * stride_ak`, which the front end carries as a scalar
    shift) is read in the body as `init + ((iv - lb) / step) * c`: the loads
    its value addresses then derive from the induction variable, which is
    what pipelining needs to issue them iterations ahead.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def KilnExpandArithForNVVM : Pass<"kiln-expand-arith-nvvm"> {
  let summary = "Expands only the arith ops NVPTX has no instruction for";
  let description = [{
    The NVIDIA pipeline's replacement for `arith-expand`: it expands integer
    `ceildivsi`/`floordivsi`/`ceildivui` and the scaling conversions, and
    leaves to the NVPTX backend what sm_80 and newer do in one instruction:
    `arith.maximumf`/`minimumf` (NaN-propagating: `max.NaN.f32`, where
    `arith-expand` makes two NaN tests and two selects of each) and bf16
    conversions (`cvt.rn.bf16.f32`/`cvt.rn.bf16x2.f32`, where `arith-expand`
    makes about seven integer instructions per element). Attention's
    softmax is mostly these. The CPU and the SIMT emulator keep `arith-expand`.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def KilnApproximateMath : Pass<"kiln-approximate-math"> {
  let summary = "Replaces f32 transcendentals with vectorizable polynomials";
  let description = [{
    Rewrites `math.exp`, `math.log`, `math.tanh`, `math.erf`, ... on f32
    scalars and vectors into polynomial approximations made of arithmetic
    only (upstream's approximation patterns), so that they stay in vector
    registers instead of becoming calls into libm.

    With `nvvm-ex2` (the NVIDIA pipeline), f32 `math.exp` and `math.exp2`
    inside `gpu.module`s become the special-function unit's `ex2.approx.ftz`
    instead (`exp(x) = 2^(x log2 e)`, CUDA's `__expf`): one instruction
    where the polynomial takes about twenty, and the exponential is the
    inner loop of every softmax and attention kernel. Its relative error is
    about 2^-22 plus the rounding of `x log2 e` (|x| 2^-24; softmax's
    `exp(s c - m)` takes `x = fma(s, c, -m)`, one rounding); results below
    2^-126 flush to zero. The SIMT emulator keeps the polynomial.

    f32 `math.sin` and `math.cos` are first reduced exactly: k = rint(x 2/pi)
    and r = x - k pi/2 in f64 (pi/2 in three parts), then +-sin r or +-cos r
    by the quadrant, from two short polynomials on |r| <= pi/4. Upstream's
    reduction in f32 lost |x| 2^-24 (sin(1e4) was off by 7.6e-4, and past
    1e8 it left [-1, 1]). A tile with a lane beyond 1e7 or infinite takes
    the f64 functions (libm, libdevice) behind a branch.
  }];
  let options = [
    Option<"nvvmEx2", "nvvm-ex2", "bool", /*default=*/"false",
           "f32 exp/exp2 in gpu.modules as NVVM ex2.approx.ftz">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::scf::SCFDialect"
  ];
}

#endif // KILN_PASSES_TD
