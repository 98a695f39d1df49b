//! The script the guest runs from the 9p share: load the module, start the
//! daemon, wait for the host's stop file, then hand trace.bin back.

/// What the guest job needs to know.
pub struct GuestJob<'a> {
    /// Guest path of nvme-hmb-trace.ko.
    pub module: &'a str,
    /// Module parameters, e.g. `ring_size=16777216`.
    pub module_params: &'a str,
    /// Extra daemon arguments (e.g. `--follow`).
    pub daemon_args: &'a str,
}

/// Files the guest script and the host use to talk through the share.
pub mod files {
    pub const SCRIPT: &str = "run.sh";
    pub const STARTED: &str = "daemon.started";
    pub const STOP: &str = "stop";
    pub const DAEMON_RC: &str = "daemon.rc";
    pub const DAEMON_STDERR: &str = "daemon.stderr";
    pub const TRACE: &str = "trace.bin";
    pub const DMESG: &str = "dmesg.txt";
    pub const SYSFS: &str = "sysfs.txt";
}

pub fn render(job: &GuestJob) -> String {
    format!(
        r#"#!/bin/sh
# Written by `cargo xtask boot`; runs in the guest from the 9p share.
share=/mnt/host
step() {{ echo "HMBT-STEP $*"; }}

step insmod
insmod {module} {params} || {{ echo "HMBT-ERROR insmod failed"; exit 10; }}
i=0
while [ ! -e /dev/nvme-hmb-trace0 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && {{ echo "HMBT-ERROR no /dev/nvme-hmb-trace0"; exit 11; }}
    sleep 0.1
done

step daemon
/bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output /tmp/{trace} --stats {daemon_args} 2>$share/{stderr} &
daemon=$!
touch $share/{started}
while [ ! -e $share/{stop} ] && kill -0 $daemon 2>/dev/null; do
    sleep 0.2
done
kill -TERM $daemon 2>/dev/null
wait $daemon
echo $? > $share/{rc}
step collect
cp /tmp/{trace} $share/{trace} 2>/dev/null
for f in /sys/class/nvme-hmb-trace/nvme-hmb-trace0/*; do
    [ -f "$f" ] && echo "$(basename $f) $(cat $f 2>/dev/null)"
done > $share/{sysfs}
dmesg > $share/{dmesg}
sync
exit 0
"#,
        module = job.module,
        params = job.module_params,
        daemon_args = job.daemon_args,
        trace = files::TRACE,
        stderr = files::DAEMON_STDERR,
        started = files::STARTED,
        stop = files::STOP,
        rc = files::DAEMON_RC,
        sysfs = files::SYSFS,
        dmesg = files::DMESG,
    )
}
