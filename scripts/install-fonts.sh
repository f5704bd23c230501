#!/bin/sh
# Install the fonts the labelled overlay test films are drawn with (tests/overlay_films.py):
# DejaVu Sans for Latin subtitles, Noto Sans CJK for Chinese ones.
#
# Idempotent: does nothing when both font files are found where Debian puts them. Otherwise
# installs Debian's packages non-interactively with apt-get (as root, or through sudo when
# available). `make test` calls it. Elsewhere, install the two fonts by other means and point
# ANIMEGAMER_FONT_DIRS at the folders holding them (tests/overlay_films.py).
set -eu

have() {
    find /usr/share/fonts /usr/local/share/fonts -name "$1" 2>/dev/null | grep -q .
}

if have DejaVuSans.ttf && { have NotoSansCJK-Regular.ttc || have wqy-zenhei.ttc; }; then
    exit 0
fi

"$(dirname "$0")/apt-install.sh" install-fonts.sh \
    "Debian's fonts-dejavu-core and fonts-noto-cjk (about 60 MB)" \
    fonts-dejavu-core fonts-noto-cjk \
    || { echo "install-fonts.sh: or install the fonts by other means and set ANIMEGAMER_FONT_DIRS" >&2; exit 1; }
