"""python -m tle.benchmark: the same as the tle-bench command."""
import sys

from tle.benchmark.cli import main

sys.exit(main())
