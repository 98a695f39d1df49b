//! Scripts the guest runs from the 9p share (`/mnt/host/run.sh`): a prelude
//! of small shell functions (load the module, start and stop the daemon,
//! collect results) and a body that uses them.

/// Files the guest script and the host use to talk through the share.
pub mod files {
    pub(crate) const SCRIPT: &str = "run.sh";
    pub const STARTED: &str = "daemon.started";
    pub const STOP: &str = "stop";
    pub const DAEMON_RC: &str = "daemon.rc";
    pub const DAEMON_STDERR: &str = "daemon.stderr";
    pub const TRACE: &str = "trace.bin";
    pub const DMESG: &str = "dmesg.txt";
    pub(crate) const SYSFS: &str = "sysfs.txt";
}

/// A guest script: `#!/bin/sh`, its parameters as variable assignments, then
/// files of harness/guest-scripts/ and body lines. The shell lives in those
/// files (shellcheck checks them: harness/tests/guest_scripts.rs); the host
/// only sets the variables they read.
#[derive(Debug, Clone)]
pub struct Script {
    text: String,
}

impl Script {
    /// A script run from the share (mounted at /mnt/host, `$SHARE`).
    pub fn new() -> Script {
        Script {
            text: "#!/bin/sh\n# Written by the host from harness/guest-scripts/ (harness/src/guest_script.rs).\n"
                .to_string(),
        }
        .set("SHARE", "/mnt/host")
    }

