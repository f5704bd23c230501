#!/bin/sh
# Install Debian's chromium for the browser test of the dataset report (tests/test_report.py).
#
# Idempotent: does nothing when /usr/bin/chromium exists. Otherwise installs the package
# non-interactively with apt-get (as root, or through sudo when available). `make test` calls it.
# On a system without apt-get, install Chromium by other means and point CHROMIUM at it.
set -eu

if [ -x /usr/bin/chromium ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium.sh: apt-get not found; install Chromium yourself and set" \
         "CHROMIUM=/path/to/chromium for the tests" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "install-chromium.sh: need root (or sudo) to apt-get install chromium" >&2
    exit 1
fi

echo "install-chromium.sh: installing Debian's chromium (about 100 MB)"
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
# Recommended packages (desktop integration) are not needed headless; a font is, for the text
# in screenshots.
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
