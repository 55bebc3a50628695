#!/usr/bin/env bash
# BASE=<base prefixgate> NEW=<new prefixgate> docs/benchmarks/issue29-callgrind/rounds.sh (from the repository root): 3 rounds,
# each case in the same order every round; writes <build>-<case>-r<round>.txt here. Run 2026-12-07 with BASE = 02f8e41
# (sha256 375f42dd...) and NEW = fc765c1 (843a4252...); its progress lines are in rounds.log.
# Interleaved callgrind rounds: base and new prefixgate (prefix-cache and random, one 2 KiB body and the families),
# and nginx, each round in the same order.
set -u
out=docs/benchmarks/issue29-callgrind
for round in 1 2 3; do
  for case in "pc-fixed:--strategy prefix-cache" "random-fixed:--strategy random" "pc-families:--strategy prefix-cache --families"; do
    name=${case%%:*}; args=${case#*:}
    for build in base:${BASE:?the base build} new:${NEW:?the new build}; do
      b=${build%%:*}; bin=${build#*:}
      /usr/bin/python3 loadtest/overhead/callgrind_request.py --bin "$bin" --out /tmp/cgab $args --top 60 > "$out/$b-$name-r$round.txt" 2>&1
      echo "$(date +%T) $b $name r$round: $(head -1 $out/$b-$name-r$round.txt | grep -o '[0-9,]* per request')"
    done
  done
  for case in "fixed:" "families:--families"; do
    name=${case%%:*}; args=${case#*:}
    /usr/bin/python3 loadtest/overhead/callgrind_request.py --proxy nginx --out /tmp/cgab $args --top 60 > "$out/nginx-$name-r$round.txt" 2>&1
    echo "$(date +%T) nginx $name r$round: $(head -1 $out/nginx-$name-r$round.txt | grep -o '[0-9,]* per request')"
  done
done
