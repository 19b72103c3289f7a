"""tle-bench, the benchmark of the operators of tle.ops (DESIGN: every operator module's BenchSpec).

    tle-bench --operator rms_norm --mode fwd,bwd        (or: python -m tle.benchmark ...)

Modules, one job each: cli (the command line), measure (the measuring loop: implementations, modes),
check (is an implementation right before it is timed), timing (do_bench; the copy ceiling), records (the
JSON records and their merge), tables, page (docs/benchmark/<op>.md), plot (the PNG), progress (the bar),
provenance (commit, date, device, versions; shared with the kernel-level `python -m tle.bench`).

parity (`python -m tle.benchmark.parity`) is a benchmark of its own: a plain Triton kernel text under
`@triton.jit` beside the same text through both lowerings, at one launch (docs/benchmark/triton_parity.md)."""
