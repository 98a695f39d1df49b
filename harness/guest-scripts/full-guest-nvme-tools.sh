# shellcheck shell=sh
# emu-device's NVMe controller through Debian's own tools
# (harness/src/full_guest/nvme_tools.rs), in the full guest: the function
# nvme_tools, called by full-guest-check.sh after the PID 1 check. It uses
# that script's step, fail, run, wait_for and $GUEST_LOG. Set by the host:
#   TOOLS_DIR, TOOLS_DONE, TOOLS_OK  its answers' folder in the share, and
#                                    the rendezvous files with the host
#   FIO_JOBS       NAME ENGINE BS_KIB IODEPTH OFFSET_MIB SIZE_MIB of each fio job
#   DSM_AT_MIB, WZ_AT_MIB, RANGE_MIB  where the discard checks write
#   PROBE_FILE     the file the host reads back from the media
#   ASSERTED, TELEMETRY_CONTROLLER  the host's "firmware assert injected"
#                  file, and the name of the Controller-Initiated log pulled
#   TELEMETRY_HOST_1, TELEMETRY_HOST_2, TELEMETRY_READS  the two
#                  Host-Initiated logs pulled (each a Create: a new
#                  snapshot), and how many 4 KiB reads are made between them
#   COMPARE_AT_MIB, NVME_DSM_AT_MIB  where nvme compare and nvme dsm work
#   RESET_JOB_AT_MIB, RESET_JOB_MIB, RESET_JOB_WRITE_IOPS, RESET_AFTER_WRITES
#                  fio's verifying job across nvme reset, and after how
#                  many of its writes the reset is sent
#   FATAL_JOB_AT_MIB  where the same job runs across a Controller Fatal
#                  Status the host sets (ask_fatal)
#   HMB_JOB_AT_MIB, HMB_JOB_MIB, HMB_ACTIONS  the same job across the HMB
#                  disabled (Set Features 0Dh EHM=0) and returned (EHM=1,
#                  MR=1, the driver's own list), its fio_across actions
#   TRIM_JOB_AT_MIB, TRIM_JOB_MIB, TRIM_PERCENTAGE, TRIM_BACKLOG  fio's
#                  verifying job that trims a share of what it wrote and
#                  verifies those blocks read back as zeroes
# Writes completed on the namespace (field 5 of the block device's stat).
nvme_writes() { awk '{print $5}' /sys/block/nvme0n1/stat; }
# Called through wait_for.
# shellcheck disable=SC2317
nvme_live() { [ "$(cat /sys/class/nvme/nvme0/state)" = live ]; }
# Called through wait_for: the running job has completed $after writes.
# shellcheck disable=SC2317
nvme_job_wrote() { [ $(( $(nvme_writes) - w0 )) -ge "$after" ]; }
# ask_host NAME: create $SHARE/nvme-NAME.ask and wait for the host's
# nvme-NAME.done (it acts on or checks the controller meanwhile).
ask_host() {
    touch "$SHARE/nvme-$1.ask"
    wait_for 120 "the host did not answer nvme-$1.ask" test -e "$SHARE/nvme-$1.done"
}
# ask_fatal TAG: the host sets Controller Fatal Status (inject reset on the
# control socket) once $SHARE/nvme-fatal-TAG.ask exists, and answers with
# nvme-fatal-TAG.done once it has seen CSTS.CFS set.
ask_fatal() { ask_host "fatal-$1"; }
# hmb_set EHM_MR: Set Features 0Dh through nvme-cli's admin passthrough,
# CDW11 = EHM_MR (0: release the HMB; 3: EHM=1 and MR=1), CDW12..15 the
# attributes the controller reported for the driver's buffer just before
# the job ($out/feature-0d-hmb.bin: HSIZE, HMDLAL, HMDLAU, HMDLEC), so MR=1
# returns the very buffer and descriptor list the driver lent. The driver's
# sysfs `hmb` switch would be the plain way, but 6.1 and 6.12 hide it on a
# controller without a CMB (docs/nvme-controller.md).
hmb_set() {
    # shellcheck disable=SC2046
    set -- "$1" $(od -An -tu4 -N16 "$out/feature-0d-hmb.bin")
    [ $# -eq 5 ] || fail "no HMB attributes in $out/feature-0d-hmb.bin"
    run nvme admin-passthru /dev/nvme0 --opcode=0x09 --cdw10=0x0d --cdw11="$1" \
        --cdw12="$2" --cdw13="$3" --cdw14="$4" --cdw15="$5"
}
# fio_across NAME AT_MIB MIB RATE ACTION:AFTER...: fio's crc32c-verifying
# 4 KiB random writes (libaio, direct, QD8; writes held to RATE IOPS unless
# RATE is 0) over MIB MiB at AT_MIB, into $out/fio-NAME.json; each ACTION
# (reset: nvme reset; fatal-TAG: ask_fatal TAG; hmb-off, hmb-on: hmb_set 0
# or 3; ask-NAME: ask_host NAME) is taken once AFTER of the
# job's writes have completed, noted as NAME.ACTION_after_writes in
# guest.txt. The namespace's I/O timeout is 3 s during the job: the driver
# looks at CSTS only when a command times out (30 s by default).
fio_across() {
    name=$1; at=$2; mib=$3; rate=$4; shift 4
    q=/sys/block/nvme0n1/queue/io_timeout
    timeout0=$(cat "$q")
    echo 3000 > "$q" || fail "setting $q"
    w0=$(nvme_writes)
    fio --name="$name" --filename=/dev/nvme0n1 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=8 \
        --rate_iops=,"$rate" --offset="${at}M" --size="${mib}M" \
        --verify=crc32c --verify_fatal=1 --do_verify=1 \
        --output-format=json --output="$out/fio-${name}.json" >> "$GUEST_LOG" 2>&1 &
    fio_pid=$!
    # Not "what": wait_for sets that one.
    for action in "$@"; do
        act=${action%%:*}; after=${action#*:}
        wait_for 300 "fio $name made no $after writes" nvme_job_wrote
        echo "$name.${act}_after_writes=$(( $(nvme_writes) - w0 ))" >> "$out/guest.txt"
        case $act in
            reset) run nvme reset /dev/nvme0 ;;
            fatal-*) ask_fatal "${act#fatal-}" ;;
            hmb-off) hmb_set 0 ;;
            hmb-on) hmb_set 3 ;;
            ask-*) ask_host "${act#ask-}" ;;
            *) fail "fio_across: unknown action $act" ;;
        esac
    done
    wait $fio_pid || fail "fio $name through $* (exit $?)"
    wait_for 60 "nvme0 is not live after fio $name" nvme_live
    echo "$timeout0" > "$q" || fail "restoring $q"
}

