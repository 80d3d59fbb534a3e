# shellcheck shell=bash
# atftp's test/test.sh for bench/peers.sh: its test functions, unchanged, run against
# bootpool's TFTP instead of an atftpd it starts; this replaces test.sh's main.
#   bash atftp-main.sh TEST.SH     (HOST and PORT name bootpool's TFTP, as test.sh reads them)
# From bench/peers.sh:
#   PEERS_TFTP_ROOT  bootpool's TFTP root on the server's side (server.loaders): test.sh's
#                    files are made there, as test.sh makes them in its server's root
#   PEERS_CHECKS     where each check goes: label TAB passed|failed|n/a TAB reason

# test.sh's definitions and settings: everything above its main.
eval "$(sed '/^############### main/,$d' "$1")"
# test.sh runs with -e (and its test_options turns it back on): a put that bootpool refuses
# would end it, and so would any helper here that returned non-zero; each returns 0.
set +e
set +u
rm -rf "$TDIR"
TDIR="$PEERS_TFTP_ROOT"

start_server() { :; }
stop_server() { :; }

GROUP=""
LABEL=""

record() {
    printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$PEERS_CHECKS"
    return 0
}

# Each check prints its prompt without a newline and its verdict on a line of its own
# (OK, ERROR..., → OK, Errors occurred...): the prompt is the label, the verdict recorded.
echo() {
    builtin echo "$@"
    local newline=1 raw text
    while [ $# -gt 0 ]; do
        case "$1" in
            -[neE]*) case "$1" in *n*) newline="" ;; esac; shift ;;
            *) break ;;
        esac
    done
    raw=$(printf '%b' "$*" | tr '\t\n' '  ')
    case "$raw" in
        *"→ OK"*)
            if [ -n "$newline" ]; then verdict passed; fi
            return 0 ;;
    esac
    text=$(sed 's/ *\.\.\. *$//; s/^ *//; s/ *$//; s/  */ /g' <<<"$raw")
    case "$text" in
        ""|[0-9]*" blocks, "*) return 0 ;;  # check_trace's counts, before check_file's verdict
        "====="*)
            GROUP=$(sed 's/^===== *//; s/ *\.\.\.$//; s/:$//' <<<"$text")
            if [ -z "$newline" ]; then LABEL="$GROUP"; fi
            return 0 ;;
    esac
    if [ -z "$newline" ]; then
        if [ "$text" != "." ]; then LABEL="$GROUP: $text"; fi
        return 0
    fi
    case "$text" in
        OK) verdict passed ;;
        ERROR*|"Errors occurred"*) verdict failed "$text" ;;
    esac
    return 0
}

verdict() {
    [ -n "$LABEL" ] || return 0
    case "$LABEL" in
        *"put:"*)
            record "$LABEL" n/a "WRQ (put): bootpool's TFTP is read-only (it answers ERROR 2, read-only server)" ;;
        *"non-existing file name"*)
            if [ "$1" = passed ]; then
                record "$LABEL" passed
            elif grep -qi "error received from server <file not found>" "$OUTPUTFILE"; then
                record "$LABEL" n/a "greps atftpd's own message text, <File not found>; bootpool answers with the same TFTP error (1) and its own text, <file not found>"
            else
                record "$LABEL" failed "no file-not-found error"
            fi ;;
        *"invalid blksize"*|*"timeout option limit"*)
            if [ "$1" = passed ]; then
                record "$LABEL" passed
            elif grep -qE "received ([0-9]+\. )?DATA" "$OUTPUTFILE" && ! grep -qi "error received" "$OUTPUTFILE"; then
                record "$LABEL" n/a "expects ERROR 8 for an out-of-range option; bootpool leaves it out of its OACK or caps it and sends (RFC 2347 allows either; docs/clients.md, 'Options out of range')"
            else
                record "$LABEL" failed "neither ERROR 8 nor a transfer with the option left out"
            fi ;;
        *) record "$LABEL" "$1" "${2:-}" ;;
    esac
    LABEL=""
    return 0
}

builtin echo -n "Generate test files: "
touch "$TDIR/0.bin"
TFILE=(511 512 2K 50K 128K 1M 10M 100M)
for FILE in "${TFILE[@]}"; do
    dd if=/dev/urandom of="$TDIR/${FILE}.bin" bs="${FILE}" count=1 2>/dev/null
done
builtin echo "done"

test_get_put
test_options
test_highload

record "Test PCRE substitution" n/a "atftpd's own file name rewriting (--pcre), a feature of that server"
record "Test timeout" n/a "reads atftpd's own log of its retries (and needs an atftp built with --delay)"
record "Test return code after timeout when server is unreachable" n/a "the atftp client alone: no server is asked"
record "Test disk-out-of-space" n/a "uploads to a full disk: bootpool's TFTP takes no uploads"
record "Test multicast option" n/a "RFC 2090 multicast TFTP (and ssh to other hosts): bootpool serves unicast TFTP"
record "Test mtftp" n/a "PXE MTFTP (and ssh to other hosts): bootpool serves unicast TFTP"
