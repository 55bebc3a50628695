#!/usr/bin/env bash
# BASE=<47eccbe build: the gateway code of d7df35d> FINAL=<ad9dd2e build> docs/benchmarks/issue29-decision/rounds.sh
# (from the repository root): 3 interleaved rounds of prefix-cache and random with the one 2 KiB body, then the SSE
# relay (--stream) once per build and nginx's per event and per request once; writes <build>-<case>-r<round>.txt
# here and prints a progress line per run (the 2026-12-07 run's: rounds.log).
set -u
out=${OUT:-docs/benchmarks/issue29-decision}  # OUT: another folder (issue29-deadline/rounds.sh)
for round in 1 2 3; do
  for case in "pc-fixed:--strategy prefix-cache" "random-fixed:--strategy random"; do
    name=${case%%:*}; args=${case#*:}
    for b in base:${BASE:?} final:${FINAL:?}; do
      l=${b%%:*}; bin=${b#*:}; f=$out/$l-$name-r$round.txt
      /usr/bin/python3 loadtest/overhead/callgrind_request.py --bin "$bin" --out /tmp/cgdec $args --top 60 > "$f" 2>&1
      echo "$(date +%T) $l $name r$round: $(head -1 "$f" | grep -o '[0-9,]* per request')"
    done
  done
done
for b in base:$BASE final:$FINAL; do
  l=${b%%:*}; bin=${b#*:}; f=$out/$l-sse.txt
  /usr/bin/python3 loadtest/overhead/callgrind_request.py --bin "$bin" --out /tmp/cgdec --stream --top 60 > "$f" 2>&1
  echo "$(date +%T) $l sse: $(head -1 "$f" | grep -o '[0-9,]* per event')"
done
/usr/bin/python3 loadtest/overhead/callgrind_request.py --proxy nginx --out /tmp/cgdec --stream --top 60 > $out/nginx-sse.txt 2>&1
echo "$(date +%T) nginx sse: $(head -1 $out/nginx-sse.txt | grep -o '[0-9,]* per event')"
/usr/bin/python3 loadtest/overhead/callgrind_request.py --proxy nginx --out /tmp/cgdec --top 60 > $out/nginx-fixed.txt 2>&1
echo "$(date +%T) nginx fixed: $(head -1 $out/nginx-fixed.txt | grep -o '[0-9,]* per request')"
