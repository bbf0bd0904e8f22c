#!/bin/sh
# What a refusal leaves as it was: the unit files systemd knows and their states, the files under the folders the
# cutover writes to (name, type, mode, size, checksum).
systemctl list-unit-files --no-legend --no-pager
for d in /etc/systemd/system /lib/systemd/system /var/lib/inferops /etc/inferops; do
  [ -e "$d" ] && find "$d" -printf '%p %y %m %s\n'
done | sort
for d in /etc/systemd/system /var/lib/inferops /etc/inferops; do
  [ -e "$d" ] && find "$d" -type f -exec sha256sum {} +
done | sort
