//! Opening files to write without ever following a symbolic link.
//!
//! Every file the tool creates, truncates, appends to or cuts back is opened through
//! [`options`] (`O_NOFOLLOW`): a symbolic link planted where an output goes (`DIR.lock`,
//! `report.html`, a shard, a spill bucket) makes the open fail instead of overwriting the file
//! it points to. `O_NOFOLLOW` covers the last component only, so the directories the tool
//! names itself (the staging directory, its working folders) are checked with
//! [`real_dir`] before anything is written into them. Removing and renaming never follow a
//! link (they act on the link itself), so they need no check of their own.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// Open options that refuse a symbolic link as the file itself.
pub fn options() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.custom_flags(libc::O_NOFOLLOW);
    options
}

/// Opens `path` with `options` (from [`options`]), saying so plainly when it is a symbolic
/// link (the kernel's own message, "too many levels of symbolic links", misleads).
pub fn open(options: &OpenOptions, path: &Path) -> io::Result<File> {
    options.open(path).map_err(|e| explain(path, e))
}

/// Creates or truncates `path` for writing.
pub fn create(path: &Path) -> io::Result<File> {
    let mut options = options();
    options.write(true).create(true).truncate(true);
    open(&options, path)
}

/// [`std::fs::write`] without following a symbolic link.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    create(path)?.write_all(bytes)
}

/// Fails if `path` is a symbolic link (to a directory or anything else); a missing path is
/// fine. For the directories the tool writes into.
pub fn real_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(symlink_error()),
        _ => Ok(()),
    }
}

fn symlink_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it is a symbolic link; refusing to write through it (remove the link)",
    )
}

/// A failed no-follow open: `ELOOP` on a path that is a link means it was refused for that.
fn explain(path: &Path, e: io::Error) -> io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(libc::ELOOP) && is_link {
        symlink_error()
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbolic_link_is_refused_and_its_target_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("notes.txt");
        std::fs::write(&target, "mine").expect("write");
        let link = dir.path().join("out.txt");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let err = write(&link, b"theirs").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "it is a symbolic link; refusing to write through it (remove the link)"
        );
        assert_eq!(
            real_dir(&link).expect_err("refused").to_string(),
            err.to_string()
        );
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "mine");
        // A plain file is written, a missing directory is fine.
        write(&target, b"new").expect("write");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
        real_dir(&dir.path().join("missing")).expect("missing is fine");
        real_dir(dir.path()).expect("a real directory");
    }
}
