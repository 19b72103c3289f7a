"""Contract checks and views shared by the operators: every failure names the argument."""
from __future__ import annotations

import math

import torch

from tle.checks import FLOAT_DTYPES, check_tensor
from tle.errors import LaunchError

__all__ = ["FLOAT_DTYPES", "check_tensor", "check_float", "check_kernel_dtypes", "check_int32_offsets", "as_rows",
           "reshaped", "programs", "LaunchError"]

# the torch backend also takes fp64 (gradcheck runs on it); the kernels take FLOAT_DTYPES
TORCH_FLOAT_DTYPES = FLOAT_DTYPES + (torch.float64,)


def check_float(t, name: str, *, device=None, shape=None, rank=None) -> torch.Tensor:
    """A floating tensor (fp32, fp16 or bf16; fp64 for the torch backend) on `device` with `shape`, if given."""
    return check_tensor(t, name, dtypes=TORCH_FLOAT_DTYPES, device=device, shape=shape, rank=rank)


def check_kernel_dtypes(op: str, backend: str, **tensors) -> None:
    """fp64 runs on the torch backend only: name the tensor and the backend otherwise."""
    if backend == "torch":
        return
    for name, t in tensors.items():
        if t is not None and t.dtype not in FLOAT_DTYPES:
            raise LaunchError(f"tle.ops.{op}: '{name}' has dtype {str(t.dtype).replace('torch.', '')}, which "
                              f"backend '{backend}' does not take (fp32, fp16, bf16; fp64 runs on 'torch')")


def check_int32_offsets(op: str, backend: str, name: str, t: torch.Tensor) -> None:
    """Kernels that index rows as row * row_stride in int32 take tensors of fewer than 2^31 elements."""
    if backend != "torch" and t.numel() >= 2 ** 31:
        raise LaunchError(f"tle.ops.{op}: '{name}' has {t.numel()} elements; backend '{backend}' indexes it with "
                          f"32-bit offsets (fewer than 2^31 elements; the torch backend has no such limit)")


def as_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """`x` as a [rows, x.shape[-1]] matrix whose last dimension has unit stride: a view where one exists,
    else a contiguous copy (a tensor whose rows are not evenly strided, or whose last dimension is strided)."""
    if x.dim() == 0:
        raise LaunchError(f"'{name}' is a scalar; expected at least one dimension")
    if x.dim() == 2 and (x.shape[1] <= 1 or x.stride(1) == 1) and x.numel():
        return x        # already rows: a reshape would cost the host a few microseconds for the same view
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if x.numel() == 0:
        return x.new_empty((rows, n))
    x2 = x.reshape(rows, n)
    if n > 1 and x2.stride(-1) != 1:
        x2 = x2.contiguous()
    return x2


def reshaped(t: torch.Tensor, shape) -> torch.Tensor:
    """`t` in `shape`: `t` itself where it has that shape already (a reshape to the same shape costs the host a
    few microseconds on every operator call), else t.reshape(shape)."""
    return t if t.shape == shape else t.reshape(shape)


_properties: dict = {}
DEFAULT_SMEM_BYTES = 227 * 1024     # what a block may opt into on sm_90 (H100, H200); off a GPU, for the lowering


def _device_properties(device: torch.device):
    """torch's properties of a CUDA device, looked up once (launch configurations ask on every call)."""
    if device not in _properties:
        _properties[device] = torch.cuda.get_device_properties(device)
    return _properties[device]


def shared_memory_per_block(device: torch.device) -> int:
    """The shared memory one block may use on `device` (opted in), in bytes; DEFAULT_SMEM_BYTES off a GPU."""
    if device.type != "cuda":
        return DEFAULT_SMEM_BYTES
    props = _device_properties(device)
    return int(getattr(props, "shared_memory_per_block_optin", props.shared_memory_per_block))


def targets_sm90(device: torch.device) -> bool:
    """Do kernels for tensors on `device` build for sm_90 (wgmma, setmaxnreg: what warp-group kernels need)?
    On a GPU, when it is one; off a GPU too, where TileLang's interpreter runs what the lowering builds for
    sm_90a."""
    return device.type != "cuda" or _device_properties(device).major == 9


def programs(device: torch.device, per_sm: int, work_items: int) -> int:
    """How many programs a persistent kernel launches: `per_sm` per multiprocessor on a GPU (4 in all on
    the CPU), never more than there are work items, and at least one."""
    if device.type == "cuda":
        n = _device_properties(device).multi_processor_count * per_sm
    else:
        n = 4
    return max(1, min(n, work_items))