nvme_tools() {
    out="$SHARE/$TOOLS_DIR"
    mkdir -p "$out"
    ctrl=/dev/nvme0
    ns=/dev/nvme0n1
    wait_for 120 "no $ns: the stock nvme driver did not bind emu-device's controller" test -b "$ns"
    wait_for 60 "nvme0 is not live" nvme_live
    step "nvme: $ns on $(basename "$(readlink /sys/class/nvme/nvme0/device/driver)"), $(nvme version | head -n 1), $(fio --version)"
    wait_for 120 "the host injected no firmware assert" test -e "$SHARE/$ASSERTED"
    step "nvme: nvme telemetry-log --controller-init (the host injected a firmware assert)"
    run nvme telemetry-log "$ctrl" --controller-init --output-file="$out/$TELEMETRY_CONTROLLER"
    # nv FILE ARGS...: nvme-cli's answer into $out/FILE.
    nv() { f=$1; shift; nvme "$@" > "$out/$f" 2>>"$GUEST_LOG" || fail "nvme $* (exit $?)"; }
    smart() { nv "smart-$1.bin" smart-log "$ctrl" -b; }
    nv list.json list -o json
    nv id-ctrl.bin id-ctrl "$ctrl" -b
    nv id-ctrl.txt id-ctrl "$ctrl" -H
    nv id-ns.bin id-ns "$ns" -b
    nv id-ns.txt id-ns "$ns" -H
    nv fw-log.bin fw-log "$ctrl" -b
    nv feature-07.txt get-feature "$ctrl" -f 0x07
    nv feature-0d.txt get-feature "$ctrl" -f 0x0d -H
    nv feature-0d.bin get-feature "$ctrl" -f 0x0d -b
    {
        for q in discard_max_bytes write_zeroes_max_bytes logical_block_size; do
            echo "$q=$(cat /sys/block/nvme0n1/queue/$q)"
        done
        echo "model=$(cat /sys/class/nvme/nvme0/model)"
        echo "serial=$(cat /sys/class/nvme/nvme0/serial)"
        echo "bytes=$(blockdev --getsize64 $ns)"
    } > "$out/guest.txt"

    step "nvme: nvme telemetry-log twice (Host-Initiated 07h, each a Create), $TELEMETRY_READS reads between"
    # After each pull the host looks at the controller's own view of log
    # 07h (ask_host): generation and data areas, checked against the file.
    t=$(cut -d' ' -f1 /proc/uptime)
    run nvme telemetry-log "$ctrl" --output-file="$out/$TELEMETRY_HOST_1"
    ask_host telemetry-1
    dd if="$ns" of=/dev/null bs=4096 count="$TELEMETRY_READS" iflag=direct 2>>"$GUEST_LOG" \
        || fail "reads between the telemetry logs"
    run nvme telemetry-log "$ctrl" --output-file="$out/$TELEMETRY_HOST_2"
    ask_host telemetry-2
    echo "telemetry.seconds=$(awk -v t="$t" '{print $1 - t}' /proc/uptime)" >> "$out/guest.txt"

    step "nvme: nvme flush, nvme compare (equal, then one byte off), nvme dsm --ad, nvme write-zeroes, get-log 04h"
    ss=$(blockdev --getss "$ns")
    cmp_lba=$(( (COMPARE_AT_MIB << 20) / ss ))
    echo "compare_lba=$cmp_lba" >> "$out/guest.txt"
    nv flush.txt flush "$ns"
    head -c 1048576 /dev/urandom > /tmp/dsm-pattern
    head -c 1048576 /dev/zero > /tmp/dsm-zeroes
    dd if=/tmp/dsm-pattern of="$ns" bs=1M seek="$NVME_DSM_AT_MIB" count=1 oflag=direct conv=fsync 2>>"$GUEST_LOG" \
        || fail "write at $NVME_DSM_AT_MIB MiB"
    # dsm_back FILE: the MiB at NVME_DSM_AT_MIB read back equals FILE.
    dsm_back() {
        rm -f /tmp/dsm-back
        dd if="$ns" of=/tmp/dsm-back bs=1M skip="$NVME_DSM_AT_MIB" count=1 iflag=direct 2>>"$GUEST_LOG" \
            || fail "read back at $NVME_DSM_AT_MIB MiB"
        cmp /tmp/dsm-back "$1" >> "$GUEST_LOG" 2>&1
    }
    dsm_back /tmp/dsm-pattern || fail "the pattern at $NVME_DSM_AT_MIB MiB did not read back"
    nv dsm.txt dsm "$ns" --namespace-id=1 --ad --slbs=$(( (NVME_DSM_AT_MIB << 20) / ss )) --blocks=$(( 1048576 / ss ))
    dsm_back /tmp/dsm-zeroes || fail "nvme dsm --ad: the deallocated range does not read back as zeroes"
    # nvme write-zeroes over the same MiB, written again first. Before the
    # compare: nvme-cli 2.3's write-zeroes also sends an admin command with
    # NSID 1 that this NVMe 1.4 controller answers Invalid Field (seen in the
    # error log: SQ 0, status 0/02h), an entry the checks below must not find
    # between the miscompare and the read past the end.
    dd if=/tmp/dsm-pattern of="$ns" bs=1M seek="$NVME_DSM_AT_MIB" count=1 oflag=direct conv=fsync 2>>"$GUEST_LOG" \
        || fail "write at $NVME_DSM_AT_MIB MiB"
    dsm_back /tmp/dsm-pattern || fail "the pattern at $NVME_DSM_AT_MIB MiB did not read back"
    nv write-zeroes.txt write-zeroes "$ns" --namespace-id=1 --start-block=$(( (NVME_DSM_AT_MIB << 20) / ss )) \
        --block-count=$(( 1048576 / ss - 1 ))
    dsm_back /tmp/dsm-zeroes || fail "nvme write-zeroes: the range does not read back as zeroes"
    # Changed Namespace List (04h), declared by OAES bit 8.
    nv log-04.bin get-log "$ctrl" --log-id=4 --log-len=4096 -b
    head -c 4096 /dev/urandom > /tmp/cmp-r
    { head -c 100 /tmp/cmp-r; printf A; tail -c +102 /tmp/cmp-r; } > /tmp/cmp
    { head -c 100 /tmp/cmp-r; printf B; tail -c +102 /tmp/cmp-r; } > /tmp/cmp-off
    dd if=/tmp/cmp of="$ns" bs=4096 seek=$(( (COMPARE_AT_MIB << 20) / 4096 )) count=1 oflag=direct conv=fsync 2>>"$GUEST_LOG" \
        || fail "write at $COMPARE_AT_MIB MiB"
    nv compare-equal.txt compare "$ns" --start-block="$cmp_lba" --block-count=$((4096 / ss - 1)) --data-size=4096 --data=/tmp/cmp
    if nvme compare "$ns" --start-block="$cmp_lba" --block-count=$((4096 / ss - 1)) --data-size=4096 \
        --data=/tmp/cmp-off > "$out/compare-differ.txt" 2>&1; then
        fail "nvme compare of data one byte off succeeded"
    fi

    step "nvme: an error on purpose (read past the end), error-log"
    lbas=$(( $(blockdev --getsize64 "$ns") / $(blockdev --getss "$ns") ))
    if nvme read "$ns" --start-block="$lbas" --block-count=0 --data-size="$(blockdev --getss "$ns")" --data=/tmp/past-end.bin >> "$GUEST_LOG" 2>&1; then
        fail "nvme read at LBA $lbas (past the end) succeeded"
    fi
    echo "past_end_lba=$lbas" >> "$out/guest.txt"
    nv error-log.bin error-log "$ctrl" -b

    step "nvme: fio randwrite + crc32c verify, libaio and io_uring, 4 KiB and 128 KiB, QD1 and QD32"
    fio_job() {
        name=$1; shift
        fio --name="$name" --filename="$ns" --direct=1 --rw=randwrite \
            --verify=crc32c --verify_fatal=1 --do_verify=1 --output-format=json \
            --output="$out/fio-${name}.json" "$@" >> "$GUEST_LOG" 2>&1 || fail "fio $name (exit $?)"
    }
    smart before-fio
    # $FIO_JOBS unquoted: NAME ENGINE BS_KIB IODEPTH OFFSET_MIB SIZE_MIB,
    # six words a job.
    # shellcheck disable=SC2086
    set -- $FIO_JOBS
    while [ $# -ge 6 ]; do
        fio_job "$1" --ioengine="$2" --bs="$3k" --iodepth="$4" --offset="$5M" --size="$6M"
        shift 6
    done
    smart after-fio

    step "nvme: fio randwrite + crc32c verify through nvme reset"
    fio_across reset "$RESET_JOB_AT_MIB" "$RESET_JOB_MIB" "$RESET_JOB_WRITE_IOPS" "reset:$RESET_AFTER_WRITES"
    step "nvme: fio randwrite + crc32c verify through a Controller Fatal Status (the host's inject reset)"
    fio_across fatal "$FATAL_JOB_AT_MIB" "$RESET_JOB_MIB" "$RESET_JOB_WRITE_IOPS" "fatal-tools:$RESET_AFTER_WRITES"
    step "nvme: fio randwrite + crc32c verify through the HMB released (EHM=0) and returned (MR=1)"
    t=$(cut -d' ' -f1 /proc/uptime)
    nv feature-0d-hmb.bin get-feature "$ctrl" -f 0x0d -b
    # $HMB_ACTIONS unquoted: one word an action.
    # shellcheck disable=SC2086
    fio_across hmb "$HMB_JOB_AT_MIB" "$HMB_JOB_MIB" "$RESET_JOB_WRITE_IOPS" $HMB_ACTIONS
    echo "hmb.seconds=$(awk -v t="$t" '{print $1 - t}' /proc/uptime)" >> "$out/guest.txt"
    step "nvme: fio randwrite + crc32c verify with trims (trim_verify_zero: deallocated blocks read as zeroes)"
    t=$(cut -d' ' -f1 /proc/uptime)
    # randtrimwrite (each block trimmed, then written): fio 3.33 aborts on a
    # trim_percentage trim in a job whose rw has no trim (fio_ro_check).
    fio --name=trim --filename="$ns" --ioengine=libaio --direct=1 --rw=randtrimwrite --bs=4k --iodepth=8 \
        --offset="${TRIM_JOB_AT_MIB}M" --size="${TRIM_JOB_MIB}M" \
        --verify=crc32c --verify_fatal=1 --do_verify=1 \
        --trim_percentage="$TRIM_PERCENTAGE" --trim_backlog="$TRIM_BACKLOG" --trim_verify_zero=1 \
        --output-format=json --output="$out/fio-trim.json" >> "$GUEST_LOG" 2>&1 || fail "fio trim (exit $?)"
    echo "trim.seconds=$(awk -v t="$t" '{print $1 - t}' /proc/uptime)" >> "$out/guest.txt"

    step "nvme: blkdiscard (DSM deallocate) and blkdiscard -z (Write Zeroes), read back"
    # range_check MIB FILE: the 4 MiB at MIB read back (O_DIRECT) equal FILE.
    range_check() {
        rm -f /tmp/back
        dd if="$ns" of=/tmp/back bs=1M skip="$1" count="$RANGE_MIB" iflag=direct 2>>"$GUEST_LOG" || fail "read back at $1 MiB"
        cmp /tmp/back "$2" >> "$GUEST_LOG" 2>&1
    }
    head -c $((RANGE_MIB << 20)) /dev/zero > /tmp/zeroes
    for at in "$DSM_AT_MIB" "$WZ_AT_MIB"; do
        head -c $((RANGE_MIB << 20)) /dev/urandom > /tmp/pattern
        dd if=/tmp/pattern of="$ns" bs=1M seek="$at" oflag=direct conv=fsync 2>>"$GUEST_LOG" || fail "write at $at MiB"
        range_check "$at" /tmp/pattern || fail "the pattern at $at MiB did not read back"
    done
    smart before-dsm
    run blkdiscard --offset $((DSM_AT_MIB << 20)) --length $((RANGE_MIB << 20)) "$ns"
    range_check "$DSM_AT_MIB" /tmp/zeroes || fail "blkdiscard: the deallocated range does not read back as zeroes"
    smart after-dsm
    run blkdiscard -z --offset $((WZ_AT_MIB << 20)) --length $((RANGE_MIB << 20)) "$ns"
    range_check "$WZ_AT_MIB" /tmp/zeroes || fail "blkdiscard -z: the range does not read back as zeroes"
    smart after-wz

    step "nvme: mkfs.ext4 (discard), mount, files, fstrim, umount, mount, compare, fsck.ext4 -fn"
    run mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "$ns"
    mkdir -p /mnt/nvme
    run mount -o noinit_itable "$ns" /mnt/nvme
    mkdir -p /mnt/nvme/data
    i=1
    while [ "$i" -le 6 ]; do
        head -c $((i * 177 * 1024 + i)) /dev/urandom > /mnt/nvme/data/r"$i"
        i=$((i + 1))
    done
    run cp -a /usr/share/common-licenses /mnt/nvme/data/licenses
    run cp "/mnt/nvme/$PROBE_FILE" "$out/probe.bin"
    (cd /mnt/nvme && find data -type f -exec sha256sum {} +) > "$out/manifest.sha256"
    # The file system's own discard of its free space (DSM deallocate).
    fstrim -v /mnt/nvme > /tmp/fstrim.txt 2>>"$GUEST_LOG" || fail "fstrim /mnt/nvme (exit $?)"
    echo "fstrim=$(cat /tmp/fstrim.txt)" >> "$out/guest.txt"
    run umount /mnt/nvme
    run mount "$ns" /mnt/nvme
    (cd /mnt/nvme && sha256sum --check --quiet "$out/manifest.sha256") >> "$GUEST_LOG" 2>&1 \
        || fail "files read back after umount and mount differ from what was written"
    run umount /mnt/nvme
    run fsck.ext4 -fn "$ns"
    smart final
    dmesg | grep nvme > "$out/dmesg-nvme.txt"
    touch "$SHARE/$TOOLS_DONE"
    wait_for 120 "the host did not answer $TOOLS_DONE" test -e "$SHARE/$TOOLS_OK"
    step "nvme: the host checked every answer against the controller"
}
