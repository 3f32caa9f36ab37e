//! What reading a sandboxed agent's packs would cost, found before libgit2 reads them.
//!
//! libgit2 reports a delta's size as the size of what it makes, but reading it inflates its
//! base, and the base's base: a ten-byte delta can stand for a base of gigabytes that the
//! pack's index does not even list, and a thousand small deltas make libgit2 inflate one big
//! base a thousand times. So mvk walks each pack's entries itself, from the index the agent
//! wrote (the one libgit2 reads), and counts for each listed object everything its read
//! inflates: its own data and every base down its chain. Only the first bytes of a delta are
//! inflated here (the sizes it declares); nothing else is.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::run::sandbox::{AbsorbError, Limits};

const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;
/// An index mvk reads no further than this: a million objects and then some.
const MAX_INDEX: u64 = 64 << 20;

/// Leaves in `pack_dir` only what mvk checks: regular files named `*.idx` and `*.pack`. A
/// multi-pack index (or anything else libgit2 might read) goes unread, and a symlinked
/// directory is unlinked, not followed.
pub fn tidy(pack_dir: &Path) {
    match std::fs::symlink_metadata(pack_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            let _ = std::fs::remove_file(pack_dir);
            return;
        }
        Err(_) => return,
    }
    let Ok(entries) = std::fs::read_dir(pack_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let named = path.extension().is_some_and(|e| e == "idx" || e == "pack");
        let kind = entry.file_type();
        if named && kind.as_ref().is_ok_and(|k| k.is_file()) {
            continue;
        }
        // Best effort: what stays is refused below if libgit2 would read it.
        let _ = match kind {
            Ok(k) if k.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

/// Refuses the agent's packs in `pack_dir` when reading the objects their indexes list (those
/// not already in `shared`) would inflate more than `limits` allow, counting every delta's
/// bases; or when mvk cannot tell what it would cost.
pub fn check(pack_dir: &Path, shared: &git2::Odb, limits: Limits) -> Result<(), AbsorbError> {
    let Ok(entries) = std::fs::read_dir(pack_dir) else {
        return Ok(());
    };
    let mut total = 0u64;
    for entry in entries.flatten() {
        let idx = entry.path();
        if idx.extension().is_none_or(|e| e != "idx") {
            continue;
        }
        let name = idx.file_name().map(|n| n.to_string_lossy().into_owned());
        let refuse = |why: String| AbsorbError::Pack {
            pack: name.clone().unwrap_or_default(),
            why,
        };
        let listed = read_index(&idx).map_err(refuse)?;
        if listed.len() > limits.count {
            return Err(AbsorbError::TooMany {
                limit: limits.count,
            });
        }
        let pack = File::open(idx.with_extension("pack"))
            .map_err(|e| refuse(format!("has no pack mvk can read ({e})")))?;
        let mut walk = Walk {
            pack,
            by_id: listed.iter().map(|(id, at)| (*id, *at)).collect(),
            shared,
            limits,
            costs: HashMap::new(),
        };
        for (id, at) in &listed {
            if git2::Oid::from_bytes(id).is_ok_and(|id| shared.exists(id)) {
                continue;
            }
            let cost = walk.cost(*at).map_err(refuse)?;
            total = total.saturating_add(cost);
            if total > limits.total as u64 {
                return Err(AbsorbError::TooMuch {
                    limit: limits.total,
                });
            }
        }
    }
    Ok(())
}

/// The ids and offsets a version 2 pack index lists.
fn read_index(path: &Path) -> Result<Vec<([u8; 20], u64)>, String> {
    let unread = |e: std::io::Error| format!("has an index mvk cannot read ({e})");
    let file = File::open(path).map_err(unread)?;
    let mut data = Vec::new();
    file.take(MAX_INDEX + 1)
        .read_to_end(&mut data)
        .map_err(unread)?;
    if data.len() as u64 > MAX_INDEX {
        return Err(format!("has an index over {MAX_INDEX} bytes"));
    }
    let bad = || "has an index that is not a version 2 pack index".to_string();
    if data.get(..8) != Some(&[0xff, b't', b'O', b'c', 0, 0, 0, 2][..]) {
        return Err(bad());
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let n = word(8 + 255 * 4).ok_or_else(bad)? as usize;
    let ids = 8 + 256 * 4;
    let offsets = ids + n * 24;
    let large = offsets + n * 4;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let id: [u8; 20] = data
            .get(ids + i * 20..ids + i * 20 + 20)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(bad)?;
        let small = word(offsets + i * 4).ok_or_else(bad)?;
        let at = if small & 0x8000_0000 == 0 {
            u64::from(small)
        } else {
            let j = large + (small & 0x7fff_ffff) as usize * 8;
            let hi = word(j).ok_or_else(bad)?;
            let lo = word(j + 4).ok_or_else(bad)?;
            (u64::from(hi) << 32) | u64::from(lo)
        };
        out.push((id, at));
    }
    Ok(out)
}

/// One entry of a pack, as far as its cost goes.
struct Entry {
    /// What inflating its own data makes (for a delta, the delta itself and its result).
    own: u64,
    base: Option<Base>,
}

enum Base {
    /// An entry of the same pack.
    At(u64),
    /// An object of the shared store, of this size.
    Shared(u64),
}

struct Walk<'a> {
    pack: File,
    by_id: HashMap<[u8; 20], u64>,
    shared: &'a git2::Odb<'a>,
    limits: Limits,
    /// What reading the entry at an offset inflates, bases included.
    costs: HashMap<u64, u64>,
}

impl Walk<'_> {
    /// What reading the entry at `start` inflates, down its chain of bases.
    fn cost(&mut self, start: u64) -> Result<u64, String> {
        let mut chain = Vec::new();
        let mut seen = HashSet::new();
        let mut at = start;
        let below = loop {
            if let Some(&known) = self.costs.get(&at) {
                break known;
            }
            if !seen.insert(at) {
                return Err(format!("has a delta at offset {at} that is its own base"));
            }
            let entry = self.entry(at)?;
            chain.push((at, entry.own));
            match entry.base {
                None => break 0,
                Some(Base::At(base)) => at = base,
                Some(Base::Shared(size)) => break size,
            }
        };
        let mut cost = below;
        for (at, own) in chain.into_iter().rev() {
            cost = cost.saturating_add(own);
            self.costs.insert(at, cost);
        }
        Ok(cost)
    }

    fn entry(&mut self, at: u64) -> Result<Entry, String> {
        let unread = |why: &str| format!("has an entry at offset {at} mvk cannot read ({why})");
        let mut head = Vec::with_capacity(4096);
        self.pack
            .seek(SeekFrom::Start(at))
            .map_err(|e| unread(&e.to_string()))?;
        (&mut self.pack)
            .take(4096)
            .read_to_end(&mut head)
            .map_err(|e| unread(&e.to_string()))?;
        let mut bytes = head.iter().copied();
        let mut next = || bytes.next().ok_or_else(|| unread("it is cut short"));
        let mut c = next()?;
        let kind = (c >> 4) & 7;
        let mut size = u64::from(c & 15);
        let mut shift = 4;
        while c & 0x80 != 0 {
            c = next()?;
            if shift > 56 {
                return Err(unread("its size is too long"));
            }
            size |= u64::from(c & 0x7f) << shift;
            shift += 7;
        }
        let too_big = |size: u64| {
            format!(
                "has an entry at offset {at} of {size} bytes, more than the {} bytes mvk \
                 accepts from an agent",
                self.limits.object
            )
        };
        if size > self.limits.object as u64 {
            return Err(too_big(size));
        }
        let base = match kind {
            1..=4 => {
                return Ok(Entry {
                    own: size,
                    base: None,
                });
            }
            OFS_DELTA => {
                let mut c = next()?;
                let mut back = u64::from(c & 0x7f);
                while c & 0x80 != 0 {
                    c = next()?;
                    back = back
                        .checked_add(1)
                        .and_then(|b| b.checked_mul(128))
                        .ok_or_else(|| unread("its base's offset is too long"))?
                        | u64::from(c & 0x7f);
                }
                match at.checked_sub(back) {
                    Some(base) if back > 0 => Base::At(base),
                    _ => return Err(unread("its base lies before the pack")),
                }
            }
            REF_DELTA => {
                let mut id = [0u8; 20];
                for b in &mut id {
                    *b = next()?;
                }
                if let Some(&base) = self.by_id.get(&id) {
                    Base::At(base)
                } else {
                    let found = git2::Oid::from_bytes(&id)
                        .and_then(|oid| self.shared.read_header(oid))
                        .map_err(|_| {
                            format!(
                                "has a delta at offset {at} whose base is neither in the pack \
                                 nor in the repository"
                            )
                        })?;
                    Base::Shared(found.0 as u64)
                }
            }
            _ => return Err(unread("its type is unknown")),
        };
        // The delta's data starts with the sizes of its base and of what it makes: inflate
        // just those bytes.
        let used = head.len() - bytes.len();
        let result = delta_result_size(&head[used..]).ok_or_else(|| unread("a bad delta"))?;
        if result > self.limits.object as u64 {
            return Err(too_big(result));
        }
        Ok(Entry {
            own: size.saturating_add(result),
            base: Some(base),
        })
    }
}

/// The size a delta says it makes, from the start of its compressed data.
fn delta_result_size(compressed: &[u8]) -> Option<u64> {
    use miniz_oxide::inflate::stream::{InflateState, inflate};
    use miniz_oxide::{DataFormat, MZFlush};
    let mut state = InflateState::new_boxed(DataFormat::Zlib);
    let mut out = [0u8; 20];
    let done = inflate(&mut state, compressed, &mut out, MZFlush::None);
    let mut bytes = out[..done.bytes_written].iter().copied();
    let mut varint = || -> Option<u64> {
        let mut size = 0u64;
        let mut shift = 0;
        loop {
            let c = bytes.next()?;
            if shift > 56 {
                return None;
            }
            size |= u64::from(c & 0x7f) << shift;
            shift += 7;
            if c & 0x80 == 0 {
                return Some(size);
            }
        }
    };
    let _base = varint()?;
    varint()
}
