//! `cargo xtask conformance`: the conformance scenarios on one kernel and
//! device or on the whole matrix (kernels x devices), through cargo-nextest
//! (one process per scenario, in parallel where the machine allows), a
//! scenario-by-(kernel, device) table that says "n/a" and why where a
//! scenario does not apply to a device (hmb_harness::matrix), and JUnit.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use hmb_harness::images::kernels;
use hmb_harness::matrix::{self, Applies, Device};
use hmb_harness::nvme_guest;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::{ivshmem_session, target_dir, workspace_root};

#[derive(Args, Clone)]
pub struct Conformance {
    /// A kernel from images/KERNELS, or `all` (default: the first line).
    #[arg(long)]
    pub kernel: Option<String>,
    /// The emulated device: ivshmem, nvme, or all (both).
    #[arg(long, default_value = "all", value_parser = ["ivshmem", "nvme", "all"])]
    pub device: String,
    /// QEMU for the ivshmem device: bookworm's 7.2 or bookworm-backports'
    /// 10.0 (the nvme device always runs trixie-backports' 11.1, the first
    /// with vfio-user-pci).
    #[arg(long, value_enum, default_value = "7.2")]
    pub qemu: QemuVersion,
    /// Run only this scenario, or these (comma-separated; see
    /// conformance/src/scenarios/: streaming, overflow, ...).
    #[arg(long)]
    pub scenario: Option<String>,
    /// `reset`: add a controller reset to the streaming scenario (on nvme,
    /// a device-side failure, CSTS.CFS).
    #[arg(long, value_parser = ["reset"])]
    pub inject: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// On the kernel the debug kernel is built from (6.12), leave out the
    /// lock scenarios: `cargo xtask debug-kernel` runs them on 6.12-debug,
    /// the same source with lockdep, KASAN and the other checks on (what
    /// the test command does: that is its last step).
    #[arg(long)]
    pub lock_scenarios_on_debug_kernel: bool,
    /// Scenarios at a time (each boots a TCG guest); default: the
    /// `conformance` profile's in .config/nextest.toml.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub test_threads: Option<u16>,
}

/// One scenario's result on one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub seconds: f64,
    pub passed: bool,
}

impl Conformance {
    pub fn run(self, sh: &Shell) -> Result<()> {
        run(self, sh)
    }
}

/// One column of the table: a kernel on a device.
struct Column {
    kernel: String,
    device: Device,
    cases: Vec<CaseResult>,
    /// Scenarios left to the debug kernel's step (`--lock-scenarios-on-debug-kernel`).
    on_debug_kernel: Vec<&'static str>,
    seconds: f64,
}

