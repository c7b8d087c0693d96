//===- Conv.cpp - Vision convolutions: implicit GEMM, depthwise, patches ---===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// conv: N-D (up to 3 spatial dims: T, H, W) convolution by implicit GEMM.
//   input [N, T, H, W, C] (channels last), weight [KT, KH, KW, C/groups, OC],
//   bias [OC], output [N, OT, OH, OW, OC]. Each program computes a tile of
//   BM output pixels x BN output channels of one group: for every kernel tap
//   and channel block it gathers the BM input pixels (rows of the input seen
//   as a [pixels, channels] matrix; a pixel in the padding reads zeros) and
//   multiplies them with the weight tile on the dot micro-kernel, in one
//   loop over the (tap, channel block) pairs.
//   conv2d is T = KT = 1; a ViT patch embedding is KH = KW = stride = patch;
//   Qwen2-VL's is KT = 2 as well.
// depthwise_conv2d: one filter per channel; each program a segment of BW
//   output pixels of one row x BC channels, accumulated over the taps (a
//   loop over the kernel's rows around one over its columns). A tap reads a
//   window of the image row for stride 1 and gathers the pixels otherwise.
//   On the CPU the inner loop runs in registers (KilnToCPU's register
//   loops): no tile of input pixels, no accumulator stored per tap.
//
// Sizes are runtime arguments (any image size runs without recompiling);
// pixel indices are computed in i32, so N*T*H*W must stay below 2^31.
//
//===----------------------------------------------------------------------===//

#include "OpDefs.h"

