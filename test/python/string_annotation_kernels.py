"""Kernels whose annotations are strings (test_frontend_semantics.py)."""
from __future__ import annotations

import numpy as np

import kiln
import kiln.language as tl


@kiln.jit
def scaled(x, out, SCALE: tl.constexpr, BLOCK: "tl.constexpr"):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) * SCALE)