fn run(args: Conformance, sh: &Shell) -> Result<()> {
    let root = workspace_root();
    sh.change_dir(&root);
    let specs = kernels::load(&root.join("images/KERNELS"))?;
    let selected: Vec<String> = match args.kernel.as_deref() {
        Some("all") => specs.iter().map(|s| s.name.clone()).collect(),
        other => vec![kernels::select(&specs, other)?.name],
    };
    let devices: Vec<Device> = match args.device.as_str() {
        "all" => Device::ALL.to_vec(),
        one => vec![Device::parse(one)?],
    };
    let wanted: Option<Vec<&str>> = args.scenario.as_deref().map(|s| s.split(',').map(str::trim).collect());
    for name in wanted.iter().flatten() {
        let scenario = matrix::find(name).with_context(|| {
            let all: Vec<&str> = matrix::SCENARIOS.iter().map(|s| s.name).collect();
            format!("unknown scenario {name:?}; known: {}", all.join(", "))
        })?;
        if devices.iter().all(|d| scenario.on(*d) != Applies::Yes) {
            bail!("scenario {name} applies to none of the selected devices; see `cargo xtask conformance --help`");
        }
    }
    crate::cargo_tool::ensure_nextest(sh)?;
    let out_dir = target_dir().join("hmb-trace/conformance");
    std::fs::create_dir_all(&out_dir)?;
    let mut table: Vec<Column> = Vec::new();
    let mut junit_suites = Vec::new();
    for kernel in &selected {
        for &device in &devices {
            let qemu = match device {
                Device::Ivshmem => args.qemu,
                Device::Nvme => QemuVersion::V11_1,
            };
            let on_debug_kernel: Vec<&'static str> = match args.lock_scenarios_on_debug_kernel {
                true => debug_kernel_scenarios(&specs, kernel, device)?,
                false => Vec::new(),
            };
            let names: Vec<&str> = matrix::on(device, kernel)
                .into_iter()
                .filter(|n| wanted.as_ref().is_none_or(|want| want.contains(n)))
                .filter(|n| !on_debug_kernel.contains(n))
                .collect();
            if names.is_empty() {
                continue;
            }
            let qemu_name = qemu.name();
            println!(
                "==> conformance on kernel {kernel}, device {}, QEMU {qemu_name}",
                device.name()
            );
            let start = Instant::now();
            // Build the image once here so the parallel scenarios find it cached.
            let mut phases = Phases::new();
            match device {
                Device::Ivshmem => drop(ivshmem_session::prepare(sh, Some(kernel), qemu, &mut phases)?),
                Device::Nvme => drop(nvme_guest::prepare(sh, Some(kernel), true, &mut phases)?),
            }
            // Only the scenarios that apply to this device (and the suite's
            // own consistency test); the others are "n/a" in the table.
            let expr = names
                .iter()
                .map(|n| format!("test(={n})"))
                .chain(std::iter::once("test(=every_scenario_has_a_test)".to_string()))
                .collect::<Vec<_>>()
                .join(" | ");
            let threads: Vec<String> = args
                .test_threads
                .map(|n| vec!["--test-threads".to_string(), n.to_string()])
                .unwrap_or_default();
            let status = cmd!(
                sh,
                "cargo nextest run -p conformance --profile conformance --run-ignored all --no-tests fail {threads...} -E {expr}"
            )
            .env("HMB_TRACE_KERNEL", kernel)
            .env("HMB_TRACE_DEVICE", device.name())
            .env("HMB_TRACE_QEMU", qemu_name)
            .env("HMB_TRACE_INJECT", args.inject.clone().unwrap_or_default())
            .quiet()
            .run();
            // .config/nextest.toml puts the store under the workspace root.
            let junit = root.join("target/nextest/conformance/junit.xml");
            let xml = std::fs::read_to_string(&junit).with_context(|| format!("reading {}", junit.display()))?;
            let kept = out_dir.join(format!("junit-{kernel}-{}-qemu-{qemu_name}.xml", device.name()));
            std::fs::write(&kept, &xml)?;
            let cases = parse_junit(&xml);
            if status.is_err() && cases.iter().all(|c| c.passed) {
                bail!(
                    "cargo nextest failed before running the scenarios on {kernel} ({})",
                    device.name()
                );
            }
            junit_suites.push(suites_of(&xml, &format!("{kernel}-{}", device.name()), qemu_name));
            table.push(Column {
                kernel: kernel.clone(),
                device,
                cases,
                on_debug_kernel,
                seconds: start.elapsed().as_secs_f64(),
            });
        }
    }
    print_table(&table);
    if let Some(path) = &args.junit {
        write_junit(path, &junit_suites)?;
        println!("JUnit: {}", path.display());
    }
    let failed: usize = table.iter().map(|c| c.cases.iter().filter(|c| !c.passed).count()).sum();
    if failed > 0 {
        bail!(
            "{failed} conformance case(s) failed; run folders under {}",
            out_dir.display()
        );
    }
    Ok(())
}

/// The lock scenarios of `device` when `kernel` is the one the debug kernel
/// is built from, none otherwise.
fn debug_kernel_scenarios(specs: &[kernels::KernelSpec], kernel: &str, device: Device) -> Result<Vec<&'static str>> {
    let debug = kernels::select(specs, Some(crate::debug_kernel::KERNEL))?;
    if debug.debian().name != kernel {
        return Ok(Vec::new());
    }
    Ok(crate::debug_kernel::lock_scenarios(device).to_vec())
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let end = tag[start..].find('"')? + start;
    Some(tag[start..end].to_string())
}

/// Test cases of a JUnit file: name, time, and whether it has a failure or error.
pub fn parse_junit(xml: &str) -> Vec<CaseResult> {
    let mut cases = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<testcase ") {
        rest = &rest[at..];
        let tag_end = rest.find('>').unwrap_or(rest.len());
        let tag = &rest[..tag_end];
        let self_closing = tag.ends_with('/');
        let body_end = if self_closing {
            tag_end
        } else {
            rest.find("</testcase>").unwrap_or(rest.len())
        };
        let body = &rest[..body_end];
        let name = attr(tag, "name").unwrap_or_default();
        let short = name.rsplit("::").next().unwrap_or(&name).to_string();
        cases.push(CaseResult {
            name: short,
            seconds: attr(tag, "time").and_then(|t| t.parse().ok()).unwrap_or(0.0),
            passed: !(body.contains("<failure") || body.contains("<error")),
        });
        rest = &rest[body_end.max(1)..];
    }
    cases
}

/// The `<testsuite>` elements of one run, renamed to carry kernel and QEMU.
fn suites_of(xml: &str, kernel: &str, qemu: &str) -> String {
    let start = xml.find("<testsuite ").unwrap_or(xml.len());
    let end = xml.rfind("</testsuites>").unwrap_or(xml.len());
    xml[start..end].replace(
        "<testsuite name=\"",
        &format!("<testsuite name=\"kernel-{kernel}-qemu-{qemu}/"),
    )
}

