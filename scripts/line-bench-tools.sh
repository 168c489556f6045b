#!/usr/bin/env bash
# Measuring tools of `npm run bench:line-time` (bench/line-time.ts), from Debian: Ghostscript (the
# renderer HylaFAX uses, the yardstick; AGPL, so never a dependency of the service), tesseract and its
# English data (OCR word recall), poppler's pdftotext (the PDFs' own text) and libtiff's tiffcp
# (decoding the fax images for OCR). Not needed by the tests, not installed by CI.
# Installs only what is missing; run as root, and not while another apt-get runs.
set -euo pipefail
need=()
for pair in "gs:ghostscript" "tesseract:tesseract-ocr" "pdftotext:poppler-utils" "tiffcp:libtiff-tools"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
dpkg -s tesseract-ocr-eng >/dev/null 2>&1 || need+=(tesseract-ocr-eng)
if [ ${#need[@]} -gt 0 ]; then
  echo "line-bench-tools: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
