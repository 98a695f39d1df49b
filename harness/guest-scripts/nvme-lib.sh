# shellcheck shell=sh
# Functions of every guest on emu-device's NVMe controller (the boot,
# the soak, the conformance sessions). Each script defines `fail` itself.
# Set by the host before it:
#   SHARE             the 9p share
#   RESULTS           the KEY=VALUE notes file in the share
#   MODS              the stock modules nvme.ko needs, file names in load order
#   NVME_CORE_PARAMS  nvme_core's module parameters (may be empty)
#   TRACE_MODULE, TRACE, DAEMON_STDERR  for trace_follow and trace_stop: the
#                     module's guest path, trace.bin's and the daemon's
#                     stderr's names in the share

# note KEY VALUE: a result for the host.
note() { echo "$1=$2" >> "$SHARE/$RESULTS"; echo "HMBT-NVME $1=$2"; }

# Guest uptime in centiseconds.
now_cs() { read -r up _ < /proc/uptime; echo "${up%.*}${up#*.}"; }

# checkpoint NAME: tell the host, wait (60 s at most) for its NAME.ok.
checkpoint() {
    touch "$SHARE/$1"
    i=0
    while [ ! -e "$SHARE/$1.ok" ]; do
        i=$((i + 1)); [ $i -lt 3000 ] || fail "no answer from the host at checkpoint $1"
        sleep 0.02
    done
}

wait_live() {
    i=0
    while [ "$(cat /sys/class/nvme/nvme0/state 2>/dev/null)" != live ]; do
        i=$((i + 1)); [ $i -lt 600 ] || fail "nvme0 not live after 60 s ($(cat /sys/class/nvme/nvme0/state 2>&1))"
        sleep 0.1
    done
}

# insmod_stock: the stock modules of $MODS not built in or loaded yet.
insmod_stock() {
    for m in $MODS; do
        name=${m%.ko}
        params=
        [ "$name" = nvme_core ] && params=$NVME_CORE_PARAMS
        # $params unquoted: zero or more PARAM=VALUE words.
        # shellcheck disable=SC2086
        [ -d "/sys/module/$name" ] || insmod "$SHARE/mods/$m" $params || fail insmod "$m"
    done
}

# wait_namespace: until /dev/nvme0n1 appears (120 s at most).
wait_namespace() {
    i=0
    while [ ! -b /dev/nvme0n1 ]; do
        i=$((i + 1)); [ $i -lt 1200 ] || fail "no /dev/nvme0n1 after 120 s"
        sleep 0.05
    done
}

# trace_follow: nvme-hmb-trace.ko on the series' nvme.ko, and the daemon
# in the background with --follow (a controller reset starts a new epoch).
trace_follow() {
    insmod "$TRACE_MODULE" || fail "insmod nvme-hmb-trace.ko"
    i=0
    while [ ! -c /dev/nvme-hmb-trace0 ]; do
        i=$((i + 1)); [ $i -lt 100 ] || fail "no /dev/nvme-hmb-trace0"
        sleep 0.1
    done
    /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output "/tmp/$TRACE" --stats --follow 2>>"$SHARE/$DAEMON_STDERR" &
    daemon=$!
}

# daemon_attached PID: until the daemon PID has mapped the trace ring
# (/proc/PID/maps names the device), 30 s at most; it must not exit first.
daemon_attached() {
    i=0
    until grep -q /dev/nvme-hmb-trace "/proc/$1/maps" 2>/dev/null; do
        kill -0 "$1" 2>/dev/null || fail "the daemon exited before it mapped the ring (see the daemon's stderr)"
        i=$((i + 1)); [ $i -lt 1500 ] || fail "the daemon did not map the ring within 30 s"
        sleep 0.02
    done
}

# trace_caught_up: until the daemon has taken every record written so far:
# the ring's head (read from its header) equals the tail the daemon last
# published, after its batch was written (30 s at most). A device that
# can no longer be read (gone, dead) ends the wait: the daemon's exit code
# and the host's journal check then judge what trace.bin holds.
trace_caught_up() {
    t=/sys/class/nvme-hmb-trace/nvme-hmb-trace0
    i=0
    while head=$(cat "$t/head" 2>/dev/null) && tail=$(cat "$t/tail" 2>/dev/null) && [ "$head" != "$tail" ]; do
        i=$((i + 1)); [ $i -lt 1500 ] || fail "the daemon did not catch up with the ring within 30 s (head $head, tail $tail)"
        sleep 0.02
    done
}

# trace_stop: the daemon's last batch, its exit code, trace.bin to the host.
trace_stop() {
    # Nothing reaches the controller now: the module samples the ring
    # every poll_ms (10 ms); wait until the daemon has taken the last
    # batch (before: a fixed second).
    trace_caught_up
    kill -0 "$daemon" 2>/dev/null || fail "the daemon died (see daemon.stderr)"
    kill -TERM "$daemon"
    wait "$daemon"
    note daemon_rc $?
    # In 9p's msize (256 KiB) pieces: busybox cp took 0.9 s for 0.5 MB here.
    dd if="/tmp/$TRACE" of="$SHARE/$TRACE" bs=256k 2>/dev/null || fail "no trace.bin"
}