    /// `NAME='value'`: a parameter of the files that follow.
    pub fn set(mut self, name: &str, value: impl std::fmt::Display) -> Script {
        debug_assert!(name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
        self.text.push_str(&format!("{name}={}\n", quote(&value.to_string())));
        self
    }

    /// One of harness/guest-scripts/.
    pub fn file(mut self, file: &ScriptFile) -> Script {
        self.text.push_str(&format!("# ---- {} ----\n", file.name));
        self.text.push_str(file.text);
        self
    }

    /// Lines of the job itself (a scenario body: calls of the files' functions).
    pub fn body(mut self, lines: &str) -> Script {
        self.text.push_str(lines);
        self
    }

    pub fn build(self) -> String {
        self.text
    }
}

impl Default for Script {
    fn default() -> Script {
        Script::new()
    }
}

/// `value` as one single-quoted shell word.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// A shell file of harness/guest-scripts/, built into the harness.
#[derive(Debug, Clone, Copy)]
pub struct ScriptFile {
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! script_file {
    ($name:literal) => {
        ScriptFile {
            name: $name,
            text: include_str!(concat!("../guest-scripts/", $name)),
        }
    };
}

/// Functions every ivshmem-side script body calls (load the module, start
/// and stop the daemon, collect results).
pub(crate) const IVSHMEM_PRELUDE: ScriptFile = script_file!("ivshmem-prelude.sh");

/// Functions of every guest on emu-device's NVMe controller.
pub(crate) const NVME_LIB: ScriptFile = script_file!("nvme-lib.sh");

/// The conformance sessions on the NVMe controller (after the two above).
pub(crate) const NVME_SESSION: ScriptFile = script_file!("nvme-session.sh");

/// `cargo xtask boot --device nvme`'s checks (after nvme-lib.sh).
pub(crate) const NVME_BOOT: ScriptFile = script_file!("nvme-boot.sh");

/// The boot's driver-against-personality loads (issue 26, after nvme-lib.sh).
pub(crate) const NVME_PERSONALITIES: ScriptFile = script_file!("nvme-personalities.sh");

/// `cargo xtask soak --device nvme`'s guest (after nvme-lib.sh).
pub(crate) const NVME_SOAK: ScriptFile = script_file!("nvme-soak.sh");

/// The main ivshmem job, streaming until the host says stop (after the prelude).
pub(crate) const IVSHMEM_STREAM: ScriptFile = script_file!("ivshmem-stream.sh");

/// `cargo xtask soak --device ivshmem`'s job (after the prelude).
pub(crate) const IVSHMEM_SOAK: ScriptFile = script_file!("ivshmem-soak.sh");

/// `cargo xtask guest-smoke`'s guest: the kernel boots, our modules load.
pub const GUEST_SMOKE: ScriptFile = script_file!("guest-smoke.sh");

/// `cargo xtask nvme-smoke`'s guest (after nvme-lib.sh).
pub const NVME_SMOKE: ScriptFile = script_file!("nvme-smoke.sh");

/// The full Debian guest's check (harness/src/full_guest/script.rs).
pub(crate) const FULL_GUEST_CHECK: ScriptFile = script_file!("full-guest-check.sh");

/// The full guest's NVMe tools section: a function the check calls.
pub(crate) const FULL_GUEST_NVME_TOOLS: ScriptFile = script_file!("full-guest-nvme-tools.sh");

/// The full guest's traced run on the NVMe controller: a function the check calls.
pub(crate) const FULL_GUEST_NVME_TRACED: ScriptFile = script_file!("full-guest-nvme-traced.sh");

/// `cargo xtask bench --nvme`'s fio jobs in the full guest.
pub(crate) const FULL_GUEST_NVME_BENCH: ScriptFile = script_file!("full-guest-nvme-bench.sh");

/// Every file of harness/guest-scripts/ (the shellcheck test checks that
/// this list and the folder agree).
pub const ALL_FILES: &[ScriptFile] = &[
    IVSHMEM_PRELUDE,
    IVSHMEM_STREAM,
    IVSHMEM_SOAK,
    GUEST_SMOKE,
    NVME_LIB,
    NVME_SESSION,
    NVME_BOOT,
    NVME_PERSONALITIES,
    NVME_SOAK,
    NVME_SMOKE,
    FULL_GUEST_CHECK,
    FULL_GUEST_NVME_TOOLS,
    FULL_GUEST_NVME_TRACED,
    FULL_GUEST_NVME_BENCH,
];

/// The prelude every ivshmem guest script starts with. `module` is the
/// guest path of nvme-hmb-trace.ko.
pub fn prelude(module: &str) -> Script {
    Script::new()
        .set("MODULE", module)
        .set("TRACE", files::TRACE)
        .set("DAEMON_STDERR", files::DAEMON_STDERR)
        .set("STARTED", files::STARTED)
        .set("STOP", files::STOP)
        .set("DAEMON_RC", files::DAEMON_RC)
        .set("SYSFS", files::SYSFS)
        .set("DMESG", files::DMESG)
        .file(&IVSHMEM_PRELUDE)
}

/// The main job: stream until the host says stop. `module_params` and
/// `daemon_args` are lists of words (PARAM=VALUE; daemon flags).
pub fn streaming(module: &str, module_params: &str, daemon_args: &str) -> String {
    prelude(module)
        .set("MODULE_PARAMS", module_params)
        .set("DAEMON_ARGS", daemon_args)
        .file(&IVSHMEM_STREAM)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_single_quoted_words() {
        let s = Script::new().set("A", "x y").set("B", "it's").build();
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("SHARE='/mnt/host'\n"));
        assert!(s.contains("A='x y'\n"));
        assert!(s.contains(r"B='it'\''s'"));
    }

    #[test]
    fn the_prelude_names_the_shared_files_and_the_module() {
        let s = streaming("/lib/m.ko", "ring_size=8192", "--follow");
        for want in [
            "MODULE='/lib/m.ko'",
            "TRACE='trace.bin'",
            "STOP='stop'",
            "MODULE_PARAMS='ring_size=8192'",
            "DAEMON_ARGS='--follow'",
            "load_module $MODULE_PARAMS\n",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        assert!(s.find("start_daemon()").unwrap() < s.find("start_daemon $DAEMON_ARGS").unwrap());
    }
}
