//! The control socket: one JSON object per line in each direction.
//!
//! A client sends a request line and reads exactly one response line; it may
//! send several requests on one connection. docs/emu-device.md lists the
//! requests. Responses are `{"ok":true,"result":...}` or
//! `{"ok":false,"error":"..."}`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sockpath::SocketPathError;

/// What goes wrong on the control socket itself (a request the device
/// refuses is an answer, not this).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot connect to {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("I/O error during {what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
    #[error("encoding the request: {0}")]
    Encode(serde_json::Error),
    #[error("emu-device closed the connection without answering")]
    Closed,
    #[error("bad response ({len} bytes) {head:?}...: {source}")]
    BadResponse {
        len: usize,
        head: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Bind(#[from] SocketPathError),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ControlError {
    move |source| ControlError::Io { what, source }
}

/// Longest request line accepted: requests are tiny, a longer line is abuse.
pub const MAX_LINE: usize = 64 * 1024;

/// Which version field `bump-version` raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum VersionPart {
    Major,
    Minor,
}

/// A fault to inject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// Controller reset: the producer sets FROZEN, the guest gets the state
    /// interrupt, and production resumes on the next READY advert.
    Reset,
    /// Overwrite the ring header's magic.
    CorruptMagic,
    /// Raise the ring header's major or minor version by one.
    BumpVersion { part: VersionPart },
    /// Publish a record whose header lies about its length, then stop.
    Hostile,
    /// Pause the producer for `ms` milliseconds.
    Stall { ms: u64 },
    /// Set a ring flag bit that ABI v1 does not define (a newer minor's
    /// flag): consumers must log it and carry on.
    UnknownFlag,
    /// Model in-flight DMA: the next time the advert is withdrawn, keep
    /// producing into the old slice for `ms` milliseconds (whatever adverts
    /// arrive meanwhile) before stopping and acknowledging. A module that
    /// re-initialises without waiting for the acknowledgement gets late
    /// stores in its new ring.
    LateStop { ms: u64 },
    /// Hostile device: rewrite the module's own header fields, `tail` to 0
    /// and `epoch` one lower. The module must go by its own copies.
    RewindHeader,
    /// NVMe controller only: a firmware assert the firmware recovers from. The
    /// controller captures Controller-Initiated Telemetry (log 08h) and sends
    /// the Telemetry Log Changed notice, then carries on (the ring is not
    /// frozen; a fatal failure is `reset`).
    FirmwareAssert,
    /// Surprise removal as the host sees the memory: stop producing and
    /// overwrite the advert, the device block and the ring header with
    /// all-ones, as a vanished device's BAR reads. The device answers no
    /// more adverts. The module must treat it as gone, not as FROZEN.
    Vanish,
}

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// State, slice, guests, production settings.
    Status,
    /// Start (or re-configure) production. It begins as soon as a READY
    /// advert is seen, and resumes by itself after resets.
    Start {
        workload: String,
        #[serde(default)]
        seed: u64,
        /// Records per second; 0 = as fast as possible.
        #[serde(default)]
        rate: u64,
        /// Most records emitted back to back; default about 1 ms worth.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burst: Option<u32>,
    },
    /// Stop production (the ring stays live).
    Stop,
    Inject(Fault),
    /// Producer and interrupt counters.
    Stats,
    /// What was produced, for checking a consumer against it.
    GroundTruth,
    /// Raise an interrupt vector in the guest by hand.
    Interrupt {
        vector: u16,
    },
    /// Shut the device down cleanly.
    Shutdown,
    /// The NVMe controller's host-write audit of its HMB: enables, MR=1 re-enables,
    /// pages checked, violations, every Set Features 0Dh and vendor feature it saw.
    HmbAudit,
    /// The NVMe controller becomes another personality (HMB limits, trace contract) while
    /// no driver runs it, as another controller model behind the same function would be;
    /// its HMB audit starts afresh. For issue 26's personality checks in one guest.
    Personality {
        personality: hmb_nvme_trace::Personality,
    },
    /// The NVMe controller's completion timing from now on (`serve-nvme --timing`):
    /// "none" or "model". Switching to none posts what the model holds at once.
    Timing {
        timing: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    pub(crate) fn ok(result: Value) -> Self {
        Self {
            ok: true,
            result: Some(result),
            error: None,
        }
    }
    pub(crate) fn err(msg: impl Into<String>) -> Self {
        Self {
            ok: false,
            result: None,
            error: Some(msg.into()),
        }
    }
}

