"""What the compiler needs of a function a kernel calls with `tle.call`. The runtime's raw functions
(tle/raw/function.py) are made this way; the compiler knows them only through this interface."""
from __future__ import annotations

from abc import ABC, abstractmethod

from .body import RawBody


class RawCallee(ABC):
    name: str
    params: tuple[str, ...]           # parameter names
    param_types: tuple[str, ...]      # their MLIR tensor types, as text
    threads_dim: int                  # thread axes the function declares (tle.hardware_constraint)
    sync_scope: str

    @property
    @abstractmethod
    def tiles(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype name) of each parameter."""

    @abstractmethod
    def body(self) -> RawBody:
        """The verified function, read into the backend-neutral form the backends render."""
