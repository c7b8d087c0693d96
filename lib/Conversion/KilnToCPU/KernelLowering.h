//===- KernelLowering.h - Tile programs to loops over buffers ---*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The lowering shared by the CPU and the GPU target (private to
// lib/Conversion). Every tile value gets a statically shaped buffer and every
// tile op becomes a loop nest over buffers. The CPU target (KilnToCPU.cpp)
// puts the buffers on the stack and walks them with native-width vectors; the
// GPU target (KilnToGPU.cpp) puts them in shared memory and distributes each
// loop nest over the threads of a block ("SIMT mode"), with a barrier after
// every op, and replaces dot and reduce by warp-level code (mma.sync, warp
// shuffles).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KERNELLOWERING_H
#define KILN_LIB_CONVERSION_KERNELLOWERING_H

#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <map>
#include <tuple>

namespace mlir::kiln::detail {

/// Storage type of a tile element in memory (i1 -> i8, bf16/f16 -> i16).
Type storageType(Type elementType);
/// Converts between an element type and its storage type.
Value toType(OpBuilder &b, Location loc, Value v, Type elementType);
/// The padding value as bits of the storage type.
TypedAttr storagePadding(TypedAttr pad);
/// Identity and combiner of a (non-arg) reduction.
TypedAttr reduceIdentity(Builder &b, ReduceKind kind, Type elt);
Value combine(ImplicitLocOpBuilder &b, ReduceKind kind, Value x, Value y);

/// Whether `from` is [1, ..., 1, R, C] and `to` is [R, C]: a view load with
/// leading unit dimensions reshaped to its 2-D tile (attention's [1, R, C];
/// a Triton-style batch and head offset's [1, 1, R, C]).
inline bool unitLeadingReshape(RankedTensorType from, RankedTensorType to) {
  if (from.getRank() < 3 || to.getRank() != 2 ||
      from.getShape().take_back(2) != to.getShape())
    return false;
  return llvm::all_of(from.getShape().drop_back(2),
                      [](int64_t d) { return d == 1; });
}

/// How the GPU target runs a kernel body (SIMT mode).
struct SimtConfig {
  int64_t numThreads = 128;   // threads per block
  Value threadId;             // index
  Value sharedBase;           // memref<?xi8, workgroup>: the dynamic window
  int64_t sharedBytes = 0;    // bytes planned so far
  bool tensorCores = true;    // kiln.dot on mma.sync where shapes allow
  bool asyncCopy = true;      // cp.async for loads of interior tiles
  bool ldmatrix = true;       // mma.sync fragments loaded with ldmatrix
  bool registerAccumulators = true; // loop-carried mma accumulators in regs
  bool wgmma = false;         // sm_90a: warpgroup tensor cores (wgmma)
  bool tma = false;           // sm_90a: pipelined loads by TMA
  /// TMA: the kernel's hidden scratch argument (memref<?xi8>, global), this
  /// program's linear id, the bytes each program owns there (a constant
  /// patched once the kernel is lowered: 128 per tensor map) and the maps.
  Value scratch;
  Value programLinear;
  Value scratchStride;
  int64_t tensorMaps = 0;
  /// TMA: tensor maps the runtime encodes at launch (host maps; docs/gpu.md,
  /// "Tensor maps"): each one's `tensor_map` manifest line, the kernel
  /// argument that carries it (!llvm.ptr; a 128-byte byval parameter on the
  /// GPU) and the i32 argument whose bit i says map i is usable (the view
  /// allows TMA). Off (hostMaps false), or for a view the runtime cannot
  /// evaluate, thread 0 builds the map in the scratch.
  bool hostMaps = true;
  Operation *kernelFunc = nullptr; // the gpu.func (arguments are added)
  Block *entry = nullptr;
  unsigned numUserArgs = 0;
  SmallVector<std::string> hostMapSpecs;
  SmallVector<Value> hostMapArgs;
  Value hostMapFlags;
  int64_t numStages = 2;      // software pipelining depth of loads in loops
  /// Gathers of rows whose indices a pipelined load gives are pipelined too
  /// (their stages take numStages copies of the gathered tile).
  bool pipelineGathers = true;
  /// sm_90a: warpgroups take turns at the tensor cores in attention-shaped
  /// loops (scheduleWarpgroupPingpong).
  bool pingpong = true;
  /// sm_90a: fp8 dots on wgmma's fp8 forms where they can be (expandFp8Dots).
  bool fp8Wgmma = true;
  /// The block of the op being lowered when each buffer was allocated (its
  /// "home"; blocks outlive the ops lowered away): a buffer allocated inside
  /// a loop body holds a value of one iteration.
  llvm::DenseMap<Operation *, Block *> bufferHome;
  /// Buffers (their memref.view) that must start on a wider boundary than
  /// the planner's 16 or 128 bytes: 128B-swizzled stages, 1024.
  llvm::DenseMap<Operation *, int64_t> bufferAlign;
  /// sm_90a: 128B-swizzled wgmma operand stages; mma.sync: operand buffers
  /// of whole 128-byte rows XOR-swizzled (allocXorTile).
  bool swizzle = true;
  /// Other mma.sync operand buffers get padded rows (allocPaddedTile).
  bool padRows = true;
  /// mma.sync: keep flash-attention-shaped dot results (row reductions,
  /// register A operands, row-rescaled accumulators) in registers, the
  /// dots' warps owning whole rows (planRowDots).
  bool rowFragments = true;
  /// The dots whose mma.sync tiling gives each warp whole rows.
  llvm::SmallPtrSet<Operation *, 4> rowDots;
};

/// Fills SimtConfig::rowDots from the kernel body, before it is lowered
/// (GPUTensorCores.cpp).
void planRowDots(SimtConfig &simt, Operation *body);

/// What a lowered make_view knows: the memref over the view (dynamic strides),
/// the same memref with a static unit innermost stride (used only when the
/// runtime stride is 1), the sizes, and whether the innermost stride is 1.
struct ViewInfo {
  Value base; // the kiln pointer the view was made from
  Value memref;
  Value unitMemref;
  SmallVector<Value> sizes;
  SmallVector<Value> strides; // in elements
  Value unitStride;
};

struct MmaTiles; // GPUTensorCores.cpp
/// One dimension of a TMA tensor map, innermost first: the global size, the
/// byte stride (none for dimension 0) and the box size (GPUPipelining.cpp).
struct TmaDim {
  Value size, strideBytes;
  int64_t box;
};

class KernelLowering {
public:
  KernelLowering(Operation *func, unsigned vectorBits)
      : func(func), vectorBits(vectorBits) {}
  /// Switches to SIMT mode (the GPU target).
  void setSimt(SimtConfig *config) { simt = config; }
  /// Lets bf16 dots use AVX512-BF16's vdpbf16ps (lowerDotPairs).
  void setBF16Dot(bool enable) { bf16Dot = enable; }
  /// Names the lowering and its target in diagnostics.
  std::string who() const {
    return simt ? "kiln GPU lowering" : "kiln CPU lowering";
  }
  std::string target() const { return simt ? "GPU" : "CPU"; }

