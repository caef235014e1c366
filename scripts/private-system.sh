#!/usr/bin/env bash
# Runs a command with a private /usr, /etc and /var: copy-on-write layers
# (overlayfs) over the machine's, in a mount namespace of the command's
# own, gone when it ends. What it installs or removes with apt, the
# clusters it makes, the files it writes there, none of it reaches the
# machine, and running servers of the machine keep the files they have
# mapped. The package test runs in one (scripts/test.sh): installing the
# extension's package with apt and purging it would otherwise take from
# the machine's PostgreSQL the extension files it had before.
#   scripts/private-system.sh command [args...]
set -euo pipefail
(($#)) || { echo "usage: $0 command [args...]" >&2; exit 2; }
((EUID == 0)) || { echo "$0: needs root (a mount namespace and overlay mounts)" >&2; exit 2; }
# The layers' upper halves live on /tmp, which is not one of the layered
# directories.
layers=$(mktemp -d /tmp/snowflake_id-private.XXXXXX)
rc=0
unshare --mount --propagation private -- bash -euo pipefail -c '
    layers=$1
    shift
    for d in usr etc var; do
        mkdir -p "$layers/$d/upper" "$layers/$d/work"
        mount -t overlay overlay -o "lowerdir=/$d,upperdir=$layers/$d/upper,workdir=$layers/$d/work" "/$d"
    done
    exec "$@"' private-system "$layers" "$@" || rc=$?
rm -rf "$layers"
exit "$rc"
