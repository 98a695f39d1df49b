# shellcheck shell=sh
# `cargo xtask bench --nvme` (harness/src/full_guest/nvme_bench.rs) in the
# full guest: find both controllers by model, run every fio job on each,
# REPS times, alternating which goes first; fio's JSON into the share.
# Set by the host:
#   SHARE      the 9p share
#   JOBS       one job a line: NAME|FIO ARGUMENTS
#   REPS       repetitions of every job on each controller
#   RUNTIME_S  seconds per fio job (after one second of ramp)
echo "HMBT-STEP PID 1 is $(cat /proc/1/comm): nvme bench"
fail() { echo "HMBT-ERROR $*"; dmesg > "$SHARE/dmesg.txt"; echo "HMBT-RESULT rc=1"; exit 1; }
ours=; qemu=; i=0
while [ $i -lt 600 ]; do
    for c in /sys/class/nvme/nvme*; do
        n=$(basename "$c")
        [ -b "/dev/${n}n1" ] || continue
        case "$(cat "$c/model")" in QEMU*) qemu=/dev/${n}n1 ;; *) ours=/dev/${n}n1 ;; esac
    done
    [ -n "$ours" ] && [ -n "$qemu" ] && break
    sleep 0.2; i=$((i + 1))
done
if [ -z "$ours" ] || [ -z "$qemu" ]; then
    fail "want two NVMe namespaces, ours '$ours' and QEMU's '$qemu'"
fi
echo "HMBT-STEP ours $ours, QEMU's $qemu"
# run_job NAME ARGS: on both controllers, the first one alternating by rep.
run_job() {
    if [ $((rep % 2)) -eq 1 ]; then order="ours qemu"; else order="qemu ours"; fi
    for who in $order; do
        if [ "$who" = ours ]; then dev=$ours; else dev=$qemu; fi
        # $2 unquoted: fio's arguments, a word each.
        # shellcheck disable=SC2086
        fio --name="$1" --filename="$dev" --ioengine=io_uring --direct=1 --size=64M \
            --time_based --runtime="$RUNTIME_S" --ramp_time=1 --output-format=json \
            --output="$SHARE/fio-$1-$who-$rep.json" $2 < /dev/null > /dev/null 2>>"$SHARE/fio.stderr" \
            || fail "fio $1 on $who ($dev)"
    done
}
rep=1
while [ $rep -le "$REPS" ]; do
    # A redirected loop, not a pipe: fail must end the script, not a subshell.
    while IFS='|' read -r name args; do
        [ -n "$name" ] && run_job "$name" "$args"
    done <<JOBS_END
$JOBS
JOBS_END
    echo "HMBT-STEP rep $rep done"
    rep=$((rep + 1))
done
echo "HMBT-RESULT rc=0"