namespace kiln::ops {
using namespace mlir;
namespace kd = mlir::kiln;

static Param intParam(const char *name, const char *def, const char *help) {
  return {name, Param::Int, def, help, {}};
}

/// Whether a kernel of `sizes` taps per dimension, spaced `dilations` apart,
/// has fewer than 2^31 taps and tap offsets (pixel indices are i32: more
/// would wrap).
static bool tapsFitI32(ArrayRef<int64_t> sizes, ArrayRef<int64_t> dilations) {
  const int64_t limit = int64_t(1) << 31;
  int64_t taps = 1;
  for (auto [k, d] : llvm::zip(sizes, dilations)) {
    if (taps > limit / k || k - 1 > (limit - 1) / d)
      return false;
    taps *= k;
  }
  return true;
}

static llvm::Error buildConv(ModuleOp module, const Config &c,
                             llvm::StringRef name) {
  MLIRContext *ctx = module.getContext();
  const int64_t KT = c.getInt("kt"), KH = c.getInt("kh"), KW = c.getInt("kw");
  const int64_t ST = c.getInt("st"), SH = c.getInt("sh"), SW = c.getInt("sw");
  const int64_t PT = c.getInt("pt"), PH = c.getInt("ph"), PW = c.getInt("pw");
  const int64_t DT = c.getInt("dt"), DH = c.getInt("dh"), DW = c.getInt("dw");
  const int64_t G = c.getInt("groups"), BM = c.getInt("block_m"),
                BN = c.getInt("block_n"), BC = c.getInt("block_c");
  const bool hasBias = c.getInt("bias") != 0;
  const bool wide = c.getInt("wide_taps") != 0;
  const int64_t R = c.getInt("row_block");
  for (int64_t v : {KT, KH, KW, ST, SH, SW, DT, DH, DW, G, BM, BN, BC, R})
    if (v <= 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "conv: kernel sizes, strides, dilations, "
                                     "groups and blocks must be positive");
  if (!tapsFitI32({KT, KH, KW}, {DT, DH, DW}))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "conv: the kernel's taps or their offsets reach 2^31");
  if (wide && (G != 1 || PW != 0 || DW != 1))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "conv: wide_taps needs one group, no padding along "
                                   "the width and dilation 1 along it");
  if (R > 1) {
    const char *missing = G != 1                ? "one group"
                          : PH != 0             ? "no padding along the height"
                          : KH % R != 0         ? "kh a multiple of it"
                          : (KW != 1 && !wide)  ? "one tap per kernel row (kw 1, or wide_taps)"
                                                : nullptr;
    if (missing)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "conv: row_block > 1 needs %s", missing);
  }
  Type t = elementType(ctx, c.getString("dtype"));
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  auto P = [&](Type ty) { return kd::PtrType::get(ctx, ty); };
  KernelBuilder k(module, name,
                  {{"input", P(t)}, {"weight", P(t)}, {"bias", P(f32)},
                   {"out", P(f32)}, {"n", i64}, {"t", i64}, {"h", i64},
                   {"w", i64}, {"c", i64}, {"oc", i64}, {"ot", i64},
                   {"oh", i64}, {"ow", i64}},
                  2, &c.statics);
  Value N = k.arg("n"), T = k.arg("t"), H = k.arg("h"), W = k.arg("w"),
        C = k.arg("c"), OC = k.arg("oc"), OT = k.arg("ot"), OH = k.arg("oh"),
        OW = k.arg("ow");
  Value Cg = k.div(k.toIndex(C), k.cIndex(G));
  Value OCg = k.div(k.toIndex(OC), k.cIndex(G));
  Value nb = k.div(k.add(OCg, k.cIndex(BN - 1)), k.cIndex(BN));
  Value g = k.div(k.pid(1), nb);
  Value n0 = k.mul(k.rem(k.pid(1), nb), k.cIndex(BN));
  Value m0 = k.mul(k.pid(0), k.cIndex(BM));
  Value outPix = k.mul(k.mul(k.toIndex(OT), k.toIndex(OH)), k.toIndex(OW));
  Value M = k.mul(k.toIndex(N), outPix);

  // Output pixel coordinates of the tile's rows.
  auto I = [&](Value v) { return k.convert(v, i32); };
  Value m = k.add(k.arange(BM), I(m0));
  Value img = k.div(m, I(outPix));
  Value r = k.rem(m, I(outPix));
  Value ohw = k.mul(k.toIndex(OH), k.toIndex(OW));
  Value ot = k.div(r, I(ohw));
  Value r2 = k.rem(r, I(ohw));
  Value oh = k.div(r2, I(k.toIndex(OW)));
  Value ow = k.rem(r2, I(k.toIndex(OW)));
  Value mValid = k.cmp(Cmp::LT, m, I(M));

  Value pixels = k.mul(k.mul(k.mul(k.toIndex(N), k.toIndex(T)), k.toIndex(H)),
                       k.toIndex(W));
  Value vin = k.view(k.arg("input"), {pixels, k.cIndex(G), Cg},
                     {k.toIndex(C), Cg, k.cIndex(1)});
  // wide_taps: a kernel row's KW taps are one step. For dilation 1 their
  // input pixels are adjacent, so each output pixel reads KW * C contiguous
  // channels from its first tap's pixel (the input seen as overlapping rows
  // of KW C channels, C apart), and the weights' (kw, c) rows are already
  // contiguous. Without padding along the width every such read stays in
  // its image row (kiln.ops pads the input first). A 3-channel stem's steps
  // have K = KW * 3 instead of 3.
  const int64_t tapsPerRow = wide ? 1 : KW;
  Value Kg = wide ? k.mul(Cg, k.cIndex(KW)) : Cg; // channels per tap step
  const int64_t tapRows = KH / R; // kernel rows (of R) the steps take
  Value taps = k.cIndex(KT * tapRows * tapsPerRow);
  Value vw = k.view(k.arg("weight"), {taps, Cg, k.cIndex(G), OCg},
                    {k.mul(Cg, k.toIndex(OC)), k.toIndex(OC), OCg, k.cIndex(1)});
  // row_block R > 1: a step takes R kernel rows of one such contiguous run
  // each (wide taps, or kw = 1 as a patch embedding's wide pixels): the
  // pixel rows [BM, R, BC] from the input seen as [pixels, R, Kg] with the
  // rows' distance between its second index's entries, one dot of K = R *
  // BC. The accumulator stays in registers R times longer, and the loop
  // around the dot runs R times fewer steps (a 7x7 stride-2 stem: K = 147 in
  // one step, not 21 in 7). A step's rows lie inside the image or its pixel
  // reads nothing: no padding along the height (kiln.ops pads the input).
  Value vinR, vwR;
  if (R > 1) {
    Value rowStride = k.mul(k.mul(k.cIndex(DH), k.toIndex(W)), k.toIndex(C));
    vinR = k.view(k.arg("input"), {pixels, k.cIndex(R), Kg},
                  {k.toIndex(C), rowStride, k.cIndex(1)});
    vwR = k.view(k.arg("weight"), {k.cIndex(KT * KH), Kg, k.toIndex(OC)},
                 {k.mul(Kg, k.toIndex(OC)), k.toIndex(OC), k.cIndex(1)});
  }
  Value vin1, vw1;
  if (G == 1) {
    vin1 = k.view(k.arg("input"), {pixels, Kg}, {k.toIndex(C), k.cIndex(1)});
    vw1 = k.view(k.arg("weight"), {taps, Kg, OCg},
                 {k.mul(Kg, k.toIndex(OC)), k.toIndex(OC), k.cIndex(1)});
  }
  Value zero = k.constant(k.tile({BM, BN}, f32), 0.0);
  // One loop over (tap, channel block) pairs, not a loop over the channel
  // blocks inside one over the taps: a GPU pipelines the pixel rows and the
  // weights across taps too (docs/gpu.md, "Pipelined gathers": the rows'
  // indices are computed per row at issue); with a few channel blocks per
  // tap (3 channels: one) the inner loop had nothing to pipeline.
  Value cBlocks = k.div(k.add(Kg, k.cIndex(BC - 1)), k.cIndex(BC));
  Value steps = k.mul(taps, cBlocks);
  auto acc = k.forLoop(k.cIndex(0), steps, k.cIndex(1), {zero}, [&](Value step, ValueRange it) {
    Value tap = k.div(step, cBlocks);
    Value c0 = k.mul(k.rem(step, cBlocks), k.cIndex(BC));
    Value tapI = I(tap);
    Value kt = k.div(tapI, k.cI32(tapRows * tapsPerRow));
    Value kr = k.rem(tapI, k.cI32(tapRows * tapsPerRow));
    Value kh = k.div(kr, k.cI32(tapsPerRow));
    if (R > 1)
      kh = k.mul(kh, k.cI32(R));
    Value kw = k.rem(kr, k.cI32(tapsPerRow));
    auto coord = [&](Value o, int64_t s, int64_t p, Value kk, int64_t d) {
      return k.add(k.sub(k.mul(o, k.cI32(s)), k.cI32(p)), k.mul(kk, k.cI32(d)));
    };
    Value it_ = coord(ot, ST, PT, kt, DT), ih = coord(oh, SH, PH, kh, DH),
          iw = coord(ow, SW, PW, kw, DW);
    auto inside = [&](Value x, Value hi) {
      return k.andI(k.cmp(Cmp::GE, x, k.cI32(0)), k.cmp(Cmp::LT, x, I(k.toIndex(hi))));
    };
    Value valid = k.andI(k.andI(mValid, inside(it_, T)), k.andI(inside(ih, H), inside(iw, W)));
    if (wide) // the row's last tap too (an output width too large for the input)
      valid = k.andI(valid, inside(k.add(iw, k.cI32(KW - 1)), W));
    if (R > 1) // the step's last kernel row too
      valid = k.andI(valid, inside(k.add(ih, k.cI32((R - 1) * DH)), H));
    Value row = k.add(k.mul(k.add(k.mul(k.add(k.mul(img, I(k.toIndex(T))), it_),
                                        I(k.toIndex(H))),
                                  ih),
                            I(k.toIndex(W))),
                      iw);
    Value idx = k.select(valid, row, k.cI32(-1));
    Value a, bt;
    if (R > 1) {
      // The weights' rows of the step's R kernel rows: (kt * KH + kh) on.
      Value wRow = k.add(k.mul(k.toIndex(kt), k.cIndex(KH)), k.toIndex(kh));
      a = k.reshape(k.gather(vinR, idx, {k.cIndex(0), c0}, {BM, R, BC}, 0),
                    {BM, R * BC});
      bt = k.reshape(k.load(vwR, {wRow, c0, n0}, {R, BC, BN}, 0), {R * BC, BN});
    } else if (G == 1) {
      // One group (conv2d, patch embeddings): the pixel rows [BM, BC] and
      // the weights [1, BC, BN] straight from rank-2 and rank-3 views, so
      // that on a GPU both are written in the dot's operand layout (padded
      // rows, core matrices) and the weights are pipelined.
      a = k.gather(vin1, idx, {c0}, {BM, BC}, 0);
      bt = k.reshape(k.load(vw1, {tap, c0, n0}, {1, BC, BN}, 0), {BC, BN});
    } else {
      a = k.reshape(k.gather(vin, idx, {g, c0}, {BM, 1, BC}, 0), {BM, BC});
      bt = k.reshape(k.load(vw, {tap, c0, g, n0}, {1, BC, 1, BN}, 0), {BC, BN});
    }
    return SmallVector<Value>{k.dot(a, bt, it[0])};
  });
  Value res = acc[0];
  if (hasBias) {
    Value vb = k.view(k.arg("bias"), {k.cIndex(G), OCg}, {OCg, k.cIndex(1)});
    res = k.add(res, k.load(vb, {g, n0}, {1, BN}, 0));
  }
  Value vo = k.view(k.arg("out"), {M, k.cIndex(G), OCg},
                    {k.toIndex(OC), OCg, k.cIndex(1)});
  k.store(k.reshape(res, {BM, 1, BN}), vo, {m0, g, n0});
  k.finish();
  return llvm::Error::success();
}

