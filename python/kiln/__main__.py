"""python -m kiln: prints what this installation can do."""
from . import runtime

print("kiln", __import__("kiln").__version__)
print("CPU features:", runtime._ext.cpu_features())
ok, what = runtime._ext.cuda_device()
print("CUDA device:", what if ok else f"none ({what})")
