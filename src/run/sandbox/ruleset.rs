//! Where a confined process may write in: mvk's places and the grants, each opened once and
//! checked where it leads; out, this process restricted by Landlock to writing only there and to
//! signalling nothing outside its domain, and how much of that the kernel enforces.

use std::path::PathBuf;

use super::policy::{Protected, exposed};

/// The Landlock ABI mvk asks for: writes, truncation, renames across directories, device
/// ioctls, and the signal and abstract-socket scopes.
const ABI: landlock::ABI = landlock::ABI::V6;

/// A grant held open: the directory or file it led to when it was checked.
pub(super) struct Opened {
    fd: landlock::PathFd,
    file: bool,
}

/// Opens each of `grants` (one that does not exist grants nothing, as Landlock would) and
/// finds where the open descriptor leads; one that leads to or holds a `protected` place is
/// refused, with why.
pub(super) fn open_grants(
    grants: &[PathBuf],
    protected: &[Protected],
) -> Result<Vec<Opened>, String> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut opened = Vec::new();
    for granted in grants {
        let Ok(fd) = landlock::PathFd::new(granted) else {
            continue;
        };
        let raw = fd.as_fd().as_raw_fd();
        let leads = std::fs::read_link(format!("/proc/self/fd/{raw}")).map_err(|e| {
            format!(
                "cannot tell where the grant `{}` leads (/proc/self/fd: {e})",
                granted.display()
            )
        })?;
        if let Some(p) = exposed(&leads, protected) {
            return Err(format!(
                "the sandbox grants `{}`, which now leads to {} (`{}`)",
                granted.display(),
                p.what,
                p.place.display()
            ));
        }
        let file = rustix::fs::fstat(&fd)
            .map(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
            })
            .unwrap_or(false);
        opened.push(Opened { fd, file });
    }
    Ok(opened)
}

/// Applies Landlock to this process: writes only beneath `write` and the `opened` grants, no
/// signals out of the domain. Out comes how much the kernel enforces: `full`, `partial` or
/// `none`.
pub(super) fn restrict(write: &[PathBuf], opened: Vec<Opened>) -> Result<String, String> {
    use landlock::{
        Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        Scope, path_beneath_rules,
    };
    // Every write is handled, so what no rule grants is denied everywhere: device nodes are
    // never made, not even where the program may write (a node of the disk would let it
    // write anything). No device can be under a granted path then, so ioctls on devices stay
    // granted for the few granted device files (`/dev/null` and the like, never a terminal:
    // see `DEVICES`), and are refused on every other device, however it was opened.
    let granted = AccessFs::from_write(ABI) & !(AccessFs::MakeBlock | AccessFs::MakeChar);
    let status = Ruleset::default()
        .handle_access(AccessFs::from_write(ABI))
        .and_then(|r| r.scope(Scope::from_all(ABI)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(write, granted)))
        .and_then(|r| {
            r.add_rules(opened.into_iter().map(|o| {
                let access = if o.file {
                    granted & AccessFs::from_file(ABI)
                } else {
                    granted
                };
                Ok::<_, landlock::RulesetError>(PathBeneath::new(o.fd, access))
            }))
        })
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    }
    .to_string())
}