/// Handles requests; implemented by the device, by fakes in tests.
pub(crate) trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> Response;
}

/// Parse one request line; errors become the response to send back.
pub fn parse_request(line: &str) -> Result<Request, Response> {
    serde_json::from_str(line.trim()).map_err(|e| Response::err(format!("bad request: {e}")))
}

fn serve_connection(stream: UnixStream, handler: &dyn Handler, in_flight: &AtomicUsize) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut reader).take(MAX_LINE as u64 + 1).read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let too_long = n > MAX_LINE;
        // Counted from the moment a request is handed to the device until
        // its answer is written, so shutdown can let the answer out.
        let mut counted = false;
        let response = if too_long {
            Response::err(format!("request longer than {MAX_LINE} bytes"))
        } else {
            match parse_request(&line) {
                Ok(req) => {
                    log::debug!("control request {req:?}");
                    in_flight.fetch_add(1, Ordering::AcqRel);
                    counted = true;
                    handler.handle(req)
                }
                Err(resp) => resp,
            }
        };
        let mut text = serde_json::to_string(&response).unwrap_or_else(|e| format!(r#"{{"ok":false,"error":"{e}"}}"#));
        text.push('\n');
        let written = out.write_all(text.as_bytes());
        if counted {
            in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        written?;
        if too_long {
            return Ok(());
        }
    }
}

/// The listening side. Dropping it stops accepting and removes the socket.
pub(crate) struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    pub(crate) fn start(path: &Path, handler: Arc<dyn Handler>) -> Result<Self, ControlError> {
        let listener = crate::sockpath::bind_listener(path, "control socket")?;
        listener.set_nonblocking(true).map_err(io("control socket"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (stop2, in_flight2) = (stop.clone(), in_flight.clone());
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || accept_loop(listener, handler, stop2, in_flight2))
            .map_err(io("spawning control thread"))?;
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            in_flight,
            thread: Some(thread),
        })
    }
}

fn accept_loop(listener: UnixListener, handler: Arc<dyn Handler>, stop: Arc<AtomicBool>, in_flight: Arc<AtomicUsize>) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let (h, n) = (handler.clone(), in_flight.clone());
                // Clients are few (the harness, a person): a thread each.
                let spawned = std::thread::Builder::new().name("control-conn".into()).spawn(move || {
                    if let Err(e) = stream
                        .set_nonblocking(false)
                        .and_then(|_| serve_connection(stream, &*h, &n))
                    {
                        log::debug!("control connection ended: {e}");
                    }
                });
                if let Err(e) = spawned {
                    log::warn!("control connection refused: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                log::error!("control socket accept failed: {e}");
                return;
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Let answers already computed (e.g. to `shutdown`) reach their
        // clients, but never hang the exit on a stuck client.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.in_flight.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != ErrorKind::NotFound {
                log::warn!("removing {}: {e}", self.path.display());
            }
        }
    }
}

