//! The `vfio_user` crate's own message decoding (`Server::run`, 0.1.7) in
//! front of emu-device's backend, as `serve-nvme` runs it: a hostile
//! client connects to the server's socket and sends messages built from the
//! input (any command number, message size, flags and body, file
//! descriptors attached to any message, a torn last message), the server
//! decodes them and calls the backend (the NVMe controller with the trace
//! producer, built as in `vfio_user_backend`).
//!
//! What the crate does wrong on such input is reported, not patched
//! (docs/fuzzing.md, "vfio_user_server"):
//!
//! * it panics on some messages (a VERSION whose message size is below its
//!   header, or whose capability string has no NUL): emu-device runs the
//!   crate under `catch_unwind` (`serve.rs`), so such a panic ends the
//!   client, not the device. Here too: a panic whose location is in the
//!   crate is caught, one anywhere else (our code) aborts as usual.
//! * it allocates whatever a REGION_READ / REGION_WRITE `count` or a
//!   VERSION `message_size` says (up to 4 GiB) before any check of ours
//!   can run. The target bounds those fields (below) so that libFuzzer's
//!   malloc limit does not stop every run on that one known defect.
//!
//! Each message goes out in one `sendmsg`, so the crate's 16-byte header
//! read sees a whole header (it does not handle a short read of the header:
//! its framing would desynchronise, and with it the bounds above).
#![no_main]

#[path = "shared/guest_ram.rs"]
mod guest_ram;

use std::cell::Cell;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Once, OnceLock};

use hmb_emu_device::vfio_user::nvme::traced_controller;
use hmb_emu_device::vfio_user::Backend;
use hmb_nvme::{Backing, Controller, ControllerConfig};
use libfuzzer_sys::fuzz_target;

#[path = "shared/input.rs"]
mod input;
use input::Input;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, Server, ServerBackend};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Guest RAM a DMA_MAP may map.
const RAM: u64 = 256 << 10;
/// Bound on REGION_READ/REGION_WRITE counts and VERSION payloads (see above).
const MAX_COUNT: u32 = 8192;
const HEADER: usize = 16;
/// The client sends everything, then the server runs in the same thread
/// (a client thread per input made LeakSanitizer see its thread-local
/// destructor list, freed only after the join, as a leak): what is sent,
/// and the replies, must fit in the sockets' buffers (wmem_default, 208 KiB
/// by default, counting each message's buffer overhead as SKB_COST).
const SOCKET_BUDGET: usize = 120 << 10;
const SKB_COST: usize = 1024;
/// Regions the server has (vfio's PCI regions: BARs 0-5, ROM, config, VGA).
const REGIONS: u32 = 9;
/// Body sizes after the header, per command, as the crate reads them.
fn body_size(command: u16) -> usize {
    match command {
        1 => 4,       // VERSION: major, minor (then message_size - 20 bytes of JSON)
        2 => 32,      // DMA_MAP
        3 => 24,      // DMA_UNMAP
        4 => 16,      // DEVICE_GET_INFO
        5 => 32,      // DEVICE_GET_REGION_INFO (vfio_region_info)
        7 => 16,      // GET_IRQ_INFO
        8 => 20,      // SET_IRQS
        9 | 10 => 16, // REGION_READ / REGION_WRITE (then count bytes for a write)
        _ => 0,
    }
}

/// The listening socket (abstract, per process), made once.
fn listener() -> &'static (UnixListener, SocketAddr) {
    static L: OnceLock<(UnixListener, SocketAddr)> = OnceLock::new();
    L.get_or_init(|| {
        let name = format!("hmb-fuzz-vfio-user-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        (UnixListener::bind_addr(&addr).expect("bind"), addr)
    })
}

thread_local! {
    /// Inside `Server::run` (the crate's code) ...
    static IN_SERVER: Cell<bool> = const { Cell::new(false) };
    /// ... and, within it, inside our backend.
    static IN_BACKEND: Cell<bool> = const { Cell::new(false) };
}

/// A panic raised by the crate's own code (inside `Server::run` but not in
/// our backend; the panic's location may be in `alloc`, as for a capacity
/// overflow) is tolerated: emu-device catches it. Any other panic goes to
/// libFuzzer's hook, which aborts.
fn tolerate_crate_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // libFuzzer's C main does not ignore SIGPIPE as a Rust main does
        // (emu-device's does): a write to a client that hung up must be an
        // error, not the end of the process.
        // SAFETY: setting a signal's disposition to SIG_IGN, before threads use it.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // The main thread's handle is a thread-local with a destructor,
        // registered (one allocation for ever) on first use: made here.
        let _ = std::thread::current();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !(IN_SERVER.get() && !IN_BACKEND.get()) {
                previous(info);
            }
        }));
    });
}

/// Our backend, marking its calls so that a panic in them is ours.
struct Marked<'a, B>(&'a mut B);

impl<B: ServerBackend> Marked<'_, B> {
    fn call<T>(&mut self, f: impl FnOnce(&mut B) -> T) -> T {
        IN_BACKEND.set(true);
        let r = f(self.0);
        IN_BACKEND.set(false);
        r
    }
}

impl<B: ServerBackend> ServerBackend for Marked<'_, B> {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        self.call(|b| b.region_read(region, offset, data))
    }
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.call(|b| b.region_write(region, offset, data))
    }
    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> std::io::Result<()> {
        self.call(|b| b.dma_map(flags, offset, address, size, fd))
    }
    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> std::io::Result<()> {
        self.call(|b| b.dma_unmap(flags, address, size))
    }
    fn reset(&mut self) -> std::io::Result<()> {
        self.call(|b| b.reset())
    }
    fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) -> std::io::Result<()> {
        self.call(|b| b.set_irqs(index, flags, start, count, fds))
    }
}

