#!/usr/bin/env bash
# Runs a command with a private /usr, /etc and /var: copy-on-write layers
# (overlayfs) over the machine's, in mount and PID namespaces of the
# command's own, gone when it ends. What it installs or removes with apt,
# the clusters it makes and the servers it starts, the files it writes
# there, none of it reaches the machine, and running servers of the machine
# keep the files they have mapped. The package test runs in one
# (scripts/test.sh): installing the extension's package with apt and
# purging it would otherwise take from the machine's PostgreSQL the
# extension files it had before.
#   - The layers' upper halves are a tmpfs mounted inside the namespace: on
#     any filesystem, and gone with it however the command ends.
#   - Every process the command leaves is killed with it (a PID namespace
#     whose first process is the command).
#   - The machine's service manager is out of reach: /run/systemd/system is
#     hidden (postgresql-common's tools then start clusters themselves
#     instead of asking the machine's systemd, which would look for them in
#     the machine's /etc), a policy-rc.d refuses every service start from a
#     package's scripts, and /run/postgresql (pid files, sockets) is a tmpfs.
#   - SNOWFLAKE_PRIVATE_SYSTEM=1 tells the command where it runs.
# Directories mounted below /usr, /etc or /var are not seen inside.
#   scripts/private-system.sh command [args...]
set -euo pipefail
(($#)) || { echo "usage: $0 command [args...]" >&2; exit 2; }
((EUID == 0)) || { echo "$0: needs root (namespaces and overlay mounts)" >&2; exit 2; }
# Where the layers are mounted inside the namespace (an empty directory of
# the machine's, removed afterwards).
layers=$(mktemp -d /run/snowflake_id-private.XXXXXX)
trap 'rmdir "$layers" 2>/dev/null || true' EXIT
unshare --mount --propagation private --pid --fork --kill-child --mount-proc -- bash -euo pipefail -c '
    layers=$1
    shift
    mount -t tmpfs -o mode=0700 snowflake_id-private "$layers"
    for d in usr etc var; do
        mkdir -p "$layers/$d/upper" "$layers/$d/work"
        mount -t overlay overlay -o "lowerdir=/$d,upperdir=$layers/$d/upper,workdir=$layers/$d/work" "/$d"
    done
    if [[ -d /run/systemd/system ]]; then mount -t tmpfs -o ro,mode=0555 none /run/systemd/system; fi
    mkdir -p /run/postgresql
    mount -t tmpfs -o mode=2775 snowflake_id-private-run /run/postgresql
    chown postgres:postgres /run/postgresql 2>/dev/null || true
    printf "#!/bin/sh\n# private-system.sh: no service starts here\nexit 101\n" >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    export SNOWFLAKE_PRIVATE_SYSTEM=1 _SYSTEMCTL_SKIP_REDIRECT=1
    "$@"' private-system "$layers" "$@"
