#!/usr/bin/env bash
# Runs the GPU suite as N pytest processes sharing the one GPU (most of a test's time is compiling on the
# CPU): the collected test ids dealt round-robin to the shards, each shard's log in LOGDIR. The shards share
# the GPU's memory, so a test with large tensors can run out of it beside the others: every test that failed
# in a shard runs again afterwards in one process of its own (LOGDIR/rerun.log), and only what fails there
# counts as failed.
# Usage, from the project root on the GPU machine: tests/gpu/run_in_shards.sh N LOGDIR [pytest paths or ids...]
# Exits nonzero when a test failed on its own too; LOGDIR/summary.txt has each shard's last line.
set -uo pipefail
n=${1:?number of shards}; logs=${2:?log folder}; shift 2
paths=("${@:-tests/gpu}")
mkdir -p "$logs"
last_line() { grep -v '^\s*$' "$1" | tail -n 1; }
python3 -m pytest --collect-only -q "${paths[@]}" 2>/dev/null | grep '::' > "$logs/ids.txt"
[[ -s $logs/ids.txt ]] || { echo "no tests collected from: ${paths[*]}" >&2; exit 2; }
count=$(wc -l < "$logs/ids.txt")
(( n > count )) && n=$count           # an empty shard would run pytest without ids: the whole suite
echo "$count tests in $n shards"
pids=()
for ((s = 0; s < n; s++)); do
  awk -v n="$n" -v s="$s" 'NR % n == s' "$logs/ids.txt" > "$logs/shard$s.ids"
  mapfile -t ids < "$logs/shard$s.ids"
  python3 -m pytest -q -p no:cacheprovider "${ids[@]}" > "$logs/shard$s.log" 2>&1 &
  pids+=($!)
done
status=0
for ((s = 0; s < n; s++)); do
  wait "${pids[$s]}"
  rc=$?
  echo "shard $s: $(last_line "$logs/shard$s.log")" | tee -a "$logs/summary.txt"
  (( rc == 0 || rc == 1 )) || status=1      # not a test failing: pytest itself stopped (usage, collection, ...)
done
grep -h '^\(FAILED\|ERROR\) [^ ]*::' "$logs"/shard*.log | sed 's/^[A-Z]* //; s/ - .*//' | sort -u > "$logs/failed.txt"
[[ -s $logs/failed.txt ]] || exit $status
echo "$(wc -l < "$logs/failed.txt") failed beside other shards; again, alone:" | tee -a "$logs/summary.txt"
mapfile -t ids < "$logs/failed.txt"
python3 -m pytest -q -p no:cacheprovider "${ids[@]}" > "$logs/rerun.log" 2>&1
(( $? == 0 )) || status=1
echo "alone: $(last_line "$logs/rerun.log")" | tee -a "$logs/summary.txt"
exit $status

