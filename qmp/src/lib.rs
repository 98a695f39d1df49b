//! A small blocking QMP client for the hmb-trace harness (xtask,
//! conformance): connect, wait for QEMU to be ready, `query-status`,
//! `stop`, `cont`, `system_reset`, `device_del`, `quit`, and HMP commands.
//!
//! Command and result types come from the `qapi` crate (generated from
//! QEMU's schema). The wire loop is ours: every call has a deadline (socket
//! timeouts), events are kept as raw JSON so that an event newer than the
//! crate's schema cannot break a command, and nothing panics on EOF.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use qapi::qmp;
pub use qapi::qmp::{RunState, StatusInfo};
use qapi::Command;
use serde_json::{json, Value};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum QmpError {
    #[error("could not connect to QMP socket {path} within {secs:.1}s: {last}")]
    Connect { path: String, secs: f64, last: String },
    #[error("QMP timed out after {secs:.1}s waiting for {what}")]
    Timeout { what: String, secs: f64 },
    #[error("QMP I/O error during {what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("QEMU closed the QMP connection during {0}")]
    Closed(String),
    #[error("QEMU refused {command}: {class}: {desc}")]
    Command {
        command: String,
        class: String,
        desc: String,
    },
    #[error("unexpected QMP message during {what}: {msg}")]
    Protocol { what: String, msg: String },
    #[error("this QMP connection is unusable after an earlier timeout or error; reconnect")]
    Broken,
}

