//! `cargo xtask conformance`: the conformance scenarios on one kernel or on
//! the whole matrix, through cargo-nextest (one process per scenario, in
//! parallel where the machine allows), a kernel-by-scenario table, and JUnit.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use hmb_harness::images::kernels;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::{session, target_dir, workspace_root};

#[derive(Args, Clone)]
pub struct Conformance {
    /// A kernel from images/KERNELS, or `all` (default: the first line).
    #[arg(long)]
    pub kernel: Option<String>,
    /// QEMU: bookworm's 7.2 or bookworm-backports' 10.0.
    #[arg(long, value_enum, default_value = "7.2")]
    pub qemu: QemuVersion,
    /// Run only this scenario (see conformance/src/scenarios.rs: streaming, overflow, ...).
    #[arg(long)]
    pub scenario: Option<String>,
    /// `reset`: add a controller reset to the streaming scenario.
    #[arg(long, value_parser = ["reset"])]
    pub inject: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
}

/// One scenario's result on one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub seconds: f64,
    pub passed: bool,
}

impl Conformance {
    pub fn run(self) -> Result<()> {
        run(self)
    }
}

fn run(args: Conformance) -> Result<()> {
    let sh = Shell::new()?;
    let root = workspace_root();
    sh.change_dir(&root);
    let specs = kernels::load(&root.join("images/KERNELS"))?;
    let selected: Vec<String> = match args.kernel.as_deref() {
        Some("all") => specs.iter().map(|s| s.name.clone()).collect(),
        other => vec![kernels::select(&specs, other)?.name],
    };
    let qemu_name = args.qemu.name();
    ensure_nextest(&sh)?;
    let out_dir = target_dir().join("hmb-trace/conformance");
    std::fs::create_dir_all(&out_dir)?;
    let mut table: Vec<(String, Vec<CaseResult>, f64)> = Vec::new();
    let mut junit_suites = Vec::new();
    for kernel in &selected {
        println!("==> conformance on kernel {kernel}, QEMU {qemu_name}");
        let start = Instant::now();
        // Build the image once here so the parallel scenarios find it cached.
        let mut phases = Phases::new();
        session::prepare(&sh, Some(kernel), args.qemu, &mut phases)?;
        let filter: Vec<String> = match &args.scenario {
            Some(name) => vec!["-E".into(), format!("test(={name})")],
            None => Vec::new(),
        };
        let status = cmd!(
            sh,
            "cargo nextest run -p conformance --profile conformance --run-ignored all --no-tests fail {filter...}"
        )
        .env("HMB_TRACE_KERNEL", kernel)
        .env("HMB_TRACE_QEMU", qemu_name)
        .env("HMB_TRACE_INJECT", args.inject.clone().unwrap_or_default())
        .quiet()
        .run();
        // .config/nextest.toml puts the store under the workspace root.
        let junit = root.join("target/nextest/conformance/junit.xml");
        let xml = std::fs::read_to_string(&junit).with_context(|| format!("reading {}", junit.display()))?;
        let kept = out_dir.join(format!("junit-{kernel}-qemu-{qemu_name}.xml"));
        std::fs::write(&kept, &xml)?;
        let cases = parse_junit(&xml);
        if status.is_err() && cases.iter().all(|c| c.passed) {
            bail!("cargo nextest failed before running the scenarios on {kernel}");
        }
        junit_suites.push(suites_of(&xml, kernel, qemu_name));
        table.push((kernel.clone(), cases, start.elapsed().as_secs_f64()));
    }
    print_table(&table);
    if let Some(path) = &args.junit {
        write_junit(path, &junit_suites)?;
        println!("JUnit: {}", path.display());
    }
    let failed: usize = table
        .iter()
        .map(|(_, cases, _)| cases.iter().filter(|c| !c.passed).count())
        .sum();
    if failed > 0 {
        bail!(
            "{failed} conformance case(s) failed; run folders under {}",
            out_dir.display()
        );
    }
    Ok(())
}

/// cargo-nextest runs each scenario in its own process and writes JUnit.
fn ensure_nextest(sh: &Shell) -> Result<()> {
    if cmd!(sh, "cargo nextest --version")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok()
    {
        return Ok(());
    }
    println!("installing cargo-nextest (crates.io): runs the conformance scenarios one process each, with JUnit");
    cmd!(sh, "cargo install --locked cargo-nextest")
        .run()
        .context("installing cargo-nextest")?;
    Ok(())
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

fn print_table(table: &[(String, Vec<CaseResult>, f64)]) {
    let mut names: Vec<String> = Vec::new();
    for (_, cases, _) in table {
        for c in cases {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
    }
    print!("\n{:<28}", "scenario");
    for (kernel, _, _) in table {
        print!(" {:>14}", kernel);
    }
    println!();
    for name in &names {
        print!("{name:<28}");
        for (_, cases, _) in table {
            let cell = match cases.iter().find(|c| &c.name == name) {
                Some(c) if c.passed => format!("pass {:.1}s", c.seconds),
                Some(c) => format!("FAIL {:.1}s", c.seconds),
                None => "-".to_string(),
            };
            print!(" {cell:>14}");
        }
        println!();
    }
    print!("{:<28}", "wall time");
    for (_, _, secs) in table {
        print!(" {:>14}", format!("{secs:.0}s"));
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

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
