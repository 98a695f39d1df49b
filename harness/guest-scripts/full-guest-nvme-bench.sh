# shellcheck shell=sh
# `cargo xtask bench --nvme` (harness/src/full_guest/nvme_bench.rs) in the
# full guest: find both controllers by model, run every fio job on each,
# REPS times, alternating which goes first; fio's JSON into the share. Then
# the HMB rows on ours alone (HMB enabled vs disabled, the timing model on).
# Set by the host:
#   SHARE      the 9p share
#   JOBS       one job a line: NAME|FIO ARGUMENTS
#   REPS       repetitions of every job on each controller
#   RUNTIME_S  seconds per fio job (after one second of ramp)
#   COST_REPS  repetitions of every cost job in each mode
#   COST_JOBS  the cost of tracing, one job a line: NAME|FIO ARGUMENTS, run
#              on our controller under the series' nvme.ko with the module
#              and the daemon tracing, and with hmb_trace_kb=0 (no slice)
#   COST_MODES the cost part's modes, rotated by rep (cost_rep): on and off
#              for the figure, and for finding where the cost goes (issue 28)
#              on0 (the daemon with --batch-wait-ms 0), shm (trace.bin in
#              /dev/shm, not on the root file system), slice (the series'
#              slice adopted, no module and no daemon: the controller's side),
#              direct (the daemon --direct: trace.bin by O_DIRECT), big (the
#              daemon with --batch-wait-ms 500 --max-batch-kib 2048), disk
#              (trace.bin on an ext4 of its own on a second virtio disk of
#              TRACE_DISK_SECTORS sectors: raw, cache=unsafe, no qcow2);
#              every mode runs fio on CPU 0 and the daemon on the last CPU
#              (a CPU of its own, as a deployment runs it: docs/daemon.md)
#              but off_unpinned and on_unpinned, off and on with neither
#              pinned (where the scheduler puts them)
#   SERIES_NVME, DKMS_TAR, DAEMON  the series' nvme.ko, DKMS's build of the
#              module and the static daemon, in the share
echo "HMBT-STEP PID 1 is $(cat /proc/1/comm): nvme bench"
fail() { echo "HMBT-ERROR $*"; dmesg > "$SHARE/dmesg.txt"; echo "HMBT-RESULT rc=1"; exit 1; }
ours=; qemu=; i=0
while [ $i -lt 600 ]; do
    for c in /sys/class/nvme/nvme*; do
        n=$(basename "$c")
        [ -b "/dev/${n}n1" ] || continue
        case "$(cat "$c/model")" in QEMU*) qemu=/dev/${n}n1 ;; *) ours=/dev/${n}n1 ;; esac
    done
    [ -n "$ours" ] && [ -n "$qemu" ] && break
    sleep 0.2; i=$((i + 1))
done
if [ -z "$ours" ] || [ -z "$qemu" ]; then
    fail "want two NVMe namespaces, ours '$ours' and QEMU's '$qemu'"
fi
echo "HMBT-STEP ours $ours, QEMU's $qemu"
# run_job NAME ARGS: on both controllers, the first one alternating by rep.
run_job() {
    if [ $((rep % 2)) -eq 1 ]; then order="ours qemu"; else order="qemu ours"; fi
    for who in $order; do
        if [ "$who" = ours ]; then dev=$ours; else dev=$qemu; fi
        # For the host's speed probe and serve-nvme's CPU (host_counters.rs).
        echo "HMBT-FIO job=$1 mode=$who rep=$rep at=begin"
        # $2 unquoted: fio's arguments, a word each.
        # shellcheck disable=SC2086
        fio --name="$1" --filename="$dev" --ioengine=io_uring --direct=1 --size=64M \
            --time_based --runtime="$RUNTIME_S" --ramp_time=1 --output-format=json \
            --output="$SHARE/fio-$1-$who-$rep.json" $2 < /dev/null > /dev/null 2>>"$SHARE/fio.stderr" \
            || fail "fio $1 on $who ($dev)"
        echo "HMBT-FIO job=$1 mode=$who rep=$rep at=end"
    done
}
# The guest's uptime (seconds since the kernel started) at the first fio
# I/O on our controller, and which controller is ours (the probe times).
echo "first_io_uptime=$(cut -d' ' -f1 /proc/uptime)" > "$SHARE/timing.txt"
echo "ours=$(basename "$ours" n1)" >> "$SHARE/timing.txt"
# What the cost part's counters need: vCPUs, and where the daemon writes.
echo "vcpus=$(nproc) tmp_fs=$(stat -f -c %T /tmp)" >> "$SHARE/cost-counters.txt"
rep=1
while [ $rep -le "$REPS" ]; do
    # A redirected loop, not a pipe: fail must end the script, not a subshell.
    while IFS='|' read -r name args; do
        [ -n "$name" ] && run_job "$name" "$args"
    done <<JOBS_END
