// The PTX of both GPU targets assembles with ptxas, and a cubin bundle works.
// REQUIRES: ptxas
// RUN: kilnc %S/gpu-pipeline.mlir --target sm_80 --emit ptx -o %t80.ptx
// RUN: %ptxas -arch=sm_80 %t80.ptx -o %t80.cubin
// RUN: kilnc %S/gpu-pipeline.mlir --target sm_90a --emit ptx -o %t90.ptx
// RUN: %ptxas -arch=sm_90a %t90.ptx -o %t90.cubin
// RUN: kilnc %S/gpu-pipeline.mlir --target sm_90a --cubin -o %t.kb
// RUN: head -c 200 %t.kb | FileCheck %s
// CHECK: code cubin
