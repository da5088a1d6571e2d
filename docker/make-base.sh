#!/usr/bin/env bash
# Build the local base images for machines that reach no image registry (the CI/dev machine):
#   kernel-judge-base:bookworm   a minimal Debian bookworm root (debootstrap --variant=minbase), imported
#   kernel-judge-wheels:local    a one-layer image holding the wheels in $WHEELS_DIR (the CPU torch wheel):
#                                the Dockerfile bind-mounts it while installing, so it never lands in a layer
# Usage: bash docker/make-base.sh [ROOTFS_DIR]      (as root; needs debootstrap and a running dockerd)
# Env:   MIRROR (default: the first Debian URI in this machine's apt sources), SUITE (bookworm),
#        BASE_TAG (kernel-judge-base:bookworm), WHEELS_DIR (/opt/wheels), WHEELS_TAG (kernel-judge-wheels:local)
set -euo pipefail

ROOTFS=${1:-/tmp/kernel-judge-rootfs}
SUITE=${SUITE:-bookworm}
BASE_TAG=${BASE_TAG:-kernel-judge-base:$SUITE}
WHEELS_DIR=${WHEELS_DIR:-/opt/wheels}
WHEELS_TAG=${WHEELS_TAG:-kernel-judge-wheels:local}

if [[ -z "${MIRROR:-}" ]]; then
    # deb822 "URIs:" lines and one-line "deb URI" entries; the first Debian archive that is not security.
    MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
             | awk '/^URIs:/ || /^deb[ \t]/ {print $2}' | grep -E '/debian/?$' | grep -v security | head -n1 || true)
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
echo "make-base: suite $SUITE from $MIRROR into $ROOTFS"

if [[ ! -x "$ROOTFS/usr/bin/apt-get" ]]; then
    nice -n 10 debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR"
fi

# The image's apt sources: the release, its updates and security (bubblewrap's fixes come from there).
SECURITY=${SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}
cat > "$ROOTFS/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
SOURCES
# Keep the image small: no caches, no docs, no man pages in later apt installs either.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/01-nodoc" <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
NODOC

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' - "$BASE_TAG"
echo "make-base: imported $BASE_TAG"

if compgen -G "$WHEELS_DIR/*.whl" > /dev/null; then
    tar -C "$WHEELS_DIR" -c $(cd "$WHEELS_DIR" && ls *.whl) | docker import - "$WHEELS_TAG"
    echo "make-base: imported $WHEELS_TAG from $WHEELS_DIR: $(cd "$WHEELS_DIR" && ls *.whl | tr '\n' ' ')"
else
    echo "make-base: no wheels in $WHEELS_DIR; build with --build-arg WHEELS=scratch (torch from TORCH_INDEX)"
fi
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(${BASE_TAG%%:*}|${WHEELS_TAG%%:*}):"