/// The most kernel rows depthwise_conv2d's row_taps unrolls (kiln.ops
/// takes it for 3 or fewer; 7x7 measured slower with it).
constexpr int64_t kMaxRowTaps = 16;

static llvm::Error buildDepthwise(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  const int64_t KH = c.getInt("kh"), KW = c.getInt("kw"), SH = c.getInt("sh"),
                SW = c.getInt("sw"), PH = c.getInt("ph"), PW = c.getInt("pw"),
                DH = c.getInt("dh"), DW = c.getInt("dw"), BW = c.getInt("block_w"),
                BC = c.getInt("block_c");
  for (int64_t v : {KH, KW, SH, SW, DH, DW, BW, BC})
    if (v <= 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "depthwise_conv2d: kernel sizes, strides, "
                                     "dilations and blocks must be positive");
  if (!tapsFitI32({KH, KW}, {DH, DW}))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "depthwise_conv2d: the kernel's taps or their offsets "
                                   "reach 2^31");
  // row_taps unrolls the kernel rows in the IR: a large kh grew the
  // compile's time and memory without bound.
  if (c.getInt("row_taps") && KH > kMaxRowTaps)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "depthwise_conv2d: row_taps unrolls the kernel's rows, "
                                   "at most " + llvm::Twine(kMaxRowTaps) + ", got kh " +
                                       llvm::Twine(KH));
  const bool hasBias = c.getInt("bias") != 0;
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  auto P = [&](Type ty) { return kd::PtrType::get(ctx, ty); };
  KernelBuilder k(module, "depthwise_conv2d",
                  {{"input", P(f32)}, {"weight", P(f32)}, {"bias", P(f32)},
                   {"out", P(f32)}, {"n", i64}, {"h", i64}, {"w", i64},
                   {"c", i64}, {"oh", i64}, {"ow", i64}},
                  3, &c.statics);
  Value N = k.arg("n"), H = k.arg("h"), W = k.arg("w"), C = k.arg("c"),
        OH = k.arg("oh"), OW = k.arg("ow");
  // One program: a segment of BW output pixels of one output row, BC
  // channels. Axis 0 numbers (row, channel block) with the channel block
  // fastest: programs in a row of launches read adjacent channels of the
  // same pixels (with the row fastest, each pass over the image read 1 of
  // every C / BC channel blocks of each pixel).
  Value blocksC = k.div(k.add(k.toIndex(C), k.cIndex(BC - 1)), k.cIndex(BC));
  Value row = k.div(k.pid(0), blocksC);
  Value img = k.div(row, k.toIndex(OH)), oh = k.rem(row, k.toIndex(OH));
  Value ow0 = k.mul(k.pid(1), k.cIndex(BW)),
        c0 = k.mul(k.rem(k.pid(0), blocksC), k.cIndex(BC));
  Value vin2 = k.denseView(k.arg("input"),
                           {k.mul(k.mul(k.toIndex(N), k.toIndex(H)), k.toIndex(W)), C});
  Value vin4 = k.denseView(k.arg("input"), {N, H, W, C});
  Value vw = k.denseView(k.arg("weight"), {k.cIndex(KH * KW), C});
  Value zero = k.constant(k.tile({BW, BC}, f32), 0.0);
  // One tap (kh, kw) multiplied into `acc`.
  auto tap = [&](Value kh, Value kw, Value acc) {
    Value ih = k.add(k.sub(k.mul(oh, k.cIndex(SH)), k.cIndex(PH)), k.mul(kh, k.cIndex(DH)));
    Value a;
    if (SW == 1) {
      // Consecutive pixels: a window of the image row (outside it, and
      // rows outside the image, read zeros).
      Value iw0 = k.add(k.sub(ow0, k.cIndex(PW)), k.mul(kw, k.cIndex(DW)));
      a = k.reshape(k.load(vin4, {img, ih, iw0, c0}, {1, 1, BW, BC}, 0), {BW, BC});
    } else {
      // Strided pixels: gathered (out-of-image ones read zeros).
      Value ow = k.add(k.arange(BW), k.convert(ow0, i32));
      Value iw = k.add(k.sub(k.mul(ow, k.cI32(SW)), k.cI32(PW)),
                       k.convert(k.mul(kw, k.cIndex(DW)), i32));
      Value ihI = k.convert(ih, i32);
      Value valid = k.andI(k.andI(k.cmp(Cmp::GE, iw, k.cI32(0)),
                                  k.cmp(Cmp::LT, iw, k.convert(k.toIndex(W), i32))),
                           k.andI(k.cmp(Cmp::GE, ihI, k.cI32(0)),
                                  k.cmp(Cmp::LT, ihI, k.convert(k.toIndex(H), i32))));
      Value pix = k.add(k.mul(k.add(k.mul(k.convert(img, i32), k.convert(k.toIndex(H), i32)),
                                    ihI),
                              k.convert(k.toIndex(W), i32)),
                        iw);
      a = k.gather(vin2, k.select(valid, pix, k.cI32(-1)), {c0}, {BW, BC}, 0);
    }
    Value wt = k.load(vw, {k.add(k.mul(kh, k.cIndex(KW)), kw), c0}, {1, BC}, 0);
    return k.fma(a, wt, acc);
  };
  // On the CPU the loop over kernel columns runs in registers
  // (lowerRegisterLoop): per group of pixels and vectors of channels, its
  // fused multiply-adds accumulate in registers (rounded once; a multiply
  // and an add measured 2-19% slower on AVX2).
  Value res;
  if (c.getInt("row_taps")) {
    // Each step multiplies a kernel column's taps of every kernel row (the
    // rows unrolled here): the accumulators stay in registers for all the
    // taps. 3x3 over 96-960 channels: 0.89-0.95x the time of the two loops
    // (AVX2); over 16-32 channels 1.1-1.4x, 7x7 over 512 1.23-1.27x
    // (kiln.ops takes it for 3 rows or fewer over 48+ channel blocks).
    res = k.forLoop(k.cIndex(0), k.cIndex(KW), k.cIndex(1), {zero}, [&](Value kw, ValueRange it) {
      Value acc = it[0];
      for (int64_t kh = 0; kh < KH; ++kh)
        acc = tap(k.cIndex(kh), kw, acc);
      return SmallVector<Value>{acc};
    })[0];
  } else {
    // Taps by kernel row, then column (no division per tap); the row's
    // accumulators are stored between rows.
    res = k.forLoop(k.cIndex(0), k.cIndex(KH), k.cIndex(1), {zero}, [&](Value kh, ValueRange it) {
      return k.forLoop(k.cIndex(0), k.cIndex(KW), k.cIndex(1), {it[0]},
                       [&](Value kw, ValueRange jt) {
        return SmallVector<Value>{tap(kh, kw, jt[0])};
      });
    })[0];
  }
  if (hasBias)
    res = k.add(res, k.load(k.denseView(k.arg("bias"), {k.cIndex(1), C}),
                            {k.cIndex(0), c0}, {1, BC}, 0));
  Value vout = k.denseView(k.arg("out"), {N, OH, OW, C});
  k.store(k.reshape(res, {1, 1, BW, BC}), vout, {img, oh, ow0, c0});
  k.finish();
  return llvm::Error::success();
}

