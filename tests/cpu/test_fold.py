"""Integer folding before the TileLang lowering: a runtime integer compiled in as 1 or 0 (one column block, a
unit stride, no offset) leaves no `* 1`, `// 1`, `% 1` or `+ 0` behind, and the kernel means the same."""
import pytest
import torch
import triton.language as tl

import tle


@tle.jit
def tiled_copy(x_ptr, y_ptr, n_rows, n_cols, col_blocks, row_stride, col_offset, BM: tl.constexpr,
               BN: tl.constexpr):
    tile = tl.program_id(0)
    rows = (tile // col_blocks) * BM + tl.arange(0, BM)
    cols = (tile % col_blocks) * BN + tl.arange(0, BN)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * row_stride + col_offset + cols[None, :] * 1, mask=mask, other=0.0)
    tl.store(y_ptr + rows[:, None] * n_cols + cols[None, :], x, mask=mask)


def _launch(n_rows, n_cols, bn):
    x = torch.randn(n_rows, n_cols)
    y = torch.full_like(x, float("nan"))
    col_blocks = -(-n_cols // bn)
    return x, y, (-(-n_rows // 4) * col_blocks,), (x, y, n_rows, n_cols, col_blocks, n_cols, 0)


def test_identities_leave_no_arithmetic():
    x, y, grid, args = _launch(10, 16, 16)          # one column block
    source = tiled_copy.lower(*args, grid=grid, backend="tilelang", BM=4, BN=16).source
    body = source[source.index("with T.Kernel"):]
    for dead in ("* 1)", "* 1 ", "// 1", "% 1", "+ 0)", "- 0)", "T.truncdiv(", "T.truncmod("):
        assert dead not in body, (dead, body)


@pytest.mark.parametrize("n_cols, bn", [(16, 16), (40, 16)], ids=["one column block", "three column blocks"])
def test_folded_kernel_means_the_same(n_cols, bn):
    x, y, grid, args = _launch(10, n_cols, bn)
    tiled_copy.interpret_tilelang(grid, *args, BM=4, BN=bn)
    torch.testing.assert_close(y, x)
