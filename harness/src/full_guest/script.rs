//! The script the full guest runs as root (from the share, started by the
//! image's hmbt-check.service once systemd has reached multi-user): a user's
//! installation on a host, step by step, checked as it goes. The same steps
//! are the README's "On a host with a real SSD".
//!
//! It talks to the host through files in the share: it creates `STARTED`
//! when the service runs, waits for `KILL` (the host has had the device
//! produce), SIGKILLs the daemon through systemd and creates `RESTARTED`
//! once systemd has restarted it, then waits for `STOP` (the host has
//! stopped the producer and seen the ring drained).

use crate::images::dkms_prebuilt::DkmsPackage;

/// Files in the share.
pub mod files {
    pub const SCRIPT: &str = "run.sh";
    /// The module's source tree (kmod/), copied as DKMS wants it in /usr/src.
    pub const KMOD: &str = "kmod";
    /// DKMS's build of the module (see `images::dkms_prebuilt`).
    pub const DKMS_TAR: &str = "dkms-built.tar";
    pub const DAEMON: &str = "hmb-trace-daemon";
    pub const UNIT: &str = "hmb-trace-daemon.service";
    pub const UDEV_RULE: &str = "60-nvme-hmb-trace.rules";
    pub const STARTED: &str = "daemon.started";
    pub const KILL: &str = "kill";
    pub const RESTARTED: &str = "daemon.restarted";
    pub const STOP: &str = "stop";
    pub const TRACE: &str = "trace.bin";
    /// Every command's output (the console gets only the markers).
    pub const LOG: &str = "guest.log";
    pub const JOURNAL: &str = "journal.txt";
    pub const DMESG: &str = "dmesg.txt";
}

