"""Launch-configuration sweep of flash_attention's kernels on a GPU: each (shape, mode, backend, configuration)
run through tle.ops.flash_attention with kernels/flash_attention.py's `fwd_config` / `bwd_configs` replaced,
checked against torch's SDPA, timed with triton.testing.do_bench beside SDPA. A = ATOMIC_DQ (dQ added by the
dK/dV kernel), T = DESC (rows read through tensor descriptors), P = TileLang's plain forward kernel at D64 (where
the operator takes the warp-group kernel, timed too as WARP_GROUPS), W = TileLang's warp-group forward at D64 and
D128, with AHEAD (the next block's scores computed before this block's softmax) or without, and with TURNS (the
consumers take turns at their products), BWD_WARP_GROUPS = TileLang's warp-group backward
(flash_attention_bwd_warp_groups: dK, dV and dQ in one kernel, dQ by atomics) beside TWO_KERNELS (the dK/dV and dQ
kernels at the operator's configurations). Shapes named drop* run SDPA's entry point with
dropout (tle.ops.scaled_dot_product_attention beside F.scaled_dot_product_attention, both dropping 10%). The operator's configurations are chosen from
such sweeps; the Notes of docs/benchmark/flash_attention.md give the figures.

From the project root, on the GPU machine:
    python3 docs/benchmark/sweeps/flash_attention.py warm 14 [FILTER]   # build every case, 14 processes
    python3 docs/benchmark/sweeps/flash_attention.py time [FILTER]      # time them; rows to $OUT/sweep.json
FILTER keeps the cases whose "shape-mode-backend" name contains it (e.g. d256-bwd-tilelang). Building first in
parallel matters on TileLang, whose kernels take 5-40 s each to compile."""
import json
import multiprocessing as mp
import os
import sys

import torch
import torch.nn.functional as F

import tle.ops
from tle.kernels import flash_attention as fa

TARGETS_SM90, FWD_KERNEL, BWD_CONFIGS, BWD_WARP_GROUPS_APPLIES = (fa.targets_sm90, fa.fwd_kernel, fa.bwd_configs,
                                                                fa.bwd_warp_groups_applies)


def C(bm, bn, warps, stages, **extra):
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, **extra)


def A(cfg):
    """The dK/dV configuration `cfg` adding dQ by atomics (ATOMIC_DQ: no dQ kernel)."""
    return dict(cfg, ATOMIC_DQ=True)


def P(cfg):
    """The configuration `cfg` on TileLang's plain forward kernel where it would take the warp-group one (D64)."""
    return dict(cfg, PLAIN=True)


WARP_GROUPS = {"WARP_GROUPS": True}          # TileLang's D64 forward as the operator launches it (its own tiles)


def W(ahead, **extra):
    """TileLang's warp-group forward (flash_attention_warp_groups, its own tiles) at any head dim; `ahead`: each step
    computes the next block's scores before this block's softmax (AHEAD)."""
    return dict(WG=True, AHEAD=ahead, **extra)


BWD_WARP_GROUPS = {"BWD_WARP_GROUPS": True}  # TileLang's warp-group backward (its own tiles)
TWO_KERNELS = {"TWO_KERNELS": True}          # the dK/dV and dQ kernels at the operator's configurations


def T(cfg):
    """The configuration `cfg` reading its blocks of rows through tensor descriptors (DESC: TMA loads on Triton)."""
    return dict(cfg, DESC=True)


DROPOUT = 0.1                                 # the shapes named drop*: SDPA with this dropout
SHAPES = {"drop128c": (4, 32, 4096, 128, True), "drop128f": (4, 32, 4096, 128, False), "d128c": (4, 32, 8192, 128, True), "d128f": (4, 32, 8192, 128, False), "d64c": (32, 16, 1024, 64, True),
          "d64f": (32, 16, 1024, 64, False), "d256": (2, 16, 4096, 256, False)}