  LogicalResult run(Block &body, ArrayRef<Value> gridArgs);

private:
  Operation *func; // func.func or gpu.func: buffers go at its entry
  unsigned vectorBits;
  bool bf16Dot = false;
  SimtConfig *simt = nullptr;
  // SIMT mode: shared-memory reads not yet followed by a barrier (scalar
  // tensor.extract reads run on every thread and have no barrier of their
  // own). An op that writes tiles, or a loop's back edge, must sync first.
  bool unsyncedReads = false;
  struct RegionFrame {
    bool entry;         // unsyncedReads when the op with regions began
    bool exit = false;  // any of its blocks ended with unsyncedReads
  };
  SmallVector<RegionFrame> regionFrames;
  Operation *current = nullptr; // the op lowerOp is lowering
  SmallVector<Value> grid; // pid_x, pid_y, pid_z, grid_x, grid_y, grid_z
  DenseMap<Value, Value> buffers;
  /// The block a value is defined in, for in-place reuse of its buffer (an
  /// op may overwrite an operand that dies at it, in the same block). A
  /// loop-carried tile's block argument stays with the old loop body when
  /// lowerFor moves the body into the rebuilt loop: its block is the new one.
  DenseMap<Value, Block *> movedArgBlocks;
  Block *definingBlock(Value v) const {
    Block *moved = movedArgBlocks.lookup(v);
    return moved ? moved : v.getParentBlock();
  }
  DenseMap<Value, ViewInfo> views;
  SmallVector<Operation *> toErase;

  // SIMT software pipelining (num_stages): loads in an scf.for whose
  // offsets derive from the induction variable are issued num_stages - 1
  // iterations ahead with cp.async into rotating stage buffers.
  struct PipelinedLoad {
    LoadOp load;
    SmallVector<Value> stages;      // numStages shared buffers
    SmallVector<Operation *> slice; // offset computation (body order)
    // TMA (sm_90a): the load's tensor map (a slot of the scratch) and
    // whether its view allows TMA (i1, uniform, decided before the loop);
    // without it the load takes cp.async.
    int64_t tensorMap = -1;
    int64_t hostMap = -1; // or the index of its host map
    Value useTma;
    int64_t tmaBytes = 0; // per stage fill
    // sm_90a: the stages are in the 128B-swizzled wgmma layout
    // (swizzleCandidate), not the no-swizzle core layout.
    bool swizzled = false;
    // The indices of a pipelined gather: issued 2D iterations ahead (D the
    // loop's distance) into 2D + 1 stages, so that iteration k, issuing
    // the gather of iteration k + D, finds them landed; never by TMA.
    bool feedsGather = false;
  };
  // A gather of rows issued D iterations ahead like a load (cp.async per
  // row chunk into rotating stages). Its index tile is evaluated per row at
  // issue (evalIndexAt): an elementwise expression over pipelined loads of
  // the loop (read from their stage for that iteration), aranges, splats of
  // scalars (recomputed for that iteration), constants and tiles defined
  // before the loop.
  struct PipelinedGather {
    GatherOp gather;
    SmallVector<Value> stages;      // numStages shared buffers
    SmallVector<Operation *> slice; // offsets' and splats' scalars (body order)
  };
  struct PipelinedLoop {
    SmallVector<PipelinedLoad> loads;
    SmallVector<PipelinedGather> gathers;
    Value current;   // this iteration's stage index (set at the first load)
    Value iteration; // this iteration's number k (set with `current`)
    // TMA: one mbarrier per stage (i64 [S] in shared memory) and whether
    // any load of the loop may go by TMA (i1): then every fill arms its
    // stage's mbarrier and every iteration waits on it.
    Value barriers;
    Value anyTma;
    // Whether some fill of a wgmma operand stage may be written by threads
    // (cp.async, per element) rather than TMA (i1, uniform; null: no such
    // stage): then each iteration fences those writes for the async proxy.
    Value threadWrittenCores;
    // How many iterations ahead loads are issued: S - 1, or S - 2 when the
    // loop's wgmma dot stays in flight into the next iteration (inFlight):
    // then the stage that dot reads is refilled one iteration later.
    int64_t distance = 1;
    DotOp inFlight;
  };
  SmallVector<std::unique_ptr<PipelinedLoop>> pipelinedLoops;
  // TMA maps already built by thread 0 (released and acquired), by view,
  // tile type, and stage layout (core matrices, 128B swizzle): a later loop
  // loading the same tiles of the same view reuses the map when its
  // condition dominates the loop (setupTma). Attention's partial- and
  // full-block loops read the same key and value tiles.
  struct BuiltMap {
    int64_t slot, hostMap;
    Value ok;
  };
  std::map<std::tuple<const void *, const void *, bool, bool>, BuiltMap> builtMaps;

