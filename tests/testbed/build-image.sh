#!/usr/bin/env bash
# Builds (or reuses) the test-bed images, for each Debian release the collection is tested on:
#   localhost/inferops-testbed-base:<hash>  debootstrap minbase of the release, systemd as PID 1, sshd, python3
#   localhost/inferops-testbed:<hash>       the base plus /opt/sglang/venv with the SGLang double
# Each tag is a hash of its recipe (the release included), so a changed recipe builds anew and an unchanged one is
# reused. Prints the image names as shell assignments on stdout: INFEROPS_TESTBED_BASE and INFEROPS_TESTBED_IMAGE
# (Debian 12, every scenario), INFEROPS_TESTBED_IMAGE_BULLSEYE and INFEROPS_TESTBED_IMAGE_TRIXIE (molecule/platforms).
set -euo pipefail
shopt -s inherit_errexit  # a failed build inside $(...) stops the script
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${INFEROPS_CACHE:-$root/.cache}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# One build at a time on this machine (several checkouts may ask at once); the second finds the image made.
exec 9>/tmp/inferops-testbed-image.lock
flock 9

# The double's wheel (and its one dependency) come from the host's wheel cache.
"$here/wheels.sh" >&2

base_image() {  # RELEASE: the base image's name, built when missing
  local release=$1 base
  base=localhost/inferops-testbed-base:$( (echo "$release"; cat "$here/packages.txt"; sed -n '/^# --- base recipe/,/^# --- end base/p' "$0") | sha256sum | cut -c1-12)
# --- base recipe
  if ! podman image exists "$base"; then
    echo "building $base ($release: debootstrap, about 70 s)" >&2
    # outside the checkout: nothing that copies or walks the checkout may enter the root file system while
    # debootstrap has /proc mounted in it (a busy mount outlives debootstrap, and tar would pack it)
    dir=$(mktemp -d /var/tmp/inferops-rootfs.XXXXXX)
    trap 'umount -l "$dir/proc" "$dir/sys" 2>/dev/null; rm -rf --one-file-system "$dir"' EXIT
    debootstrap --variant=minbase --include="$(paste -sd, "$here/packages.txt")" "$release" "$dir" "$mirror" >&2
    umount -l "$dir/proc" "$dir/sys" 2>/dev/null || true
    # A container has no console to log in on, and no hardware clock or udev to wait for.
    rm -f "$dir"/etc/machine-id && : > "$dir"/etc/machine-id
    for u in getty@tty1.service systemd-timesyncd.service; do rm -f "$dir"/etc/systemd/system/*/"$u"; done
    ln -sf /dev/null "$dir"/etc/systemd/system/systemd-udevd.service
    ln -sf /dev/null "$dir"/etc/systemd/system/systemd-logind.service
    mkdir -p "$dir"/root/.ssh && chmod 700 "$dir"/root/.ssh
    printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' > "$dir"/etc/ssh/sshd_config.d/testbed.conf
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" --one-file-system -c . | podman import --change 'CMD ["/lib/systemd/systemd"]' - "$base" >&2
    rm -rf --one-file-system "$dir"; trap - EXIT
  fi
# --- end base
  echo "$base"
}

layer_image() {  # BASE: the base plus the venv with the double, built when missing
  local base=$1 image
  image=localhost/inferops-testbed:$( (echo "$base"; cat "$here/Containerfile"; ls -a "$cache/wheels/double") | sha256sum | cut -c1-12)  # names carry the source hash
  if ! podman image exists "$image"; then
    echo "building $image (venv with the SGLang double)" >&2
    podman build --quiet --network none --build-arg BASE="$base" -f "$here/Containerfile" -t "$image" "$cache/wheels/double" >&2
  fi
  echo "$image"
}

base=$(base_image bookworm)
echo "INFEROPS_TESTBED_BASE=$base"
echo "INFEROPS_TESTBED_IMAGE=$(layer_image "$base")"
for release in bullseye trixie; do
  echo "INFEROPS_TESTBED_IMAGE_${release^^}=$(layer_image "$(base_image "$release")")"
done
