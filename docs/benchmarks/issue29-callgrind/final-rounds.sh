#!/usr/bin/env bash
# BASE=<02f8e41 build> MID=<fc765c1 build> FINAL=<47eccbe build> docs/benchmarks/issue29-callgrind/final-rounds.sh
# (from the repository root): 3 interleaved rounds of prefix-cache and random with the one 2 KiB body, each build in
# the same order every round; writes final-<build>-<case>-r<round>.txt here and prints a progress line per run (the
# 2026-12-07 run's: final-rounds.log).
set -u
out=docs/benchmarks/issue29-callgrind
for round in 1 2 3; do
  for case in "pc-fixed:--strategy prefix-cache" "random-fixed:--strategy random"; do
    name=${case%%:*}; args=${case#*:}
    for b in base:${BASE:?} fc765c1:${MID:?} 47eccbe:${FINAL:?}; do
      l=${b%%:*}; bin=${b#*:}; f=$out/final-$l-$name-r$round.txt
      /usr/bin/python3 loadtest/overhead/callgrind_request.py --bin "$bin" --out /tmp/cgfin $args --top 60 > "$f" 2>&1
      echo "$(date +%T) $l $name r$round: $(head -1 "$f" | grep -o '[0-9,]* per request')"
    done
  done
done
