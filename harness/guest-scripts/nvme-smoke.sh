# shellcheck shell=sh
# `cargo xtask nvme-smoke` (xtask/src/nvme_smoke.rs): the series' nvme.ko
# on QEMU's own NVMe device under the stock nvme-core; after nvme-lib.sh.
# Set by the host:
#   SHARE, MODS, NVME_CORE_PARAMS   as nvme-lib.sh says
#   PATCHED_NVME   the series' nvme.ko in the share
#   TRACE_MODULE   nvme-hmb-trace.ko's guest path
#   DMESG          the kernel log's file in the share
set -e
fail() { echo "HMBT-NVME FAIL $*"; dmesg > "$SHARE/$DMESG"; exit 1; }
insmod_stock
# A stock nvme loaded at boot makes way for the patched one.
if [ -d /sys/module/nvme ]; then rmmod nvme; fi
insmod "$SHARE/$PATCHED_NVME" || fail insmod patched nvme.ko
kb=$(cat /sys/module/nvme/parameters/hmb_trace_kb) || fail no hmb_trace_kb parameter
echo "HMBT-NVME hmb_trace_kb=$kb"
wait_namespace
dd if=/dev/urandom of=/tmp/out bs=4096 count=64 2>/dev/null
dd if=/tmp/out of=/dev/nvme0n1 bs=4096 count=64 conv=fsync 2>/dev/null || fail write
echo 3 > /proc/sys/vm/drop_caches
dd if=/dev/nvme0n1 of=/tmp/back bs=4096 count=64 2>/dev/null || fail read
cmp /tmp/out /tmp/back || fail data read back differs
echo "HMBT-NVME data verified"
insmod "$TRACE_MODULE" || fail insmod trace module
grep -q ' nvme_hmb_trace_register' /proc/kallsyms || fail the patched driver exports no client API
if rmmod nvme 2>/dev/null; then fail rmmod nvme succeeded while the trace module holds it; fi
rmmod nvme_hmb_trace || fail rmmod trace module
rmmod nvme || fail rmmod nvme after the trace module
echo "HMBT-NVME unloaded in order"
dmesg > "$SHARE/$DMESG"
