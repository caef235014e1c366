#!/usr/bin/env bash
# The library of an earlier commit, for the benchmark's A/B (bench.py
# --ab): built from that commit's own sources and lock file, for the major
# whose pg_config is $2, cached by commit and major outside the repository.
# Prints the library's path. The library is loaded under another file name
# beside this one's, in a server of its own; only its C functions are used,
# so its SQL and its cargo-pgrx version do not matter.
#
#   bench/ab_build.sh <commit> <pg_config>
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh
pgrx_flags
commit=$(git rev-parse --verify "$1^{commit}")
pg_config=$2
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
cache="${SNOWFLAKE_AB_CACHE:-/var/cache/snowflake_id/ab}"
out="$cache/$commit-pg$major.so"
if [[ ! -f $out ]]; then
    src="$cache/src-$commit"
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    echo "Building snowflake_id at ${commit:0:10} for PostgreSQL $major (release; cached in $cache)" >&2
    (cd "$src" && PGRX_PG_CONFIG_PATH="$pg_config" CARGO_TARGET_DIR="$cache/target" \
        cargo build --release --locked --lib --no-default-features --features "pg$major" "${PGRX_CARGO_FLAGS[@]}" >&2)
    cp "$cache/target/release/libsnowflake_id.so" "$out.new"
    mv "$out.new" "$out"
fi
echo "$out"
