# shellcheck shell=bash
# Sourced by tests/run.sh and the demo: the environment every tool of the test bed runs in.
INFEROPS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export INFEROPS_ROOT
export CONTAINERS_CONF=$INFEROPS_ROOT/tests/testbed/containers.conf
export PATH=$INFEROPS_ROOT/.venv/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$INFEROPS_ROOT/.cache/collections
_inferops_images=$("$INFEROPS_ROOT/tests/testbed/build-image.sh") || { echo "the test-bed images could not be built" >&2; return 1; }
eval "$_inferops_images"
export INFEROPS_TESTBED_BASE INFEROPS_TESTBED_IMAGE INFEROPS_TESTBED_IMAGE_BULLSEYE INFEROPS_TESTBED_IMAGE_TRIXIE
# On a hybrid cgroup host (v1 controllers, v2 at /sys/fs/cgroup/unified) systemd in a container
# learns that a unit's cgroup emptied only through the v2 hierarchy: without it every stop of a
# unit whose main process exited hangs until TimeoutStopSec and Restart= never fires.
if [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
  INFEROPS_CGROUP_VOLUME=/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw
else
  INFEROPS_CGROUP_VOLUME=$INFEROPS_ROOT/tests/testbed:/opt/inferops-testbed:ro  # nothing to add there
fi
export INFEROPS_CGROUP_VOLUME
mkdir -p "$INFEROPS_ROOT/.cache/ssh" "$INFEROPS_ROOT/.cache/collections/ansible_collections/inferops"
[ -f "$INFEROPS_ROOT/.cache/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$INFEROPS_ROOT/.cache/ssh/id_ed25519"
ln -sfn "$INFEROPS_ROOT" "$INFEROPS_ROOT/.cache/collections/ansible_collections/inferops/sglang"