  /// The dot of `loop` that may keep its wgmma groups in flight across
  /// iterations (see setupPipelining), or null.
  DotOp inFlightDot(scf::ForOp loop, const PipelinedLoop &state);
  // SIMT: loop-carried tensor-core accumulators kept in registers (each
  // lane's fragments under the dot's warp tiling), not in a shared buffer.
  DenseMap<Value, SmallVector<Value>> registerTiles;
  // Row rescalings of register accumulators (flash attention's acc * alpha):
  // an arith.mulf by broadcast(expand_dims(v [M], 1)) -> v.
  DenseMap<Operation *, Value> registerRowScales;
  LogicalResult lowerRegisterRowScale(Operation *mulf, Value rowVector);
  /// The dot a register accumulator iter_arg feeds.
  DotOp registerDotOfArg(BlockArgument arg);
  /// The tile iter_args of `loop` that can live in registers: used only as
  /// the accumulator of one warp-tiled tensor-core dot (directly, or scaled
  /// per row first) whose result is yielded back in the same position.
  SmallVector<unsigned> registerAccumulators(scf::ForOp loop);
  SmallVector<Value> loadRegisterTile(ImplicitLocOpBuilder &b, DotOp dot,
                                      Value buf);
  /// Results of register accumulators whose users are all in the loop's
  /// block stay in registers (under their dot's tiling): a following loop
  /// carries them on; any other reader gets them stored first (bufferOf).
  DenseMap<Value, std::pair<DotOp, SmallVector<Value>>> loopRegisters;
  /// Whether warp-tiled dots `a` and `b` lay out their accumulators alike.
  bool sameRegisterTiling(DotOp a, DotOp b);
  /// How many accumulator registers each lane holds for `dot`.
  int64_t registerTileSize(DotOp dot);
  void storeRegisterTile(ImplicitLocOpBuilder &b, DotOp dot, ValueRange regs,
                         Value buf);
  LogicalResult lowerRegisterDot(DotOp op);
  DenseMap<Operation *, PipelinedLoop *> pipelinedLoads;
  // This iteration's stage buffers (the loads' values): rewritten only
  // after the next iteration's first barrier.
  DenseSet<Value> pipelinedBuffers;
  // Stage buffers (of this iteration, or any) in the 128B-swizzled layout:
  // their elements are where swizzledOffset says, not coreStrides.
  DenseSet<Value> swizzledBuffers;
  void setupPipelining(scf::ForOp loop);
  /// Whether gather index tile `v` of `loop` can be evaluated per element
  /// at issue (see PipelinedGather): collects the scalars its splats read
  /// (`scalars`), the pipelined loads it reads (`indexLoads`) and the ops of
  /// the body it is made of (`ops`).
  bool indexExpression(Value v, scf::ForOp loop, const PipelinedLoop &state,
                       SmallVectorImpl<Value> &scalars,
                       SmallPtrSetImpl<Operation *> &indexLoads,
                       SmallPtrSetImpl<Operation *> &ops);
  /// Element `r` (index) of index tile `v` at the iteration being issued,
  /// `iter` (its number; `map` maps the body's scalars to that iteration's)
  /// of `loop` (the one whose body holds the gather: after lowerFor rebuilt
  /// a loop with tile iter_args, the new one).
  Value evalIndexAt(ImplicitLocOpBuilder &b, Value v, Value r, Value iter,
                    scf::ForOp loop, IRMapping &map, PipelinedLoop &state,
                    DenseMap<Value, Value> &memo);
  /// Ops of loop bodies only pipelined gathers' index tiles use: evaluated
  /// at issue, not lowered where they stand.
  DenseSet<Operation *> issuedIndexOps;
  /// A pipelined load or gather (`op`) of `state`'s loop: at the first of
  /// an iteration, the wait, barrier and issue of later iterations; then
  /// its stage buffer for this iteration.
  LogicalResult lowerPipelinedAccess(Operation *op, PipelinedLoop &state);
  Value scalarReadAt(ImplicitLocOpBuilder &b, tensor::ExtractOp ex,
                     IRMapping &map);
  /// Recomputes an access's view and offsets (from `slice`, the ops in the
  /// loop body that compute them) for induction variable `ivNew` at `b`;
  /// returns the offsets and sets `vi` to the view's.
  SmallVector<Value> pipelinedAccessAt(ImplicitLocOpBuilder &b,
                                       ArrayRef<Operation *> slice, Value view,
                                       ValueRange offsets, Value ivOld,
                                       Value ivNew, const ViewInfo *&vi,
                                       IRMapping *mapOut = nullptr);
  /// Issues the copies for iteration number `iter` (index) of `loop` (if
  /// the loop runs that iteration), each into its stage iter % (its stage
  /// count), without commit: with `ahead`, the gathers' index loads only;
  /// otherwise the other loads and the gathers.
  void issuePipelinedLoads(ImplicitLocOpBuilder &b, scf::ForOp loop,
                           PipelinedLoop &state, Value iter, bool ahead);
  /// TMA: whether pipelined load `pl` of `loop` can load by TMA (the
  /// compile-time conditions; the view's are checked at run time).
  bool tmaCandidate(const PipelinedLoad &pl, scf::ForOp loop);
  /// TMA: before `loop` (at `b`): the run-time conditions, thread 0 builds
  /// the tensor maps and initializes the stage mbarriers.
  void setupTma(ImplicitLocOpBuilder &b, scf::ForOp loop, PipelinedLoop &state);
  /// TMA: whether a view allows a map (i1, run time), and thread 0's
  /// writing of one into the scratch.
  Value tmaViewAllows(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                      int64_t rank, int64_t eb, bool chunkColumns);
  void buildTensorMap(ImplicitLocOpBuilder &mb, int64_t slot,
                      const ViewInfo &vi, ArrayRef<TmaDim> dims, int64_t eb,
                      int64_t swizzleMode);
  /// TMA store (sm_90a): a plain row-major tile stored to its view by one
  /// box from shared memory when the view allows it (else false: the caller
  /// stores it by threads).
  bool tmaStoreCandidate(Operation *op, Value tileBuf,
                         RankedTensorType tileType);
  /// `op`: the kiln store (what follows it decides the final wait).
  void emitTmaStore(ImplicitLocOpBuilder &b, Operation *op, const ViewInfo &vi,
                    ValueRange offsets, Value tileBuf, RankedTensorType type,
                    int64_t hostMap);
  /// Host maps: the index of a new one for view `vi` and a tile of `type`
  /// (kind "plain", "core" or "swizzled", as tmaDims), or -1 when the
  /// runtime cannot compute it (the view is not made from a pointer argument
  /// with sizes and strides computed from scalar arguments and constants).
  int64_t addHostMap(const ViewInfo &vi, RankedTensorType type,
                     llvm::StringRef kind);
  /// Whether host map `index` is usable (i1, uniform): its bit of the flags.
  Value hostMapUsable(ImplicitLocOpBuilder &b, int64_t index);
  /// A tile stored to a strided view by the block's threads (no barrier).
  void storeByThreads(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                      ValueRange offsets, Value tileBuf,
                      RankedTensorType tileType, TypedAttr padAttr);
  /// TMA: whether a box of `type` at `offsets` of view `vi` ends at or
  /// below 2^30 in each unbounded dimension (whose map size is 2^30; i1,
  /// uniform), or null when the view has none.
  Value tmaInRange(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                   ValueRange offsets, RankedTensorType type);
  /// TMA: whether this fill of `pl` (at `offsets`) goes by TMA (i1).
  Value tmaIssuable(ImplicitLocOpBuilder &b, const PipelinedLoad &pl,
                    ValueRange offsets);
  /// TMA: thread 0 issues `pl`'s box for a stage fill at `offsets`.
  void issueTma(ImplicitLocOpBuilder &b, PipelinedLoad &pl,
                ValueRange offsets, Value dst, Value barrier);
  /// A gather's or scatter's rows moved in whole chunks where the view
  /// allows (cp.async with zero fill; vector stores), element by element
  /// elsewhere; no commit, wait or barrier.
  /// `rowIndex`, when given, computes row r's index (index type) in place
  /// of reading `idxBuf`.
  void emitRowChunksSimt(
      ImplicitLocOpBuilder &b, const ViewInfo &vi, Value idxBuf,
      ValueRange offsets, Value tileBuf, RankedTensorType tileType,
      TypedAttr padAttr, bool isStore,
      function_ref<Value(ImplicitLocOpBuilder &, Value)> rowIndex = nullptr);
  /// The widest cp.async chunk for a tile row (0: none).
  int64_t asyncChunk(RankedTensorType tileType);
  /// Loads a tile from a view into `tileBuf` (interior tiles by cp.async,
  /// others per element), without barrier; `wait` commits and waits for the
  /// copies, else the caller commits.
  void emitTileLoadSimt(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                        ValueRange offsets, Value tileBuf,
                        RankedTensorType tileType, TypedAttr padAttr,
                        bool wait, bool swizzled = false);

