#!/usr/bin/env bash
# Runs the GPU suite as N pytest processes sharing the one GPU (most of a test's time is compiling on the
# CPU): the collected test ids dealt round-robin to the shards, each shard's log in LOGDIR.
# Usage, from the project root on the GPU machine: tests/gpu/run_in_shards.sh N LOGDIR [pytest paths...]
# Exits nonzero when any shard failed; LOGDIR/summary.txt has each shard's last line.
set -uo pipefail
n=${1:?number of shards}; logs=${2:?log folder}; shift 2
paths=("${@:-tests/gpu}")
mkdir -p "$logs"
python3 -m pytest --collect-only -q "${paths[@]}" 2>/dev/null | grep '::' > "$logs/ids.txt"
echo "$(wc -l < "$logs/ids.txt") tests in $n shards"
pids=()
for ((s = 0; s < n; s++)); do
  awk -v n="$n" -v s="$s" 'NR % n == s' "$logs/ids.txt" > "$logs/shard$s.ids"
  python3 -m pytest -q -p no:cacheprovider $(cat "$logs/shard$s.ids") > "$logs/shard$s.log" 2>&1 &
  pids+=($!)
done
rc=0
for ((s = 0; s < n; s++)); do
  wait "${pids[$s]}" || rc=1
  echo "shard $s: $(tail -n 1 "$logs/shard$s.log")" | tee -a "$logs/summary.txt"
done
exit $rc
