//! Saying what a path is, for messages: "is a directory", "is a FIFO", "is a symlink loop"...
//! rather than a bare "does not exist" when something else is there.

use std::path::{Path, PathBuf};

/// What is at `path`, as a phrase: `a regular file`, `a directory`, `a FIFO (named pipe)`,
/// `a symlink loop`, `a broken symlink (to `x`)`, `missing`, ...
pub fn describe(path: &Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return io_phrase(&e),
    };
    let meta = if link.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return "a symlink loop".into(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let target = std::fs::read_link(path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return format!("a broken symlink (to `{target}`)");
            }
            Err(e) => return io_phrase(&e),
        }
    } else {
        link
    };
    let kind = meta.file_type();
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
    .into()
}

fn io_phrase(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symlink loop".into(),
        Some(libc::ENOTDIR) => "missing (a parent of it is not a directory)".into(),
        _ => match e.kind() {
            std::io::ErrorKind::NotFound => "missing".into(),
            std::io::ErrorKind::PermissionDenied => "unreadable (permission denied)".into(),
            _ => format!("unreadable ({e})"),
        },
    }
}

/// A path that should name a regular file and does not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAFile {
    #[error("`{}` does not exist", .0.display())]
    Missing(PathBuf),
    /// `what` as [`describe`] says it, e.g. "a directory".
    #[error("`{}` is {what}, not a file", path.display())]
    Other { path: PathBuf, what: String },
}

/// `Ok` for a regular file (through symlinks), else what the path is instead, e.g.
/// "`x.jsonl` is a directory, not a file".
pub fn require_file(path: &Path) -> Result<(), NotAFile> {
    match describe(path) {
        what if what == "a regular file" => Ok(()),
        what if what == "missing" => Err(NotAFile::Missing(path.to_owned())),
        what => Err(NotAFile::Other {
            path: path.to_owned(),
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_described_by_what_they_are() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path();
        std::fs::write(p.join("f"), "x").expect("file");
        std::os::unix::fs::symlink(p.join("loop"), p.join("loop")).expect("loop");
        std::os::unix::fs::symlink(p.join("nowhere"), p.join("broken")).expect("broken");
        assert_eq!(describe(&p.join("f")), "a regular file");
        assert_eq!(describe(p), "a directory");
        assert_eq!(describe(&p.join("loop")), "a symlink loop");
        assert!(describe(&p.join("broken")).starts_with("a broken symlink"));
        assert_eq!(describe(&p.join("none")), "missing");
        assert_eq!(
            describe(&p.join("f/x")),
            "missing (a parent of it is not a directory)"
        );
        assert_eq!(describe(Path::new("/dev/null")), "a character device");
        assert_eq!(
            require_file(p).unwrap_err().to_string(),
            format!("`{}` is a directory, not a file", p.display())
        );
    }
}
