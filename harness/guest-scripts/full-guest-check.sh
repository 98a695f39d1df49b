# shellcheck shell=sh
# The full Debian guest's check (harness/src/full_guest/script.rs), run as
# root by hmbt-check.service: a user's installation on a host, step by
# step; after full-guest-nvme-tools.sh and full-guest-nvme-traced.sh (the
# NVMe controller's traced run, between modprobe -r and dkms remove). Set by
# the host:
#   SHARE                     the 9p share
#   LOG, JOURNAL, DMESG, TRACE             files it writes in the share
#   UDEV_RULE, DAEMON, UNIT_FILE, KMOD, DKMS_TAR  what the host staged there
#   STARTED, KILL, RESTARTED, STOP         rendezvous files with the host
#   PKG_ID, PKG_NAME, PKG_SRC  the DKMS package: name/version, module name,
#                              its source folder under /usr/src
GUEST_LOG=$SHARE/$LOG
node=/dev/nvme-hmb-trace0
unit=hmb-trace-daemon
abi=$(uname -r)
step() { echo "HMBT-STEP $*"; echo "== $*" >> "$GUEST_LOG"; }
fail() {
    echo "HMBT-ERROR $*"
    journalctl -b --no-pager > "$SHARE/$JOURNAL" 2>&1
    dmesg > "$SHARE/$DMESG"
    echo "HMBT-RESULT rc=1"
    exit 1
}
# run CMD...: run it with its output in the log; fail naming it.
run() { "$@" >> "$GUEST_LOG" 2>&1 || fail "$* (exit $?)"; }
# wait_for SECONDS DESCRIPTION TEST...: poll TEST every 0.2 s.
wait_for() {
    n=$(($1 * 5)); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ "$n" -le 0 ] && fail "timeout: $what"
        sleep 0.2
    done
}
prop() { systemctl show -p "$1" --value "$unit"; }
# Conditions wait_for polls (evaluated afresh each time).
active() { [ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" != 0 ]; }
restarted() { active && [ "$(prop NRestarts)" = 1 ] && [ "$(prop MainPID)" != "$pid1" ]; }

step "PID 1 is $(cat /proc/1/comm), kernel $abi"
[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is not systemd"
systemctl is-active --quiet systemd-udevd || fail "systemd-udevd is not running"
nvme_tools

step "group hmbtrace, its service user, a member (alice) and an outsider (bob)"
run groupadd --system hmbtrace
run useradd --system --gid hmbtrace --no-create-home --shell /usr/sbin/nologin hmbtrace
run useradd --no-create-home --groups hmbtrace alice
run useradd --no-create-home bob

step "udev rule, daemon and systemd unit, as shipped"
run install -m 0644 "$SHARE/$UDEV_RULE" /etc/udev/rules.d/"$UDEV_RULE"
run udevadm control --reload
run install -m 0755 "$SHARE/$DAEMON" /usr/local/bin/hmb-trace-daemon
run install -m 0644 "$SHARE/$UNIT_FILE" /etc/systemd/system/"$UNIT_FILE"
run systemctl daemon-reload

step "dkms add $PKG_ID (source in $PKG_SRC)"
run cp -r "$SHARE/$KMOD" "$PKG_SRC"
run dkms add "$PKG_ID"
# DKMS's own build of this source for $abi, made in this image's tree on the
# host (see images/dkms_prebuilt.rs): unpacked where dkms build puts it.
run tar -C /var/lib/dkms/"$PKG_ID" -xf "$SHARE/$DKMS_TAR"
dkms status "$PKG_ID" -k "$abi" | grep -q ": built" || fail "dkms status is not 'built': $(dkms status)"
step "dkms install $PKG_ID -k $abi"
run dkms install "$PKG_ID" -k "$abi"
dkms status "$PKG_ID" -k "$abi" | grep -q ": installed" || fail "dkms status is not 'installed': $(dkms status)"
where=$(modinfo -n "$PKG_NAME" 2>>"$GUEST_LOG")
case "$where" in
    /lib/modules/"$abi"/updates/dkms/*|/usr/lib/modules/"$abi"/updates/dkms/*) ;;
    *) fail "modinfo finds $PKG_NAME at '$where', not DKMS's updates/dkms" ;;
esac

step "modprobe $PKG_NAME"
run modprobe "$PKG_NAME"
run udevadm settle --timeout=30
wait_for 30 "no $node after modprobe" test -c "$node"
perm=$(stat -c '%U %G %a' "$node")
step "node $node: $perm"
[ "$perm" = "root hmbtrace 440" ] || fail "node is '$perm', the udev rule says root hmbtrace 440"

step "bob (not in hmbtrace) opens the node"
setpriv --reuid bob --regid bob --init-groups /usr/local/bin/hmb-trace-daemon \
    --device "$node" --output /tmp/bob.bin > /tmp/bob.err 2>&1
rc=$?
cat /tmp/bob.err >> "$GUEST_LOG"
if ! { [ "$rc" -eq 3 ] && grep -q "Permission denied" /tmp/bob.err; }; then
    fail "bob's daemon: exit $rc, '$(cat /tmp/bob.err)'; want exit 3 (device error) with EACCES"
fi
step "bob: EACCES (exit $rc)"
step "alice (in hmbtrace) opens the node"
setpriv --reuid alice --regid alice --init-groups /usr/local/bin/hmb-trace-daemon \
    --device "$node" --output /tmp/alice.bin --stats >> "$GUEST_LOG" 2>&1 &
apid=$!
# The daemon installs its signal handlers before it opens anything, so once
# its file has a header a SIGTERM is a clean stop, however slow the guest.
alice_ready() { [ "$(stat -c %s /tmp/alice.bin 2>/dev/null || echo 0)" -ge 64 ] || ! kill -0 "$apid"; }
wait_for 60 "alice's daemon wrote no trace header" alice_ready
kill -TERM "$apid" 2>/dev/null
wait "$apid"
rc=$?
[ "$rc" -eq 0 ] || fail "alice's daemon exited $rc; want 0 (opened, mapped, stopped by SIGTERM)"
[ "$(stat -c %s /tmp/alice.bin)" -ge 64 ] || fail "alice's trace has no header"
step "alice: read the ring, exit 0"

step "systemctl start $unit"
run systemctl start "$unit"
wait_for 30 "$unit is not active" active
pid1=$(prop MainPID)
user=$(stat -c %U /proc/"$pid1")
step "$unit active, pid $pid1, user $user"
[ "$user" = hmbtrace ] || fail "the daemon runs as $user, the unit says hmbtrace"
touch "$SHARE/$STARTED"
wait_for 300 "the host never asked for the kill" test -e "$SHARE/$KILL"

step "SIGKILL to the daemon (pid $pid1)"
run systemctl kill --signal=SIGKILL --kill-who=main "$unit"
wait_for 60 "systemd did not restart $unit" restarted
pid2=$(prop MainPID)
step "restarted by systemd: pid $pid2, NRestarts $(prop NRestarts)"
touch "$SHARE/$RESTARTED"
wait_for 300 "the host never said stop" test -e "$SHARE/$STOP"

step "systemctl stop $unit"
run systemctl stop "$unit"
result=$(prop Result)
# Result=success rules out a non-zero exit; the daemon's closing stats line
# (printed only on its own way out) rules out a death by the SIGTERM.
[ "$result" = success ] || fail "stop: Result=$result, want success"
journalctl -b --no-pager _PID="$pid2" | grep -q "records=" \
    || fail "the restarted daemon (pid $pid2) printed no closing stats: it did not exit by itself on SIGTERM"
run cp /var/lib/hmb-trace/trace.bin "$SHARE/$TRACE"
step "trace.bin $(stat -c %s /var/lib/hmb-trace/trace.bin) bytes, owner $(stat -c '%U:%G' /var/lib/hmb-trace/trace.bin)"

step "modprobe -r $PKG_NAME; dkms remove $PKG_ID --all"
run modprobe -r "$PKG_NAME"
wait_for 30 "$node still there after modprobe -r" test ! -e "$node"
nvme_traced
run dkms remove "$PKG_ID" --all
modinfo "$PKG_NAME" >/dev/null 2>&1 && fail "modinfo still finds $PKG_NAME after dkms remove"
[ -z "$(dkms status "$PKG_ID")" ] || fail "dkms still lists $PKG_ID: $(dkms status "$PKG_ID")"
journalctl -b --no-pager > "$SHARE/$JOURNAL" 2>&1
dmesg > "$SHARE/$DMESG"
sync
echo "HMBT-RESULT rc=0"
