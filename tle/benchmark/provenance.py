"""Where a measurement comes from: the commit, the date, the device and the versions of what ran.

Shared by tle-bench (operators) and `python -m tle.bench` (kernel examples)."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import subprocess

import torch

# peers' packages whose versions a record carries when they are installed
PEER_DISTRIBUTIONS = ("liger-kernel", "fla-core")

SHORT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}


def short_dtypes(label: str) -> str:
    """`label` with torch's long dtype names shortened: "32768x8192 bfloat16" -> "32768x8192 bf16"."""
    for long, short in (("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32"), ("float64", "fp64")):
        label = label.replace(long, short)
    return label


def versions() -> dict[str, str]:
    """torch, triton and tilelang's versions, and those of the installed peers' packages."""
    import triton
    try:
        import tilelang
        tl_version = getattr(tilelang, "__version__", "unknown")
    except Exception:
        tl_version = "not importable"
    out = {"torch": torch.__version__, "triton": triton.__version__, "tilelang": str(tl_version)}
    for dist in PEER_DISTRIBUTIONS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def commit() -> str:
    """TLE_COMMIT if set (a copied tree on a GPU machine has no .git), else git's short HEAD."""
    if os.environ.get("TLE_COMMIT"):
        return os.environ["TLE_COMMIT"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def today() -> str:
    return datetime.date.today().isoformat()


def device_name(device: torch.device) -> str:
    """The device's name as torch reports it ("NVIDIA H200"); "cpu" for the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def observation(device: torch.device) -> dict:
    """The keys every record of one run shares: gpu, commit, date, versions."""
    return {"gpu": device_name(device), "commit": commit(), "date": today(), "versions": versions()}