  // Buffers and element access ------------------------------------------
  Value allocTile(RankedTensorType type, Location loc);
  FailureOr<Value> bufferOf(Value tile, Operation *user);
  int64_t vectorWidth(ArrayRef<Type> elementTypes, int64_t innerDim);
  Value loadElems(ImplicitLocOpBuilder &b, Value buf, ValueRange idx,
                  Type elementType, int64_t width);
  void storeElems(ImplicitLocOpBuilder &b, Value value, Value buf,
                  ValueRange idx, int64_t width);
  Value splatConstant(ImplicitLocOpBuilder &b, TypedAttr attr, int64_t width);
  void forEachIndex(ImplicitLocOpBuilder &b, ArrayRef<int64_t> shape,
                    int64_t innerStep,
                    function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn);
  /// The CPU's loop nest over dynamic extents (index values), the innermost
  /// by `innerStep` (the extent a multiple of it, or the last step partial).
  void forEachIndex(ImplicitLocOpBuilder &b, ValueRange extents, int64_t innerStep,
                    function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn);
  /// Stores `value` into every element of the tile buffer `buf`.
  void fillTile(ImplicitLocOpBuilder &b, Value buf, RankedTensorType type, TypedAttr value);
  void copyTile(ImplicitLocOpBuilder &b, Value from, Value to,
                RankedTensorType type);
  /// Region terminators carrying tiles (scf.yield, scf.condition): copies
  /// each tile operand `values[i]` into `dests[i]` as one parallel assignment
  /// (staged through temporaries when a source is another destination) and
  /// returns the operands without a destination (the scalars), in order.
  FailureOr<SmallVector<Value>> assignTiles(Operation *terminator,
                                            ValueRange values,
                                            ArrayRef<Value> dests);
  /// Replaces `block`'s scf.yield by one that yields only the scalars, after
  /// assigning the yielded tiles to `dests` (see assignTiles).
  LogicalResult rewriteYield(Block &block, ArrayRef<Value> dests);