/// The messages of one input, each as the bytes of one `sendmsg` and how
/// many file descriptors go with it.
fn messages(mut input: Input<'_>) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let (mut sent, mut replies) = (0usize, 0usize);
    while let Some(op) = input.u8() {
        let Some(cmd_byte) = input.u8() else { break };
        // Mostly the crate's commands (1..=14), sometimes anything.
        let command = if cmd_byte & 0x80 == 0 {
            u16::from(cmd_byte % 15)
        } else {
            u16::from(cmd_byte) << 8 | u16::from(input.u8().unwrap_or(0))
        };
        let flags = u32::from(input.u8().unwrap_or(0)); // includes NO_REPLY (1 << 4)
        let mut body = input.take(body_size(command)).to_vec();
        let complete = body.len() == body_size(command);
        let mut message_size = (HEADER + body.len()) as u32;
        let mut tail = Vec::new();
        if complete {
            match command {
                1 => {
                    // The capability JSON: from the input, or a valid one.
                    let n = usize::from(input.u8().unwrap_or(0)) % 64;
                    tail = if op & 0x10 != 0 {
                        br#"{"capabilities":{"max_msg_fds":8,"max_data_xfer_size":1048576}}"#.to_vec()
                    } else {
                        input.take(n).to_vec()
                    };
                    if op & 0x20 == 0 {
                        tail.push(0);
                    }
                    message_size = (HEADER + 4 + tail.len()) as u32;
                    if op & 0x40 != 0 {
                        // A message size below the VERSION struct (the crate underflows).
                        message_size = u32::from(input.u8().unwrap_or(0)) % 20;
                    }
                }
                9 | 10 => {
                    let count = u32::from_le_bytes(body[12..16].try_into().unwrap()) % (MAX_COUNT + 1);
                    body[12..16].copy_from_slice(&count.to_le_bytes());
                    if command == 10 {
                        tail = input.take(count as usize).to_vec();
                        message_size += count;
                    }
                }
                _ => {}
            }
            if op & 0x80 != 0 {
                message_size = u32::from_le_bytes([op, cmd_byte, 0, 0]);
            }
        }
        let mut bytes = Vec::with_capacity(HEADER + body.len() + tail.len());
        bytes.extend_from_slice(&u16::from(op).to_le_bytes()); // message id
        bytes.extend_from_slice(&command.to_le_bytes());
        bytes.extend_from_slice(&message_size.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&tail);
        // Where the crate's reading of this message ends: if that is past what
        // was sent (torn, or a VERSION size larger than its payload), the
        // crate waits for bytes that never come, so it is the last message.
        // The crate also stops reading early: before the body of a message
        // that expects a reply but is flagged NO_REPLY, and before the data
        // of a REGION_WRITE to a region it does not have.
        let no_reply = flags & 0x10 != 0;
        let field = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().unwrap()) as usize;
        let expected = match command {
            1 | 4 | 5 | 7 | 9 if no_reply => HEADER,
            1 if message_size >= 20 => message_size as usize,
            10 if complete && field(8) >= REGIONS as usize => HEADER + 16,
            10 if complete => HEADER + 16 + field(12),
            _ => HEADER + body_size(command),
        };
        // Bytes past what the crate reads would be decoded as the next
        // header: they are not sent (the next message says what comes next).
        bytes.truncate(expected);
        let last = !complete || bytes.len() < expected;
        // Both directions must fit in the sockets' buffers (SOCKET_BUDGET).
        sent += SKB_COST + bytes.len();
        replies += SKB_COST + if command == 9 && complete { 32 + field(12) } else { 128 };
        if sent > SOCKET_BUDGET || replies > SOCKET_BUDGET {
            break;
        }
        out.push((bytes, usize::from(op & 3)));
        if last {
            break;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    tolerate_crate_panics();
    let (listener, addr) = listener();
    let cfg = ControllerConfig {
        namespace_bytes: 128 << 10,
        backing: Backing::Memory,
        ..ControllerConfig::default()
    };
    let vectors = cfg.interrupt_vectors;
    // As serve-nvme builds it; the trace producer lives as long as the input.
    let (shared, _trace) = traced_controller(cfg).expect("default controller");
    let mut backend = Backend::new(
        shared,
        &Controller::pci_identity().into(),
        Controller::BAR0_SIZE,
        vectors,
    );
    let server = Server::from_owned_fd(
        OwnedFd::from(listener.try_clone().expect("dup listener")),
        true,
        backend.irqs(),
        backend.regions(),
    );
    let ram = guest_ram::memfd(RAM);
    let client = UnixStream::connect_addr(addr).expect("connect");
    let msgs = messages(Input(data));
    // The client: every message, then its side closed. Non-blocking, so a
    // miscounted budget ends the input's messages instead of hanging.
    client.set_nonblocking(true).expect("non-blocking");
    let fds = [ram.as_raw_fd(); 3];
    for (bytes, nfds) in &msgs {
        let sent = if *nfds == 0 {
            (&client).write(bytes).is_ok_and(|n| n == bytes.len())
        } else {
            client
                .send_with_fds(&[&bytes[..]], &fds[..*nfds])
                .is_ok_and(|n| n == bytes.len())
        };
        if !sent {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Write);
    // The server, as serve.rs runs it: a crate panic ends this client.
    IN_SERVER.set(true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(&mut Marked(&mut backend))));
    IN_SERVER.set(false);
    IN_BACKEND.set(false);
    drop(result);
    drop(client);
    backend.disconnected();
});
