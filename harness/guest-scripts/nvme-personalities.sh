# shellcheck shell=sh
# Issue 26: the drivers against the controller's other personalities, one
# load each (harness/src/nvme_personalities.rs), after the trace checks with
# nvme unloaded. At each checkpoint the host audits the load before and
# switches the controller (no driver runs it). Uses nvme-lib.sh's
# checkpoint, wait_live and note, and the script's fail.
# Set by the host before it:
#   TRACE_MODULE    nvme-hmb-trace.ko's guest path
#   PERSONA_PHASES  "personality driver" pairs, one per line (driver: the
#                   module's file name in $SHARE/mods without .ko)
#   PERSONA_END     the last checkpoint's name

# trace_devices PERSONALITY: how many trace devices the module made.
trace_devices() {
    # The class folder holds only the devices' links: ls counts them.
    # shellcheck disable=SC2012
    note "persona-$1-trace-devices" "$(ls /sys/class/nvme-hmb-trace | wc -l)"
}

# persona PERSONALITY DRIVER: one load of DRIVER on the controller the host
# made PERSONALITY.
persona() {
    checkpoint "persona-$1-$2"
    n0=$(dmesg | wc -l)
    insmod "$SHARE/mods/$2.ko" || fail "insmod $2.ko on the $1 controller"
    i=0
    while [ ! -b /dev/nvme0n1 ]; do
        i=$((i + 1)); [ $i -lt 1200 ] || fail "$1: no /dev/nvme0n1 after 120 s"
        sleep 0.05
    done
    wait_live
    dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: reads"
    if [ "$1" = refusing-reinit ]; then
        # The daemon drains the epoch the reset freezes and REINITs; the
        # controller refuses the re-advert: the daemon must exit 10.
        insmod "$TRACE_MODULE" || fail "$1: insmod nvme-hmb-trace.ko"
        trace_devices "$1"
        [ -c /dev/nvme-hmb-trace0 ] || fail "$1: no /dev/nvme-hmb-trace0"
        /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output /tmp/persona.bin --follow 2>>"$SHARE/persona-$1.stderr" &
        d=$!
        sleep 0.5
        kill -0 $d 2>/dev/null || fail "$1: the daemon did not start"
        echo 1 > /sys/class/nvme/nvme0/reset_controller || fail "$1: reset_controller"
        wait_live
        i=0
        while kill -0 $d 2>/dev/null; do
            i=$((i + 1)); [ $i -lt 300 ] || fail "$1: the daemon still runs 30 s after the refused REINIT"
            sleep 0.1
        done
        wait $d
        note "persona-$1-daemon-rc" $?
        dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: reads after the reset"
        rmmod nvme_hmb_trace || fail "$1: rmmod nvme-hmb-trace"
    else
        echo 1 > /sys/class/nvme/nvme0/reset_controller || fail "$1: reset_controller"
        wait_live
        dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: reads after the reset"
        if [ "$2" = nvme ]; then
            insmod "$TRACE_MODULE" || fail "$1: insmod nvme-hmb-trace.ko"
            trace_devices "$1"
            rmmod nvme_hmb_trace || fail "$1: rmmod nvme-hmb-trace"
        fi
    fi
    rmmod nvme || fail "$1: rmmod nvme"
    dmesg | tail -n +$((n0 + 1)) > "$SHARE/persona-$1-$2.log"
}

# personas: every phase of PERSONA_PHASES, then the last checkpoint.
personas() {
    while read -r personality driver; do
        [ -n "$personality" ] || continue
        persona "$personality" "$driver" < /dev/null
    done <<PHASES
$PERSONA_PHASES
PHASES
    checkpoint "$PERSONA_END"
}
