#!/usr/bin/env bash
# phase.sh NAME CMD...: runs CMD, then prints
# "[phase] NAME: <seconds>s, <cpu> CPU-s, (ok|failed)" and exits with CMD's
# status. make test times its phases with it. The CPU seconds (user + sys of
# CMD and everything it waited for) say what a phase costs whatever else the
# machine runs; the wall seconds, on a shared machine, do not.
set -uo pipefail
name=$1; shift
start=$SECONDS
"$@"
rc=$?
# The second line of `times` is the children's user and system time, e.g.
# "12m3.456s 1m0.500s".
# `times` runs in this shell (not in a pipeline's subshell, which has its own
# children), its output read back from a file.
tf=$(mktemp); times >"$tf"
cpu=$(sed -n 2p "$tf" | awk '{
  t = 0
  for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] }
  printf "%d", t
}'); rm -f "$tf"
status=ok; [ $rc -eq 0 ] || status="failed ($rc)"
printf '[phase] %s: %ds, %s CPU-s, %s\n' "$name" "$((SECONDS - start))" "$cpu" "$status" >&2
exit $rc
