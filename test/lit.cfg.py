# lit configuration for Kiln's FileCheck tests.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "Kiln"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs", "unit", "bench"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")

llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()
tool_dirs = [config.kiln_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["kiln-opt", "kilnc"], tool_dirs)
config.substitutions.append(("%kiln_src", config.kiln_src_root))
config.environment["PATH"] = os.pathsep.join(tool_dirs + [config.environment.get("PATH", "")])

# ptxas (the CUDA toolkit) assembles the PTX of GPU targets when present.
_ptxas = os.environ.get("KILN_PTXAS") or shutil.which("ptxas")
if not _ptxas and os.path.exists("/usr/local/cuda/bin/ptxas"):
    _ptxas = "/usr/local/cuda/bin/ptxas"
if _ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", _ptxas))
