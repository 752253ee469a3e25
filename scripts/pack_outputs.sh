#!/usr/bin/env bash
# Packs everything under $1 into $1/outputs.tgz and removes the loose files except summary.txt:
# the device tool brings back only a handful of files per call, so a run that writes many logs
# must ship them as one archive (unpack with `tar xzf outputs.tgz`).
set -u
dir=${1:?usage: pack_outputs.sh DIR}
[ -d "$dir" ] || exit 0
files=$(cd "$dir" && find . -type f ! -name outputs.tgz ! -name summary.txt | sort)
[ -n "$files" ] || exit 0
(cd "$dir" && echo "$files" | tar czf outputs.tgz -T - && echo "$files" | xargs rm -f &&
  find . -mindepth 1 -type d -empty -delete)
