"""Print the access-plan entries of test_access_plans.PLANS for kernels or corpus cases, to paste after
reviewing them:  python tests/print_access_plans.py rms_norm.rms_norm_fwd_kernel column_sum.column_sum_kernel"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu"))
os.environ.setdefault("TRITON_INTERPRET", "1")

from test_access_plans import plan  # noqa: E402

for name in sys.argv[1:]:
    print(f"    {name!r}: [")
    for entry in plan(name):
        print(f"        {entry!r},")
    print("    ],")