/// One QMP connection. After a timeout or I/O error it refuses further
/// calls (the stream position is unknown); connect again.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    events: Vec<Value>,
    broken: bool,
    /// QEMU version from the greeting, e.g. "7.2.22".
    pub version: String,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Qmp {
    /// Connect to `path` (retrying while QEMU has not created the socket
    /// yet), read the greeting and negotiate capabilities, all within
    /// `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, QmpError> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    log::trace!("QMP connect {}: {e}", path.display());
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(QmpError::Connect {
                        path: path.display().to_string(),
                        secs: secs(timeout),
                        last: e.to_string(),
                    })
                }
            }
        };
        let writer = stream.try_clone().map_err(|e| QmpError::Io {
            what: "connect".into(),
            source: e,
        })?;
        let mut qmp = Self {
            reader: BufReader::new(stream),
            writer,
            events: Vec::new(),
            broken: false,
            version: String::new(),
        };
        let greeting = qmp.read_message("the QMP greeting", deadline)?;
        let v = &greeting["QMP"]["version"]["qemu"];
        if v.is_null() {
            return Err(QmpError::Protocol {
                what: "greeting".into(),
                msg: greeting.to_string(),
            });
        }
        qmp.version = format!("{}.{}.{}", v["major"], v["minor"], v["micro"]);
        qmp.execute(
            &qmp::qmp_capabilities { enable: None },
            deadline.saturating_duration_since(Instant::now()),
        )?;
        Ok(qmp)
    }

    /// Connect, then wait until `query-status` answers.
    pub fn wait_ready(path: &Path, timeout: Duration) -> Result<(Self, StatusInfo), QmpError> {
        let deadline = Instant::now() + timeout;
        let mut qmp = Self::connect(path, timeout)?;
        let status = qmp.query_status(deadline.saturating_duration_since(Instant::now()))?;
        Ok((qmp, status))
    }

    fn read_message(&mut self, what: &str, deadline: Instant) -> Result<Value, QmpError> {
        if self.broken {
            return Err(QmpError::Broken);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            self.broken = true;
            return Err(QmpError::Timeout {
                what: what.into(),
                secs: 0.0,
            });
        }
        let set = self.reader.get_ref().set_read_timeout(Some(left));
        set.map_err(|e| QmpError::Io {
            what: what.into(),
            source: e,
        })?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => {
                self.broken = true;
                Err(QmpError::Closed(what.into()))
            }
            Ok(_) => serde_json::from_str(&line).map_err(|e| {
                self.broken = true;
                QmpError::Protocol {
                    what: what.into(),
                    msg: format!("{e}: {line:?}"),
                }
            }),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                self.broken = true;
                Err(QmpError::Timeout {
                    what: what.into(),
                    secs: secs(left),
                })
            }
            Err(e) => {
                self.broken = true;
                Err(QmpError::Io {
                    what: what.into(),
                    source: e,
                })
            }
        }
    }

    /// Send `{"execute": C::NAME, "arguments": cmd}` and wait for its
    /// answer; events arriving meanwhile are queued.
    pub fn execute<C: Command>(&mut self, cmd: &C, timeout: Duration) -> Result<C::Ok, QmpError> {
        self.execute_raw(C::NAME, serde_json::to_value(cmd).unwrap_or(Value::Null), timeout)
            .and_then(|v| {
                serde_json::from_value(v.clone()).map_err(|e| QmpError::Protocol {
                    what: C::NAME.into(),
                    msg: format!("{e}: {v}"),
                })
            })
    }

    fn execute_raw(&mut self, name: &str, args: Value, timeout: Duration) -> Result<Value, QmpError> {
        if self.broken {
            return Err(QmpError::Broken);
        }
        let deadline = Instant::now() + timeout;
        let mut msg = json!({ "execute": name });
        if args.as_object().is_some_and(|o| !o.is_empty()) {
            msg["arguments"] = args;
        }
        let mut text = msg.to_string();
        text.push('\n');
        self.writer
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .ok();
        if let Err(e) = self.writer.write_all(text.as_bytes()) {
            self.broken = true;
            return Err(QmpError::Io {
                what: name.into(),
                source: e,
            });
        }
        loop {
            let v = self.read_message(name, deadline)?;
            if v.get("event").is_some() {
                log::debug!("QMP event {}", v["event"]);
                self.events.push(v);
            } else if let Some(r) = v.get("return") {
                return Ok(r.clone());
            } else if let Some(e) = v.get("error") {
                return Err(QmpError::Command {
                    command: name.into(),
                    class: e["class"].as_str().unwrap_or("?").into(),
                    desc: e["desc"].as_str().unwrap_or("?").into(),
                });
            } else {
                self.broken = true;
                return Err(QmpError::Protocol {
                    what: name.into(),
                    msg: v.to_string(),
                });
            }
        }
    }

    pub fn query_status(&mut self, timeout: Duration) -> Result<StatusInfo, QmpError> {
        self.execute(&qmp::query_status {}, timeout)
    }

    /// Poll `query-status` until `want(status)` holds.
    pub fn wait_status(
        &mut self,
        want: impl Fn(&StatusInfo) -> bool,
        timeout: Duration,
    ) -> Result<StatusInfo, QmpError> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.query_status(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(100)),
            )?;
            if want(&s) {
                return Ok(s);
            }
            if Instant::now() >= deadline {
                return Err(QmpError::Timeout {
                    what: format!("status (last {:?})", s.status),
                    secs: secs(timeout),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pause the guest's vCPUs (the ring stops being drained).
    pub fn stop(&mut self, timeout: Duration) -> Result<(), QmpError> {
        self.execute(&qmp::stop {}, timeout).map(drop)
    }

    pub fn cont(&mut self, timeout: Duration) -> Result<(), QmpError> {
        self.execute(&qmp::cont {}, timeout).map(drop)
    }

    pub fn system_reset(&mut self, timeout: Duration) -> Result<(), QmpError> {
        self.execute(&qmp::system_reset {}, timeout).map(drop)
    }

    /// Ask for removal of device `id`. Removal finishes when the guest
    /// cooperates; wait for `DEVICE_DELETED` with `wait_event`.
    pub fn device_del(&mut self, id: &str, timeout: Duration) -> Result<(), QmpError> {
        self.execute(&qmp::device_del { id: id.into() }, timeout).map(drop)
    }

    /// Ask QEMU to exit. The connection closing right after counts as done.
    pub fn quit(&mut self, timeout: Duration) -> Result<(), QmpError> {
        match self.execute(&qmp::quit {}, timeout) {
            Ok(_) | Err(QmpError::Closed(_)) => {
                self.broken = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Run an HMP command (e.g. `info pci`, `xp /4wx ADDR`) and return its
    /// text output.
    pub fn hmp(&mut self, command_line: &str, timeout: Duration) -> Result<String, QmpError> {
        self.execute(
            &qmp::human_monitor_command {
                command_line: command_line.into(),
                cpu_index: None,
            },
            timeout,
        )
    }

    /// Events received so far, oldest first; clears the queue.
    pub fn take_events(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.events)
    }

    /// Wait for an event named `name` (e.g. "DEVICE_DELETED"); returns it.
    /// Events seen before are searched first.
    pub fn wait_event(&mut self, name: &str, timeout: Duration) -> Result<Value, QmpError> {
        if let Some(i) = self.events.iter().position(|e| e["event"] == name) {
            return Ok(self.events.remove(i));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let v = self
                .read_message(&format!("event {name}"), deadline)
                .map_err(|e| match e {
                    QmpError::Timeout { .. } => QmpError::Timeout {
                        what: format!("event {name}"),
                        secs: secs(timeout),
                    },
                    other => other,
                })?;
            if v["event"] == name {
                return Ok(v);
            }
            if v.get("event").is_some() {
                self.events.push(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake QEMU QMP server answering from a script.
    fn fake(
        script: impl FnOnce(BufReader<UnixStream>, UnixStream) + Send + 'static,
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let r = BufReader::new(s.try_clone().unwrap());
            script(r, s);
        });
        (dir, path)
    }

    const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": ""}, "capabilities": ["oob"]}}"#;

    fn expect(r: &mut BufReader<UnixStream>, name: &str) -> Value {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["execute"], name);
        v
    }

    #[test]
    fn handshake_status_events_and_errors() {
        let (_d, path) = fake(|mut r, mut w| {
            writeln!(w, "{GREETING}").unwrap();
            expect(&mut r, "qmp_capabilities");
            writeln!(w, r#"{{"return": {{}}}}"#).unwrap();
            expect(&mut r, "query-status");
            writeln!(
                w,
                r#"{{"event": "SOME_FUTURE_EVENT", "data": {{}}, "timestamp": {{"seconds": 1, "microseconds": 2}}}}"#
            )
            .unwrap();
            writeln!(
                w,
                r#"{{"return": {{"status": "paused", "singlestep": false, "running": false}}}}"#
            )
            .unwrap();
            let v = expect(&mut r, "device_del");
            assert_eq!(v["arguments"]["id"], "nvme0");
            writeln!(
                w,
                r#"{{"error": {{"class": "DeviceNotFound", "desc": "Device 'nvme0' not found"}}}}"#
            )
            .unwrap();
            expect(&mut r, "quit");
            // QEMU may close before answering quit.
        });
        let (mut q, st) = Qmp::wait_ready(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(q.version, "7.2.22");
        assert!(!st.running);
        assert!(matches!(st.status, RunState::paused));
        assert_eq!(q.take_events()[0]["event"], "SOME_FUTURE_EVENT");
        match q.device_del("nvme0", Duration::from_secs(5)) {
            Err(QmpError::Command { class, .. }) => assert_eq!(class, "DeviceNotFound"),
            other => panic!("{other:?}"),
        }
        q.quit(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn a_silent_qemu_times_out_and_poisons_the_connection() {
        let (_d, path) = fake(|mut r, mut w| {
            writeln!(w, "{GREETING}").unwrap();
            expect(&mut r, "qmp_capabilities");
            writeln!(w, r#"{{"return": {{}}}}"#).unwrap();
            expect(&mut r, "stop");
            std::thread::sleep(Duration::from_secs(2));
        });
        let mut q = Qmp::connect(&path, Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        assert!(matches!(
            q.stop(Duration::from_millis(200)),
            Err(QmpError::Timeout { .. })
        ));
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(matches!(q.cont(Duration::from_secs(1)), Err(QmpError::Broken)));
    }

    #[test]
    fn no_socket_is_a_connect_error_after_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let e = Qmp::connect(&dir.path().join("none"), Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Connect { .. }), "{e}");
        assert!(t.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let (_d, path) = fake(|_r, mut w| {
            writeln!(w, "this is not json").unwrap();
        });
        assert!(matches!(
            Qmp::connect(&path, Duration::from_secs(5)),
            Err(QmpError::Protocol { .. })
        ));
        let (_d2, path2) = fake(|_r, w| drop(w));
        assert!(matches!(
            Qmp::connect(&path2, Duration::from_secs(5)),
            Err(QmpError::Closed(_))
        ));
    }
}
