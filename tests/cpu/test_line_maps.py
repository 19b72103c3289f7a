"""Line maps: each generated line an op of the kernel emitted -> the kernel source line of that op
(Compiled.line_map), for every kernel's small example on both backends. Every op carries a source line, and every
generated line that computes something maps back to one; the share is printed per backend."""
import inspect
import re

import pytest

from kernel_cases import example_kernels, lower_example
from tilelang_oracle import needs_tilelang

KERNELS = example_kernels()
# lines that compute nothing: blank, comments, `else:`, `pass`, and declarations of buffers and views
_DECLARATION = re.compile(r"^\s*(#.*|else:|pass|)$|T\.alloc_|T\.StridedTensor\(|T\.import_source\(")


def computing_lines(backend: str, source: str) -> list[tuple[int, str]]:
    """(number from 1, text) of the kernel body's lines that compute something."""
    lines = source.splitlines()
    head = "    with T.Kernel(" if backend == "tilelang" else "def "
    start = next(i for i, line in enumerate(lines) if line.startswith(head)) + 1
    return [(i + 1, line) for i, line in enumerate(lines[start:], start) if not _DECLARATION.search(line)]


def lowered(backend: str):
    for name, kernel in KERNELS:
        yield name, kernel, lower_example(kernel, backend)


def test_every_op_of_every_example_carries_a_source_line():
    for name, _, lw in lowered("triton"):
        missing = [op.name for op in lw.kernel.walk() if op.loc.line <= 0]
        assert not missing, f"{name}: ops without a source line: {missing[:5]}"


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_every_computing_generated_line_maps_to_a_source_line(backend, capsys):
    mapped = total = 0
    for name, _, lw in lowered(backend):
        lines = computing_lines(backend, lw.source)
        missing = [text.strip() for number, text in lines if number not in lw.compiled.line_map]
        assert not missing, f"{name} [{backend}]: generated lines with no source line: {missing[:3]}"
        mapped, total = mapped + len(lines) - len(missing), total + len(lines)
        # a line of the kernel's own file, or of a @tle.jit function it calls (those keep their own numbers)
        assert all(line > 0 for line in lw.compiled.line_map.values())
    with capsys.disabled():
        print(f"\nline maps [{backend}]: {mapped} of {total} computing lines mapped ({mapped / total:.1%}), "
              f"{len(KERNELS)} kernels")
    assert total > 1000 and mapped == total


@pytest.mark.parametrize("backend", ["triton", pytest.param("tilelang", marks=needs_tilelang)])
def test_a_store_maps_to_the_line_that_stores(backend):
    kernel = dict(KERNELS)["examples.vector_add.add_kernel"]
    lw = lower_example(kernel, backend)
    source, first = inspect.getsourcelines(kernel.fn)
    store = first + next(i for i, line in enumerate(source) if "tl.store(" in line)
    load = first + next(i for i, line in enumerate(source) if "tl.load(" in line)
    generated = lw.source.splitlines()
    at = {n: generated[n - 1] for n, line in lw.compiled.line_map.items() if line == store}
    assert at, f"nothing generated for the store at line {store}"
    writes = "tl.store(out_ptr" if backend == "triton" else "out_ptr"
    assert any(writes in text for text in at.values()), at
    assert not any("x_ptr" in text and "out_ptr" not in text for text in at.values())   # the loads are not there
    assert any(line == load for line in lw.compiled.line_map.values())
