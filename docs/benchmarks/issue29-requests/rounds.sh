#!/usr/bin/env bash
# BASE=<eb534e0 build: the last stop's gateway code> FINAL=<d14d7de build> docs/benchmarks/issue29-requests/rounds.sh
# (from the repository root): issue29-decision/rounds.sh's runs (3 interleaved rounds of prefix-cache and random with
# the one 2 KiB body, the SSE relay once per build, nginx once), written here (the 2026-12-08 run's log: rounds.log).
OUT=docs/benchmarks/issue29-requests exec docs/benchmarks/issue29-decision/rounds.sh
