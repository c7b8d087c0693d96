"""Every broken kernel raises kiln.CompilationError naming the right file and
line, with the source line and a caret; none crashes the interpreter."""
import inspect
import os

import numpy as np
import pytest

import kiln
from broken_kernels import BROKEN


def expected(fn):
    """(file, line, text) of the `# error:` marker (in a helper if the kernel
    has none)."""
    for f in [fn.fn] + [getattr(inspect.getmodule(fn.fn), "helper_with_error").fn]:
        lines, start = inspect.getsourcelines(f)
        for i, line in enumerate(lines):
            if "# error:" in line:
                return inspect.getsourcefile(f), start + i, line.split("# error:")[1].strip()
    raise AssertionError(f"{fn.__name__} has no '# error:' marker")


def test_the_corpus_is_large_enough():
    assert len(BROKEN) >= 30


@pytest.mark.parametrize("kernel", BROKEN, ids=[k.__name__ for k in BROKEN])
def test_broken_kernel_reports_its_line(kernel):
    path, line, text = expected(kernel)
    x = np.zeros(16, np.float32)
    with pytest.raises(kiln.CompilationError) as info:
        kernel[(1,)](x, 16)
    e = info.value
    assert text in e.message, e.message
    assert os.path.samefile(e.filename, path)
    assert e.lineno == line, str(e)
    rendered = str(e)
    assert f":{line}:" in rendered
    assert "^" in rendered.splitlines()[-1]
    assert rendered.splitlines()[-2].strip() == e.source_line.strip()


@kiln.jit
def huge_tile_copy(x, out, n, BLOCK: kiln.language.constexpr):
    kl = kiln.language
    offs = kl.arange(0, BLOCK)
    kl.store(out + offs, kl.load(x + offs, mask=offs < n, other=0.0), mask=offs < n)


def test_tiles_too_large_for_the_stack_are_refused_at_compile_time():
    # 2^22 f32 elements = 16 MiB per tile: it would overflow the stack of the
    # thread running the program, so compiling it must fail, not the launch.
    x = np.ones(10, np.float32)
    out = np.full(10, np.nan, np.float32)
    with pytest.raises(Exception, match="tile buffers per program"):
        huge_tile_copy[(1,)](x, out, 10, BLOCK=1 << 22)
    huge_tile_copy[(1,)](x, out, 10, BLOCK=16)
    assert (out == 1).all()
