//! Files an agent could have written (its worktree's git links, a neighbour's HEAD, its object
//! directory) → their bytes, read the only way that cannot be turned against mvk: never through
//! a symlink, never blocking on a FIFO or a device, never more than the caller asked for.
//!
//! `fs::read` on such a path is an attack surface: a link replaced by a symlink to `/dev/zero`
//! grows mvk's memory until it dies, a FIFO blocks the thread for ever, and a sparse file of
//! gigabytes costs as much memory as it claims.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// What is at a path, told without opening anything but a regular file.
#[derive(Debug)]
pub enum Found {
    /// A regular file, and its size.
    Regular(File, u64),
    /// A symlink (not followed), and where it leads.
    Symlink(std::path::PathBuf),
    /// Anything else: a FIFO, a socket, a device, a directory.
    Other(&'static str),
}

/// Opens `path` if it is a regular file itself, else says what it is. `O_NOFOLLOW` refuses a
/// symlink and `O_NONBLOCK` makes opening a FIFO return at once; the type is then taken from
/// the open file (`fstat`), so nothing can be swapped in between.
pub fn open(path: &Path) -> io::Result<Found> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP: the last component is a symlink.
        Err(rustix::io::Errno::LOOP) => return Ok(Found::Symlink(std::fs::read_link(path)?)),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Ok(Found::Other(name(kind)));
    }
    Ok(Found::Regular(
        File::from(fd),
        u64::try_from(stat.st_size).unwrap_or(0),
    ))
}

/// At most `max` bytes of `path` when it is a regular file; `None` when it is something else.
pub fn read(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let Found::Regular(file, size) = open(path)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    file.take(max).read_to_end(&mut out)?;
    Ok(Some(out))
}

/// What a file type is called in a message.
fn name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read(&file, 4).unwrap().as_deref(), Some(&b"0123"[..]));
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(open(&link).unwrap(), Found::Symlink(to) if to == Path::new("/dev/zero")));
        assert_eq!(read(&link, 4).unwrap(), None);
        // A FIFO with no writer: opening it for reading would block for ever.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(open(&fifo).unwrap(), Found::Other("FIFO")));
        assert!(matches!(
            open(dir.path()).unwrap(),
            Found::Other("directory")
        ));
        // A sparse file of 8 GiB costs what is read of it, no more.
        let sparse = dir.path().join("sparse");
        File::create(&sparse).unwrap().set_len(8 << 30).unwrap();
        assert_eq!(read(&sparse, 16).unwrap().map(|b| b.len()), Some(16));
    }
}