void registerConvOps(std::vector<OpInfo> &ops) {
  std::vector<Param> convParams = {
      dtypeParam(),
      intParam("kt", "1", "kernel size (time)"), intParam("kh", "3", "kernel height"),
      intParam("kw", "3", "kernel width"), intParam("st", "1", "stride (time)"),
      intParam("sh", "1", "stride (height)"), intParam("sw", "1", "stride (width)"),
      intParam("pt", "0", "padding (time)"), intParam("ph", "0", "padding (height)"),
      intParam("pw", "0", "padding (width)"), intParam("dt", "1", "dilation (time)"),
      intParam("dh", "1", "dilation (height)"), intParam("dw", "1", "dilation (width)"),
      intParam("groups", "1", "channel groups"), intParam("bias", "1", "1: add bias"),
      intParam("block_m", "64", "output pixels per program"),
      intParam("block_n", "64", "output channels per program"),
      intParam("block_c", "32", "input channels per step"),
      intParam("wide_taps", "0",
               "1: a kernel row's taps are one step of kw * c contiguous channels "
               "(one group, pw 0, dw 1; kiln.ops pads the input for a stem)"),
      intParam("row_block", "1",
               "kernel rows per step, each one contiguous run of channels "
               "(kw 1 or wide_taps; one group, ph 0, kh a multiple of it)")};
  ops.push_back({"conv",
                 "N-D convolution (T, H, W spatial; NTHWC) by implicit GEMM: "
                 "conv2d, patch embeddings (kernel = stride), Conv3d video patches",
                 convParams,
                 [](ModuleOp m, const Config &c) { return buildConv(m, c, "conv"); }});
  ops.push_back({"depthwise_conv2d",
                 "depthwise 2-D convolution (NHWC, one KHxKW filter per channel)",
                 {intParam("kh", "3", "kernel height"), intParam("kw", "3", "kernel width"),
                  intParam("sh", "1", "stride (height)"), intParam("sw", "1", "stride (width)"),
                  intParam("ph", "1", "padding (height)"), intParam("pw", "1", "padding (width)"),
                  intParam("dh", "1", "dilation (height)"), intParam("dw", "1", "dilation (width)"),
                  intParam("bias", "1", "1: add bias"),
                  intParam("block_w", "32", "output pixels of a row per program"),
                  intParam("block_c", "64", "channels per program"),
                  intParam("row_taps", "0",
                           "1: a step multiplies one kernel column's taps of every "
                           "kernel row (accumulators in registers for all taps; kiln.ops "
                           "takes it on the CPU for 3 rows or fewer)")},
                 buildDepthwise});
}

} // namespace kiln::ops
