kiln.func @k(%x: !kiln.ptr<i4>) {
  kiln.return
}
