#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the admin listener (HOST:PORT, default 127.0.0.1:9090, the admin_listen of
# conf/prefixgate.yaml) and exit 0 only on a 200. The image has no curl or wget and the gateway is not touched for
# this, so one HTTP/1.0 request goes through bash's /dev/tcp. /healthz, not /readyz: the image ships no pods, and
# Docker cannot act on readiness (Kubernetes ignores HEALTHCHECK and probes the health listener instead).
set -euo pipefail
address=${1:-127.0.0.1:9090}
exec 3<>"/dev/tcp/${address%:*}/${address##*:}"
printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$address" >&3
IFS= read -r -t 5 status <&3
[[ "$status" =~ ^HTTP/1\.[01]\ 200[\ $'\r'] ]]
