# shellcheck shell=sh
# Issue 26: the drivers against the controller's other personalities, one
# load each (harness/src/nvme_personalities.rs), after the trace checks with
# nvme unloaded. At each checkpoint the host audits the load before and
# switches the controller (no driver runs it). Uses nvme-lib.sh's
# checkpoint, wait_live and note, and the script's fail.
# Set by the host before it:
#   TRACE_MODULE    nvme-hmb-trace.ko's guest path
#   PERSONA_PHASES  "personality driver paths" lines, one a load (driver:
#                   the module's file name in $SHARE/mods without .ko;
#                   paths: how the load loses and regains its HMB, comma-
#                   separated, always "reset" first, then "fatal", "rebind")
#   PERSONA_IO_TIMEOUT_MS  the namespace's I/O timeout for the fatal path
#   PERSONA_END     the last checkpoint's name

# trace_devices PERSONALITY: how many trace devices the module made.
trace_devices() {
    # The class folder holds only the devices' links: ls counts them.
    # shellcheck disable=SC2012
    note "persona-$1-trace-devices" "$(ls /sys/class/nvme-hmb-trace | wc -l)"
}

# persona_fatal PERSONALITY DRIVER: the host fails the controller
# (CSTS.CFS) at the checkpoint; the next read is never fetched; at its
# timeout the driver finds CFS, resets (the same HMB back with MR=1) and
# retries the read.
persona_fatal() {
    echo "$PERSONA_IO_TIMEOUT_MS" > /sys/block/nvme0n1/queue/io_timeout || fail "$1: io_timeout"
    checkpoint "persona-$1-$2-fatal"
    dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: read across the controller failure"
    wait_live
    dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: reads after the recovery"
}

# persona_rebind PERSONALITY DRIVER: the driver's unbind (it shuts the
# controller down and frees the HMB) and bind (a new HMB, MR=0).
persona_rebind() {
    checkpoint "persona-$1-$2-rebind"
    bdf=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
    echo "$bdf" > /sys/bus/pci/drivers/nvme/unbind || fail "$1: unbind $bdf"
    [ ! -e /dev/nvme0n1 ] || fail "$1: /dev/nvme0n1 still there after the unbind"
    echo "$bdf" > /sys/bus/pci/drivers/nvme/bind || fail "$1: bind $bdf"
    wait_ctrl "$bdf"
    [ "$ctrl" = nvme0 ] || fail "$1: the controller came back as $ctrl, not nvme0"
    dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "$1: reads after the bind"
}

# persona PERSONALITY DRIVER PATHS: one load of DRIVER on the controller the
# host made PERSONALITY, losing and regaining the HMB by each of PATHS.
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
        daemon_attached $d
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
        for path in $(echo "$3" | tr , ' '); do
            case $path in
                reset) ;;
                fatal) persona_fatal "$1" "$2" ;;
                rebind) persona_rebind "$1" "$2" ;;
                *) fail "$1: unknown path $path" ;;
            esac
        done
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
    while read -r personality driver paths; do
        [ -n "$personality" ] || continue
        persona "$personality" "$driver" "$paths" < /dev/null
    done <<PHASES
$PERSONA_PHASES
PHASES
    [ -z "$PEER_PORT" ] || pair
    checkpoint "$PERSONA_END"
}

# Issue 26, two controllers in one guest: a second controller (emu-device's
# `stock` personality, behind the root port PEER_PORT, empty without one)
# is kept from the driver (driver_override) until the pair phase, so the
# trace checks and the phases above see one controller, nvme0.
#   PEER_PORT     the peer's root port's PCI address, or empty
#   PERSONA_PAIR  the pair phase's checkpoint name

# nvme_functions: the PCI addresses of the NVMe functions (class 010802).
nvme_functions() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/class")" = 0x010802 ] && basename "$d"
    done
}

