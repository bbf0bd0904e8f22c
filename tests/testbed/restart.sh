#!/usr/bin/env bash
# Restarts test-bed hosts, as a power cycle of each: tests/testbed/restart.sh NAME... (all at once, one stop and
# start each). Exits non-zero when a host did not come back.
#
# Not `podman restart`: it lets the exit command of the container's old conmon (`podman container cleanup`) run in
# the middle of the restart, between the container's end and its new start. Here the stop ends with the network torn
# down by podman stop itself, the start waits until the old conmon and any cleanup of it have exited, and only then
# sets the network up again. (Hosts once lost around a restart, "No route to host", were removed by another lane's
# lookup of an all-hex name, which podman reads as an ID prefix: tests/unit/test_testbed_names.py.)
set -uo pipefail
restart() {
  local name=$1 id deadline
  id=$(podman inspect --format '{{.Id}}' "$name") || return 1
  podman stop --time 30 "$name" >/dev/null || return 1
  deadline=$((SECONDS + 60))
  while pgrep -f "conmon .*-c $id" >/dev/null || pgrep -f "cleanup $id" >/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "$name: its old conmon or cleanup still runs 60 s after the stop" >&2; return 1; }
    sleep 0.1
  done
  podman start "$name" >/dev/null
}
pids=()
for name in "$@"; do
  restart "$name" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=1
done
exit $rc
