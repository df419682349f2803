# lazyd-shim's waiting program: what a handed-off shim becomes while the daemon serves its client
# (docs/protocol.md, "Waiting"). Descriptor 9 is the daemon's socket. Arguments: flock(1)'s path
# and the resume slot's lock file ("" for none: shim/slots.py), then the command that takes the
# session back (shim/recover.py). A trapped signal ends `wait`, and the trap ends what it waited for.

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
