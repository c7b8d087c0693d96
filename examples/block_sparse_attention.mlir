// Block-sparse attention forward (FlexAttention's BlockMask model), head dim 64.
//
//   q, k, v, out : [bh, s, 64] f32 (bh = batch x heads), lse : [bh, s] f32
//   kv_num_blocks: [bh, nqb] i32      how many key blocks each query block visits
//   kv_indices   : [bh, nqb, maxb] i32 which key blocks (of 64 keys), in order
//
// Each program owns one 64-row query block of one (batch, head). It visits only
// the listed key blocks, with an online softmax: a running row maximum m, a
// running denominator l and an accumulator rescaled whenever m grows. Keys
// past s are masked to -inf; a row that sees no key gets out = 0 and
// lse = -inf (never NaN).
//
// Launch: grid = (ceil(s / 64), bh).
kiln.func @block_sparse_attention(
    %q: !kiln.ptr<f32> {kiln.name = "q"}, %k: !kiln.ptr<f32> {kiln.name = "k"}, %v: !kiln.ptr<f32> {kiln.name = "v"},
    %out: !kiln.ptr<f32> {kiln.name = "out"}, %lse: !kiln.ptr<f32> {kiln.name = "lse"},
    %kv_num_blocks: !kiln.ptr<i32> {kiln.name = "kv_num_blocks"}, %kv_indices: !kiln.ptr<i32> {kiln.name = "kv_indices"},
    %bh: index {kiln.name = "bh"}, %s: index {kiln.name = "s"}, %nqb: index {kiln.name = "nqb"}, %maxb: index {kiln.name = "maxb"}, %scale: f32 {kiln.name = "scale"})
    attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %ninf = arith.constant 0xFF800000 : f32
  %fzero = arith.constant 0.0 : f32
  %fone = arith.constant 1.0 : f32

  %qb_i32 = kiln.program_id x : i32
  %h_i32 = kiln.program_id y : i32
  %qb = arith.index_cast %qb_i32 : i32 to index
  %h = arith.index_cast %h_i32 : i32 to index
  %qrow = arith.muli %qb, %c64 : index

  %d_stride = arith.muli %s, %c64 : index
  %vq = kiln.make_view %q, [%bh, %s, %c64], [%d_stride, %c64, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %vk = kiln.make_view %k, [%bh, %s, %c64], [%d_stride, %c64, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %vv = kiln.make_view %v, [%bh, %s, %c64], [%d_stride, %c64, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %vo = kiln.make_view %out, [%bh, %s, %c64], [%d_stride, %c64, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %vl = kiln.make_view %lse, [%bh, %s], [%s, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vn = kiln.make_view %kv_num_blocks, [%bh, %nqb], [%nqb, %c1] : !kiln.ptr<i32> -> !kiln.view<2xi32>
  %idx_stride = arith.muli %nqb, %maxb : index
  %vi = kiln.make_view %kv_indices, [%bh, %nqb, %maxb], [%idx_stride, %maxb, %c1] : !kiln.ptr<i32> -> !kiln.view<3xi32>

  %q3 = kiln.load %vq[%h, %qrow, %c0] : !kiln.view<3xf32> -> tensor<1x64x64xf32>
  %qt = kiln.reshape %q3 : tensor<1x64x64xf32> -> tensor<64x64xf32>
  %scale_t = kiln.splat %scale : tensor<64x64xf32>
  %qs = arith.mulf %qt, %scale_t : tensor<64x64xf32>

  %count_t = kiln.load %vn[%h, %qb] : !kiln.view<2xi32> -> tensor<1x1xi32>
  %count_i32 = tensor.extract %count_t[%c0, %c0] : tensor<1x1xi32>
  %count = arith.index_cast %count_i32 : i32 to index

  %s_i32 = arith.index_cast %s : index to i32
  %s_t = kiln.splat %s_i32 : tensor<64xi32>
  %lanes = kiln.arange 0, 64 : tensor<64xi32>
  %ninf_t = kiln.splat %ninf : tensor<64x64xf32>
  %zero_acc = arith.constant dense<0.0> : tensor<64x64xf32>
  %m0 = kiln.splat %ninf : tensor<64xf32>
  %l0 = kiln.splat %fzero : tensor<64xf32>
  %ninf_row = kiln.splat %ninf : tensor<64xf32>
  %zero_row = kiln.splat %fzero : tensor<64xf32>

  %res:3 = scf.for %j = %c0 to %count step %c1
      iter_args(%m_i = %m0, %l_i = %l0, %acc = %zero_acc)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
    %kb_t = kiln.load %vi[%h, %qb, %j] : !kiln.view<3xi32> -> tensor<1x1x1xi32>
    %kb_i32 = tensor.extract %kb_t[%c0, %c0, %c0] : tensor<1x1x1xi32>
    %kb = arith.index_cast %kb_i32 : i32 to index
    %krow = arith.muli %kb, %c64 : index

    %k3 = kiln.load %vk[%h, %krow, %c0] : !kiln.view<3xf32> -> tensor<1x64x64xf32>
    %kt = kiln.reshape %k3 : tensor<1x64x64xf32> -> tensor<64x64xf32>
    %ktt = kiln.trans %kt [1, 0] : tensor<64x64xf32> -> tensor<64x64xf32>
    %scores = kiln.dot %qs, %ktt, %zero_acc : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>

    // Keys at or past s do not exist: mask them to -inf.
    %krow_i32 = arith.index_cast %krow : index to i32
    %krow_t = kiln.splat %krow_i32 : tensor<64xi32>
    %key_ids = arith.addi %lanes, %krow_t : tensor<64xi32>
    %valid = arith.cmpi slt, %key_ids, %s_t : tensor<64xi32>
    %valid2 = kiln.expand_dims %valid [0] : tensor<64xi1> -> tensor<1x64xi1>
    %valid_b = kiln.broadcast %valid2 : tensor<1x64xi1> -> tensor<64x64xi1>
    %masked = arith.select %valid_b, %scores, %ninf_t : tensor<64x64xi1>, tensor<64x64xf32>

    // Online softmax update. A row with no valid key so far keeps m = -inf;
    // subtract 0 instead so that exp(-inf - -inf) never produces NaN.
    %blk_max = kiln.reduce max %masked [1] : tensor<64x64xf32> -> tensor<64xf32>
    %m_new = arith.maximumf %m_i, %blk_max : tensor<64xf32>
    %is_ninf = arith.cmpf oeq, %m_new, %ninf_row : tensor<64xf32>
    %m_safe = arith.select %is_ninf, %zero_row, %m_new : tensor<64xi1>, tensor<64xf32>
    %m_col = kiln.expand_dims %m_safe [1] : tensor<64xf32> -> tensor<64x1xf32>
    %m_b = kiln.broadcast %m_col : tensor<64x1xf32> -> tensor<64x64xf32>
    %shifted = arith.subf %masked, %m_b : tensor<64x64xf32>
    %p = math.exp %shifted : tensor<64x64xf32>
    %dm = arith.subf %m_i, %m_safe : tensor<64xf32>
    %alpha = math.exp %dm : tensor<64xf32>
    %p_sum = kiln.reduce sum %p [1] : tensor<64x64xf32> -> tensor<64xf32>
    %l_scaled = arith.mulf %l_i, %alpha : tensor<64xf32>
    %l_new = arith.addf %l_scaled, %p_sum : tensor<64xf32>
    %alpha_col = kiln.expand_dims %alpha [1] : tensor<64xf32> -> tensor<64x1xf32>
    %alpha_b = kiln.broadcast %alpha_col : tensor<64x1xf32> -> tensor<64x64xf32>
    %acc_scaled = arith.mulf %acc, %alpha_b : tensor<64x64xf32>

    %v3 = kiln.load %vv[%h, %krow, %c0] : !kiln.view<3xf32> -> tensor<1x64x64xf32>
    %vt = kiln.reshape %v3 : tensor<1x64x64xf32> -> tensor<64x64xf32>
    %acc_new = kiln.dot %p, %vt, %acc_scaled : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    scf.yield %m_new, %l_new, %acc_new : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
  }

  // out = acc / l (0 where l = 0); lse = m + log(l) (-inf where l = 0).
  %l_zero = arith.cmpf oeq, %res#1, %zero_row : tensor<64xf32>
  %one_row = kiln.splat %fone : tensor<64xf32>
  %l_safe = arith.select %l_zero, %one_row, %res#1 : tensor<64xi1>, tensor<64xf32>
  %l_col = kiln.expand_dims %l_safe [1] : tensor<64xf32> -> tensor<64x1xf32>
  %l_b = kiln.broadcast %l_col : tensor<64x1xf32> -> tensor<64x64xf32>
  %o = arith.divf %res#2, %l_b : tensor<64x64xf32>
  %o3 = kiln.reshape %o : tensor<64x64xf32> -> tensor<1x64x64xf32>
  kiln.store %o3, %vo[%h, %qrow, %c0] : tensor<1x64x64xf32> -> !kiln.view<3xf32>
  %log_l = math.log %res#1 : tensor<64xf32>
  %lse_row = arith.addf %res#0, %log_l : tensor<64xf32>
  %lse2 = kiln.expand_dims %lse_row [0] : tensor<64xf32> -> tensor<1x64xf32>
  kiln.store %lse2, %vl[%h, %qrow] : tensor<1x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
