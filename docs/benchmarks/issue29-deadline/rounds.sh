#!/usr/bin/env bash
# BASE=<b39edf6 build: the gateway code of d8eacd9> FINAL=<727fa01 build> docs/benchmarks/issue29-deadline/rounds.sh
# (from the repository root): issue29-decision/rounds.sh's runs (3 interleaved rounds of prefix-cache and random with
# the one 2 KiB body, the SSE relay once per build, nginx once), written here (the 2026-12-07 run's log: rounds.log).
OUT=docs/benchmarks/issue29-deadline exec docs/benchmarks/issue29-decision/rounds.sh
