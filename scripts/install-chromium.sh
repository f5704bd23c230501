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

# Recommended packages (desktop integration) are not needed headless; a font is, for the text
# in screenshots.
"$(dirname "$0")/apt-install.sh" install-chromium.sh "Debian's chromium (about 100 MB)" \
    chromium fonts-dejavu-core \
    || { echo "install-chromium.sh: or install Chromium by other means and set CHROMIUM=/path/to/chromium" >&2; exit 1; }