$JOBS
JOBS_END
    echo "HMBT-STEP rep $rep done"
    rep=$((rep + 1))
done

# The cost of tracing: the series' nvme.ko, off (hmb_trace_kb=0) and on
# (its default slice, the module, the daemon --follow), alternating.
mkdir -p /tmp/dkms
tar -C /tmp/dkms -xf "$SHARE/$DKMS_TAR" || fail "unpacking $DKMS_TAR"
tko=$(find /tmp/dkms -name 'nvme-hmb-trace.ko*' | head -n 1)
[ -n "$tko" ] || fail "no nvme-hmb-trace.ko in $DKMS_TAR"
# series [ARGS]: the series' nvme.ko (with ARGS) on both controllers; $ours
# is ours again.
series() {
    rmmod nvme_hmb_trace 2>/dev/null
    rmmod nvme || fail "rmmod nvme"
    t0=$(date +%s%N)
    insmod "$SHARE/$SERIES_NVME" "$@" || fail "insmod the series' nvme.ko $*"
    ours=; i=0
    while [ -z "$ours" ] && [ $i -lt 600 ]; do
        for c in /sys/class/nvme/nvme*; do
            n=$(basename "$c")
            if [ ! -b "/dev/${n}n1" ] || [ "$(cat "$c/state")" != live ]; then continue; fi
            case "$(cat "$c/model")" in QEMU*) ;; *) ours=/dev/${n}n1; octrl=$c ;; esac
        done
        [ -n "$ours" ] || { sleep 0.05; i=$((i + 1)); }
    done
    [ -n "$ours" ] || fail "the series' nvme.ko did not bind our controller"
    echo "series_probe_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >> "$SHARE/timing.txt"
    # The reload's uevents (block devices, partitions, the trace node) are
    # handled by udev in both modes before a job is timed, not during it.
    udevadm settle --timeout=30 || true
}
# counters: one line of what the guest did so far, for where a traced job's
# time goes (nvme_bench.rs turns two lines into rates per second and per
# I/O): context switches and interrupts (/proc/stat), CPU ticks (user,
# system, irq+softirq, idle+iowait, over both vCPUs; and busy and all ticks
# of each vCPU, cpuN_busy/cpuN_all, to set beside the host's per-vCPU-thread
# run time in host-counters.txt: which vCPU ran fio), our controller's queue
# interrupts, the timer, rescheduling and call IPIs (/proc/interrupts), and
# the daemon's context switches, minor faults, CPU ticks (user and system
# apart), system calls, bytes written and scheduler time (0 with the
# trace off); and the disk writes (issue 28): write requests, sectors written
# and flushes completed by the virtio disks (/proc/diskstats, whole disks),
# pages dirtied and written back (/proc/vmstat), virtio interrupts.
counters() {
    q=$(basename "$octrl")q
    printf 'ns=%s ' "$(date +%s%N)"
    awk '$1 == "ctxt" { printf "ctxt=%s ", $2 } $1 == "intr" { printf "intr=%s ", $2 }
         $1 == "cpu" { printf "user=%d sys=%d irq=%d idle=%d ", $2 + $3, $4, $7 + $8, $5 + $6 }
         $1 ~ /^cpu[0-9]+$/ { printf "%s_busy=%d %s_all=%d ", $1, $2 + $3 + $4 + $7 + $8, $1, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat
    awk -v q="$q" 'NR == 1 { n = NF; next }
         { s = 0; for (i = 2; i <= n + 1; i++) s += $i }
         index($NF, q) == 1 { nvme += s } $1 == "LOC:" { loc = s } $1 == "RES:" { res = s }
         $1 == "CAL:" { cal = s }
         END { printf "nvme_irq=%d loc=%d res=%d cal=%d ", nvme, loc, res, cal }' /proc/interrupts
    awk '$3 ~ /^vd[a-z]+$/ { w += $8; s += $10; if (NF >= 20) f += $19 }
         END { printf "blk_wr=%d blk_wsect=%d blk_flush=%d ", w, s, f }' /proc/diskstats
    awk '$1 == "nr_dirtied" { d = $2 } $1 == "nr_written" { w = $2 }
         END { printf "pg_dirtied=%d pg_written=%d ", d, w }' /proc/vmstat
    awk 'NR == 1 { n = NF; next } /virtio/ { for (i = 2; i <= n + 1; i++) v += $i }
         END { printf "virtio_irq=%d ", v }' /proc/interrupts
    # Ticks (utime + stime) of every task by kind, for the guest's work
    # per I/O outside the daemon (issue 28): kworkers (the module's
    # sampler, writeback), ksoftirqd, fio, the file systems' threads.
    cat /proc/[0-9]*/stat 2>/dev/null | awk '{ c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c)
         r = $0; sub(/^.*\) /, "", r); split(r, f, " "); t = f[12] + f[13]
         if (c ~ /^kworker/) kw += t; else if (c ~ /^ksoftirqd/) ks += t; else if (c ~ /^fio/) fio += t
         else if (c ~ /^(jbd2|flush-|kswapd)/) fs += t; else if (c !~ /^hmb-trace/) o += t }
         END { printf "kworker_ticks=%d ksoftirqd_ticks=%d fio_ticks=%d fs_ticks=%d other_ticks=%d ", kw, ks, fio, fs, o }'
    if [ -n "$dpid" ] && [ -r "/proc/$dpid/stat" ]; then
        awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
             END { printf "daemon_vcs=%d daemon_ncs=%d ", v, n }' "/proc/$dpid/status"
        # After the command's parenthesised name: minflt is field 8, utime
        # and stime are fields 12 and 13 (faults: the ring view is mapped by
        # the module's fault handler).
        sed 's/.*) //' "/proc/$dpid/stat" |
            awk '{ printf "daemon_minflt=%d daemon_ticks=%d daemon_uticks=%d daemon_sticks=%d ", $8, $12 + $13, $12, $13 }'
        # Its system calls and bytes (syscw: write calls, writev among
        # them; syscr: read calls; wchar: bytes written) and its run time,
        # wait for a CPU and times scheduled in (schedstat), for the
        # daemon's work per system call and per wake-up (issue 28).
        awk '$1 == "syscr:" { r = $2 } $1 == "syscw:" { w = $2 } $1 == "wchar:" { b = $2 }
             END { printf "daemon_syscr=%d daemon_syscw=%d daemon_wchar=%d ", r, w, b }' "/proc/$dpid/io"
        awk '{ printf "daemon_run_ns=%d daemon_wait_ns=%d daemon_slices=%d", $1, $2, $3 }' "/proc/$dpid/schedstat"
    else
        printf 'daemon_vcs=0 daemon_ncs=0 daemon_minflt=0 daemon_ticks=0'
    fi
    echo
}
# The HMBT-COST console lines mark each job's start and end for the host,
# which samples its own processes' CPU there and its speed probe between
# them (nvme_bench/host_counters.rs, speed_probe.rs).
cost_job() {
    fiocpu=--cpus_allowed=0
    case $3 in *_unpinned) fiocpu= ;; esac
    echo "job=$1 mode=$3 rep=$rep $(counters)" >> "$SHARE/cost-counters.txt"
    echo "HMBT-COST job=$1 mode=$3 rep=$rep at=begin"
    # $2 unquoted: fio's arguments, a word each.
    # shellcheck disable=SC2086
    fio --name="$1" --filename="$ours" --ioengine=io_uring --direct=1 --size=64M \
        --time_based --runtime="$RUNTIME_S" --ramp_time=1 --output-format=json \
        --output="$SHARE/fio-$1-$3-$rep.json" $2 $fiocpu < /dev/null > /dev/null 2>>"$SHARE/fio.stderr" \
        || fail "fio $1 with the trace $3"
    echo "HMBT-COST job=$1 mode=$3 rep=$rep at=end"
    echo "job=$1 mode=$3 rep=$rep $(counters)" >> "$SHARE/cost-counters.txt"
}
# rotated N WORDS...: the words rotated left by N (each mode goes first in
# turn as the reps go by; with "on off" the order alternates as before).
rotated() {
    n=$1; shift
    while [ "$n" -gt 0 ]; do
        first=$1; shift; set -- "$@" "$first"; n=$((n - 1))
    done
    echo "$@"
}
# daemon_holds PID NODE: whether process PID has NODE open.
daemon_holds() {
    for fd in /proc/"$1"/fd/*; do
        [ "$(readlink "$fd" 2>/dev/null)" = "$2" ] && return 0
    done
    return 1
}
cost_rep() {
    # $COST_MODES unquoted: a word each.
    # shellcheck disable=SC2086
    order=$(rotated $(((rep - 1) % $(echo $COST_MODES | wc -w))) $COST_MODES)
    for mode in $order; do
        dpid=; out=/tmp/cost.bin
        if [ "$mode" = off ] || [ "$mode" = off_unpinned ]; then
            series hmb_trace_kb=0
        elif [ "$mode" = slice ]; then
            series
        else
            series
            insmod "$tko" || fail "insmod $tko"
            pci=$(readlink -f "$octrl/device"); node=; i=0
            while [ -z "$node" ] && [ $i -lt 200 ]; do
                for d in /sys/class/nvme-hmb-trace/nvme-hmb-trace*; do
                    [ "$(readlink -f "$d/device")" = "$pci" ] && [ -c "/dev/${d##*/}" ] && node=/dev/${d##*/}
                done
                [ -n "$node" ] || { sleep 0.05; i=$((i + 1)); }
            done
            [ -n "$node" ] || fail "no trace node of our controller's slice"
            udevadm settle --timeout=30 || true
            wait_ms=100; batch_kib=256; direct=
            [ "$mode" = on0 ] && wait_ms=0
            [ "$mode" = shm ] && out=/dev/shm/cost.bin
            [ "$mode" = disk ] && out=/mnt/trace/cost.bin
            [ "$mode" = direct ] && direct=--direct
            [ "$mode" = big ] && { wait_ms=500; batch_kib=2048; }
            pin="taskset -c $daemon_cpu"
            [ "$mode" = on_unpinned ] && pin=
            echo "mode=$mode daemon: --batch-wait-ms $wait_ms --max-batch-kib $batch_kib $direct --output $out" \
                >> "$SHARE/daemon.stderr"
            # $direct and $pin unquoted: the flag or nothing, the command or nothing.
            # shellcheck disable=SC2086
            $pin "$daemon_bin" --device "$node" --output "$out" --follow --stats -v \
                --batch-wait-ms "$wait_ms" --max-batch-kib "$batch_kib" $direct 2>>"$SHARE/daemon.stderr" &
            dpid=$!
            # Started, not starting: its file opened (the open also starts
            # the module's sampler, on the daemon's CPU) before a job is timed.
            i=0
            while ! daemon_holds "$dpid" "$node" || [ ! -e "$out" ]; do
                kill -0 "$dpid" 2>/dev/null || fail "the daemon exited at start (mode $mode)"
                [ $i -lt 600 ] || fail "the daemon did not open $node and $out (mode $mode)"
                sleep 0.05; i=$((i + 1))
            done
        fi
        while IFS='|' read -r name args; do
            [ -n "$name" ] && cost_job "$name" "$args" "$mode"
        done <<COST_END
