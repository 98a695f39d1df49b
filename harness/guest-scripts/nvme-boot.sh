# shellcheck shell=sh
# `cargo xtask boot --device nvme` (harness/src/nvme_guest.rs): a nvme
# driver on emu-device's controller, checked from the guest side; after
# nvme-lib.sh. Results as KEY=VALUE lines in $RESULTS. Set by the host:
#   SHARE, RESULTS, MODS, NVME_CORE_PARAMS   as nvme-lib.sh says
#   DMESG, PATTERN, TRACE, DAEMON_STDERR     file names in the share
#   PROBED, RESET, FATAL, RECOVERED, DONE    checkpoint names
#   TRACE_MODULE    nvme-hmb-trace.ko's guest path, empty for no trace
#   PULL_TELEMETRY  1: pull NVMe Telemetry with nvme-cli (stock driver: two
#                   snapshots and 08h; with the trace: one snapshot and 08h
#                   while the daemon still runs)
#   QD32            1: the QD32 read loop after the QD1 one
#   MODULE_CHECKS   1 (with the trace): after the done checkpoint, wake-up
#                   latency, chunk mapping, removal with a reader and the
#                   personalities (harness/src/nvme_checks.rs: --checks full)
#   TELEMETRY_1, TELEMETRY_2, TELEMETRY_CONTROLLER, TELEMETRY_READS_BETWEEN,
#   NVME_CLI, NVME_CLI_LOADER
#                   the telemetry logs' files, the reads between the first
#                   two, nvme-cli's folder in the share and its loader
#   INJECT_FATAL    1: the host fails the controller after the reset
#   PATTERN_SEEK, PATTERN_BLOCKS  where (4 KiB blocks) the pattern goes
#   IOPS_READS, QD32_PER          reads of the QD1 loop, per process at QD32
#   WAKE_ROUNDS     rounds of the poll wake-up latency measurement
#   LOCKDEP_NOTE    the result key of /proc/lockdep_stats' debug_locks
fail() { echo "HMBT-NVME FAIL $*"; dmesg > "$SHARE/$DMESG"; exit 1; }
# nvmecli ARGS...: Debian's nvme-cli with its libraries, from the share.
nvmecli() {
    "$SHARE/$NVME_CLI/$NVME_CLI_LOADER" --library-path "$SHARE/$NVME_CLI" "$SHARE/$NVME_CLI/nvme" "$@"
}

# trace_start: the series' trace slice checked, then trace_follow (the
# reset starts a second epoch), from the probe to the end.
trace_start() {
    kb=$(cat /sys/module/nvme/parameters/hmb_trace_kb 2>/dev/null) || fail "nvme.ko is not the patched one (no hmb_trace_kb)"
    note hmb_trace_kb "$kb"
    slice=$(dmesg | grep -o 'HMB trace slice: .*' | tail -n 1)
    [ -n "$slice" ] || fail "the patched driver reserved no trace slice"
    note slice "$slice"
    trace_follow
}

