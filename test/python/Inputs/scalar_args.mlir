// Bundle scalar arguments of every float width (test_features.py).
kiln.func @sc(%o: !kiln.ptr<f32> {kiln.name = "o"}, %h: f16 {kiln.name = "h"}, %b: bf16 {kiln.name = "b"},
              %f: f32 {kiln.name = "f"}, %i: i32 {kiln.name = "i"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %v = kiln.make_view %o, [%c4], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %hf = arith.extf %h : f16 to f32
  %bf = arith.extf %b : bf16 to f32
  %if = arith.sitofp %i : i32 to f32
  %t0 = kiln.splat %hf : tensor<1xf32>
  %t1 = kiln.splat %bf : tensor<1xf32>
  %t2 = kiln.splat %f : tensor<1xf32>
  %t3 = kiln.splat %if : tensor<1xf32>
  kiln.store %t0, %v[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.store %t1, %v[%c1] : tensor<1xf32> -> !kiln.view<1xf32>
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  kiln.store %t2, %v[%c2] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.store %t3, %v[%c3] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.return
}
