# shellcheck shell=sh disable=SC2034  # the names are the ones test_*.sh read
# libnfs's tests/functions.sh for bench/peers.sh: the same names, pointed at bootpool's
# export instead of one made with exportfs, and each check recorded instead of the first
# failure ending the script. Sourced by each test_*.sh (POSIX sh).
#
# From bench/peers.sh:
#   PEERS_TESTDIR  the export's folder on the server's side (the scripts make their files there)
#   PEERS_URL      its nfs:// URL
#   PEERS_CHECKS   where each check goes: label TAB passed|failed|n/a TAB reason
#   PEERS_WROTE    the stubs of the programs that would change the export name themselves here
#   PEERS_WOK      the access stubs mark an access(W_OK) question here

TESTDIR="${PEERS_TESTDIR}"
TESTSHARE="${PEERS_URL}"
TESTURL="${PEERS_URL}"

# Which version of NFS to test for (bootpool serves NFSv3).
VERS=${VERSION:-3}

# The scripts compare with bash's $UID and $GID, unset in sh.
UID=$(id -u)
GID=$(id -g)

# Made for a user whose umask is 002 (test_0201 greps a touched file's mode for 664).
umask 002

start_share() {
    # The export is bootpool's and stays; its contents are the script's.
    find "${TESTDIR}" -mindepth 1 -delete 2>/dev/null
    : >"${PEERS_WROTE}"
    : >"${PEERS_WOK}"
    CHECK=""
    CHECK_FAILED=""
}

stop_share() {
    find "${TESTDIR}" -mindepth 1 -delete 2>/dev/null
}

# The label of the check under way is what the script echoes with -n before it, ending in
# "... " (an echo -n into a file is a file's contents).
echo() {
    if [ "$1" = "-n" ] && [ $# -eq 2 ]; then
        case "$2" in *"... ") CHECK="$2" ;; esac
    fi
    command echo "$@"
}

success() {
    label=$(printf '%s' "${CHECK}" | sed 's/ *\.\.\. *$//')
    if [ -s "${PEERS_WROTE}" ]; then
        progs=$(sort -u "${PEERS_WROTE}" | tr '\n' ' ' | sed 's/ $//')
        printf '%s\tn/a\t%s\n' "$label" "changes the export (${progs}), or reads what the script changed: bootpool's NFS roots are read-only" >>"${PEERS_CHECKS}"
        command echo "[N/A]"
    elif [ -s "${PEERS_WOK}" ]; then
        printf '%s\tn/a\t%s\n' "$label" "access(W_OK): a read-only export grants no write access (knfsd's ro exports answer the same)" >>"${PEERS_CHECKS}"
        command echo "[N/A]"
    elif [ -n "${CHECK_FAILED}" ]; then
        printf '%s\tfailed\t\n' "$label" >>"${PEERS_CHECKS}"
        command echo "[FAILED]"
    else
        printf '%s\tpassed\t\n' "$label" >>"${PEERS_CHECKS}"
        command echo "[OK]"
    fi
    : >"${PEERS_WOK}"
    CHECK_FAILED=""
}

# libnfs's own failure() exits; this one marks the check and lets the script go on, so each
# later check is counted too.
failure() {
    CHECK_FAILED=1
}
