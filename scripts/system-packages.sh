#!/usr/bin/env bash
# Debian packages the test suite needs: independent checkers (libtiff's tiffinfo/tiffcmp) and the
# libraries of the optional SpanDSP loopback line. Never runtime dependencies of the service itself.
# Installs only what is missing, so it is quick on a machine that already has them.
set -euo pipefail
need=()
# command:package pairs
for pair in "tiffinfo:libtiff-tools" "pkg-config:pkg-config"; do
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
