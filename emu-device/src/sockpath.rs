//! Binding a listening unix socket at a path, for both of emu-device's
//! sockets: a stale socket file (left by a SIGKILLed run) is replaced, a
//! live one or a non-socket file is never touched, and the path appears
//! only once the socket is listening (bound under a temporary name, then
//! renamed), so "the file exists" means "connect works".

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Why a socket could not be bound at its path.
#[derive(Debug, thiserror::Error)]
pub enum SocketPathError {
    #[error("{what} {path} is in use by a running process")]
    InUse { what: &'static str, path: String },
    #[error("{what} {path} exists and is not a socket")]
    NotASocket { what: &'static str, path: String },
    #[error("{what} path {path} has no file name")]
    NoFileName { what: &'static str, path: String },
    #[error("I/O error during {what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> SocketPathError {
    move |source| SocketPathError::Io { what, source }
}

pub(crate) fn bind_listener(path: &Path, what: &'static str) -> Result<UnixListener, SocketPathError> {
    let shown = || path.display().to_string();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(SocketPathError::InUse { what, path: shown() });
            }
            log::info!("removing stale {what} {}", path.display());
            std::fs::remove_file(path).map_err(io("removing a stale socket"))?;
        }
        Ok(_) => return Err(SocketPathError::NotASocket { what, path: shown() }),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("checking a socket path")(e)),
    }
    let name = path
        .file_name()
        .ok_or_else(|| SocketPathError::NoFileName { what, path: shown() })?;
    let tmp = path.with_file_name(format!(".{}.{}.binding", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(io("binding a socket"))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("publishing a socket")(e));
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_sockets_are_replaced_live_ones_and_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.sock");
        let live = bind_listener(&p, "test socket").unwrap();
        assert!(UnixStream::connect(&p).is_ok(), "listening as soon as the path exists");
        assert!(bind_listener(&p, "test socket")
            .unwrap_err()
            .to_string()
            .contains("in use"));
        drop(live);
        let again = bind_listener(&p, "test socket").unwrap();
        assert!(UnixStream::connect(&p).is_ok());
        drop(again);
        let f = dir.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(bind_listener(&f, "test socket")
            .unwrap_err()
            .to_string()
            .contains("not a socket"));
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers.len(), 2, "no temporary names left: {leftovers:?}");
    }
}