  // Op lowerings -----------------------------------------------------------
  LogicalResult lowerBlock(Block &block);
  /// Lowers the ops nested in `op`, which itself stays (control flow that
  /// carries no tiles, and ops the lowering leaves alone).
  LogicalResult lowerRegions(Operation *op);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerMakeView(MakeViewOp op);
  /// A store's `computed`: a deferred tile whose elements are computed as
  /// they are stored (CPU; tileBuf unused).
  LogicalResult lowerViewAccess(Operation *op, Value view, Value indices,
                                ValueRange offsets, Value tileBuf,
                                RankedTensorType tileType, Attribute padding,
                                bool isStore, Value computed = Value());
  /// CPU: whether `user` is a kiln.store of `v`, or a reshape of unit
  /// dimensions (the last kept) of it whose only user is one, in v's block:
  /// a store that computes v's elements as it writes them (canDefer).
  bool storesElements(Operation *user, Value v);
  /// kiln.atomic_add / atomic_rmw, or kiln.scatter_add / scatter_rmw
  /// (`indices` set: dimension 0 is the row each index names); with `cmp`,
  /// kiln.atomic_cas (a compare and swap of each element).
  LogicalResult lowerAtomicAdd(Operation *op, Value value, Value view,
                               Value indices, ValueRange offsets, Value old,
                               AtomicKind kind = AtomicKind::add,
                               Value cmp = Value());
  /// kiln.assert / kiln.print / kiln.clock / kiln.processor_id (DebugOps.cpp).
  LogicalResult lowerAssert(AssertOp op);
  /// Reports `message` at `site` (an op of `module`) where the scalar `ok`
  /// is false, as a failing kiln.assert does: on the CPU the runtime's hook
  /// fails the launch, in SIMT mode cf.assert (DebugOps.cpp). In SIMT mode
  /// each thread tests its own `ok`.
  void failUnless(ImplicitLocOpBuilder &b, Value ok, StringRef message, Operation *site);
  LogicalResult lowerPrint(PrintOp op);
  LogicalResult lowerClock(ClockOp op);
  LogicalResult lowerProcessorId(ProcessorIdOp op);
  LogicalResult lowerElementwise(Operation *op);
  // Elementwise fusion: an elementwise op whose only user is an elementwise
  // op of the same shape in the same block, or a splat or broadcast whose
  // users all are, is not materialized; the users compute it inline,
  // element by element.
  bool canDefer(Operation *op);
  void collectTypes(Value v, SmallVectorImpl<Type> &types);
  Value emitElems(ImplicitLocOpBuilder &ib, Value v, ValueRange idx,
                  int64_t width);
  Value emitElemsAt(ImplicitLocOpBuilder &ib, Value v, ValueRange idx,
                    int64_t width);
  /// emitElems' results while a register loop's yield is emitted (memoElems).
  bool memoElems = false;
  std::map<std::tuple<const void *, std::vector<std::pair<bool, intptr_t>>, int64_t,
                      int64_t>,
           Value>
      elemMemo;
  /// Whether a tile of a register loop's body is computed from its carried
  /// tiles (groupOverride), memoized in carriedMemo (cleared with elemMemo).
  bool fromCarried(Value v);
  DenseMap<Value, bool> carriedMemo;
  DenseSet<Operation *> deferred;
  // Gather + store fusion: a gather whose only user is a store copies rows
  // from source to destination directly when both tiles are interior (no
  // tile buffer in between); otherwise both run the general way.
  bool canFuseGatherStore(GatherOp gather);
  /// For a tile stored into `memref` at `offsets`: whether all its rows
  /// start at the same distance from a `bytes` boundary (a power of two;
  /// elements of `eltBytes`), and that distance in elements.
  std::pair<Value, Value> streamShift(ImplicitLocOpBuilder &b, Value memref,
                                      ValueRange offsets, int64_t eltBytes, int64_t bytes);
  /// Walks `extents` of a tile (index values) row by row for kiln.store
  /// {streaming}: the first `shift` elements of each row one by one, then
  /// whole vectors of `width` (written non-temporal), then the rest one by
  /// one. `read` gives the tile's elements at an index (a vector of w, or a
  /// scalar for 1).
  void streamRows(ImplicitLocOpBuilder &b, ValueRange extents, int64_t width, Value shift,
                  function_ref<Value(ImplicitLocOpBuilder &, ValueRange, int64_t)> read,
                  function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value, bool)> write);
  /// Stores a vector (or a scalar) into a view's memref at `at`; a
  /// non-temporal vector store is aligned to the vector's size.
  void writeElems(ImplicitLocOpBuilder &b, Value v, const ViewInfo &vi, ValueRange at,
                  bool nontemporal);
  /// An sfence after non-temporal stores (kiln.store {streaming}).
  void storeFence(ImplicitLocOpBuilder &b);
  /// kiln.store {streaming} of `extents` of a tile (index values, all
  /// inside the view) into `memref` at `offsets`: streamRows with `read` and
  /// `write`, then storeFence, when streamShift finds the rows at one
  /// distance from a vector boundary; `plain` (the ordinary copy) otherwise.
  void storeStreaming(ImplicitLocOpBuilder &b, Value memref, ValueRange offsets, Type elt,
                      ValueRange extents, int64_t width,
                      function_ref<Value(ImplicitLocOpBuilder &, ValueRange, int64_t)> read,
                      function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value, bool)> write,
                      function_ref<void(ImplicitLocOpBuilder &)> plain);
  LogicalResult lowerGatherStore(GatherOp gather, Operation *reshape,
                                 StoreOp store);
  /// SIMT: whether both ends of a fused gather + store move whole chunks
  /// (i1, uniform: every gathered row start and the destination tile's rows
  /// aligned to the tile's cp.async chunk), and each thread's copy of its
  /// chunks, global to registers to global (rows outside read `pad`).
  Value gatherStoreAlignedSimt(ImplicitLocOpBuilder &b, const ViewInfo &gv,
                               ValueRange gOff, const ViewInfo &sv,
                               ValueRange sOff, RankedTensorType type);
  void gatherStoreChunksSimt(ImplicitLocOpBuilder &b, const ViewInfo &gv,
                             ValueRange gOff, const ViewInfo &sv,
                             ValueRange sOff, int64_t lead, Value idxBuf,
                             RankedTensorType type, TypedAttr pad);
  LogicalResult lowerReshape(Operation *op);
  DenseSet<Operation *> fusedGathers;
  LogicalResult lowerDot(DotOp op);
  LogicalResult lowerReduce(ReduceOp op);
  LogicalResult lowerScan(ScanOp op);
  LogicalResult lowerFor(scf::ForOp op);
  // Loops in registers (CPU): an scf.for that carries only tiles of one
  // shape, whose body computes them element by element (elementwise ops,
  // splats, aranges, broadcasts, loads and gathers, scalar code) and writes
  // no memory, runs inside the walk over the elements: for each group of
  // `unroll` vectors, the loop, its carried tiles in vector registers and
  // every tile of its body computed inline (emitElems). Depthwise
  // convolution's loop over the taps: no tile of the gathered pixels, no
  // accumulator stored per tap.
  bool registerLoop(scf::ForOp op, int64_t &width, int64_t &unroll,
                    int64_t &unrollRows);
  /// The vectors of a register loop's carried tiles, one per element group
  /// of the walk (curGroup: the group emitElems computes).
  DenseMap<Value, SmallVector<Value>> groupOverride;
  int64_t curGroup = 0;
  std::optional<LogicalResult> lowerRegisterLoop(scf::ForOp op);
  /// A register loop's only result stored by a kiln.store at the end of a
  /// chain of single-use ops in the loop's block: elementwise ops of the
  /// loop's shape (a bias, a cast), then perhaps a reshape adding or
  /// dropping unit dimensions. The chain, its store last; empty if none.
  SmallVector<Operation *> epilogueStore(scf::ForOp op);
  /// Moves each register loop of `block` with an epilogue store to just
  /// before its chain, and the chain to just before the store, when nothing
  /// they pass writes memory: lowerRegisterLoop then computes the chain and
  /// stores it per group of vectors (no tile buffer of the result).
  void sinkRegisterLoops(Block &block);
  /// Epilogue ops lowered with their register loop (lowerOp skips them).
  DenseSet<Operation *> fusedEpilogue;
  /// Stores the epilogue of register loop result `result`, whose vectors
  /// at the group's indices `at` are `vectors`: a plain vector store each
  /// when the store's tile is `direct` (apart from the loop's reads and
  /// inside its view, both tested before the walk); checked stores when it
  /// is only `apart`; otherwise into tile `spill`.
  void storeEpilogue(ImplicitLocOpBuilder &ib, Value result, ValueRange vectors,
                     ArrayRef<Operation *> epilogue, ArrayRef<SmallVector<Value>> at,
                     int64_t width, Value direct, Value apart, Value spill);
  /// `width` elements of a kiln.load's or kiln.gather's tile at `idx`, read
  /// from its view (padding outside it), for a register loop's body.
  Value readViewElems(ImplicitLocOpBuilder &ib, Operation *access,
                      ValueRange idx, int64_t width);
  /// Reads of a register loop's version whose columns were tested before it:
  /// all inside their views (fastReads), or starting at column 0 or later
  /// with unit stride (maskedReads: a masked load each, for a tile running
  /// past its view's columns).
  DenseSet<Operation *> fastReads, maskedReads;
  /// A row of padding per fast read of a tile with rows (its columns' worth,
  /// filled at the kernel's entry): a row outside the view reads it instead
  /// (one scalar select of the address per row, not a vector select per
  /// vector).
  DenseMap<Operation *, Value> paddingRows;
  /// Fast reads of a register loop's version for steps whose rows lie inside
  /// their views at every iteration (tested before the loop): no row test.
  DenseSet<Operation *> interiorReads;
  /// CPU: whether `producer` (a view load, maybe reshaped to 2-D)
  /// is read only as the lhs of a dot (or its rhs, rhsReadInPlace; or by a
  /// blocked 2-D kiln.trans) after it, with no memory write
  /// between; if so, marks it (and its reshape) for lowerDot to read in
  /// place or lower.
  bool directDotOperand(Operation *producer);
  /// Elements [row, col .. col + width) of a 2-D tile as `elt` values.
  using TileReader =
      std::function<Value(ImplicitLocOpBuilder &, Value, Value, Type, int64_t)>;
  TileReader bufferReader(Value buf);
  /// The load (and reshape) deferred to `tile`'s user, or none.
  std::pair<LoadOp, Operation *> deferredSource(Value tile);
  /// Calls `emit` with a reader of `tile`: its buffer, or, for a deferred
  /// load, twice under an scf.if: the view itself when the tile is interior,
  /// else the tile the load is lowered into there.
  LogicalResult emitOnTile(ImplicitLocOpBuilder &b, Value tile, Operation *user,
                           function_ref<void(ImplicitLocOpBuilder &, TileReader)> emit);
  /// A deferred load's tile lies inside its view, with last stride 1 (i1).
  Value deferredInterior(ImplicitLocOpBuilder &b, LoadOp load);
  /// `width` elements of a deferred load's 2-D tile at [row, col..], read
  /// from its view (valid where deferredInterior holds).
  Value readDeferred(ImplicitLocOpBuilder &b, LoadOp load, Value row, Value col,
                     Type elt, int64_t width);
  /// An f32 dot whose rhs, a deferred load, the micro-kernel reads through a
  /// strided memref (deferredRhs) instead of a copy.
  bool rhsReadInPlace(DotOp dot);
  /// The memref a dot's deferred rhs [K, N] is read through, chosen at run
  /// time: the view itself where the tile is interior and its rows are
  /// adjacent (row stride N: the tile is one block of memory, so the reads
  /// touch what the copy would have), else the tile the load is lowered
  /// into there.
  FailureOr<Value> deferredRhs(DotOp op, LoadOp load, Operation *reshape);
  /// Lowers a deferred load (and its reshape) at the end of `into`, as it
  /// would have been where it stood.
  LogicalResult materializeDeferred(Operation *load, Operation *reshape, Block *into);
  DenseSet<Operation *> deferredDotLoads;
  bool materializingDotLoad = false;
  // Dots of a transposed tile, x86 (dot(a, trans(x)), a [M, K] and x
  // [N, K] in f32, or bf16 / f16 widened once, K long against M: DeepSeek sparse attention's q . k^T over
  // its gathered key rows): the transpose is not made; each output element
  // is a dot product of a row of `a` and a row of `x`, both read along K
  // (emitDotNT). ntSources maps such a transpose's result to x's buffer.
  bool dotNTOnly(TransOp tr);
  /// A [rows, cols] tile of bf16 / f16 (`narrow`, read by `read`) widened
  /// into the f32 buffer `wide` (allocated when null), once per dot.
  Value widenToF32(ImplicitLocOpBuilder &b, TileReader read, int64_t rows, int64_t cols,
                   Type narrow, Value &wide);
  void emitDotNT(ImplicitLocOpBuilder &b, TileReader readA, TileReader readX, Type inElt,
                 Value out, TypedAttr splat, int64_t M, int64_t K, int64_t N);
  DenseMap<Value, Value> ntSources;
  /// Whether such a transpose's only user, a dot in its block, reads x once
  /// (M <= 4 rows of a, not itself deferred): x's load is then deferred to
  /// the dot (directDotOperand), which reads an interior tile's rows from
  /// its view. Decoding streams each key tile once, and the copy's pass over
  /// it came on top of the dot's.
  bool ntReadsOnce(TransOp tr);
  /// Transposes taken so (directDotOperand), and their results' source tiles
  /// (deferred loads) for lowerDot.
  DenseSet<Operation *> ntInPlace;
  DenseMap<Value, Value> ntDeferred;
  LogicalResult lowerIf(scf::IfOp op);
  LogicalResult lowerWhile(scf::WhileOp op);
  Value assignResult(Operation *op, Value result);

  // SIMT mode (KilnToGPU.cpp) -----------------------------------------------
  Value allocSharedTile(RankedTensorType type, Location loc);
  void forEachIndexSimt(
      ImplicitLocOpBuilder &b, ArrayRef<int64_t> shape,
      function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn);
  LogicalResult lowerViewAccessSimt(Operation *op, const ViewInfo &vi,
                                    Value idxBuf, ValueRange offsets,
                                    Value tileBuf, RankedTensorType tileType,
                                    TypedAttr padAttr, bool isStore);
  /// `accSplat`: the accumulator is this constant (splatAccumulator), the
  /// warp-tiled dot starts from it in registers and `out` only receives the
  /// result.
  LogicalResult lowerDotSimt(DotOp op, Value a, Value b, Value out,
                             TypedAttr accSplat = {});
  /// SIMT: the value of a dot's accumulator, as its registers hold it
  /// (registerSplat), when it is a splat constant and the dot is warp-tiled
  /// on tensor cores (its registers then start from the constant: no copy
  /// of the accumulator, no buffer read). Null otherwise.
  TypedAttr splatAccumulator(DotOp op);
  /// SIMT: whether every use of tile `v` (a warp-tiled dot's result, or an
  /// elementwise result computed on its fragments) can read it from this
  /// lane's accumulator fragments of `dot`: fused elementwise expressions
  /// (which then compute each fragment element themselves) and row
  /// reductions when whole rows lie in one warp. Such a value stays in
  /// registers (fragmentResults): no shared-memory round trip, no barrier.
  /// Any other reader gets it stored first (bufferOf).
  /// (`elementwiseOnly`: the uses are elementwise expressions only, which
  /// need no whole rows: any warp tiling of `dot` will do.)
  bool fragmentUses(Value v, DotOp dot, bool elementwiseOnly = false);
  /// SIMT: whether scf.if `op` can yield its tiles as fragments of `dot` (in
  /// registers): each is of the dot's result type and read the way
  /// fragmentUses allows; then the branches' expressions on `dot`'s
  /// fragments keep theirs too (lowerFragmentIf).
  bool fragmentIf(scf::IfOp op, DotOp dot);
  LogicalResult lowerFragmentIf(scf::IfOp op, DotOp dot, size_t numRegs,
                                Type regType);
  /// The branches of the ifs lowerFragmentIf rebuilt: their yields take
  /// fragments (fragmentUses).
  llvm::SmallPtrSet<Block *, 4> fragmentIfBlocks;
  /// The dot whose fragments `loop`'s iter_arg `i` carries in registers, or
  /// null: the scores an overlapped loop computes an iteration ahead
  /// (GPUOverlap.cpp). The init is a dot's result used only there, the
  /// yielded value a dot of the body used only there, both with the same
  /// register tiling; every reader in the body takes fragments, and the
  /// loop's result is unused.
  DotOp fragmentCarry(scf::ForOp loop, unsigned i);
  /// The yielded dots of fragmentCarry, once their loop is being lowered.
  llvm::SmallPtrSet<Operation *, 2> carriedDots;
  /// The dot whose fragments `loop`'s iter_arg `i` is carried in, or null:
  /// an accumulator updated by elementwise arithmetic on one dot's result
  /// in the body (a block-scaled GEMM's `acc += dot(a, b) * sa * sb`). The
  /// yielded value is an elementwise op of the body on the argument and
  /// the fragments of that dot, used only by the yield; the argument's
  /// readers are elementwise ops of the body. The init is a splat constant
  /// or any tile (read into registers); the result may be used after the
  /// loop (stored, or read in registers, as a register accumulator's).
  DotOp elementwiseCarry(scf::ForOp loop, unsigned i);
  /// The yielded values of elementwiseCarry, kept in fragments for the
  /// yield (fragmentUses).
  llvm::SmallPtrSet<Value, 2> carriedYields;
  /// A wgmma group of a carried dot was committed and no wait_group 0 has
  /// retired it yet: lowerFor waits before the yield.
  bool wgmmaPending = false;
  void retirePendingWgmma(Operation *before);
  /// A pipelined loop's issue of iteration k + D whose offsets read memory
  /// (block indices): deferred from the iteration's first barrier to just
  /// after the first wgmma group that follows is committed, so that the
  /// reads' latency passes while the tensor cores run (lowerPipelinedAccess).
  /// `deferredBlock`: the loop body it must be issued in, once.
  Operation *deferredIssue = nullptr; // an scf.execute_region of the issue
  Block *deferredBlock = nullptr;
  /// Emits the deferred issue at `b` when `b` is in `deferredBlock` (or in
  /// a region of an op of it that runs once: `once`).
  void flushDeferredIssue(ImplicitLocOpBuilder &b, bool once = false);
  DenseMap<Value, std::pair<DotOp, SmallVector<Value>>> fragmentResults;
  /// Stores a fragment value into its buffer at `user` (then a barrier).
  void materializeFragments(Value v, Operation *user);
  /// Whether fragment value `producer`'s result layout is the A-register
  /// layout `consumer` reads (both on wgmma, or both on mma.sync with whole
  /// rows per warp), so that it takes A from registers (attention's p·v).
  bool registerOperandA(DotOp producer, DotOp consumer);
  /// The K loop of a wgmma dot with A in registers (`aRegs`: the fragment
  /// values of a producer dot's layout, see registerOperandA).
  SmallVector<Value> runRegisterADot(ImplicitLocOpBuilder &b, DotOp op,
                                     const MmaTiles &mt, ArrayRef<Value> rows,
                                     ArrayRef<Value> cols, ValueRange acc,
                                     ArrayRef<Value> aRegs);
  /// The same on mma.sync: per 16-deep step, the A fragment is two of the
  /// producer's C fragments side by side (FlashAttention 2's trick), B
  /// comes from shared memory (ldmatrix).
  SmallVector<Value> runRegisterADotSync(ImplicitLocOpBuilder &b, DotOp op,
                                         ArrayRef<Value> rows,
                                         ArrayRef<Value> cols, ValueRange acc,
                                         ArrayRef<Value> aRegs, Value bBuf);
  /// Whether warp-tiled `dot`'s result can be kept as fragment values: it
  /// runs on wgmma, or on mma.sync with whole rows per warp (planRowDots:
  /// flash-attention-shaped dots). Under mma.sync's warp grids a row
  /// reduction needs shared memory anyway, and the unrolled per-fragment
  /// code cost the head-dim-128 attention kernels up to 87 registers and
  /// spills, so other mma.sync dots store their results.
  bool fragmentTiled(DotOp dot);
  /// Whether each warp holds whole rows of warp-tiled `dot`'s result.
  bool rowsInWarps(DotOp dot);
  /// Whether `dot` runs on tensor cores with a warp tiling (its result in
  /// fragments of registers).
  bool warpTiled(DotOp dot);
  /// A reduction along the rows of a fragment value: per lane, then across
  /// the four lanes of a row (shuffles). Returns the row values (rowSlots),
  /// the same in each of a row's four lanes.
  SmallVector<Value> reduceFragmentRows(ReduceOp op);
  /// SIMT on sm_90a: row vectors ([M] tiles, or their expand_dims [M, 1])
  /// of a dot whose warps hold whole rows (fragmentTiled, rowsInWarps)
  /// kept in registers: each lane holds the values of the rows its
  /// accumulator fragments touch (rowSlots), the four lanes of a row the
  /// same ones. Row reductions of fragment values produce them; elementwise
  /// ops on them compute per row; loops carry them (flash attention's
  /// running max and sum); fragment expressions and register row scales
  /// read them through broadcasts. They are kept only while every user is
  /// in the defining block; any other reader gets them stored first
  /// (bufferOf -> materializeRows).
  DenseMap<Value, std::pair<DotOp, SmallVector<Value>>> rowFragments;
  /// Whether warp-tiled dots `a` and `b` give each lane the same rows.
  bool sameRows(DotOp a, DotOp b);
  /// The tile row of each row slot of `dot`'s layout: slot 2 i + h is row
  /// g + 8 h of this lane's i-th block of 16 rows (lane = 4 g + q).
  SmallVector<Value> rowSlots(ImplicitLocOpBuilder &b, DotOp dot);
  /// How many row slots each lane has under `dot`'s layout (2 per block of
  /// 64 rows its warpgroup owns).
  int64_t rowSlotCount(DotOp dot);
  /// Lane q = 0 of each row stores its row values into `buf` (no barrier).
  void storeRows(ImplicitLocOpBuilder &b, DotOp dot, ArrayRef<Value> regs,
                 Value buf);
  /// Every lane reads its rows of `buf` (no barrier).
  SmallVector<Value> loadRows(ImplicitLocOpBuilder &b, DotOp dot, Value buf,
                              Type elementType);
  /// The values of [M] tile `v` at this lane's rows of `dot`'s layout: its
  /// registers when it is a row vector of the same rows, else read from its
  /// buffer at `b` (sets `read`; the caller syncs before a rewrite).
  FailureOr<SmallVector<Value>> rowValues(ImplicitLocOpBuilder &b, Value v,
                                          DotOp dot, Operation *user,
                                          bool &read);
  /// Stores row vector `v` at `b` into a new buffer, then a barrier.
  void materializeRows(ImplicitLocOpBuilder &b, Value v);
  /// Registers row vector `v` of `dot`'s layout, or stores it at `b` when a
  /// user lies outside its block.
  void defineRows(ImplicitLocOpBuilder &b, Value v, DotOp dot,
                  SmallVector<Value> regs);
  /// An elementwise op on row vectors, computed per row slot (returns
  /// nullopt when `op` reads no row vector, or row vectors of different
  /// layouts).
  std::optional<LogicalResult> lowerRowElementwise(Operation *op);
  /// The dot whose fragments forEachFragment is walking, and the row slot
  /// of the element being computed (-1 outside).
  DotOp fragmentRowDot;
  int64_t fragmentRowSlot = -1;
  /// lowerFor: the rank-1 f32 iter_args of `loop` carried as row vectors of
  /// `layout` (a register accumulator's dot, see registerAccumulators).
  SmallVector<unsigned> registerRowVectors(scf::ForOp loop, DotOp layout);
  /// emitElems' value for a tile at the element being computed (width 1).
  DenseMap<Value, Value> elemOverride;
  /// Calls `fn` with the tile indices and value of each of this lane's
  /// accumulator elements of warp-tiled `dot` (`regs`).
  void forEachFragment(
      ImplicitLocOpBuilder &b, DotOp dot, ValueRange regs,
      function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value)> fn);
  /// The K loop of a warp-tiled tensor-core dot: this lane's accumulators
  /// (`acc`, under the dot's WarpTiling) after it, by wgmma when the tiling
  /// is a wgmma one and the operands are plain buffers, else mma.sync.
  SmallVector<Value> runTiledDot(ImplicitLocOpBuilder &b, DotOp op,
                                 const MmaTiles &mt,
                                 ArrayRef<Value> rows, ArrayRef<Value> cols,
                                 ValueRange acc);
  /// The buffer a tile load or gather writes: in SIMT mode on sm_90a, one
  /// whose tile only feeds a wgmma dot as A or B gets a rank-4 core-matrix
  /// view instead of a row-major buffer, and one that only feeds mma.sync
  /// dots read by ldmatrix XOR-swizzled rows (allocXorTile) or padded ones
  /// (allocPaddedTile).
  Value allocLoadTile(Operation *access);
  /// The same for the result of an elementwise op (attention's convert(p)),
  /// a transpose, a slice or a register loop.
  Value allocResultTile(Value result, Location loc);
  /// The buffer of tile `v` if it is only an mma.sync operand
  /// (mmaSyncOperand): XOR-swizzled or padded rows; else null.
  Value allocMmaSyncOperandTile(Value v, Location loc);
  /// Whether shared buffer `buf` (read at `at`) is written again by the
  /// loop around `at` (made for a block inside it) and is not a pipelined
  /// stage: its reads then need a barrier before the next iteration's
  /// writes.
  bool rewrittenInLoop(Value buf, Operation *at);
  /// After an op that wrote `bufs` (and ended with a barrier at `b`): if one
  /// is a core-matrix buffer, fence the async proxy before that barrier.
  void fenceCoreWrites(ImplicitLocOpBuilder &b, ArrayRef<Value> bufs);
  /// A rank-4 core-matrix view for a rank-2 16-bit tile (wgmma operand).
  Value allocCoreTile(RankedTensorType type, Location loc);
  /// A shared buffer for `type` whose rows are rowPad elements longer
  /// (strided view; mma.sync operands, see mmaSyncOperand).
  Value allocPaddedTile(RankedTensorType type, Location loc);
  /// A shared buffer for `type` (rows of a multiple of 64 16-bit elements,
  /// whole 8-row groups) whose rows' 16-byte chunks are XOR-swizzled by
  /// the row (isXorBuffer; mma.sync operands, see mmaSyncOperand).
  Value allocXorTile(RankedTensorType type, Location loc);
  /// SIMT: a kiln.trans [1, 0] whose only use is the B operand of a
  /// tensor-core dot is not materialized: the dot reads its source X as a
  /// K-major B (wgmma: imm-trans-b 0; mma.sync: X's 8x8 matrices are B's
  /// fragments, ldmatrix without .trans). Its result maps to X's buffer.
  bool deferTransToTensorCores(TransOp op, Value srcBuf);
  /// SIMT: a tile slice (tensor.extract_slice) whose every use is an
  /// operand of a tensor-core dot (directly, through a transpose or another
  /// slice) is not copied: the view of its source's buffer it returns
  /// (null when the buffer's layout does not allow one: lowerOp copies).
  Value deferSliceToTensorCores(tensor::ExtractSliceOp op, Value srcBuf);
  DenseSet<Value> deferredTrans;
  // wgmma operands defined outside the dot's loop, laid out before it once:
  // tile -> core-matrix copy.
  /// With the op before which the copy was made (its buffer's view sits at
  /// the kernel's start, so only this says where the copy is valid).
  DenseMap<Value, std::pair<Value, Operation *>> hoistedCores;
  /// A copy of the row-major 16-bit tile `src` [rows, cols] in wgmma's
  /// no-swizzle core-matrix layout (cols % 8 == 0), without barrier.
  Value coreMatrices(ImplicitLocOpBuilder &b, Value src, int64_t rows,
                     int64_t cols, Type elt);
  /// A block barrier at `b`'s insertion point (clears unsyncedReads).
  void barrier(ImplicitLocOpBuilder &b);
  LogicalResult lowerReduceSimt(ReduceOp op);
  LogicalResult lowerScanSimt(ScanOp op);
};