$COST_JOBS
COST_END
        if [ -n "$dpid" ]; then
            kill -TERM "$dpid"; wait "$dpid" || fail "the daemon exited $?"
            [ "$mode" = on ] && echo "trace_bytes_$rep=$(stat -c %s "$out")" >> "$SHARE/timing.txt"
            # Every traced mode's file length (after the daemon's exit: with
            # --direct the padding is cut), for trace.bin's size by mode.
            echo "mode_bytes_${mode}_$rep=$(stat -c %s "$out")" >> "$SHARE/timing.txt"
            rm -f "$out"
        fi
    done
}
# The disk mode's file system: made once, before any cost job, with its
# inode tables and journal written now (no lazy init during the jobs).
case " $COST_MODES " in *" disk "*)
    tdisk=
    for b in /sys/block/vd*; do
        [ "$(cat "$b/size")" = "$TRACE_DISK_SECTORS" ] && tdisk=/dev/${b##*/}
    done
    [ -n "$tdisk" ] || fail "no trace disk of $TRACE_DISK_SECTORS sectors for mode disk"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$tdisk" || fail "mkfs.ext4 $tdisk"
    mkdir -p /mnt/trace
    mount "$tdisk" /mnt/trace || fail "mount $tdisk"
    echo "trace_disk=$tdisk" >> "$SHARE/timing.txt"
    ;;
esac
# The daemon runs from the guest's own file system, as installed: started
# from the 9p share, its first pages were read over virtio during the first
# job (issue 28). Its CPU: the last one, fio's is CPU 0.
daemon_bin=/tmp/hmb-trace-daemon
cp "$SHARE/$DAEMON" "$daemon_bin" || fail "copying the daemon into the guest"
daemon_cpu=$(($(nproc) - 1))
rep=1
while [ $rep -le "$COST_REPS" ]; do
    cost_rep
    echo "HMBT-STEP cost of tracing, rep $rep done"
    rep=$((rep + 1))
done
dmesg > "$SHARE/dmesg.txt"
# The cost part may end with the module over the series' driver (an even
# COST_REPS): off, so that nvme can be reloaded below.
rmmod nvme_hmb_trace 2>/dev/null
# The HMB rows (issue 27): 4 KiB random reads at QD1 on ours with the HMB enabled and
# disabled (the driver reloaded with max_host_mem_size_mb=0: HMMIN is above that, so it
# lends none), under the controller's timing model, which the host switches on when asked.
# The 64 MiB read are written first: reads of unwritten blocks need no map page.
fio --name=fill --filename="$ours" --ioengine=io_uring --direct=1 --rw=write --bs=1M \
    --size=64M --output-format=json --output="$SHARE/fio-hmb-fill.json" < /dev/null > /dev/null \
    2>>"$SHARE/fio.stderr" || fail "fio fill on ours ($ours)"
echo "HMBT-STEP hmb rows: timing model please"
i=0
while [ ! -e "$SHARE/timing-model" ]; do
    sleep 0.2; i=$((i + 1))
    [ $i -lt 1500 ] || fail "the host did not switch the timing model on"
done
# find_ours: our namespace again after a reload (names may move).
find_ours() {
    ours=; i=0
    while [ $i -lt 600 ]; do
        for c in /sys/class/nvme/nvme*; do
            n=$(basename "$c")
            [ -b "/dev/${n}n1" ] || continue
            case "$(cat "$c/model")" in QEMU*) ;; *) ours=/dev/${n}n1 ;; esac
        done
        [ -n "$ours" ] && return 0
        sleep 0.2; i=$((i + 1))
    done
    fail "our namespace did not come back after reloading nvme"
}
# set_hmb on|off: reload the driver with or without an HMB; dmesg must agree.
set_hmb() {
    before=$(dmesg | grep -c "host memory buffer")
    modprobe -r nvme || fail "modprobe -r nvme"
    if [ "$1" = on ]; then
        modprobe nvme || fail "modprobe nvme"
    else
        modprobe nvme max_host_mem_size_mb=0 || fail "modprobe nvme max_host_mem_size_mb=0"
    fi
    find_ours
    i=0
    while [ "$1" = on ] && [ "$(dmesg | grep -c "host memory buffer")" -le "$before" ]; do
        sleep 0.2; i=$((i + 1))
        [ $i -lt 100 ] || fail "no host memory buffer allocated after reloading nvme"
    done
    if [ "$1" = off ] && [ "$(dmesg | grep -c "host memory buffer")" -gt "$before" ]; then
        fail "a host memory buffer was allocated with max_host_mem_size_mb=0"
    fi
    echo "HMBT-STEP hmb $1: $ours"
}
rep=1
while [ $rep -le "$REPS" ]; do
    if [ $((rep % 2)) -eq 1 ]; then order="on off"; else order="off on"; fi
    for hmb in $order; do
        set_hmb "$hmb"
        fio --name=hmb --filename="$ours" --ioengine=io_uring --direct=1 --size=64M \
            --rw=randread --bs=4k --iodepth=1 --time_based --runtime="$RUNTIME_S" --ramp_time=1 \
            --output-format=json --output="$SHARE/fio-hmb_$hmb-$rep.json" < /dev/null > /dev/null \
            2>>"$SHARE/fio.stderr" || fail "fio hmb $hmb on ours ($ours)"
    done
    echo "HMBT-STEP hmb rep $rep done"
    rep=$((rep + 1))
done
echo "HMBT-RESULT rc=0"
