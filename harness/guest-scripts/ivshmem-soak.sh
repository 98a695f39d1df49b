# shellcheck shell=sh
# `cargo xtask soak --device ivshmem` (harness/src/soak_ivshmem.rs): the
# daemon follows the ring across resets (new epochs) until the host says
# stop; after ivshmem-prelude.sh. Set by the host:
#   OUTPUT         where trace.bin grows: `disk`, the output disk mounted
#                  over /tmp and unmounted at the end (which flushes it; the
#                  host reads it back); `tmpfs`, the guest's RAM, copied to
#                  the share at the end with 1 MiB writes (`collect`'s cp
#                  moved it at ~1.5 MB/s over 9p under TCG)
#   OUTPUT_DEVICE  the output disk's guest device (OUTPUT=disk)
#   RING_SIZE      the module's ring_size
if [ "$OUTPUT" = disk ]; then
    load_on_demand_modules
    mount -t ext4 "$OUTPUT_DEVICE" /tmp || fail "mounting the output disk"
fi
step output "$(grep ' /tmp ' /proc/mounts | tail -n 1 | cut -d ' ' -f 1-3), $(df -k | grep ' /tmp$' | tail -n 1)"
load_module ring_size="$RING_SIZE"
start_daemon --follow
wait_stop
stop_daemon
if [ "$OUTPUT" = disk ]; then
    step unmount
    umount /tmp || fail "unmounting the output disk"
else
    step copy
    dd if="/tmp/$TRACE" of="$SHARE/$TRACE" bs=1048576 2>/dev/null || fail "copying trace.bin"
    rm -f "/tmp/$TRACE"
fi
collect
exit 0