FWD = {"d128c": [C(128, 128, 8, 2), T(C(128, 128, 8, 2)), T(C(128, 128, 8, 3)), T(C(128, 64, 8, 3)),
                 T(C(128, 64, 4, 3))],
       "d128f": [C(128, 128, 8, 2), T(C(128, 128, 8, 2)), T(C(128, 128, 8, 3)), T(C(128, 64, 8, 3))],
       "d64c": [C(128, 64, 4, 3), C(128, 128, 8, 3), C(128, 64, 8, 3), C(128, 128, 8, 2), C(64, 64, 4, 3),
                T(C(128, 64, 4, 3)), T(C(128, 128, 8, 3))],
       "d64f": [C(128, 64, 4, 3), C(128, 128, 8, 3), C(128, 64, 8, 3), C(128, 128, 8, 2), C(64, 64, 4, 3),
                T(C(128, 64, 4, 3)), T(C(128, 128, 8, 3))],
       "d256": [C(64, 64, 8, 2), C(128, 64, 8, 2), C(128, 32, 8, 2), C(64, 64, 4, 2), C(128, 64, 8, 1),
                C(64, 32, 4, 3), T(C(64, 64, 8, 2)), T(C(128, 64, 8, 2))],
       "drop128c": [C(128, 128, 8, 2), C(128, 64, 8, 2), C(64, 128, 8, 2), C(128, 64, 4, 3), C(64, 64, 4, 3),
                    T(C(128, 128, 8, 2)), C(128, 128, 8, 3)]}
# (dK/dV configurations, dQ configurations): each dK/dV one with the first dQ one, then each dQ one with the first
# dK/dV one; the atomic dK/dV configurations need no dQ kernel
BWD = {"d128c": ([C(64, 128, 8, 2), C(64, 64, 4, 3), C(128, 128, 8, 2), C(128, 64, 8, 2), T(C(64, 128, 8, 2)),
                  T(C(64, 64, 4, 3))],
                 [C(128, 64, 8, 2), C(128, 128, 8, 2), C(64, 128, 8, 2), T(C(128, 64, 8, 2))]),
       "d64c": ([C(32, 128, 4, 3), C(64, 64, 4, 3), C(64, 128, 8, 2), C(128, 64, 8, 2)],
                [C(128, 32, 4, 3), C(128, 64, 8, 2), C(64, 64, 4, 3)]),
       "d256": ([C(32, 64, 8, 2), C(64, 64, 8, 2), C(64, 32, 4, 2), C(32, 64, 4, 2), C(32, 128, 8, 2)],
                [C(64, 32, 8, 2), C(64, 64, 8, 2), C(128, 32, 8, 2), C(64, 32, 4, 2)]),
       "drop128c": ([C(64, 128, 8, 2), C(64, 64, 4, 3), C(128, 64, 8, 2), C(64, 64, 8, 2), C(128, 128, 8, 2),
                     C(64, 128, 4, 2)],
                    [C(128, 64, 8, 2), C(64, 64, 4, 3), C(128, 32, 8, 2), C(64, 64, 8, 2), C(128, 128, 8, 2)])}
ATOMIC = {"d128c": [A(C(64, 128, 8, 2)), A(C(128, 128, 8, 2)), A(C(64, 64, 4, 3)), A(C(128, 64, 8, 2)),
                    A(C(128, 128, 8, 1)), A(T(C(64, 128, 8, 2))), A(T(C(128, 128, 8, 2))), A(T(C(64, 64, 4, 3)))],
          "d64c": [A(C(64, 128, 4, 3)), A(C(128, 128, 8, 2)), A(C(32, 128, 4, 3)), A(C(64, 128, 8, 2))],
          "d256": [A(C(64, 64, 8, 2)), A(C(32, 64, 8, 2)), A(C(64, 64, 8, 1)), A(C(64, 32, 4, 2))]}


def cases():
    """(shape name, mode, backend, configuration): fwd a dict, bwd (dK/dV dict, dQ dict)."""
    out = []
    for be in ("triton", "tilelang"):
        for name, cfgs in FWD.items():
            if be == "tilelang" and name.startswith("d64"):   # the warp-group kernel, then the plain one's tiles
                out += [(name, "fwd", be, WARP_GROUPS), (name, "fwd", be, W(True))]
                out += [(name, "fwd", be, P(c)) for c in cfgs if "DESC" not in c]
                continue
            if be == "tilelang" and name in ("d128c", "d128f"):
                out += [(name, "fwd", be, W(False)), (name, "fwd", be, W(True)), (name, "fwd", be, W(False, TURNS=True))]
            out += [(name, "fwd", be, c) for c in cfgs]
        for name, (kvs, qs) in BWD.items():
            out += [(name, "bwd", be, (kv, qs[0])) for kv in kvs]
            out += [(name, "bwd", be, (kvs[0], q)) for q in qs[1:]]
        for name, kvs in ATOMIC.items():
            out += [(name, "bwd", be, (kv, BWD[name][1][0])) for kv in kvs]
        if be == "tilelang":
            out += [(name, "bwd", be, c) for name in ("d128c", "d128f", "d64c", "d64f", "drop128c", "drop128f")
                    for c in (BWD_WARP_GROUPS, TWO_KERNELS)]
    return out


