# shellcheck shell=sh
# The prelude of every ivshmem guest script (harness/src/guest_script.rs):
# small functions a scenario body calls. Set by the host before it:
#   SHARE       the 9p share, mounted by the initramfs
#   MODULE      the guest path of nvme-hmb-trace.ko
#   TRACE, DAEMON_STDERR, STARTED, STOP, DAEMON_RC, SYSFS, DMESG
#               the names of the files the host reads or writes in the share
step() { echo "HMBT-STEP $*"; }
fail() { echo "HMBT-ERROR $*"; exit 1; }
# mark NAME / wait_file NAME: rendezvous with the host through the share.
mark() { touch "$SHARE/$1"; }
wait_file() { while [ ! -e "$SHARE/$1" ]; do sleep 0.1; done; }

# load_module [PARAM=VALUE...]: insmod and wait for the device node.
load_module() {
    step insmod "$@"
    insmod "$MODULE" "$@" || fail "insmod failed"
    i=0
    while [ ! -e /dev/nvme-hmb-trace0 ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "no /dev/nvme-hmb-trace0"
        sleep 0.1
    done
}

# module_events_on: the module's tracepoints on, then HMBT-EVENTS-ON; the
# host starts the device only after that line. Turning a tracepoint on
# patches its static key; a 7.x guest under TCG oopsed (int3 with no patch
# pending) when another CPU ran the site in the interrupt handler meanwhile.
module_events_on() {
    mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
    echo 1 > /sys/kernel/tracing/events/nvme_hmb_trace/enable ||
        fail "cannot turn the module's tracepoints on"
    echo "HMBT-EVENTS-ON"
}

# load_on_demand_modules: the image's modules not loaded at boot
# (images/guest/modules-on-demand), dependencies first.
load_on_demand_modules() {
    while read -r m; do
        insmod "$m" || fail "insmod $m failed"
    done < /etc/hmbt/on-demand-modules
}

# start_daemon [ARGS...]: run the daemon in the background, appending to trace.bin.
start_daemon() {
    step daemon "$@"
    /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output "/tmp/$TRACE" --stats "$@" 2>>"$SHARE/$DAEMON_STDERR" &
    daemon=$!
    touch "$SHARE/$STARTED"
}

# wait_stop: until the host creates the stop file or the daemon exits.
wait_stop() {
    while [ ! -e "$SHARE/$STOP" ] && kill -0 "$daemon" 2>/dev/null; do
        sleep 0.2
    done
}

# stop_daemon: SIGTERM (finish the batch, exit 0), record the exit code.
stop_daemon() {
    kill -TERM "$daemon" 2>/dev/null
    wait "$daemon"
    rc=$?
    echo $rc >> "$SHARE/$DAEMON_RC"
    step daemon-exit $rc
}

# collect: hand trace.bin, sysfs counters and the kernel log to the host.
collect() {
    step collect
    cp "/tmp/$TRACE" "$SHARE/$TRACE" 2>/dev/null
    for f in /sys/class/nvme-hmb-trace/nvme-hmb-trace0/*; do
        [ -f "$f" ] && echo "$(basename "$f") $(cat "$f" 2>/dev/null)"
    done > "$SHARE/$SYSFS"
    dmesg > "$SHARE/$DMESG"
    sync
}
