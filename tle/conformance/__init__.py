"""Conformance runs: another project's kernel suite run on this project's backends with only its import lines and
kernel decorators rewritten (`python -m tle.conformance flagtree PATH`; see __main__)."""
