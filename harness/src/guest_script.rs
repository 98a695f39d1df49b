//! Scripts the guest runs from the 9p share (`/mnt/host/run.sh`): a prelude
//! of small shell functions (load the module, start and stop the daemon,
//! collect results) and a body that uses them.

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

/// The prelude every guest script starts with. `module` is the guest path of
/// nvme-hmb-trace.ko.
pub fn prelude(module: &str) -> String {
    format!(
        r#"#!/bin/sh
# Written by xtask; runs in the guest from the 9p share.
share=/mnt/host
step() {{ echo "HMBT-STEP $*"; }}
fail() {{ echo "HMBT-ERROR $*"; exit 1; }}
# mark NAME / wait_file NAME: rendezvous with the host through the share.
mark() {{ touch $share/$1; }}
wait_file() {{ while [ ! -e $share/$1 ]; do sleep 0.1; done; }}

# load_module [PARAM=VALUE...]: insmod and wait for the device node.
load_module() {{
    step insmod "$@"
    insmod {module} "$@" || fail "insmod failed"
    i=0
    while [ ! -e /dev/nvme-hmb-trace0 ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "no /dev/nvme-hmb-trace0"
        sleep 0.1
    done
}}

# load_on_demand_modules: the image's modules not loaded at boot
# (images/guest/modules-on-demand), dependencies first.
load_on_demand_modules() {{
    while read -r m; do
        insmod "$m" || fail "insmod $m failed"
    done < /etc/hmbt/on-demand-modules
}}

# start_daemon [ARGS...]: run the daemon in the background, appending to trace.bin.
start_daemon() {{
    step daemon "$@"
    /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output /tmp/{trace} --stats "$@" 2>>$share/{stderr} &
    daemon=$!
    touch $share/{started}
}}

# wait_stop: until the host creates the stop file or the daemon exits.
wait_stop() {{
    while [ ! -e $share/{stop} ] && kill -0 $daemon 2>/dev/null; do
        sleep 0.2
    done
}}

# stop_daemon: SIGTERM (finish the batch, exit 0), record the exit code.
stop_daemon() {{
    kill -TERM $daemon 2>/dev/null
    wait $daemon
    rc=$?
    echo $rc >> $share/{rc}
    step daemon-exit $rc
}}

# collect: hand trace.bin, sysfs counters and the kernel log to the host.
collect() {{
    step collect
    cp /tmp/{trace} $share/{trace} 2>/dev/null
    for f in /sys/class/nvme-hmb-trace/nvme-hmb-trace0/*; do
        [ -f "$f" ] && echo "$(basename $f) $(cat $f 2>/dev/null)"
    done > $share/{sysfs}
    dmesg > $share/{dmesg}
    sync
}}
"#,
        trace = files::TRACE,
        stderr = files::DAEMON_STDERR,
        started = files::STARTED,
        stop = files::STOP,
        rc = files::DAEMON_RC,
        sysfs = files::SYSFS,
        dmesg = files::DMESG,
    )
}

/// The main job: stream until the host says stop.
pub fn streaming(module: &str, module_params: &str, daemon_args: &str) -> String {
    prelude(module)
        + &format!("load_module {module_params}\nstart_daemon {daemon_args}\nwait_stop\nstop_daemon\ncollect\nexit 0\n")
}
