#!/bin/sh
# apt-install.sh WHO WHAT PACKAGE...: install Debian packages non-interactively, as root or through
# sudo, without recommended packages. WHO names the calling script in messages, WHAT is told to
# the user first. The one way the project's set-up scripts install system packages.
set -eu

who=$1 what=$2
shift 2

if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: apt-get not found; install $* yourself" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "$who: need root (or sudo) to apt-get install $*" >&2
    exit 1
fi

echo "$who: installing $what"
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
