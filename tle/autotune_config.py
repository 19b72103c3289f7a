"""`tle.Config`: one point of an autotuning space, the same for every backend, with per-backend overrides
(a TileLang tile shape or thread count may differ from Triton's)."""
from __future__ import annotations

import json
import warnings

from tle.jit import _FIXED_OPTIONS
from tle.lowering.backend import backend_names

OPTIONS = ("num_warps", "num_stages")     # launch options a config sets beside the kernel's constexprs
_DEFAULTS = {"num_warps": 4, "num_stages": 3}


class Config:
    """Constexprs (`kwargs`) and launch options of one launch. `overrides={"tilelang": {"BLOCK_M": 64,
    "num_warps": 4}}` replaces some of them on one backend. `num_warps`/`num_stages` may also be written
    inside `kwargs`, as Triton tutorials do; given both ways with different values is an error (Triton lets
    the option's default win silently). `pre_hook(meta)` runs before every launch with this config."""

    def __init__(self, kwargs: dict | None = None, num_warps: int | None = None, num_stages: int | None = None,
                 overrides: dict[str, dict] | None = None, pre_hook=None):
        kwargs = dict(kwargs or {})
        options = {"num_warps": num_warps, "num_stages": num_stages}
        for name in OPTIONS:
            inside = kwargs.pop(name, None)
            if inside is not None and options[name] is not None and inside != options[name]:
                raise ValueError(f"{name} is {inside} in kwargs and {options[name]} as the option; give it once")
            value = options[name] if options[name] is not None else inside
            setattr(self, name, int(value if value is not None else _DEFAULTS[name]))
        self.kwargs = kwargs
        self.pre_hook = pre_hook
        self.overrides = {}
        for backend, changes in (overrides or {}).items():
            if backend not in backend_names():
                raise ValueError(f"overrides names backend '{backend}', which is not one of "
                                 f"{', '.join(backend_names())}")
            if not isinstance(changes, dict):
                raise ValueError(f"overrides['{backend}'] must be a dict of constexprs and launch options, "
                                 f"got {type(changes).__name__}")
            self.overrides[backend] = dict(changes)

    @classmethod
    def of(cls, c) -> Config:
        """A tle.Config, or one made from a triton.Config with Triton's meaning (its num_ctas/maxnreg must stay
        at the defaults a tle launch takes). A launch option written inside a triton.Config's kwargs loses to
        the Config's own attribute, as in Triton (num_warps=4, num_stages=3 unless given): a warning says so."""
        if isinstance(c, Config):
            return c
        if not hasattr(c, "kwargs") or not hasattr(c, "num_warps"):
            raise ValueError(f"expected a tle.Config or triton.Config, got {type(c).__name__}")
        for name, (default, why) in _FIXED_OPTIONS.items():
            if getattr(c, name, default) != default:
                raise ValueError(f"{name}={getattr(c, name)!r} is not supported ({why})")
        kwargs = dict(c.kwargs)
        options = {name: getattr(c, name) for name in OPTIONS}
        lost = {name: kwargs.pop(name) for name in OPTIONS if name in kwargs}
        lost = {name: v for name, v in lost.items() if v != options[name]}
        if lost:
            warnings.warn(f"triton.Config({c.kwargs}) launches with "
                          f"{', '.join(f'{n}={options[n]}' for n in lost)}, as in Triton: the Config's own "
                          f"{' and '.join(lost)} win over its kwargs' ({', '.join(f'{n}={v}' for n, v in lost.items())}"
                          f"); pass them to triton.Config itself", stacklevel=3)
        return cls(kwargs, pre_hook=c.pre_hook, **options)

    def for_backend(self, backend: str) -> Config:
        """This config as launched on `backend`: its overrides applied, none left."""
        changes = self.overrides.get(backend)
        if not changes:
            return self if not self.overrides else Config(self.kwargs, self.num_warps, self.num_stages,
                                                          pre_hook=self.pre_hook)
        merged = {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages, **changes}
        return Config(merged, pre_hook=self.pre_hook)

    def launch_kwargs(self) -> dict:
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}

    def describe(self) -> dict:
        """A JSON-able description (values JSON cannot hold are written as their repr)."""
        d = {"kwargs": self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.overrides:
            d["overrides"] = self.overrides
        return json.loads(canonical(d))

    def __str__(self):
        return ", ".join(f"{k}: {v}" for k, v in self.launch_kwargs().items())

    def __repr__(self):
        extra = f", overrides={self.overrides!r}" if self.overrides else ""
        return f"tle.Config({{{self}}}{extra})"

    def _ident(self):
        return canonical(self.describe()), self.pre_hook

    def __eq__(self, other):
        return isinstance(other, Config) and self._ident() == other._ident()

    def __hash__(self):
        return hash(self._ident())


def canonical(obj) -> str:
    """One JSON text per value: sorted keys, repr for what JSON cannot hold."""
    return json.dumps(obj, sort_keys=True, default=repr)
