//! Files an agent could have written (its worktree's git links, a neighbour's HEAD, its object
//! directory) → their bytes, read the only way that cannot be turned against mvk: never through
//! a symlink, never blocking on a FIFO or a device, never more than the caller asked for.
//!
//! `fs::read` on such a path is an attack surface: a link replaced by a symlink to `/dev/zero`
//! grows mvk's memory until it dies, a FIFO blocks the thread for ever, and a sparse file of
//! gigabytes costs as much memory as it claims.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

/// What is at a path, told without opening anything but a regular file.
#[derive(Debug)]
pub(crate) enum Found {
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
pub(crate) fn open(path: &Path) -> io::Result<Found> {
    open_at(CWD, path)
}

/// [`open`] for `name` in the directory `dir` (already opened, so that a directory swapped in
/// for it since is not the one read).
pub(crate) fn open_at(dir: impl AsFd, name: &Path) -> io::Result<Found> {
    #[cfg(test)]
    race::before_open(name);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP: the last component is a symlink.
        Err(Errno::LOOP) => {
            let to = rustix::fs::readlinkat(&dir, name, Vec::new())?;
            return Ok(Found::Symlink(PathBuf::from(OsString::from_vec(
                to.into_bytes(),
            ))));
        }
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Ok(Found::Other(type_name(kind)));
    }
    Ok(Found::Regular(
        File::from(fd),
        u64::try_from(stat.st_size).unwrap_or(0),
    ))
}

/// At most `max` bytes of `path` when it is a regular file; `None` when it is something else.
pub(crate) fn read(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let Found::Regular(file, size) = open(path)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    file.take(max).read_to_end(&mut out)?;
    Ok(Some(out))
}

