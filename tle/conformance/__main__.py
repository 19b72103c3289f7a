"""python -m tle.conformance flagtree PATH: FlagTree's TLE tests and tutorials run on this project's backends with
only their import lines and kernel decorators rewritten (in a temporary copy; PATH is never written).

    python -m tle.conformance flagtree ~/FlagTree/python [--backends triton,tilelang] [--device cpu|cuda]
                                       [--only SUBSTRING] [--timeout SECONDS] [--json OUT]

PATH is a checkout of FlagTree's python/ folder (its test/tle and tutorials/tle). Each file runs once per backend
in a process of its own (env TLE_BACKEND names the backend); a check is one pytest test, or one tutorial run as a
script (it passes when it ends without an exception). --device cpu runs Triton kernels in Triton's interpreter and
TileLang kernels through the project's interpreter of the generated TileLang programs (see
tle/conformance/child.py). Prints a table per file and a summary line; exit code 0 when it ran (whatever
passed), 2 for a usage error."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from tle.conformance import flagtree
from tle.conformance.runner import run_suite, summary, table
from tle.oplib.backend import KERNEL_BACKENDS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tle.conformance", description=__doc__.splitlines()[0])
    p.add_argument("suite", choices=("flagtree",))
    p.add_argument("path", help="a checkout of FlagTree's python/ folder")
    p.add_argument("--backends", default=",".join(KERNEL_BACKENDS))
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda where torch sees a GPU, else cpu")
    p.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                   help="run only the files whose path contains it (repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per file and backend (default 600)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write every check to this file")
    a = p.parse_args(argv)
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    for b in backends:
        if b not in KERNEL_BACKENDS:
            p.error(f"unknown backend {b!r} in --backends (backends: {', '.join(KERNEL_BACKENDS)})")
    if a.device is None:
        import torch
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        files = flagtree.discover(a.path)
    except FileNotFoundError as e:
        p.error(str(e))
    if a.only:
        files = [f for f in files if any(s in f[0] for s in a.only)]
        if not files:
            p.error(f"no file of the suite matches --only {' '.join(a.only)}")
    results = run_suite(a.path, files, backends, a.device, flagtree.MODULES, flagtree.DECORATORS, a.timeout,
                        progress=lambda rel: print(f"running {rel} ...", file=sys.stderr, flush=True))
    print(f"# FlagTree TLE conformance ({a.device}; backends {', '.join(backends)})")
    print("\n".join(table(results, backends)))
    print()
    print(summary(results, backends))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "backends": backends, "files": [asdict(r) for r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