/// The check for the module package `pkg`.
pub fn check_script(pkg: &DkmsPackage) -> String {
    let id = pkg.id();
    let name = &pkg.name;
    let src = pkg.source_dir();
    format!(
        r#"#!/bin/sh
# Written by the harness (harness/src/full_guest/script.rs); run by
# hmbt-check.service in the full Debian guest.
share=/mnt/host
log=$share/{log}
node=/dev/nvme-hmb-trace0
unit=hmb-trace-daemon
abi=$(uname -r)
step() {{ echo "HMBT-STEP $*"; echo "== $*" >> $log; }}
fail() {{
    echo "HMBT-ERROR $*"
    journalctl -b --no-pager > $share/{journal} 2>&1
    dmesg > $share/{dmesg}
    echo "HMBT-RESULT rc=1"
    exit 1
}}
# run CMD...: run it with its output in the log; fail naming it.
run() {{ "$@" >> $log 2>&1 || fail "$* (exit $?)"; }}
# wait_for SECONDS DESCRIPTION TEST...: poll TEST every 0.2 s.
wait_for() {{
    n=$(($1 * 5)); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ $n -le 0 ] && fail "timeout: $what"
        sleep 0.2
    done
}}
prop() {{ systemctl show -p "$1" --value $unit; }}
# Conditions wait_for polls (evaluated afresh each time).
active() {{ [ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" != 0 ]; }}
restarted() {{ active && [ "$(prop NRestarts)" = 1 ] && [ "$(prop MainPID)" != "$pid1" ]; }}

step "PID 1 is $(cat /proc/1/comm), kernel $abi"
[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is not systemd"
systemctl is-active --quiet systemd-udevd || fail "systemd-udevd is not running"
{nvme}

step "group hmbtrace, its service user, a member (alice) and an outsider (bob)"
run groupadd --system hmbtrace
run useradd --system --gid hmbtrace --no-create-home --shell /usr/sbin/nologin hmbtrace
run useradd --no-create-home --groups hmbtrace alice
run useradd --no-create-home bob

step "udev rule, daemon and systemd unit, as shipped"
run install -m 0644 $share/{rule} /etc/udev/rules.d/{rule}
run udevadm control --reload
run install -m 0755 $share/{daemon} /usr/local/bin/hmb-trace-daemon
run install -m 0644 $share/{unit_file} /etc/systemd/system/{unit_file}
run systemctl daemon-reload

step "dkms add {id} (source in {src})"
run cp -r $share/{kmod} {src}
run dkms add {id}
# DKMS's own build of this source for $abi, made in this image's tree on the
# host (see images/dkms_prebuilt.rs): unpacked where dkms build puts it.
run tar -C /var/lib/dkms/{id} -xf $share/{tar}
dkms status {id} -k $abi | grep -q ": built" || fail "dkms status is not 'built': $(dkms status)"
step "dkms install {id} -k $abi"
run dkms install {id} -k $abi
dkms status {id} -k $abi | grep -q ": installed" || fail "dkms status is not 'installed': $(dkms status)"
where=$(modinfo -n {name} 2>>$log)
case "$where" in
    /lib/modules/$abi/updates/dkms/*|/usr/lib/modules/$abi/updates/dkms/*) ;;
    *) fail "modinfo finds {name} at '$where', not DKMS's updates/dkms" ;;
esac

step "modprobe {name}"
run modprobe {name}
run udevadm settle --timeout=30
wait_for 30 "no $node after modprobe" test -c $node
perm=$(stat -c '%U %G %a' $node)
step "node $node: $perm"
[ "$perm" = "root hmbtrace 440" ] || fail "node is '$perm', the udev rule says root hmbtrace 440"

step "bob (not in hmbtrace) opens the node"
setpriv --reuid bob --regid bob --init-groups /usr/local/bin/hmb-trace-daemon \
    --device $node --output /tmp/bob.bin > /tmp/bob.err 2>&1
rc=$?
cat /tmp/bob.err >> $log
[ $rc -eq 3 ] && grep -q "Permission denied" /tmp/bob.err \
    || fail "bob's daemon: exit $rc, '$(cat /tmp/bob.err)'; want exit 3 (device error) with EACCES"
step "bob: EACCES (exit $rc)"
step "alice (in hmbtrace) opens the node"
setpriv --reuid alice --regid alice --init-groups /usr/local/bin/hmb-trace-daemon \
    --device $node --output /tmp/alice.bin --stats >> $log 2>&1 &
apid=$!
# The daemon installs its signal handlers before it opens anything, so once
# its file has a header a SIGTERM is a clean stop, however slow the guest.
alice_ready() {{ [ "$(stat -c %s /tmp/alice.bin 2>/dev/null || echo 0)" -ge 64 ] || ! kill -0 $apid; }}
wait_for 60 "alice's daemon wrote no trace header" alice_ready
kill -TERM $apid 2>/dev/null
wait $apid
rc=$?
[ $rc -eq 0 ] || fail "alice's daemon exited $rc; want 0 (opened, mapped, stopped by SIGTERM)"
[ "$(stat -c %s /tmp/alice.bin)" -ge 64 ] || fail "alice's trace has no header"
step "alice: read the ring, exit 0"

step "systemctl start $unit"
run systemctl start $unit
wait_for 30 "$unit is not active" active
pid1=$(prop MainPID)
user=$(stat -c %U /proc/$pid1)
step "$unit active, pid $pid1, user $user"
[ "$user" = hmbtrace ] || fail "the daemon runs as $user, the unit says hmbtrace"
touch $share/{started}
wait_for 300 "the host never asked for the kill" test -e $share/{kill}

step "SIGKILL to the daemon (pid $pid1)"
run systemctl kill --signal=SIGKILL --kill-who=main $unit
wait_for 60 "systemd did not restart $unit" restarted
pid2=$(prop MainPID)
step "restarted by systemd: pid $pid2, NRestarts $(prop NRestarts)"
touch $share/{restarted}
wait_for 300 "the host never said stop" test -e $share/{stop}

step "systemctl stop $unit"
run systemctl stop $unit
result=$(prop Result)
# Result=success rules out a non-zero exit; the daemon's closing stats line
# (printed only on its own way out) rules out a death by the SIGTERM.
[ "$result" = success ] || fail "stop: Result=$result, want success"
journalctl -b --no-pager _PID=$pid2 | grep -q "records=" \
    || fail "the restarted daemon (pid $pid2) printed no closing stats: it did not exit by itself on SIGTERM"
run cp /var/lib/hmb-trace/trace.bin $share/{trace}
step "trace.bin $(stat -c %s /var/lib/hmb-trace/trace.bin) bytes, owner $(stat -c '%U:%G' /var/lib/hmb-trace/trace.bin)"

step "modprobe -r {name}; dkms remove {id} --all"
run modprobe -r {name}
wait_for 30 "$node still there after modprobe -r" test ! -e $node
run dkms remove {id} --all
modinfo {name} >/dev/null 2>&1 && fail "modinfo still finds {name} after dkms remove"
[ -z "$(dkms status {id})" ] || fail "dkms still lists {id}: $(dkms status {id})"
journalctl -b --no-pager > $share/{journal} 2>&1
dmesg > $share/{dmesg}
sync
echo "HMBT-RESULT rc=0"
"#,
        log = files::LOG,
        journal = files::JOURNAL,
        dmesg = files::DMESG,
        rule = files::UDEV_RULE,
        daemon = files::DAEMON,
        unit_file = files::UNIT,
        kmod = files::KMOD,
        tar = files::DKMS_TAR,
        started = files::STARTED,
        kill = files::KILL,
        restarted = files::RESTARTED,
        stop = files::STOP,
        trace = files::TRACE,
        nvme = super::nvme_tools::guest_section(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_uses_the_package_and_the_shipped_names() {
        let s = check_script(&DkmsPackage {
            name: "nvme-hmb-trace".into(),
            version: "0.1.0".into(),
        });
        for want in [
            "dkms add nvme-hmb-trace/0.1.0",
            "dkms install nvme-hmb-trace/0.1.0 -k $abi",
            "dkms remove nvme-hmb-trace/0.1.0 --all",
            "modprobe nvme-hmb-trace",
            "cp -r $share/kmod /usr/src/nvme-hmb-trace-0.1.0",
            "\"root hmbtrace 440\"",
            "--kill-who=main",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        assert!(!s.contains("{{") && s.ends_with("HMBT-RESULT rc=0\"\n"));
    }
}