# trace_removal: removal with a reader, in either order: both are refused
# while the daemon has the device open (nvme is held by the trace module,
# the trace module by the open file) and the daemon keeps running; once it
# is stopped (exit 0) the trace module goes, then nvme. After the done
# checkpoint: the journal is already taken.
trace_removal() {
    # First, with no daemon: poll(2)'s wake-up latency over this device (the
    # module's timed sampler, docs/abi.md wake-ups), measured by the test
    # program around single 4 KiB reads; the records it causes come after the
    # journal, so the trace check is not affected.
    /bin/hmbtrace-test --wake-latency "$WAKE_ROUNDS" --block /dev/nvme0n1 > /tmp/wake.txt 2>&1 || { cat /tmp/wake.txt; fail "wake latency"; }
    # The line's words, a KEY=VALUE each.
    # shellcheck disable=SC2013
    for kv in $(grep wake_latency_us /tmp/wake.txt); do
        case $kv in min=*|p50=*|p90=*|p99=*|max=*) note "wake_${kv%%=*}_us" "${kv#*=}" ;; esac
    done
    # The ring view's chunks (one mapping each, docs/abi.md decision 11):
    # a mapping that is not exactly one chunk is EINVAL; then, mapped,
    # the controller unbound: the mapping keeps the last contents, the
    # slice's DMA memory is freed only after the last mapping is gone; the
    # controller bound again.
    /bin/hmbtrace-test --chunks --remove unbind > /tmp/chunks.txt 2>&1 || { cat /tmp/chunks.txt; fail "chunk mapping"; }
    note chunk_view "$(grep -o 'ring view: .*' /tmp/chunks.txt)"
    wait_namespace
    /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output /tmp/removal.bin --follow 2>>"$SHARE/$DAEMON_STDERR" &
    d2=$!
    # The refusals below need the device open: wait until the daemon has it.
    daemon_attached $d2
    if rmmod nvme 2>/dev/null; then fail "rmmod nvme succeeded while nvme-hmb-trace holds it"; fi
    if rmmod nvme_hmb_trace 2>/dev/null; then fail "rmmod nvme-hmb-trace succeeded under an open device"; fi
    kill -0 $d2 2>/dev/null || fail "the daemon died during the refused rmmods"
    kill -TERM $d2
    wait $d2
    note daemon_removal_rc $?
    rmmod nvme_hmb_trace || fail "rmmod nvme-hmb-trace after the daemon"
    rmmod nvme || fail "rmmod nvme after nvme-hmb-trace"
    [ ! -e /dev/nvme0n1 ] || fail "/dev/nvme0n1 still there after rmmod nvme"
    note removal ok
}

# telemetry_pull: stock driver, the trace through NVMe Telemetry with
# Debian's nvme-cli (no series, no module), twice, with reads between the
# two creates, then the Controller-Initiated log (a capture only if a
# failure was injected: the controller takes it at Controller Fatal Status).
telemetry_pull() {
    nvmecli telemetry-log /dev/nvme0 --output-file="$SHARE/$TELEMETRY_1" > /tmp/tel.txt 2>&1 || { cat /tmp/tel.txt; fail "nvme telemetry-log"; }
    dd if=/dev/nvme0n1 of=/dev/null bs=4096 count="$TELEMETRY_READS_BETWEEN" iflag=direct 2>/dev/null || fail "reads between the telemetry logs"
    nvmecli telemetry-log /dev/nvme0 --output-file="$SHARE/$TELEMETRY_2" > /tmp/tel.txt 2>&1 || { cat /tmp/tel.txt; fail "second nvme telemetry-log"; }
    note telemetry_reads_between "$TELEMETRY_READS_BETWEEN"
    nvmecli telemetry-log /dev/nvme0 --controller-init --output-file="$SHARE/$TELEMETRY_CONTROLLER" > /tmp/tel.txt 2>&1 || { cat /tmp/tel.txt; fail "nvme telemetry-log --controller-init"; }
}

# telemetry_traced: with the trace module and the daemon running, one
# Host-Initiated snapshot and the Controller-Initiated log (the capture the
# controller took when reset_controller froze the ring's first epoch) with
# Debian's nvme-cli; the daemon then takes the records these commands made,
# so trace.bin holds every record of both logs (harness/src/traced_telemetry.rs).
telemetry_traced() {
    t0=$(now_cs)
    nvmecli telemetry-log /dev/nvme0 --output-file="$SHARE/$TELEMETRY_1" > /tmp/tel.txt 2>&1 || { cat /tmp/tel.txt; fail "nvme telemetry-log beside the trace"; }
    nvmecli telemetry-log /dev/nvme0 --controller-init --output-file="$SHARE/$TELEMETRY_CONTROLLER" > /tmp/tel.txt 2>&1 || { cat /tmp/tel.txt; fail "nvme telemetry-log --controller-init beside the trace"; }
    note telemetry_centiseconds $(( $(now_cs) - t0 ))
}

# fatal: the host fails the controller (CSTS.CFS) before answering: the
# next command is never fetched; at the I/O timeout the driver finds CFS,
# resets and retries the read.
fatal() {
    checkpoint "$FATAL"
    t0=$(now_cs)
    rm -f /tmp/back
    dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip="$PATTERN_SEEK" count="$PATTERN_BLOCKS" iflag=direct 2>/dev/null || fail "read across the controller failure"
    cmp /tmp/pattern /tmp/back || fail "data read back across the controller failure differs"
    wait_live
    note recovered_ms $(( ($(now_cs) - t0) * 10 ))
    checkpoint "$RECOVERED"
}

