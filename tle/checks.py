"""Input checks for operator wrappers: every failure names the argument and what was expected."""
from __future__ import annotations

import torch

from tle.errors import LaunchError


def check_tensor(t, name: str, *, dtypes=None, rank=None, device=None, last_dim_contiguous=False,
                 contiguous=False, shape=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise LaunchError(f"'{name}' must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise LaunchError(f"'{name}' has dtype {str(t.dtype).replace('torch.', '')}; expected one of: {allowed}")
    if rank is not None:
        ranks = rank if isinstance(rank, tuple) else (rank,)
        if t.dim() not in ranks:
            raise LaunchError(f"'{name}' has rank {t.dim()} (shape {tuple(t.shape)}); expected rank "
                              f"{' or '.join(map(str, ranks))}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise LaunchError(f"'{name}' has shape {tuple(t.shape)}; expected {tuple(shape)}")
    if device is not None and t.device != device:
        raise LaunchError(f"'{name}' is on {t.device}; expected {device} (same device as the other inputs)")
    if contiguous and not t.is_contiguous():
        raise LaunchError(f"'{name}' must be contiguous (strides {t.stride()})")
    if last_dim_contiguous and t.dim() and t.stride(-1) != 1:
        raise LaunchError(f"'{name}' must have a contiguous last dimension (strides {t.stride()})")
    return t


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