def install(mode, cfg):
    fa.targets_sm90, fa.fwd_kernel, fa.bwd_configs = TARGETS_SM90, FWD_KERNEL, BWD_CONFIGS
    fa.bwd_warp_groups_applies = ((lambda d, backend, **kw: backend == "tilelang") if cfg is BWD_WARP_GROUPS else
                                  (lambda *a, **kw: False))
    if cfg in (BWD_WARP_GROUPS, TWO_KERNELS):
        return
    if mode == "fwd" and cfg is WARP_GROUPS:
        return
    if mode == "fwd" and cfg.get("WG"):
        wg = fa.warp_groups
        extra = {k: v for k, v in cfg.items() if k != "WG"}
        fa.fwd_kernel = lambda d, s, backend, **kw: (wg.flash_attention_fwd_warp_groups_kernel,
                                                     dict(wg.fwd_warp_groups_config(d), **extra))
        return
    if mode == "fwd":
        cfg = dict(cfg)
        if cfg.pop("PLAIN", False):
            fa.targets_sm90 = lambda device: False
        fa.fwd_config = lambda d, s, backend, dropout=False: dict(cfg, SPLIT=backend == "triton")
    else:
        kv, q = cfg
        fa.bwd_configs = lambda d, backend, dropout=False: (dict(kv, SPLIT=backend == "triton"), dict(q, SPLIT=backend == "triton"))


def run(case, timed):
    name, mode, backend, cfg = case
    b, h, s, d, causal = SHAPES[name]
    install(mode, cfg)
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    p = DROPOUT if name.startswith("drop") else 0.0

    def sdpa():
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              dropout_p=p, is_causal=causal).transpose(1, 2)

    def ours():
        if p:                             # dropout: the SDPA entry point, on the same kernels
            return tle.ops.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        dropout_p=p, is_causal=causal, backend=backend).transpose(1, 2)
        return tle.ops.flash_attention(q, k, v, causal, backend=backend)
    out, ref = ours(), sdpa()
    # with dropout the two draw different masks: only finite outputs are checked (the tests check the values)
    err = ((out - ref).abs().max() / ref.abs().max()).item() if not p else float(not out.isfinite().all())
    do = torch.randn_like(out)
    if mode == "bwd" and p:
        grads = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        refs = torch.autograd.grad(ref, (q, k, v), do, retain_graph=True)
        err = max(err, *(float(not g.isfinite().all()) for g in grads))
    elif mode == "bwd":
        grads = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        refs = torch.autograd.grad(ref, (q, k, v), do, retain_graph=True)
        err = max(err, *(((g - r).abs().max() / r.abs().max()).item() for g, r in zip(grads, refs)))
    if not timed:
        return None
    from triton.testing import do_bench
    flops = 4 * b * h * s * s * d / (2 if causal else 1) * (1 if mode == "fwd" else 2.5)
    if mode == "fwd":
        ms, ms_sdpa = do_bench(ours), do_bench(sdpa)
    else:
        ms = do_bench(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
        ms_sdpa = do_bench(lambda: torch.autograd.grad(ref, (q, k, v), do, retain_graph=True))
    return dict(shape=name, mode=mode, backend=backend, config=cfg, max_rel_error=err,
                tflops=round(flops / ms / 1e9, 1), sdpa_tflops=round(flops / ms_sdpa / 1e9, 1))


def build(i):
    try:
        run(cases()[i], timed=False)
        return i, "ok"
    except Exception as e:  # noqa: BLE001 - a configuration a backend refuses is a result
        return i, f"{type(e).__name__}: {str(e)[:300]}"


def main(argv):
    what, rest = argv[0], argv[1:]
    procs = int(rest.pop(0)) if what == "warm" else 0
    only = rest[0] if rest else ""
    todo = [i for i, (name, mode, backend, _) in enumerate(cases()) if only in f"{name}-{mode}-{backend}"]
    if what == "warm":
        with mp.get_context("spawn").Pool(procs) as pool:
            for i, result in pool.imap_unordered(build, todo):
                print(i, cases()[i][:3], result, flush=True)
        return
    rows = []
    for i in todo:
        try:
            row = run(cases()[i], timed=True)
        except Exception as e:  # noqa: BLE001
            name, mode, backend, cfg = cases()[i]
            row = dict(shape=name, mode=mode, backend=backend, config=cfg, error=f"{type(e).__name__}: {str(e)[:300]}")
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
