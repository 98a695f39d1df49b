//! The QEMU arguments that attach the NVMe controller served on a
//! vfio-user socket: guest RAM from a shared memfd (the `vfio_user` crate
//! has no socket DMA, so QEMU must hand the controller file descriptors of
//! guest RAM in DMA_MAP) and a `vfio-user-pci` device (QEMU 11.1; its
//! `socket` property is a SocketAddress, hence the JSON form of -device).

use std::path::Path;

/// Arguments for a guest of `memory_mb` MiB (must equal `-m`) whose NVMe
/// controller is served on `socket`; `bus` places it behind a root port.
pub fn qemu_vfio_user_args(socket: &Path, memory_mb: u32, id: &str, bus: Option<&str>) -> Vec<String> {
    let mut device = serde_json::json!({
        "driver": "vfio-user-pci",
        "id": id,
        "socket": { "type": "unix", "path": socket.display().to_string() },
    });
    if let Some(bus) = bus {
        device["bus"] = bus.into();
    }
    vec![
        "-object".into(),
        format!("memory-backend-memfd,id={id}-ram,size={memory_mb}M,share=on"),
        "-machine".into(),
        format!("memory-backend={id}-ram"),
        "-device".into(),
        device.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_is_a_shared_memfd_and_the_device_names_the_socket() {
        let a = qemu_vfio_user_args(Path::new("/run/x/vfio-user.sock"), 512, "nvme0", Some("rp1"));
        assert_eq!(
            a[0..4],
            [
                "-object",
                "memory-backend-memfd,id=nvme0-ram,size=512M,share=on",
                "-machine",
                "memory-backend=nvme0-ram"
            ]
        );
        assert_eq!(a[4], "-device");
        let dev: serde_json::Value = serde_json::from_str(&a[5]).unwrap();
        assert_eq!(dev["driver"], "vfio-user-pci");
        assert_eq!(dev["socket"]["path"], "/run/x/vfio-user.sock");
        assert_eq!(dev["socket"]["type"], "unix");
        assert_eq!(dev["bus"], "rp1");
        assert_eq!(dev["id"], "nvme0");
    }
}
