#!/usr/bin/env bash
# Debian packages the test suite uses as independent checkers (libtiff's tiffinfo/tiffcmp, poppler, openssl,
# Prometheus's promtool, the SIP peers Kamailio, rtpengine and SIPp) and the libraries of the
# optional SpanDSP loopback line and SIP media engine; never runtime dependencies of the service.
# Installs only what is missing, so it is quick on a machine that already has them.
set -euo pipefail
need=()
# poppler's pdftoppm and pdfimages read back the PDFs faxline builds (proof of transmission, received
# faxes) as a viewer would.
for pair in "tiffinfo:libtiff-tools" "openssl:openssl" "pkg-config:pkg-config" "promtool:prometheus" "pdftoppm:poppler-utils"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# deploy tests: `kubectl kustomize` renders deploy/k8s; `docker-compose config` validates deploy/compose.yaml.
for pair in "kubectl:kubernetes-client" "docker-compose:docker-compose"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# SIP tests (test/sip/, test/sip-*.test.ts): independent telephony peers started on loopback by the
# tests themselves. Kamailio is the trunk proxy (digest auth, record-route), rtpengine the media relay
# and T.38 <-> G.711 gateway (user space, no kernel module), SIPp the scripted far end. Their binaries
# live in /usr/sbin or /usr/bin, so they are looked for there too (a non-root PATH may lack /usr/sbin).
for pair in "kamailio:kamailio" "rtpengine:rtpengine-daemon" "sipp:sip-tester"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
# Mail gateway tests (test/mail*.test.ts): swaks, an SMTP client of its own, sends the messages; Postfix
# is started by the test as the MX in front of the gateway, with its own configuration and queue
# directories on a private loopback port (the package's own instance is never started here).
for pair in "swaks:swaks" "postfix:postfix"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
# The web console's browser test (test/console-browser.test.ts): Debian's chromium, driven headless by
# the npm package playwright-core (which downloads no browser: it is given /usr/bin/chromium).
command -v chromium >/dev/null 2>&1 || need+=("chromium")
# libraries (checked by package state); Net::SSLeay and IO::Socket::SSL give swaks its --tls
# (test/mail-tls.test.ts submits over STARTTLS).
for pkg in libspandsp-dev libtiff-dev libnet-ssleay-perl libio-socket-ssl-perl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "system-packages: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # A fresh container has no init system: the daemons' postinst scripts must not try to start them
  # (the tests start their own, on private ports). policy-rc.d exit 101 tells invoke-rc.d "not now".
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