# qd32: 32 busybox dd processes, one O_DIRECT read in flight each, on
# disjoint ranges (busybox has no fio).
qd32() {
    # Wait for these pids only: a plain `wait` would also wait for the daemon.
    rm -f /tmp/qd32-failed
    t0=$(now_cs)
    q=0
    pids=
    while [ $q -lt 32 ]; do
        dd if=/dev/nvme0n1 of=/dev/null bs=4096 skip=$((q * QD32_PER)) count="$QD32_PER" iflag=direct 2>/dev/null || touch /tmp/qd32-failed &
        pids="$pids $!"
        q=$((q + 1))
    done
    # $pids unquoted: one word a process.
    # shellcheck disable=SC2086
    wait $pids
    t1=$(now_cs)
    [ ! -e /tmp/qd32-failed ] || fail "read loop at QD32"
    note qd32_centiseconds $((t1 - t0))
    note qd32_reads $((32 * QD32_PER))
}

rm -f "$SHARE/$RESULTS"
insmod_stock
peer_hold
t0=$(now_cs)
insmod "$SHARE/mods/nvme.ko" || fail insmod nvme.ko
wait_namespace
t1=$(now_cs)
note probe_ms $(( (t1 - t0) * 10 ))
wait_live
pci=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
note pci "$pci"
note driver "$(basename "$(readlink /sys/class/nvme/nvme0/device/driver)")"
# Empty unless the guest's IOMMU is on (--viommu).
group=$(readlink "/sys/bus/pci/devices/$pci/iommu_group" 2>/dev/null) || group=
note iommu_group "${group##*/}"
note model "$(cat /sys/class/nvme/nvme0/model)"
[ -z "$TRACE_MODULE" ] || trace_start
hmb=$(dmesg | grep -o 'allocated .* host memory buffer.*' | tail -n 1)
[ -n "$hmb" ] || fail "no 'allocated ... host memory buffer' in the kernel log"
note hmb "$hmb"
checkpoint "$PROBED"

dd if=/dev/urandom of=/tmp/pattern bs=4096 count="$PATTERN_BLOCKS" 2>/dev/null || fail pattern
dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek="$PATTERN_SEEK" oflag=direct conv=fsync 2>/dev/null || fail write
dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip="$PATTERN_SEEK" count="$PATTERN_BLOCKS" iflag=direct 2>/dev/null || fail read
cmp /tmp/pattern /tmp/back || fail "data read back differs"
cp /tmp/pattern "$SHARE/$PATTERN"
note verified_bytes $(( PATTERN_BLOCKS * 4096 ))

# A host-initiated controller reset: synchronous (nvme_reset_ctrl_sync).
echo 1 > /sys/class/nvme/nvme0/reset_controller || fail reset_controller
wait_live
rm -f /tmp/back
dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip="$PATTERN_SEEK" count="$PATTERN_BLOCKS" iflag=direct 2>/dev/null || fail read after reset
cmp /tmp/pattern /tmp/back || fail "data read back after the reset differs"
note verified_after_reset yes
checkpoint "$RESET"
[ "$INJECT_FATAL" != 1 ] || fatal

t0=$(now_cs)
dd if=/dev/nvme0n1 of=/dev/null bs=4096 count="$IOPS_READS" iflag=direct 2>/dev/null || fail read loop
t1=$(now_cs)
note iops_centiseconds $((t1 - t0))
note iops_reads "$IOPS_READS"
[ "$QD32" != 1 ] || qd32
if [ -n "$TRACE_MODULE" ]; then
    [ "$PULL_TELEMETRY" != 1 ] || telemetry_traced
    trace_stop
elif [ "$PULL_TELEMETRY" = 1 ]; then
    telemetry_pull
fi
checkpoint "$DONE"
[ -z "$TRACE_MODULE" ] || [ "$MODULE_CHECKS" != 1 ] || { trace_removal; personas; }
# After the last load and unload: is lockdep still on? (debug_locks 1;
# empty on a kernel without lockdep; harness/src/qemu/kernel_checks.rs)
note "$LOCKDEP_NOTE" "$(sed -n 's/^ *debug_locks: *//p' /proc/lockdep_stats 2>/dev/null)"
dmesg > "$SHARE/$DMESG"
