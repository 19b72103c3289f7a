"""How the TileLang backend passes a tensor argument: a contiguous one as a flat view of itself, any other
as the storage span it addresses; the contiguity test is torch's (dimensions of size 1 take any stride)."""
import pytest
import torch

from tle.lowering.tilelang.backend import _contiguous


@pytest.mark.parametrize("shape, strides", [
    ((4, 8), (8, 1)), ((4, 8), (1, 4)), ((4, 8), (16, 1)), ((4, 8), (8, 2)), ((1, 8), (99, 1)),
    ((4, 1), (1, 7)), ((2, 1, 3), (3, 5, 1)), ((2, 3, 4), (12, 4, 1)), ((2, 3, 4), (12, 1, 3)), ((5,), (1,)),
    ((5,), (2,)), ((1,), (3,)), ((0, 3), (3, 1)), ((3, 2), (2, 1)), ((3, 2), (1, 3)), ((2, 2), (2, 2)),
])
def test_contiguity_is_torchs(shape, strides):
    t = torch.empty_strided(shape, strides)
    assert _contiguous(shape, strides) == t.is_contiguous()