fn write_junit(path: &Path, suites: &[String]) -> Result<()> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"hmb-trace-conformance\">\n{}</testsuites>\n",
        suites.concat()
    );
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// Scenarios down, (kernel, device) across; "n/a" where a scenario does not
/// apply to the device, with the reasons listed under the table.
fn print_table(table: &[Column]) {
    let width = 15;
    print!("\n{:<28}", "scenario");
    for c in table {
        print!(" {:>width$}", format!("{}/{}", c.kernel, c.device.name()));
    }
    println!();
    let mut reasons: Vec<String> = Vec::new();
    let mut rows: Vec<&str> = matrix::SCENARIOS.iter().map(|s| s.name).collect();
    for c in table {
        for case in &c.cases {
            if !rows.contains(&case.name.as_str()) {
                rows.push(&case.name);
            }
        }
    }
    for name in rows {
        print!("{name:<28}");
        for c in table {
            let cell = match c.cases.iter().find(|case| case.name == name) {
                Some(case) if case.passed => format!("pass {:.1}s", case.seconds),
                Some(case) => format!("FAIL {:.1}s", case.seconds),
                None if c.on_debug_kernel.contains(&name) => {
                    let line = format!(
                        "{name} on {} {}: on {} (cargo xtask debug-kernel)",
                        c.device.name(),
                        c.kernel,
                        crate::debug_kernel::KERNEL
                    );
                    if !reasons.contains(&line) {
                        reasons.push(line);
                    }
                    "debug".to_string()
                }
                None => match matrix::find(name).map(|s| s.on_kernel(c.device, &c.kernel)) {
                    Some(Applies::No(why)) => {
                        let line = format!("{name} on {}: {why}", c.device.name());
                        let line = match matrix::find(name).and_then(|s| s.kernels) {
                            Some((_, kwhy)) if kwhy == why => {
                                format!("{name} on {} {}: {why}", c.device.name(), c.kernel)
                            }
                            _ => line,
                        };
                        if !reasons.contains(&line) {
                            reasons.push(line);
                        }
                        "n/a".to_string()
                    }
                    _ => "-".to_string(),
                },
            };
            print!(" {cell:>width$}");
        }
        println!();
    }
    print!("{:<28}", "wall time");
    for c in table {
        print!(" {:>width$}", format!("{:.0}s", c.seconds));
    }
    println!();
    if !reasons.is_empty() {
        println!("\nnot run in this table (n/a, or debug: on the debug kernel):");
        for r in reasons {
            println!("  {r}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--lock-scenarios-on-debug-kernel` leaves out the lock scenarios on
    /// 6.12 only, and every one it leaves out runs on 6.12-debug.
    #[test]
    fn only_the_debug_kernels_source_leaves_its_lock_scenarios_to_it() {
        let specs = kernels::load(&workspace_root().join("images/KERNELS")).unwrap();
        let debug = kernels::select(&specs, Some(crate::debug_kernel::KERNEL)).unwrap();
        for device in Device::ALL {
            for spec in &specs {
                let left = debug_kernel_scenarios(&specs, &spec.name, device).unwrap();
                if spec.name == debug.debian().name {
                    assert_eq!(left, crate::debug_kernel::lock_scenarios(device));
                    let on_debug = matrix::on(device, crate::debug_kernel::KERNEL);
                    assert!(
                        left.iter().all(|n| on_debug.contains(n)),
                        "{left:?} on {}",
                        device.name()
                    );
                } else {
                    assert!(left.is_empty(), "{} leaves {left:?}", spec.name);
                }
            }
        }
    }

    #[test]
    fn junit_cases_are_read_with_failures() {
        let xml = r#"<testsuites><testsuite name="conformance::conformance" tests="2">
<testcase name="streaming" classname="conformance::conformance" time="41.5"></testcase>
<testcase name="overflow" classname="conformance::conformance" time="3.0"><failure type="test failure">boom</failure></testcase>
<testcase name="every_scenario_has_a_test" time="0.01"/>
</testsuite></testsuites>"#;
        let cases = parse_junit(xml);
        assert_eq!(
            cases,
            vec![
                CaseResult {
                    name: "streaming".into(),
                    seconds: 41.5,
                    passed: true
                },
                CaseResult {
                    name: "overflow".into(),
                    seconds: 3.0,
                    passed: false
                },
                CaseResult {
                    name: "every_scenario_has_a_test".into(),
                    seconds: 0.01,
                    passed: true
                },
            ]
        );
        let suites = suites_of(xml, "6.1", "7.2");
        assert!(suites.starts_with("<testsuite name=\"kernel-6.1-qemu-7.2/conformance::conformance\""));
    }
}
