# lazyd-shim's waiting program: what a handed-off shim becomes while the daemon serves its client.
#
# lazyd_shim/handoff.py runs it with dash (else /bin/sh), same pid and descriptors as the shim, so
# the client still watches the process it started and holds its pipes through it. The daemon's
# socket is descriptor 9. Arguments: flock(1)'s path ("" where there is none), the resume slot's
# lock file ("" for none), then the command that takes the session back: the installed shim with
# --resume-handoff=FD (lazyd_shim/recover.py).
#
# - A line on the socket: the client left; exit 0.
# - EOF: the daemon is gone, or let the session go. Take a resume slot (an exclusive flock(1) on
#   the lock file, descriptor 8, named to the shim in LAZYD_RESUME_SLOT: lazyd_shim/slots.py),
#   waiting at most 120 s for one, then exec the shim's recovery.
# - SIGTERM and SIGHUP end it with 0, SIGINT with 130 (the shim's own rules), also while it
#   queues for a slot: a trapped signal ends `wait`, and the trap ends what it waited for.

trap 'kill $! 2>/dev/null; exit 0' TERM HUP
trap 'kill $! 2>/dev/null; exit 130' INT

read -r _ <&9 && exit 0
exec 9<&-

flock=$1 lock=$2
shift 2
if [ -n "$flock" ] && [ -n "$lock" ] && [ -d "${lock%/*}" ] && command exec 8>>"$lock"; then
    if "$flock" -w 120 8 & wait $!; then
        export LAZYD_RESUME_SLOT=8
    else
        exec 8>&-
    fi
fi

if ! [ -x "$1" ]; then
    echo "lazyd-shim: $1 is no longer installed; the session ends" >&2
    exit 1
fi
exec "$@"
