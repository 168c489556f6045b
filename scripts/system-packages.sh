#!/usr/bin/env bash
# Debian packages the test suite uses as independent checkers (libtiff's tiffinfo/tiffcmp, openssl,
# Prometheus's promtool, SIPp as a SIP far end) and the libraries of the optional SpanDSP loopback line; never runtime
# dependencies of the service. Installs only what is missing, so it is quick on a machine that
# already has them.
set -euo pipefail
need=()
for pair in "tiffinfo:libtiff-tools" "openssl:openssl" "pkg-config:pkg-config" "promtool:prometheus" "sipp:sip-tester"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# deploy tests: `kubectl kustomize` renders deploy/k8s; `docker-compose config` validates deploy/compose.yaml.
for pair in "kubectl:kubernetes-client" "docker-compose:docker-compose"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# libraries (checked by package state)
for pkg in libspandsp-dev libtiff-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "system-packages: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