# peer_hold: find the peer behind PEER_PORT and keep every driver off it.
peer_hold() {
    [ -n "$PEER_PORT" ] || return 0
    peer=
    for f in $(nvme_functions); do
        case $(readlink -f "/sys/bus/pci/devices/$f") in
            */"$PEER_PORT"/"$f") peer=$f ;;
        esac
    done
    [ -n "$peer" ] || fail "no NVMe function behind the peer's root port $PEER_PORT"
    echo none > "/sys/bus/pci/devices/$peer/driver_override" || fail "driver_override of the peer $peer"
    note peer_pci "$peer"
}

# wait_ctrl PCI: ctrl= the nvmeN of the controller at PCI, once it is live
# with its namespace (60 s at most).
wait_ctrl() {
    i=0
    while :; do
        c=$(ls "/sys/bus/pci/devices/$1/nvme" 2>/dev/null)
        [ -n "$c" ] && [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] && [ -b "/dev/${c}n1" ] && break
        i=$((i + 1)); [ $i -lt 600 ] || fail "pair: the controller at $1 is not live after 60 s"
        sleep 0.1
    done
    ctrl=$c
}

# pair_devices WHEN: the trace devices now and whose PCI function each is
# (the tracing controller's only, once its slice is there: 10 s at most).
pair_devices() {
    i=0
    while [ ! -e /sys/class/nvme-hmb-trace/nvme-hmb-trace0 ]; do
        i=$((i + 1)); [ $i -lt 100 ] || break
        sleep 0.1
    done
    # The class folder holds only the devices' links.
    # shellcheck disable=SC2012
    note "persona-pair-$1-trace-devices" "$(ls /sys/class/nvme-hmb-trace | wc -l)"
    owners=
    for t in /sys/class/nvme-hmb-trace/*; do
        [ -e "$t/device" ] && owners="$owners$(basename "$(readlink "$t/device")") "
    done
    note "persona-pair-$1-trace-pci" "$owners"
}

# pair: both controllers on the series' nvme.ko, nvme-hmb-trace.ko loaded
# BEFORE nvme.ko (it attaches when nvme.ko comes up), then reloaded after
# it; reads and a reset on each; the host audits both controllers.
pair() {
    checkpoint "$PERSONA_PAIR"
    n0=$(dmesg | wc -l)
    main=
    for f in $(nvme_functions); do [ "$f" = "$peer" ] || main=$f; done
    echo > "/sys/bus/pci/devices/$peer/driver_override" || fail "pair: clearing the peer's driver_override"
    insmod "$TRACE_MODULE" || fail "pair: insmod nvme-hmb-trace.ko before nvme.ko"
    insmod "$SHARE/mods/nvme.ko" || fail "pair: insmod nvme.ko"
    wait_ctrl "$main"; mc=$ctrl
    wait_ctrl "$peer"; pc=$ctrl
    note persona-pair-tracing "$main $mc"
    note persona-pair-stock "$peer $pc"
    pair_devices before
    rmmod nvme_hmb_trace || fail "pair: rmmod nvme-hmb-trace"
    insmod "$TRACE_MODULE" || fail "pair: insmod nvme-hmb-trace.ko after nvme.ko"
    pair_devices after
    for c in "$mc" "$pc"; do
        dd if="/dev/${c}n1" of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "pair: reads on $c"
        echo 1 > "/sys/class/nvme/$c/reset_controller" || fail "pair: reset_controller of $c"
    done
    wait_ctrl "$main"
    wait_ctrl "$peer"
    for c in "$mc" "$pc"; do
        dd if="/dev/${c}n1" of=/dev/null bs=4096 count=64 iflag=direct 2>/dev/null || fail "pair: reads on $c after the reset"
    done
    rmmod nvme_hmb_trace || fail "pair: rmmod nvme-hmb-trace"
    rmmod nvme || fail "pair: rmmod nvme"
    dmesg | tail -n +$((n0 + 1)) > "$SHARE/persona-pair.log"
}