/// The directory `name` in `dir` (or at the path `name`, with [`CWD`]) opened for listing, never
/// through a symlink; `None` when it is not a directory (a symlink to one included) or is gone.
/// What is listed and opened through it is that directory's, whatever is swapped in for it
/// at `name` afterwards.
pub(crate) fn open_dir_at(dir: impl AsFd, name: &Path) -> io::Result<Option<OwnedFd>> {
    #[cfg(test)]
    race::before_open(name);
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `O_NONBLOCK` only in case a FIFO is met: `O_DIRECTORY` refuses one before it is opened.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// [`open_dir_at`], its owner first given read, write and search permission on it when it
/// lacked any. The permission is changed on the directory opened (`fchmod`), never through a
/// path looked up again, which a symlink could have replaced.
pub(crate) fn writable_dir_at(dir: impl AsFd, name: &Path) -> io::Result<Option<OwnedFd>> {
    #[cfg(test)]
    race::before_open(name);
    let fd = match rustix::fs::openat(&dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => return Ok(None),
        // No read permission (as a user that is not root): held by an `O_PATH` descriptor,
        // which any directory's can be, chmod-ed through its `/proc` link, which names the
        // directory held whatever is at `name` now, and opened again through that link.
        Err(Errno::ACCESS) => {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let held = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let link = format!("/proc/self/fd/{}", held.as_raw_fd());
            let mode = rustix::fs::fstat(&held)?.st_mode;
            rustix::fs::chmod(link.as_str(), owner_rwx(mode))?;
            return Ok(Some(rustix::fs::open(
                link.as_str(),
                DIR_FLAGS.difference(OFlags::NOFOLLOW),
                Mode::empty(),
            )?));
        }
        Err(e) => return Err(e.into()),
    };
    let mode = rustix::fs::fstat(&fd)?.st_mode;
    if mode & 0o700 != 0o700 {
        rustix::fs::fchmod(&fd, owner_rwx(mode))?;
    }
    Ok(Some(fd))
}

/// `mode`'s permission bits, and the owner's read, write and search.
fn owner_rwx(mode: rustix::fs::RawMode) -> Mode {
    Mode::from_raw_mode((mode & 0o7777) | 0o700)
}

/// What the directory open at `dir` holds: each entry's name and type (`Unknown` where the
/// file system does not say), `.` and `..` left out. The type is only a hint: what is
/// opened by name is checked again as it is opened.
pub(crate) fn list(dir: impl AsFd) -> io::Result<impl Iterator<Item = (OsString, FileType)>> {
    let listing = rustix::fs::Dir::read_from(dir)?;
    Ok(listing.filter_map(Result::ok).filter_map(|entry| {
        let name = entry.file_name().to_bytes();
        (name != b"." && name != b"..").then(|| {
            (
                std::ffi::OsStr::from_bytes(name).to_os_string(),
                entry.file_type(),
            )
        })
    }))
}

/// Removes `name` from the directory open at `dir`: a directory with everything under it, anything
/// else (a symlink included) as itself. Nothing is followed: each directory is opened once
/// (`O_NOFOLLOW`), emptied through that descriptor and then removed by its name in its parent's,
/// so a directory swapped for a symlink meanwhile leads the removal nowhere else (the symlink is
/// what goes). std's `remove_dir_all` is safe only below the path it is given, which is looked
/// up again, through whatever its components have become.
pub(crate) fn remove_at(dir: impl AsFd, name: &Path) -> io::Result<()> {
    let top = dir.as_fd();
    let mut hoisted = Vec::new();
    remove_below(top, top, name, 0, &mut hoisted)?;
    // What lay deeper than one pass holds descriptors for was moved up beside `name` (review
    // r8e re-review, F3: an agent's directory nested thousands deep made a slot unremovable).
    while let Some(junk) = hoisted.pop() {
        remove_below(top, top, Path::new(&junk), 0, &mut hoisted)?;
    }
    Ok(())
}

/// How deep one pass of [`remove_at`] goes (one descriptor is open per level); what lies deeper
/// is moved up to the directory the removal started in, and removed from there.
const REMOVE_DEPTH: usize = 256;

fn remove_below(
    top: BorrowedFd<'_>,
    dir: BorrowedFd<'_>,
    name: &Path,
    depth: usize,
    hoisted: &mut Vec<OsString>,
) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => return Ok(()),
        // A directory (EISDIR; EPERM where POSIX lets a system say so).
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    if depth >= REMOVE_DEPTH {
        // Moving a directory to another parent rewrites its `..`: it must be writable (review
        // r8f, M2: an agent's 0555 directory there stopped the move).
        if writable_dir_at(dir, name)?.is_none() {
            return Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?);
        }
        // Never over something already there, under a name no one can plant in advance.
        let mut tries = 0;
        loop {
            let junk = OsString::from(format!(".mvk-removing-{:016x}", unguessable()));
            match rustix::fs::renameat_with(
                dir,
                name,
                top,
                junk.as_os_str(),
                rustix::fs::RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {
                    hoisted.push(junk);
                    return Ok(());
                }
                Err(Errno::EXIST) if tries < 16 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Made readable and writable first: an agent's `chmod 000` must not keep what it holds
    // (review r8f, M2).
    let Some(sub) = writable_dir_at(dir, name)? else {
        // No directory any more: what took its place goes as itself.
        return Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?);
    };
    // Listed whole first: one descriptor per level, not two.
    let names: Vec<OsString> = list(&sub)?.map(|(n, _)| n).collect();
    for n in names {
        remove_below(top, sub.as_fd(), Path::new(&n), depth + 1, hoisted)?;
    }
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

/// 64 random bits, from the per-process random keys of std's hasher (no `unsafe`, no crate).
pub(crate) fn unguessable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A process racing mvk, for tests: something to do just before each open by name, at the
/// moment an attacker's swap would do the most harm (after the name was listed and checked).
#[cfg(test)]
pub(crate) mod race {
    use std::cell::RefCell;
    use std::path::Path;

    type Swap = Box<dyn FnMut(&Path)>;

    thread_local! {
        static BEFORE_OPEN: RefCell<Option<Swap>> = const { RefCell::new(None) };
    }

    /// Runs `swap` with each name opened on this thread from now on, until [`clear`].
    pub(crate) fn set(swap: impl FnMut(&Path) + 'static) {
        BEFORE_OPEN.with(|b| *b.borrow_mut() = Some(Box::new(swap)));
    }

    /// Whether a swap is set on this thread: a walk spread over threads runs on this one alone
    /// then, so that the swap sees every name it opens.
    pub(crate) fn is_set() -> bool {
        BEFORE_OPEN.with(|b| b.borrow().is_some())
    }

    pub(crate) fn clear() {
        BEFORE_OPEN.with(|b| *b.borrow_mut() = None);
    }

    pub(super) fn before_open(name: &Path) {
        // Taken out while it runs: a swap that opens files itself does not run again.
        let swap = BEFORE_OPEN.with(|b| b.borrow_mut().take());
        if let Some(mut swap) = swap {
            swap(name);
            BEFORE_OPEN.with(|b| {
                b.borrow_mut().get_or_insert(swap);
            });
        }
    }
}

/// What a file type is called in a message.
fn type_name(kind: FileType) -> &'static str {
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

    /// Re-review F3: a directory nested deeper than one pass holds descriptors for (here 3,000
    /// levels, past PATH_MAX too) is removed whole, through descriptors, from where it stands.
    #[test]
    fn a_directory_nested_thousands_deep_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let top = rustix::fs::open(
            dir.path(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        rustix::fs::mkdirat(&top, "deep", Mode::from_raw_mode(0o755)).unwrap();
        let mut at = rustix::fs::openat(
            &top,
            "deep",
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        for _ in 0..3_000 {
            rustix::fs::mkdirat(&at, "d", Mode::from_raw_mode(0o755)).unwrap();
            at = rustix::fs::openat(&at, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
                .unwrap();
        }
        let file = rustix::fs::openat(
            &at,
            "f",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop((file, at));
        remove_at(&top, Path::new("deep")).unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// Review r8f, M2: an agent's `chmod 000` directory, a 0555 one at the depth where a pass moves
    /// what it holds up (the move rewrites its `..`) and hoisting names planted in advance no longer keep the
    /// removal from finishing. Run on a thread without the capabilities that let root ignore
    /// permissions, as mvk runs for a user who is not root.
    #[test]
    fn unreadable_and_read_only_directories_at_any_depth_are_removed() {
        use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
        let dir = tempfile::tempdir().unwrap();
        let top = rustix::fs::open(
            dir.path(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        for n in 0..64 {
            let planted = format!(".mvk-removing-{}-{n}", std::process::id());
            rustix::fs::mkdirat(&top, planted.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        }
        rustix::fs::mkdirat(&top, "junk", Mode::from_raw_mode(0o755)).unwrap();
        let mut at = rustix::fs::openat(
            &top,
            "junk",
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        rustix::fs::mkdirat(&at, "closed", Mode::from_raw_mode(0o755)).unwrap();
        let closed = rustix::fs::openat(
            &at,
            "closed",
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        rustix::fs::mkdirat(&closed, "inside", Mode::from_raw_mode(0o755)).unwrap();
        rustix::fs::fchmod(&closed, Mode::empty()).unwrap();
        for level in 0..300 {
            rustix::fs::mkdirat(&at, "d", Mode::from_raw_mode(0o755)).unwrap();
            let next =
                rustix::fs::openat(&at, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
                    .unwrap();
            if level == 255 {
                rustix::fs::mkdirat(&next, "x", Mode::from_raw_mode(0o755)).unwrap();
                rustix::fs::fchmod(&next, Mode::from_raw_mode(0o555)).unwrap();
            }
            at = next;
        }
        drop((closed, at));
        let removed = std::thread::spawn(move || {
            let mut caps = capabilities(None).unwrap();
            caps.effective -= CapabilitySet::DAC_OVERRIDE
                | CapabilitySet::DAC_READ_SEARCH
                | CapabilitySet::FOWNER;
            set_capabilities(None, caps).unwrap();
            remove_at(&top, Path::new("junk"))
        })
        .join()
        .unwrap();
        removed.unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".mvk-removing-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

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
