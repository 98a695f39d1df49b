# shellcheck shell=sh
# The conformance sessions on emu-device's NVMe controller
# (harness/src/nvme_session.rs): after ivshmem-prelude.sh and nvme-lib.sh.
# Set by the host before it:
#   IO_BLOCK, IO_BLOCKS  namespace offset and size (4 KiB blocks) of the I/O loop

# load_nvme: the stock nvme-core, the series' nvme.ko, the namespace.
load_nvme() {
    step load_nvme
    insmod_stock
    insmod "$SHARE/mods/nvme.ko" || fail "insmod nvme.ko (the series' driver)"
    wait_namespace
    wait_live
    [ -e /sys/module/nvme/parameters/hmb_trace_kb ] || fail "nvme.ko is not the series' (no hmb_trace_kb)"
}

# io_start: write and read back a pattern in a loop, in the background,
# until io_stop; each round is a few NVMe commands on the I/O queues.
io_start() {
    step io_start
    dd if=/dev/urandom of=/tmp/pattern bs=4096 count="$IO_BLOCKS" 2>/dev/null || fail pattern
    rm -f /tmp/io-stop /tmp/io-bad /tmp/io-rounds
    (
        n=0
        while [ ! -e /tmp/io-stop ]; do
            dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek="$IO_BLOCK" oflag=direct 2>/dev/null || echo "write $n" >> /tmp/io-bad
            dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip="$IO_BLOCK" count="$IO_BLOCKS" iflag=direct 2>/dev/null || echo "read $n" >> /tmp/io-bad
            cmp -s /tmp/pattern /tmp/back || echo "differs $n" >> /tmp/io-bad
            n=$((n + 1)); echo $n > /tmp/io-rounds
        done
    ) &
    io=$!
}

# io_stop: end the loop; note its rounds and failed ones.
io_stop() {
    touch /tmp/io-stop
    wait "$io"
    note io_rounds "$(cat /tmp/io-rounds 2>/dev/null || echo 0)"
    # No file is no failure (the shell reports a missing `<` file itself,
    # before a `2>/dev/null` on the command could apply).
    if [ -e /tmp/io-bad ]; then
        note io_failures "$(wc -l < /tmp/io-bad)"
    else
        note io_failures 0
    fi
}