/// The view index of tile dimension `d` at tile index `iv` of an access at
/// `offsets`: for a gather (`idxBuf` set), dimension 0 reads the index tile.
Value viewIndexAt(ImplicitLocOpBuilder &b, Value idxBuf, ValueRange offsets,
                  int64_t d, Value iv);
/// The indices of tile element `idx` in buffer `buf`: `idx` itself, or for a
/// wgmma core-matrix buffer (rank 4) of a rank-2 tile (r/8, r%8, c/8, c%8).
SmallVector<Value> tileIndices(ImplicitLocOpBuilder &b, Value buf,
                               ValueRange idx);
/// Whether `op` is a tile slice the lowerings take: static offsets and
/// sizes, unit strides, the rank kept (a reshape drops unit dimensions).
bool isTileSlice(tensor::ExtractSliceOp op);
/// An access's padding in the storage type (zero when absent).
TypedAttr paddingAttr(Builder &b, Attribute padding, Type storage);
/// Whether a padding is all zero bits (what cp.async's zero fill writes;
/// -0.0 is not).
bool zeroBits(TypedAttr pad);
/// A fused gather + store's element `idx` of the gathered tile, its row
/// index `row`: the source indices (view `gv`, offsets `gOff` after the
/// row), the destination's (offsets `sOff`, `lead` leading unit dimensions)
/// and whether the row is inside the source.
std::tuple<SmallVector<Value>, SmallVector<Value>, Value>
gatherStoreAt(ImplicitLocOpBuilder &b, const ViewInfo &gv, Value row,
              ValueRange idx, ValueRange gOff, ValueRange sOff, int64_t lead);

