//! The ivshmem server against fake QEMU peers speaking the client side over
//! the real unix socket, with real eventfds and SCM_RIGHTS.

use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use hmb_emu_device::ivshmem::hmb::Hmb;
use hmb_emu_device::ivshmem::{IvshmemClient, IvshmemServer, Notification, PeerEvent, ServerConfig, DEVICE_PEER_ID};

const T: Duration = Duration::from_secs(5);

struct Running {
    events: Receiver<PeerEvent>,
    server: Arc<IvshmemServer>,
    thread: Option<std::thread::JoinHandle<()>>,
    hmb: Arc<Hmb>,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn start(vectors: u16) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ivshmem.sock");
    let hmb = Arc::new(Hmb::create(1 << 20).unwrap());
    let server = Arc::new(
        IvshmemServer::bind(
            &ServerConfig {
                socket_path: path.clone(),
                vectors,
            },
            hmb.clone(),
        )
        .unwrap(),
    );
    let (tx, events) = channel();
    let s2 = server.clone();
    let thread = std::thread::spawn(move || s2.run(|e| tx.send(e).unwrap()).unwrap());
    Running {
        events,
        server,
        thread: Some(thread),
        hmb,
        _dir: dir,
        path,
    }
}

impl Running {
    fn next(&self) -> PeerEvent {
        self.events.recv_timeout(T).expect("server event")
    }
    fn stop(&mut self) {
        self.server.stop_handle().stop();
        self.thread.take().unwrap().join().unwrap();
    }
}

#[test]
fn a_client_gets_version_id_memory_and_both_directions_of_interrupts() {
    let mut srv = start(2);
    let c = IvshmemClient::connect(&srv.path, 2, T).unwrap();
    assert_eq!(c.id, 1, "the device holds id 0, the first QEMU gets 1");
    assert_eq!(srv.next(), PeerEvent::Joined(1));
    assert_eq!(c.own.len(), 2);
    assert_eq!(c.peers.keys().copied().collect::<Vec<_>>(), vec![DEVICE_PEER_ID]);
    assert_eq!(c.peers[&DEVICE_PEER_ID].len(), 2);

    // The shm fd is the HMB: same size, same bytes.
    let st = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&c.shm)).unwrap();
    assert_eq!(st.st_size as usize, srv.hmb.len());
    srv.hmb.write(512, b"from the device").unwrap();
    let file = std::fs::File::from(c.shm.try_clone().unwrap());
    let mut buf = [0u8; 15];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 512).unwrap();
    assert_eq!(&buf, b"from the device");

    // Guest -> device doorbell, on each vector.
    c.ring(DEVICE_PEER_ID, 0).unwrap();
    assert_eq!(srv.next(), PeerEvent::Doorbell { vector: 0, count: 1 });
    c.ring(DEVICE_PEER_ID, 1).unwrap();
    assert_eq!(srv.next(), PeerEvent::Doorbell { vector: 1, count: 1 });

    // Device -> guest interrupt, on the vector asked for and no other.
    assert_eq!(srv.server.peers().interrupt_all(1).unwrap(), 1);
    assert_eq!(c.wait_interrupt(1, T).unwrap(), Some(1));
    assert_eq!(c.wait_interrupt(0, Duration::from_millis(50)).unwrap(), None);
    assert!(srv.server.peers().interrupt_all(2).is_err(), "vector 2 does not exist");

    srv.stop();
    assert!(c.server_closed(T).unwrap(), "clients see the server close");
    let Running { server, _dir, path, .. } = srv;
    assert!(path.exists());
    drop(server);
    assert!(!path.exists(), "socket file removed with the server");
}

#[test]
fn joins_and_leaves_are_announced_and_ids_reused() {
    let srv = start(2);
    let mut a = IvshmemClient::connect(&srv.path, 2, T).unwrap();
    assert_eq!(srv.next(), PeerEvent::Joined(1));
    let b = IvshmemClient::connect(&srv.path, 2, T).unwrap();
    assert_eq!(srv.next(), PeerEvent::Joined(2));
    assert_eq!(b.id, 2);
    assert_eq!(a.next_notification(T).unwrap(), Some(Notification::PeerJoined(2)));
    assert_eq!(b.peers.keys().copied().collect::<Vec<_>>(), vec![0, 1]);

    // Peers can interrupt each other without the server in the way.
    b.ring(1, 0).unwrap();
    assert_eq!(a.wait_interrupt(0, T).unwrap(), Some(1));

    drop(b);
    assert_eq!(srv.next(), PeerEvent::Left(2));
    assert_eq!(a.next_notification(T).unwrap(), Some(Notification::PeerLeft(2)));
    assert!(!a.peers.contains_key(&2));
    assert_eq!(srv.server.peers().ids(), vec![1]);

    let c = IvshmemClient::connect(&srv.path, 2, T).unwrap();
    assert_eq!(c.id, 2, "lowest free id is reused");
}

#[test]
fn a_client_with_fewer_vectors_still_sets_up() {
    // QEMU configured with vectors=1 against a 2-vector server: it gets
    // extra fds, which the spec says it closes.
    let srv = start(2);
    let c = IvshmemClient::connect(&srv.path, 2, T).unwrap();
    assert_eq!(c.own.len(), 2);
    let _ = srv.next();
    assert!(srv.server.peers().interrupt_all(0).is_ok());
}

#[test]
fn no_guest_means_interrupts_fail_clearly() {
    let srv = start(2);
    let e = srv.server.peers().interrupt_all(0).unwrap_err();
    assert!(e.to_string().contains("no guest"), "{e}");
}

#[test]
fn a_live_socket_is_not_stolen_and_a_stale_one_is_replaced() {
    let srv = start(1);
    let hmb = Arc::new(Hmb::create(1 << 20).unwrap());
    let cfg = ServerConfig {
        socket_path: srv.path.clone(),
        vectors: 1,
    };
    assert!(IvshmemServer::bind(&cfg, hmb.clone()).is_err());
    // A stale socket file (nobody listening) is replaced.
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    IvshmemServer::bind(
        &ServerConfig {
            socket_path: stale,
            vectors: 1,
        },
        hmb.clone(),
    )
    .unwrap();
    // A regular file is never removed.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(IvshmemServer::bind(
        &ServerConfig {
            socket_path: file.clone(),
            vectors: 1
        },
        hmb
    )
    .is_err());
    assert!(file.exists());
}
