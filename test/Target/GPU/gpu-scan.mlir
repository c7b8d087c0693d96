// kiln.scan on the GPU: each line along the axis goes to a group of lanes
// (32 for a 100-element line, each owning a chunk of 4), joined by a
// butterfly of xor shuffles (offsets 1 to 16: the combination of the chunks
// before each lane's), then one barrier. On the CPU, a loop along the axis
// carrying the running value: by vectors along the axis when the scan runs
// along the last dimension (each scanned by shifted copies: 1 and 2 lanes
// for 4, then the carry broadcast), by vectors along the last dimension when
// it runs along another.
// RUN: kilnc %s --kernel cumsum --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel cumsum --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel colmax --target sm_90a --emit ptx | FileCheck %s --check-prefix=COL
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=CPU
// CHECK-LABEL: .entry cumsum
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 4, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 8, 31,
// CHECK: shfl.sync.bfly.b32 {{.*}}, 16, 31,
// CHECK-NOT: shfl.sync
// CHECK: bar.sync
// A 7-row column scan: groups of 4 lanes (shuffles 1 and 2), 32 columns
// over the 32 groups of 128 threads in one round.
// COL-LABEL: .entry colmax
// COL-COUNT-2: shfl.sync.bfly.b32
// COL-NOT: shfl.sync
// CPU-LABEL: func.func private @cumsum
// CPU: scf.for {{.*}} step %c4{{.*}} iter_args(%[[CARRY:.*]] = %[[ID:.*]]) -> (vector<4xf32>)
// CPU: %[[S1:.*]] = vector.shuffle %[[X:.*]], %[[ID]] [4, 0, 1, 2]
// CPU-NEXT: %[[X1:.*]] = arith.addf %[[X]], %[[S1]] fastmath<reassoc> : vector<4xf32>
// CPU-NEXT: %[[S2:.*]] = vector.shuffle %[[X1]], %[[ID]] [4, 4, 0, 1]
// CPU-NEXT: %[[X2:.*]] = arith.addf %[[X1]], %[[S2]] fastmath<reassoc> : vector<4xf32>
// CPU-NEXT: %[[R:.*]] = arith.addf %[[CARRY]], %[[X2]] fastmath<reassoc> : vector<4xf32>
// CPU: vector.shuffle %[[R]], %[[R]] [3, 3, 3, 3]
// CPU-LABEL: func.func private @colmax
// CPU: scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>)
// CPU: arith.maximumf {{.*}} : vector<16xf32>

kiln.func @cumsum(%x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                  %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %vx[%c0] : !kiln.view<1xf32> -> tensor<100xf32>
  %s = kiln.scan sum %t [0] : tensor<100xf32>
  kiln.store %s, %vo[%c0] : tensor<100xf32> -> !kiln.view<1xf32>
  kiln.return
}

kiln.func @colmax(%x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                  %m: index {kiln.name = "m"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %out, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %vx[%c0, %c0] : !kiln.view<2xf32> -> tensor<7x32xf32>
  %s = kiln.scan max %t [0] reverse : tensor<7x32xf32>
  kiln.store %s, %vo[%c0, %c0] : tensor<7x32xf32> -> !kiln.view<2xf32>
  kiln.return
}
