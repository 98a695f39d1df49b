# shellcheck shell=sh
# The traced run on emu-device's NVMe controller in the full guest
# (harness/src/full_guest/nvme_traced.rs): the function nvme_traced, called
# by full-guest-check.sh once the ivshmem steps have removed the module
# (DKMS still has it installed). It uses that script's step, fail, run,
# wait_for, $GUEST_LOG and $PKG_NAME, and full-guest-nvme-tools.sh's
# nvme_live and fio_across. Set by the host:
#   SERIES_NVME    the patch series' nvme.ko, in the share
#   TRACED_DIR     its answers' folder in the share
#   TRACED_DONE, TRACED_OK  the rendezvous files with the host
#   TRACE_NVME     the trace file's name in TRACED_DIR
#   PRECONDITION_MIB  MiB written sequentially (1 MiB writes) before the
#                  trace starts, so that the traced job runs GC
#   TRACED_JOB_MIB, TRACED_RESET_AFTER, TRACED_FATAL_AFTER  the traced
#                  verifying job's size (from offset 0) and after how many
#                  of its writes nvme reset and the fatal status come
nvme_traced() {
    out="$SHARE/$TRACED_DIR"
    mkdir -p "$out"
    step "nvme traced: rmmod nvme (stock), insmod the series' nvme.ko"
    run rmmod nvme
    run insmod "$SHARE/$SERIES_NVME"
    wait_for 120 "no /dev/nvme0n1 from the series' nvme.ko" test -b /dev/nvme0n1
    wait_for 60 "nvme0 is not live under the series' nvme.ko" nvme_live
    [ -e /sys/module/nvme/parameters/hmb_trace_kb ] || fail "the nvme.ko loaded is not the series' (no hmb_trace_kb)"
    echo "hmb_trace_kb=$(cat /sys/module/nvme/parameters/hmb_trace_kb)" > "$out/guest.txt"

    step "nvme traced: precondition, $PRECONDITION_MIB MiB of sequential 1 MiB writes (untraced)"
    run fio --name=precondition --filename=/dev/nvme0n1 --ioengine=libaio --direct=1 --rw=write --bs=1M \
        --iodepth=4 --size="${PRECONDITION_MIB}M"

    step "nvme traced: modprobe $PKG_NAME over the series' driver, the daemon on the controller's slice"
    run modprobe "$PKG_NAME"
    run udevadm settle --timeout=30
    # The node whose parent is the controller's PCI function (the ivshmem
    # device has one too).
    pci=$(readlink -f /sys/class/nvme/nvme0/device)
    # Called through wait_for.
    # shellcheck disable=SC2317
    slice_node() {
        for d in /sys/class/nvme-hmb-trace/nvme-hmb-trace*; do
            [ "$(readlink -f "$d/device")" = "$pci" ] && [ -c "/dev/${d##*/}" ] && { echo "/dev/${d##*/}"; return 0; }
        done
        return 1
    }
    wait_for 30 "no trace node of the controller's slice" slice_node
    tnode=$(slice_node)
    echo "node=$tnode" >> "$out/guest.txt"
    /usr/local/bin/hmb-trace-daemon --device "$tnode" --output /tmp/nvme-trace.bin --stats --follow \
        >> "$GUEST_LOG" 2>&1 &
    tdaemon=$!
    # Called through wait_for.
    # shellcheck disable=SC2317
    tdaemon_ready() { [ "$(stat -c %s /tmp/nvme-trace.bin 2>/dev/null || echo 0)" -ge 64 ]; }
    wait_for 60 "the daemon on $tnode wrote no trace header" tdaemon_ready

    step "nvme traced: fio randwrite + crc32c verify ($TRACED_JOB_MIB MiB) through nvme reset and a fatal status"
    fio_across traced 0 "$TRACED_JOB_MIB" 0 "reset:$TRACED_RESET_AFTER" "fatal-traced:$TRACED_FATAL_AFTER"

    # The module samples the ring every poll_ms (10 ms): give the daemon
    # time to take the last batch.
    sleep 1
    kill -0 "$tdaemon" 2>/dev/null || fail "the daemon on $tnode died"
    kill -TERM "$tdaemon"
    wait "$tdaemon"
    rc=$?
    [ "$rc" -eq 0 ] || fail "the daemon on $tnode exited $rc; want 0"
    run cp /tmp/nvme-trace.bin "$out/$TRACE_NVME"
    dmesg | grep nvme > "$out/dmesg-nvme.txt"
    step "nvme traced: trace $(stat -c %s /tmp/nvme-trace.bin) bytes"
    touch "$SHARE/$TRACED_DONE"
    wait_for 300 "the host did not answer $TRACED_DONE" test -e "$SHARE/$TRACED_OK"
    run modprobe -r "$PKG_NAME"
    step "nvme traced: the host checked the trace against the controller's journal and counters"
}
