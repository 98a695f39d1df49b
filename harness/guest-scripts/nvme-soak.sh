# shellcheck shell=sh
# `cargo xtask soak --device nvme` (harness/src/soak_nvme.rs): the series'
# nvme.ko, the trace module and the daemon, a write/read-back loop until
# the host says stop; after nvme-lib.sh. Set by the host:
#   SHARE, RESULTS, MODS, NVME_CORE_PARAMS   as nvme-lib.sh says
#   DMESG, TRACE, DAEMON_STDERR   file names in the share
#   RUNNING, STOP, DONE           rendezvous files in the share
#   TRACE_MODULE                  nvme-hmb-trace.ko's guest path
#   ROUND_BLOCKS, SLOTS           4 KiB blocks of an I/O round; rounds cycle
#                                 over SLOTS places of the namespace
fail() { echo "HMBT-NVME FAIL $*"; dmesg > "$SHARE/$DMESG"; exit 1; }
rm -f "$SHARE/$RESULTS"
insmod_stock
insmod "$SHARE/mods/nvme.ko" || fail insmod nvme.ko
wait_namespace
kb=$(cat /sys/module/nvme/parameters/hmb_trace_kb 2>/dev/null) || fail "nvme.ko is not the patched one"
note hmb_trace_kb "$kb"
trace_follow
dd if=/dev/urandom of=/tmp/pattern bs=4096 count="$ROUND_BLOCKS" 2>/dev/null || fail pattern
# The I/O loop: write a round, read it back, compare; failures are counted
# (a command caught by a controller failure is retried by the driver, so
# none is expected).
(
    n=0; bad=0
    while [ ! -e /tmp/stop-io ]; do
        seek=$(( (n % SLOTS) * ROUND_BLOCKS ))
        if dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek=$seek oflag=direct 2>/dev/null \
            && dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip=$seek count="$ROUND_BLOCKS" iflag=direct 2>/dev/null \
            && cmp -s /tmp/pattern /tmp/back; then :; else bad=$((bad + 1)); fi
        n=$((n + 1))
        echo "$n $bad" > /tmp/io-count
    done
) &
io=$!
touch "$SHARE/$RUNNING"
while [ ! -e "$SHARE/$STOP" ]; do sleep 0.5; done
touch /tmp/stop-io
wait $io
read -r rounds failed < /tmp/io-count
note io_rounds "$rounds"
note io_failed "$failed"
note driver_state "$(cat /sys/class/nvme/nvme0/state)"
trace_stop
dmesg > "$SHARE/$DMESG"
touch "$SHARE/$DONE"
while [ ! -e "$SHARE/$DONE.ok" ]; do sleep 0.1; done
