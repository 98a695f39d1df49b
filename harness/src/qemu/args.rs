//! QEMU's command line, one small function per device or option group
//! (the style of danobi/vmtest's `qemu.rs`): each returns its own arguments,
//! `VmConfig::args` puts a guest together from them, and tests that drive
//! QEMU by hand (qtest) use the same functions. A new device (vfio-user
//! NVMe, say) is one more function here.

use std::ffi::OsString;
use std::path::Path;

use super::Accel;

/// A piece of a QEMU command line.
pub(crate) type Args = Vec<OsString>;

fn args<const N: usize>(parts: [String; N]) -> Args {
    parts.into_iter().map(OsString::from).collect()
}

/// No default devices, no user config, no display.
pub fn base() -> Args {
    ["-nodefaults", "-no-user-config", "-display", "none"]
        .map(OsString::from)
        .to_vec()
}

/// A guest reboot makes QEMU exit: with `panic=-1` a guest panic ends the
/// run instead of booting again. (A test that sends QMP `system_reset`
/// leaves it out.)
pub(crate) fn no_reboot() -> Args {
    vec!["-no-reboot".into()]
}

/// Where guest RAM comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryBackend {
    /// QEMU's own anonymous memory.
    #[default]
    Anonymous,
    /// A shared memfd (`memory-backend-memfd,share=on`): another process
    /// (a vfio-user device server) can map guest RAM for DMA.
    Memfd,
}

/// The id of the memory-backend object when there is one.
const RAM_ID: &str = "hmbt-ram";

/// q35, the accelerator with its CPU model, RAM and CPU count. `accel` must
/// be resolved (`Tcg` or `Kvm`); `Auto` is taken as TCG.
pub fn machine(accel: Accel, memory_mb: u32, backend: MemoryBackend, smp: u32) -> Args {
    let (accel, cpu) = match accel {
        Accel::Kvm => ("kvm", "host"),
        Accel::Tcg | Accel::Auto => ("tcg", "max"),
    };
    let machine = match backend {
        MemoryBackend::Anonymous => "q35".to_string(),
        MemoryBackend::Memfd => format!("q35,memory-backend={RAM_ID}"),
    };
    let mut a = args([
        "-machine".into(),
        machine,
        "-accel".into(),
        accel.into(),
        "-cpu".into(),
        cpu.into(),
        "-m".into(),
        memory_mb.to_string(),
        "-smp".into(),
        smp.to_string(),
    ]);
    if backend == MemoryBackend::Memfd {
        a.extend(args([
            "-object".into(),
            format!("memory-backend-memfd,id={RAM_ID},size={memory_mb}M,share=on"),
        ]));
    }
    a
}

/// `-L DIR` for each firmware directory (an unpacked QEMU brings its own).
pub fn firmware_dirs(dirs: &[std::path::PathBuf]) -> Args {
    dirs.iter().flat_map(|d| [OsString::from("-L"), d.into()]).collect()
}

/// Direct kernel boot: `-kernel`, `-initrd`, `-append`.
pub(crate) fn direct_kernel(kernel: &Path, initrd: &Path, cmdline: &str) -> Args {
    vec![
        "-kernel".into(),
        kernel.into(),
        "-initrd".into(),
        initrd.into(),
        "-append".into(),
        cmdline.into(),
    ]
}

/// The serial console, logged to `log`. Interactive: the terminal is the
/// console and the log still gets every byte for the fault scan.
pub(crate) fn serial_console(log: &Path, interactive: bool) -> Args {
    let chardev = if interactive {
        format!("stdio,id=con,signal=off,logfile={}", log.display())
    } else {
        format!("file,id=con,path={}", log.display())
    };
    args(["-chardev".into(), chardev, "-serial".into(), "chardev:con".into()])
}

/// A QMP server on a unix socket (no waiting for a client).
pub fn qmp(socket: &Path) -> Args {
    args(["-qmp".into(), format!("unix:{},server=on,wait=off", socket.display())])
}

/// The qtest protocol on a unix socket: the test plays the guest.
pub fn qtest(socket: &Path) -> Args {
    args(["-qtest".into(), format!("unix:{}", socket.display())])
}