/// Client: send one request, read one response, with a timeout.
pub fn call(path: &Path, req: &Request, timeout: Duration) -> Result<Response, ControlError> {
    let stream = UnixStream::connect(path).map_err(|source| ControlError::Connect {
        path: path.display().to_string(),
        source,
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(io("control socket"))?;
    stream.set_write_timeout(Some(timeout)).map_err(io("control socket"))?;
    let mut text = serde_json::to_string(req).map_err(ControlError::Encode)?;
    text.push('\n');
    (&stream)
        .write_all(text.as_bytes())
        .map_err(io("sending control request"))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .take(MAX_RESPONSE as u64)
        .read_line(&mut line)
        .map_err(io("reading control response"))?;
    if line.is_empty() {
        return Err(ControlError::Closed);
    }
    serde_json::from_str(&line).map_err(|source| ControlError::BadResponse {
        len: line.len(),
        // Not the whole line: a cut journal is tens of MB.
        head: line.chars().take(200).collect(),
        source,
    })
}

/// The longest response `call` reads. The NVMe controller's journal (its
/// ground truth) of a 10-minute soak with guest I/O was over 16 MiB, the
/// earlier bound, and got cut (`cargo xtask soak --device nvme`).
pub(crate) const MAX_RESPONSE: usize = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn socket_failures_are_told_apart_by_variant() {
        let dir = tempfile::tempdir().unwrap();
        let none = dir.path().join("none.sock");
        let e = call(&none, &Request::Status, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, ControlError::Connect { .. }), "{e}");
        std::fs::write(&none, "not a socket").unwrap();
        let e = crate::sockpath::bind_listener(&none, "control socket").unwrap_err();
        let e = ControlError::from(e);
        assert!(
            matches!(e, ControlError::Bind(SocketPathError::NotASocket { .. })),
            "{e}"
        );
        // Wrapped by the device layer, the message is the inner one's.
        assert_eq!(
            crate::error::EmuError::from(e).to_string(),
            format!("control socket {} exists and is not a socket", none.display())
        );
    }

    #[test]
    fn a_response_longer_than_16_mib_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let big = "x".repeat(20 << 20);
        let answer = serde_json::to_string(&Response::ok(json!({ "journal": big }))).unwrap() + "\n";
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut req = String::new();
            BufReader::new(&stream).read_line(&mut req).unwrap();
            (&stream).write_all(answer.as_bytes()).unwrap();
        });
        let r = call(&path, &Request::Status, Duration::from_secs(30)).unwrap();
        server.join().unwrap();
        assert_eq!(r.result.unwrap()["journal"].as_str().unwrap().len(), 20 << 20);
    }

    #[test]
    fn requests_have_a_stable_json_shape() {
        let cases = [
            (json!({"cmd":"status"}), Request::Status),
            (
                json!({"cmd":"start","workload":"ssd","rate":10000}),
                Request::Start {
                    workload: "ssd".into(),
                    seed: 0,
                    rate: 10000,
                    burst: None,
                },
            ),
            (json!({"cmd":"inject","fault":"reset"}), Request::Inject(Fault::Reset)),
            (
                json!({"cmd":"inject","fault":"corrupt-magic"}),
                Request::Inject(Fault::CorruptMagic),
            ),
            (
                json!({"cmd":"inject","fault":"bump-version","part":"minor"}),
                Request::Inject(Fault::BumpVersion {
                    part: VersionPart::Minor,
                }),
            ),
            (
                json!({"cmd":"inject","fault":"stall","ms":250}),
                Request::Inject(Fault::Stall { ms: 250 }),
            ),
            (json!({"cmd":"ground-truth"}), Request::GroundTruth),
            (json!({"cmd":"hmb-audit"}), Request::HmbAudit),
            (
                json!({"cmd":"personality","personality":"small-hmb"}),
                Request::Personality {
                    personality: hmb_nvme_trace::Personality::SmallHmb,
                },
            ),
            (json!({"cmd":"interrupt","vector":1}), Request::Interrupt { vector: 1 }),
        ];
        for (j, want) in cases {
            let got: Request = serde_json::from_value(j.clone()).unwrap();
            assert_eq!(got, want);
            assert_eq!(serde_json::to_value(&got).unwrap(), {
                let mut full = j.clone();
                if let Request::Start { .. } = want {
                    full["seed"] = json!(0);
                }
                full
            });
        }
    }

    #[test]
    fn malformed_requests_are_answered_not_fatal() {
        for bad in [
            "",
            "{",
            "{\"cmd\":\"fly\"}",
            "{\"cmd\":\"inject\",\"fault\":\"bump-version\"}",
            "[1,2]",
        ] {
            let e = parse_request(bad).unwrap_err();
            assert!(!e.ok);
            assert!(e.error.unwrap().starts_with("bad request"));
        }
    }

    struct Echo;
    impl Handler for Echo {
        fn handle(&self, req: Request) -> Response {
            Response::ok(serde_json::to_value(req).unwrap())
        }
    }

    #[test]
    fn server_answers_each_line_and_survives_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let server = ControlServer::start(&path, Arc::new(Echo)).unwrap();
        let r = call(&path, &Request::Stats, Duration::from_secs(5)).unwrap();
        assert_eq!(r.result.unwrap(), json!({"cmd":"stats"}));
        // Several requests on one connection, one of them garbage.
        let s = UnixStream::connect(&path).unwrap();
        (&s).write_all(b"{\"cmd\":\"stop\"}\nnot json\n{\"cmd\":\"status\"}\n")
            .unwrap();
        let mut lines = BufReader::new(&s).lines();
        let a: Response = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let b: Response = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let c: Response = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(a.ok && !b.ok && c.ok);
        // A second server on the same live path is refused.
        assert!(ControlServer::start(&path, Arc::new(Echo)).is_err());
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
    }
}
