#!/usr/bin/env bash
# phase.sh NAME CMD...: runs CMD, then prints "[phase] NAME: <seconds>s (ok|failed)"
# and exits with CMD's status. make test times its phases with it.
set -uo pipefail
name=$1; shift
start=$SECONDS
"$@"
rc=$?
status=ok; [ $rc -eq 0 ] || status="failed ($rc)"
printf '[phase] %s: %ds, %s\n' "$name" "$((SECONDS - start))" "$status" >&2
exit $rc
