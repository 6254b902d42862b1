//! Opening a file that is about to be read whole, refusing anything that is not a regular
//! file.
//!
//! Opening a FIFO for reading waits for a writer, and reading a character device such as
//! `/dev/zero` never ends: either would hold a blocking thread (and whatever lock its
//! caller holds) forever. So the path is checked before it is opened, opened without
//! blocking (`O_NONBLOCK`, which changes nothing for a regular file), and the file that
//! was actually opened is checked again (the path may have been swapped in between).

use std::fs::{File, Metadata};
use std::io::Read as _;
use std::path::Path;

use zeroize::Zeroizing;

use crate::error::{Error, ErrorKind, Result};

/// The largest file the crate reads (credential files, cloud configs, CA files, managed
/// identities files): 1 MiB.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Refuse input over [`MAX_FILE_BYTES`] before parsing it.
pub(crate) fn check_size(bytes: &[u8]) -> Result<()> {
    let size = bytes.len() as u64;
    if size > MAX_FILE_BYTES {
        return Err(too_large(size));
    }
    Ok(())
}

/// A file of `size` bytes, over [`MAX_FILE_BYTES`].
fn too_large(size: u64) -> Error {
    let message =
        format!("is {size} bytes; credential files over {MAX_FILE_BYTES} bytes are refused");
    Error::file("file_too_large", None, message)
}

/// Read at most `MAX_FILE_BYTES + 1` bytes of a regular file, so a huge or growing file
/// is refused without being read whole; errors name the file as `role` (e.g. "cloud config
/// file"). The buffer may hold a secret: it is zeroized on drop.
pub fn read_limited_as(path: &Path, role: &'static str) -> Result<Zeroizing<Vec<u8>>> {
    let io = |e: std::io::Error| Error::from(ErrorKind::from(e)).with_file(path, role);
    let too_large = |size: u64| too_large(size).with_file(path, role);
    // The length of a regular file; anything else is refused.
    let regular = |meta: Metadata| match special_kind(&meta) {
        Some(kind) => {
            let message = format!("is a {kind}, not a regular file");
            Err(Error::file("not_a_regular_file", None, message).with_file(path, role))
        }
        None => Ok(meta.len()),
    };
    // Checked before opening, opened without blocking (a FIFO or a device is refused, not
    // waited on), and checked again once open (the path may have been swapped).
    regular(std::fs::metadata(path).map_err(io)?)?;
    let file = open_nonblocking(path).map_err(io)?;
    let hint = regular(file.metadata().map_err(io)?)?;
    if hint > MAX_FILE_BYTES {
        return Err(too_large(hint));
    }
    // Sized from the metadata so that a regular file is read without reallocating (a
    // reallocation would free a copy of the secret without zeroizing it).
    let mut bytes = Zeroizing::new(Vec::with_capacity(hint as usize));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(target_os = "linux")]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
}

/// Elsewhere the check before opening is what protects the caller.
#[cfg(not(target_os = "linux"))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// Pure: `None` for a regular file, else what it is.
fn special_kind(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kinds = [
            (kind.is_fifo(), "FIFO"),
            (kind.is_char_device(), "character device"),
            (kind.is_block_device(), "block device"),
            (kind.is_socket(), "socket"),
        ];
        if let Some((_, name)) = kinds.into_iter().find(|(is, _)| *is) {
            return Some(name);
        }
    }
    Some("special file")
}

#[cfg(unix)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_device_is_refused_by_kind() {
        let err = read_limited_as(Path::new("/dev/zero"), "test file").unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::File {
                    code: "not_a_regular_file",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("/dev/zero: is a character device"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_is_refused_by_kind() {
        let err = read_limited_as(Path::new("/"), "test file").unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::File {
                    code: "not_a_regular_file",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .ends_with("is a directory, not a regular file"),
            "{err}"
        );
    }
}