/// Refuses (a located error, failure) a kernel with a tile of more than
/// 2^31 elements: every target's buffers are far smaller, and sizes computed
/// from such shapes overflow (a 2^62-element tile compiled and crashed).
/// Also a rank-0 tile, a tile of index (no storage size), and on a GPU
/// (`gpu`) a tile or scalar wider than 64 bits (LLVM's NVPTX back end
/// aborts on f80 and f128).
LogicalResult checkTileSizes(Operation *kernel, bool gpu);

/// A rank-1 memref of `type` over a raw !llvm.ptr (nominal size/stride).
Value memrefOverPointer(OpBuilder &b, Location loc, Value ptr,
                        MemRefType type);

/// The CPU launch ABI around `bodyFunc`, whose arguments are `numUser` user
/// arguments then pid x3 and grid x3 (i32): a function NAME(void **args,
/// i32 pid x3, i32 grid x3) where args[i] points at user argument i's value
/// (for pointers, at the pointer). Used by the CPU target and the GPU
/// emulator (EmulateGPU.cpp).
/// Debugging support (DebugOps.cpp): an op's "file:line:col"; the address
/// (!llvm.ptr) of a NUL-terminated constant string (a global named
/// `stem`_N, shared by equal texts); the kernel's exported `kiln_assert_hook`
/// (i64, set by the runtime at load), created on first use, and a call
/// through it; host printf / fflush(NULL) calls.
std::string siteOf(Location loc);
Value cStringPtr(OpBuilder &b, Location loc, ModuleOp module, StringRef text,
                 StringRef stem);
Value assertHookAddress(OpBuilder &b, Location loc, ModuleOp module);
void callAssertHook(OpBuilder &b, Location loc, ModuleOp module,
                    Value message, Value site, ValueRange pid, Value thread);
void hostPrintf(OpBuilder &b, Location loc, ModuleOp module,
                StringRef format, ValueRange args);
void hostFlush(OpBuilder &b, Location loc, ModuleOp module);

func::FuncOp buildLaunchEntry(OpBuilder &b, Location loc, StringRef name,
                              func::FuncOp bodyFunc, size_t numUser);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KERNELLOWERING_H