/// A host directory shared over virtio-9p with mount tag `tag`.
pub(crate) fn share_9p(dir: &Path, tag: &str) -> Args {
    args([
        "-fsdev".into(),
        format!("local,id=hmbtfs,path={},security_model=none", dir.display()),
        "-device".into(),
        format!("virtio-9p-pci,fsdev=hmbtfs,mount_tag={tag}"),
    ])
}

/// A raw disk image as a virtio-blk device (the guest's first one is
/// /dev/vda). `cache=unsafe`: the guest's flushes are not forwarded to the
/// host's disk, only its writes: the image is scratch space read back after
/// QEMU exits, when its data is in the host's page cache either way.
pub(crate) fn virtio_blk_scratch(image: &Path, id: &str) -> Args {
    args([
        "-drive".into(),
        format!("file={},if=none,id={id},format=raw,cache=unsafe", image.display()),
        "-device".into(),
        format!("virtio-blk-pci,drive={id}"),
    ])
}

/// A raw disk image as the guest's virtio disk, booted from; `snapshot=on`:
/// the guest's writes go to a temporary file, never to the (cached) image.
/// `cache=unsafe`: that file is deleted when QEMU exits, so forwarding the
/// guest's flushes (ext4's journal commits, every 5 s and on fsync) to the
/// host's disk would only cost host CPU and time under TCG, taken from the
/// vCPU threads (docs/performance.md, "The trace's disk writes").
pub(crate) fn virtio_disk_snapshot(image: &Path) -> Args {
    args([
        "-drive".into(),
        format!("file={},format=raw,if=virtio,snapshot=on,cache=unsafe", image.display()),
    ])
}

/// QEMU's own NVMe controller on a raw image (`nvme,serial=SERIAL`), for the
/// series' nvme.ko against a controller that is not ours.
pub(crate) fn qemu_nvme(image: &Path, serial: &str) -> Args {
    args([
        "-drive".into(),
        format!("file={},if=none,id=nvm,format=raw", image.display()),
        "-device".into(),
        format!("nvme,serial={serial},drive=nvm"),
    ])
}

/// A PCIe root port: a device behind it can be surprise-removed with QMP
/// `device_del` (q35's root bus is not hot-pluggable).
pub(crate) fn pcie_root_port(id: &str, chassis: u8, slot: u8) -> Args {
    args([
        "-device".into(),
        format!("pcie-root-port,id={id},chassis={chassis},slot={slot}"),
    ])
}

/// `pcie_root_port` at a fixed slot of the root bus (`addr=SLOT.0`), so a
/// guest can find what sits behind it by the port's PCI address.
pub(crate) fn pcie_root_port_at(id: &str, chassis: u8, slot: u8, addr: u8) -> Args {
    args([
        "-device".into(),
        format!("pcie-root-port,id={id},chassis={chassis},slot={slot},addr={addr:#x}.0"),
    ])
}

/// QEMU's emulated Intel VT-d on q35: DMA remapping (no interrupt
/// remapping, which TCG does not need), caching mode on so that QEMU's
/// vfio(-user) client hears of every mapping the guest makes and passes
/// it on to the device (DMA_MAP). Must come before the devices behind it.
pub(crate) fn intel_iommu() -> Args {
    args(["-device".into(), "intel-iommu,caching-mode=on,intremap=off".into()])
}

/// Where a PCI device sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PciPlace<'a> {
    /// Wherever QEMU puts it on the root bus.
    Any,
    /// Behind this bus (e.g. a `pcie_root_port` id).
    Bus(&'a str),
    /// At this slot of the root bus (`addr=SLOT.0`).
    Slot(u8),
}

/// emu-device's ivshmem transport: a chardev to the emu-device serving
/// `socket` and an `ivshmem-doorbell` device with id `id` (QMP names it so)
/// and `vectors` MSI-X vectors (must match `emu-device serve --vectors`).
pub fn ivshmem_doorbell(socket: &Path, id: &str, vectors: u16, place: PciPlace) -> Args {
    let place = match place {
        PciPlace::Any => String::new(),
        PciPlace::Bus(bus) => format!(",bus={bus}"),
        PciPlace::Slot(slot) => format!(",addr={slot:#x}.0"),
    };
    args([
        "-chardev".into(),
        format!("socket,path={},id={id}-chr", socket.display()),
        "-device".into(),
        format!("ivshmem-doorbell,chardev={id}-chr,vectors={vectors},id={id}{place}"),
    ])
}

