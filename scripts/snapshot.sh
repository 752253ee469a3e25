#!/usr/bin/env bash
# A source snapshot for scripts/device_ab.sh: DIR/NAME holds the tree of REV (`git archive`), or
# of the working tree (tracked and untracked files git does not ignore) when REV is omitted,
# without bench/results; DIR/COMMIT gets the short hash of HEAD unless it exists. DIR is meant
# to lie under an ignored folder (e.g. devrun/) copied to the GPU machine. Variants that differ by
# a build option are snapshots edited afterwards (e.g. sed on a #define).
#
#   run (from the repository root): scripts/snapshot.sh DIR NAME [REV]
set -euo pipefail
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: $0 DIR NAME [REV]" >&2; exit 2; }
dir=$1 name=$2 rev=${3:-}
cd "$(git rev-parse --show-toplevel)"
rm -rf "${dir:?}/${name:?}"
mkdir -p "$dir/$name"
if [ -n "$rev" ]; then
  git archive "$rev" -- . ':!bench/results' | tar -x -C "$dir/$name"
else
  git ls-files -co --exclude-standard | grep -v -e '^bench/results/' -e "^$dir/" |
    tar -cf - -T - | tar -x -C "$dir/$name"
fi
[ -f "$dir/COMMIT" ] || git rev-parse --short HEAD > "$dir/COMMIT"
