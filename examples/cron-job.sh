#!/usr/bin/env bash
# Run a command under a schedlock lock with nothing but bash and curl: acquire -> run -> release.
#
#   usage: cron-job.sh LOCK_NAME LOCK_AT_MOST_FOR -- COMMAND [ARGS...]
#
#   # crontab: every node runs it at 03:00, exactly one of them does the work
#   0 3 * * *  SCHEDLOCK_URL=http://schedlock:8000 /opt/jobs/cron-job.sh nightly-report 14m -- /opt/jobs/report.sh
#
# If another node holds the lock, it exits 0 at once and prints nothing (cron sends no mail). Otherwise it runs
# COMMAND with SCHEDLOCK_LOCK_NAME and SCHEDLOCK_FENCING_TOKEN set, releases the lock when COMMAND ends (also when
# it fails), and exits with COMMAND's exit code. 69: the lock service is unavailable, COMMAND did not run.
# 64: the service rejected the request (bad name or duration, missing or wrong SCHEDLOCK_TOKEN).
#
# The name goes into the URL percent-encoded, so any name reaches the service, which answers 422 for an invalid one
# (exit 64), never taken for "unreachable". The lease token and SCHEDLOCK_TOKEN never appear on a command line
# (where `ps` would show them): curl reads them from stdin and a file descriptor.
# For keep-alive, signal forwarding and more, use `schedlock run` from the Python client instead.
set -uo pipefail

if [ $# -lt 4 ] || [ "$3" != "--" ]; then
  echo "usage: $0 LOCK_NAME LOCK_AT_MOST_FOR -- COMMAND [ARGS...]" >&2
  exit 2
fi
name=$1 at_most=$2
shift 3
url=${SCHEDLOCK_URL:-http://127.0.0.1:8000}
holder="$(hostname) cron pid $$"

urlencode() {  # every byte but RFC 3986's unreserved characters as %XX
  local LC_ALL=C value=$1 encoded='' c i
  for ((i = 0; i < ${#value}; i++)); do
    c=${value:i:1}
    case $c in
      [a-zA-Z0-9.~_-]) encoded+=$c ;;
      *) printf -v c '%%%02X' "'$c"; encoded+=$c ;;
    esac
  done
  printf '%s' "$encoded"
}
path_name=$(urlencode "$name")

# call ACTION JSON: POST to the lock's ACTION endpoint; sets $status and $body. Fails only when unreachable.
call() {
  local out
  out=$(curl --silent --show-error --max-time 10 -X POST "$url/v1/locks/$path_name/$1" \
    -H 'content-type: application/json' -H @<(auth_header) \
    --data-binary @- --write-out '\n%{http_code}' <<<"$2") || return 1
  status=${out##*$'\n'}
  body=${out%$'\n'*}
}

auth_header() {
  if [ -n "${SCHEDLOCK_TOKEN:-}" ]; then printf 'Authorization: Bearer %s\n' "$SCHEDLOCK_TOKEN"; fi
}

field() {  # field NAME: a string or number field of $body (the API's JSON is flat where we read it)
  sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$body"
}

if ! call acquire "{\"lock_at_most_for\": \"$at_most\", \"holder\": \"$holder\"}"; then
  echo "$0: lock service unreachable at $url; $name not run" >&2
  exit 69
fi
case $status in
  200) ;;
  409)
    # Only the code lock_held means "someone else runs it": skip quietly. Anything else is an error.
    if [ "$(field code)" = lock_held ]; then exit 0; fi
    echo "$0: acquire $name: unexpected answer $status: $body" >&2
    exit 69
    ;;
  4??)
    echo "$0: acquire $name rejected ($status): $body" >&2
    exit 64
    ;;
  *)
    echo "$0: lock service unavailable ($status); $name not run: $body" >&2
    exit 69
    ;;
esac
token=$(field token)
fencing_token=$(field fencing_token)

release() {
  # Release is idempotent on the server, so retrying after a lost answer is safe.
  for pause in 0.2 1 2 ''; do
    if call release "{\"token\": \"$token\"}" && [ "$status" = 200 ]; then return 0; fi
    [ -n "$pause" ] && sleep "$pause"
  done
  echo "$0: could not release $name; it frees itself after $at_most" >&2
}
trap release EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

SCHEDLOCK_LOCK_NAME=$name SCHEDLOCK_FENCING_TOKEN=$fencing_token "$@"
exit $?