/// emu-device's vfio-user transport (`emu-device serve-nvme`): QEMU 11.1's
/// `vfio-user-pci` client on `socket`, with id `id` (QMP names it so). The
/// JSON form of -device because `socket` is a SocketAddress. Guest RAM must
/// be `MemoryBackend::Memfd`: the server maps guest memory from the fds
/// QEMU passes in DMA_MAP (the `vfio_user` crate has no socket DMA).
pub(crate) fn vfio_user_pci(socket: &Path, id: &str, place: PciPlace) -> Args {
    let mut device = serde_json::json!({
        "driver": "vfio-user-pci",
        "id": id,
        "socket": { "type": "unix", "path": socket.display().to_string() },
    });
    match place {
        PciPlace::Any => {}
        PciPlace::Bus(bus) => device["bus"] = bus.into(),
        PciPlace::Slot(slot) => device["addr"] = format!("{slot:#x}.0").into(),
    }
    args(["-device".into(), device.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(a: &Args) -> String {
        a.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn ivshmem_names_the_socket_vectors_and_place() {
        let sock = Path::new("/run/ivs.sock");
        assert_eq!(
            text(&ivshmem_doorbell(sock, "hmb0", 2, PciPlace::Bus("hmbrp"))),
            "-chardev socket,path=/run/ivs.sock,id=hmb0-chr -device ivshmem-doorbell,chardev=hmb0-chr,vectors=2,id=hmb0,bus=hmbrp"
        );
        assert!(text(&ivshmem_doorbell(sock, "hmb0", 2, PciPlace::Slot(4))).ends_with(",id=hmb0,addr=0x4.0"));
        assert!(text(&ivshmem_doorbell(sock, "hmb0", 1, PciPlace::Any)).ends_with("vectors=1,id=hmb0"));
    }

    #[test]
    fn vfio_user_pci_is_json_naming_the_socket_and_place() {
        let a = vfio_user_pci(Path::new("/run/x/vfio-user.sock"), "nvme0", PciPlace::Bus("hmbrp"));
        assert_eq!(a[0], "-device");
        let dev: serde_json::Value = serde_json::from_str(&a[1].to_string_lossy()).unwrap();
        assert_eq!(
            dev,
            serde_json::json!({"driver": "vfio-user-pci", "id": "nvme0", "bus": "hmbrp",
                "socket": {"type": "unix", "path": "/run/x/vfio-user.sock"}})
        );
        let slot = vfio_user_pci(Path::new("/s"), "n", PciPlace::Slot(5));
        let dev: serde_json::Value = serde_json::from_str(&slot[1].to_string_lossy()).unwrap();
        assert_eq!(dev["addr"], "0x5.0");
        assert!(dev.get("bus").is_none());
    }

    #[test]
    fn machine_follows_the_accelerator_and_memory_backend() {
        let tcg = text(&machine(Accel::Tcg, 512, MemoryBackend::Anonymous, 2));
        assert_eq!(tcg, "-machine q35 -accel tcg -cpu max -m 512 -smp 2");
        let kvm = text(&machine(Accel::Kvm, 256, MemoryBackend::Memfd, 1));
        assert_eq!(
            kvm,
            "-machine q35,memory-backend=hmbt-ram -accel kvm -cpu host -m 256 -smp 1 \
             -object memory-backend-memfd,id=hmbt-ram,size=256M,share=on"
        );
    }

    #[test]
    fn console_is_a_file_or_the_terminal_with_a_log() {
        let log = Path::new("/r/console.log");
        assert_eq!(
            text(&serial_console(log, false)),
            "-chardev file,id=con,path=/r/console.log -serial chardev:con"
        );
        assert!(text(&serial_console(log, true)).contains("stdio,id=con,signal=off,logfile=/r/console.log"));
    }
}
