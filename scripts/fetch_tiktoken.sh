#!/usr/bin/env bash
# Installs the npm `tiktoken` package (version pinned in tools/tiktoken/package.json and package-lock.json) into
# tools/tiktoken/node_modules and prints the absolute path of its encoders/cl100k_base.json, the vocabulary the
# gateway's tiktoken tokenizer loads. Safe to run again: it does nothing when the pinned version is installed.
# Needs node and npm, and the npm registry the first time. Messages go to stderr; stdout is only the path.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
project="$root/tools/tiktoken"
data="$project/node_modules/tiktoken/encoders/cl100k_base.json"

command -v npm >/dev/null || { echo "fetch_tiktoken: npm not found (install nodejs and npm)" >&2; exit 1; }

pinned="$(node -p 'require(process.argv[1]).dependencies.tiktoken' "$project/package.json")"
installed=""
if [[ -f "$project/node_modules/tiktoken/package.json" ]]; then
  installed="$(node -p 'require(process.argv[1]).version' "$project/node_modules/tiktoken/package.json")"
fi

if [[ "$installed" != "$pinned" || ! -s "$data" ]]; then
  echo "fetch_tiktoken: installing tiktoken $pinned into $project" >&2
  (cd "$project" && npm install --no-audit --no-fund --loglevel=error >&2)
fi

[[ -s "$data" ]] || { echo "fetch_tiktoken: $data missing after install" >&2; exit 1; }
echo "$data"
