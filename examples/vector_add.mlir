// out[i] = x[i] + y[i] for i in [0, n): one program per BLOCK = 1024 elements.
// The last program's tile overhangs the end; kiln.load pads and kiln.store
// drops the elements past n, so any n works with one compiled kernel.
//
// Launch: grid = (ceil(n / 1024)).
kiln.func @vector_add(%x: !kiln.ptr<f32> {kiln.name = "x"}, %y: !kiln.ptr<f32> {kiln.name = "y"},
                      %out: !kiln.ptr<f32> {kiln.name = "out"}, %n: index {kiln.name = "n"}) {
  %c1 = arith.constant 1 : index
  %block = arith.constant 1024 : index
  %pid = kiln.program_id x : i32
  %pidx = arith.index_cast %pid : i32 to index
  %offset = arith.muli %pidx, %block : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %vx[%offset] : !kiln.view<1xf32> -> tensor<1024xf32>
  %b = kiln.load %vy[%offset] : !kiln.view<1xf32> -> tensor<1024xf32>
  %sum = arith.addf %a, %b : tensor<1024xf32>
  kiln.store %sum, %vo[%offset] : tensor<1024xf32> -> !kiln.view<1xf32>
  kiln.return
}
