//! A sandboxed agent's object directory → a private copy of what mvk reads from it, and what
//! reading that copy would cost, found before libgit2 reads anything.
//!
//! The directory is the agent's, and so is anything it left running: mvk copies out only the
//! regular files it checks (loose objects, `.idx`/`.pack` pairs), never following a symlink
//! (each directory is opened once and what it holds opened through that descriptor, so one
//! swapped for a symlink after its check leads nowhere else), never opening a FIFO or a device, never more bytes than the limits allow, into a directory
//! out of the agent's reach. libgit2 never sees an `alternates` file, a multi-pack index or a
//! file rewritten after its check.
//!
//! libgit2 reports a delta's size as the size of what it makes, but reading it inflates its
//! base, and the base's base: a ten-byte delta can stand for a base of gigabytes, and a
//! thousand small deltas make libgit2 inflate one big base a thousand times. So mvk walks each
//! pack's entries itself, from the index libgit2 reads, and counts two things: the content of
//! the objects listed (each once, against [`Limits::total`]), and for each listed object what
//! its read inflates, its own data and every base down its chain (against [`Limits::work`]).
//! Only the first bytes of a delta are inflated here (the sizes it declares); nothing else is.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::Path;

use miniz_oxide::inflate::stream::InflateState;
use rustix::fs::CWD;

use crate::run::exec::untrusted;
use crate::run::sandbox::{AbsorbError, Limits};

const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;
/// An index mvk reads no further than this: a million objects and then some.
const MAX_INDEX: u64 = 64 << 20;
/// The longest chain of deltas git writes (`pack.depth` is capped there).
const MAX_DEPTH: usize = 4095;
/// An index: header and fanout, then per object an id, a CRC and an offset, then two ids.
const INDEX_HEAD: usize = 8 + 256 * 4;
const INDEX_ENTRY: usize = 20 + 4 + 4;
const INDEX_TAIL: usize = 40;

/// Copies from the agent's object directory `from` into `to` (made by mvk, out of the agent's
/// reach) what mvk checks and libgit2 then reads: regular loose objects named as git names
/// them, and each regular `pack/*.idx` with its regular `.pack`. Anything else is left behind
/// unread: symlinks, FIFOs, devices, `info/alternates`, a multi-pack index. Refused past the
/// limits: more files than objects allowed, more bytes than their content could take.
pub(super) fn copy_checked(from: &Path, to: &Path, limits: Limits) -> Result<(), AbsorbError> {
    // Compressed, an object takes at most a little more than its content; a delta's data
    // more than what it makes by one byte in 127 (insertions), plus headers.
    let mut budget = Budget {
        bytes: (limits.total as u64)
            .saturating_add(limits.total as u64 / 64)
            .saturating_add(64 * limits.count as u64),
        files: limits.count,
        limits,
    };
    // Each directory is opened once, never through a symlink, and what is in it is listed
    // and opened through that descriptor: a directory swapped for a symlink after its check
    // (by a process the agent left running) leads nowhere else.
    let Ok(Some(top)) = untrusted::open_dir_at(CWD, from) else {
        return Ok(());
    };
    let Ok(entries) = untrusted::list(&top) else {
        return Ok(());
    };
    for (name, _) in entries {
        let Some(name) = name.to_str() else {
            continue;
        };
        if name == "pack" {
            if let Ok(Some(dir)) = untrusted::open_dir_at(&top, Path::new(name)) {
                copy_packs(&dir, &to.join("pack"), &mut budget)?;
            }
        } else if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            let Ok(Some(dir)) = untrusted::open_dir_at(&top, Path::new(name)) else {
                continue;
            };
            let Ok(files) = untrusted::list(&dir) else {
                continue;
            };
            for (rest, _) in files {
                let named = rest
                    .to_str()
                    .is_some_and(|r| r.len() == 38 && r.bytes().all(|b| b.is_ascii_hexdigit()));
                if named {
                    budget.copy(&dir, Path::new(&rest), &to.join(name).join(&rest))?;
                }
            }
        }
    }
    Ok(())
}

fn copy_packs(from: &OwnedFd, to: &Path, budget: &mut Budget) -> Result<(), AbsorbError> {
    let Ok(entries) = untrusted::list(from) else {
        return Ok(());
    };
    for (name, _) in entries {
        let idx = Path::new(&name);
        if idx.extension().is_none_or(|e| e != "idx") {
            continue;
        }
        let pack = idx.with_extension("pack");
        // The pack first: an index copied without its pack would name objects no one has.
        if budget.copy(from, &pack, &to.join(&pack))? {
            budget.copy(from, idx, &to.join(idx))?;
        }
    }
    Ok(())
}

/// What is left of the files and bytes mvk copies from the agent.
struct Budget {
    bytes: u64,
    files: usize,
    limits: Limits,
}

impl Budget {
    /// Copies `name` in the directory `dir` to `to` if it is a regular file; out comes whether
    /// it was. What is copied is the size the file had when opened, no more (an escaped process
    /// may still write it).
    fn copy(&mut self, dir: &OwnedFd, name: &Path, to: &Path) -> Result<bool, AbsorbError> {
        let Ok(untrusted::Found::Regular(file, size)) = untrusted::open_at(dir, name) else {
            return Ok(false);
        };
        self.files = self.files.checked_sub(1).ok_or(AbsorbError::TooMany {
            limit: self.limits.count,
        })?;
        self.bytes = self.bytes.checked_sub(size).ok_or(AbsorbError::TooMuch {
            limit: self.limits.total,
        })?;
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| AbsorbError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        }
        let mut out = File::create(to).map_err(io("create", to))?;
        // A read error is the agent's file going away under mvk: what was read is checked.
        let _ = std::io::copy(&mut file.take(size), &mut out);
        Ok(true)
    }
}

/// Refuses the packs in `pack_dir` (mvk's copy) when reading the objects their indexes list
/// (those not already in `shared`) would hold or inflate more than `limits` allow, counting
/// every delta's bases; or when mvk cannot tell what it would cost: an index that is not a
/// valid one, a delta whose base its index does not list (git lists every entry of a pack) or
/// whose base is outside the pack (git keeps no thin pack).
pub(super) fn check(
    pack_dir: &Path,
    shared: &git2::Odb,
    limits: Limits,
) -> Result<(), AbsorbError> {
    let Ok(entries) = std::fs::read_dir(pack_dir) else {
        return Ok(());
    };
    let mut listed_so_far = 0usize;
    let mut content = 0u64;
    let mut work = 0u64;
    let mut inflate = InflateState::new_boxed(miniz_oxide::DataFormat::Zlib);
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
        let listed =
            read_index(&idx, limits.count - listed_so_far.min(limits.count)).map_err(|why| {
                match why {
                    Index::TooMany => AbsorbError::TooMany {
                        limit: limits.count,
                    },
                    Index::Bad(why) => refuse(why),
                }
            })?;
        listed_so_far += listed.len();
        let pack = File::open(idx.with_extension("pack"))
            .map_err(|e| refuse(format!("has no pack mvk can read ({e})")))?;
        let mut walk = Walk {
            pack,
            by_id: listed.iter().map(|(id, at)| (*id, *at)).collect(),
            offsets: listed.iter().map(|(_, at)| *at).collect(),
            limits,
            costs: HashMap::new(),
            inflate: &mut inflate,
        };
        for (id, at) in &listed {
            if git2::Oid::from_bytes(id).is_ok_and(|id| shared.exists(id)) {
                continue;
            }
            let (made, cost) = walk.cost(*at).map_err(refuse)?;
            content = content.saturating_add(made);
            if content > limits.total as u64 {
                return Err(AbsorbError::TooMuch {
                    limit: limits.total,
                });
            }
            work = work.saturating_add(cost);
            if work > limits.work {
                return Err(AbsorbError::TooMuchWork { limit: limits.work });
            }
        }
    }
    Ok(())
}

/// Why an index was refused.
enum Index {
    /// It lists more objects than are left of the limit.
    TooMany,
    Bad(String),
}

/// The ids and offsets a version 2 pack index lists, refused when it lists more than `most`
/// or is not a well-formed index: its fanout never goes down, its ids ascend strictly (as
/// libgit2's binary search needs: with an id twice, mvk could charge one base and libgit2 read
/// the other), its size is what its count says.
fn read_index(path: &Path, most: usize) -> Result<Vec<([u8; 20], u64)>, Index> {
    let unread = |e: std::io::Error| Index::Bad(format!("has an index mvk cannot read ({e})"));
    let file = File::open(path).map_err(unread)?;
    let mut data = Vec::new();
    file.take(MAX_INDEX + 1)
        .read_to_end(&mut data)
        .map_err(unread)?;
    if data.len() as u64 > MAX_INDEX {
        return Err(Index::Bad(format!("has an index over {MAX_INDEX} bytes")));
    }
    let bad = |why: &str| {
        Index::Bad(format!(
            "has an index that is not a version 2 pack index ({why})"
        ))
    };
    if data.get(..8) != Some(&[0xff, b't', b'O', b'c', 0, 0, 0, 2][..]) {
        return Err(bad("its header"));
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let mut last = 0;
    for i in 0..256 {
        let n = word(8 + i * 4).ok_or_else(|| bad("cut short"))?;
        if n < last {
            return Err(bad("its fanout goes down"));
        }
        last = n;
    }
    let n = last as usize;
    if n > most {
        return Err(Index::TooMany);
    }
    // Checked before anything is allocated for the count: the file must hold every entry.
    let fixed = INDEX_HEAD + n * INDEX_ENTRY + INDEX_TAIL;
    let large_count = data
        .len()
        .checked_sub(fixed)
        .filter(|rest| rest % 8 == 0)
        .ok_or_else(|| bad("its size does not match its count"))?
        / 8;
    let ids = INDEX_HEAD;
    let offsets = ids + n * 24;
    let large = offsets + n * 4;
    let mut out = Vec::with_capacity(n);
    let mut previous: Option<[u8; 20]> = None;
    for i in 0..n {
        let id: [u8; 20] = data
            .get(ids + i * 20..ids + i * 20 + 20)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| bad("cut short"))?;
        if previous.is_some_and(|p| p >= id) {
            return Err(bad("its ids do not ascend strictly"));
        }
        let fan = word(8 + usize::from(id[0]) * 4).unwrap_or(0) as usize;
        let below = if id[0] == 0 {
            0
        } else {
            word(8 + (usize::from(id[0]) - 1) * 4).unwrap_or(0) as usize
        };
        if i < below || i >= fan {
            return Err(bad("its fanout does not match its ids"));
        }
        previous = Some(id);
        let small = word(offsets + i * 4).ok_or_else(|| bad("cut short"))?;
        let at = if small & 0x8000_0000 == 0 {
            u64::from(small)
        } else {
            let k = (small & 0x7fff_ffff) as usize;
            if k >= large_count {
                return Err(bad("a large offset it does not hold"));
            }
            let j = large + k * 8;
            let hi = word(j).ok_or_else(|| bad("cut short"))?;
            let lo = word(j + 4).ok_or_else(|| bad("cut short"))?;
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
    /// The size of the object it is (for a delta, its result).
    made: u64,
    /// The offset of its base, an entry of the same pack.
    base: Option<u64>,
}

struct Walk<'a> {
    pack: File,
    /// The listed entries, by id and (the values) by offset: an entry's base must be one.
    by_id: HashMap<[u8; 20], u64>,
    offsets: HashSet<u64>,
    limits: Limits,
    /// What reading the entry at an offset inflates, bases included.
    costs: HashMap<u64, u64>,
    /// One inflater for every delta's first bytes (each is 40 KB).
    inflate: &'a mut InflateState,
}

impl Walk<'_> {
    /// The size of the object at `start`, and what reading it inflates, down its chain of
    /// bases.
    fn cost(&mut self, start: u64) -> Result<(u64, u64), String> {
        let mut chain = Vec::new();
        let mut seen = HashSet::new();
        let mut made = None;
        let mut at = start;
        let below = loop {
            if let Some(&known) = self.costs.get(&at) {
                break known;
            }
            if !seen.insert(at) {
                return Err(format!("has a delta at offset {at} that is its own base"));
            }
            if chain.len() > MAX_DEPTH {
                return Err(format!(
                    "has a delta at offset {start} with a chain of bases over {MAX_DEPTH} long"
                ));
            }
            let entry = self.entry(at)?;
            made.get_or_insert(entry.made);
            chain.push((at, entry.own));
            match entry.base {
                None => break 0,
                Some(base) => at = base,
            }
        };
        let mut cost = below;
        for (at, own) in chain.into_iter().rev() {
            cost = cost.saturating_add(own);
            self.costs.insert(at, cost);
        }
        // Known from an earlier walk: read just its header again for its size.
        let made = match made {
            Some(made) => made,
            None => self.entry(start)?.made,
        };
        Ok((made, cost))
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
                    made: size,
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
                    // git lists every entry of a pack: a base it does not list is a chain
                    // of entries mvk could walk for ever at no cost by the limits.
                    Some(base) if back > 0 && self.offsets.contains(&base) => base,
                    Some(base) if back > 0 => {
                        return Err(format!(
                            "has a delta at offset {at} whose base (at offset {base}) its \
                             index does not list"
                        ));
                    }
                    _ => return Err(unread("its base lies before the pack")),
                }
            }
            REF_DELTA => {
                let mut id = [0u8; 20];
                for b in &mut id {
                    *b = next()?;
                }
                // A base outside the pack is a thin pack's: git writes one only to send it,
                // and completes one it receives with the bases it lacks (`index-pack
                // --fix-thin`). Read from the shared store, such a base would be rebuilt from
                // the store's own chain of deltas at each read, which mvk does not count.
                match self.by_id.get(&id) {
                    Some(&base) => base,
                    None => {
                        return Err(format!(
                            "has a delta at offset {at} whose base ({}) is not in the pack (git \
                             completes a thin pack it receives with its bases)",
                            id.iter().map(|b| format!("{b:02x}")).collect::<String>()
                        ));
                    }
                }
            }
            _ => return Err(unread("its type is unknown")),
        };
        // The delta's data starts with the sizes of its base and of what it makes: inflate
        // just those bytes.
        let used = head.len() - bytes.len();
        let result =
            delta_result_size(self.inflate, &head[used..]).ok_or_else(|| unread("a bad delta"))?;
        if result > self.limits.object as u64 {
            return Err(too_big(result));
        }
        Ok(Entry {
            own: size.saturating_add(result),
            made: result,
            base: Some(base),
        })
    }
}

/// The size a delta says it makes, from the start of its compressed data.
fn delta_result_size(state: &mut InflateState, compressed: &[u8]) -> Option<u64> {
    use miniz_oxide::inflate::stream::inflate;
    use miniz_oxide::{DataFormat, MZFlush};
    state.reset(DataFormat::Zlib);
    let mut out = [0u8; 20];
    let done = inflate(state, compressed, &mut out, MZFlush::None);
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        object: 1 << 20,
        total: 4 << 20,
        count: 1000,
        work: 64 << 20,
    };

    fn header(kind: u8, mut size: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = (kind << 4) | (size & 15) as u8;
        size >>= 4;
        while size != 0 {
            out.push(c | 0x80);
            c = (size & 0x7f) as u8;
            size >>= 7;
        }
        out.push(c);
        out
    }

    /// The back offset of an `OFS_DELTA`, as git writes it.
    fn ofs(mut n: u64) -> Vec<u8> {
        let mut out = vec![(n & 0x7f) as u8];
        n >>= 7;
        while n != 0 {
            n -= 1;
            out.insert(0, 0x80 | (n & 0x7f) as u8);
            n >>= 7;
        }
        out
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        miniz_oxide::deflate::compress_to_vec_zlib(data, 1)
    }

    fn blob_id(data: &[u8]) -> [u8; 20] {
        let id = git2::Oid::hash_object(git2::ObjectType::Blob, data).unwrap();
        id.as_bytes().try_into().unwrap()
    }

    /// A version 2 index listing ENTRIES (id, offset) in the order given (checksums zero: mvk
    /// does not read them).
    fn index(entries: &[([u8; 20], u64)]) -> Vec<u8> {
        let mut idx = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
        for i in 0..256u32 {
            let n = entries
                .iter()
                .filter(|(id, _)| u32::from(id[0]) <= i)
                .count();
            idx.extend((n as u32).to_be_bytes());
        }
        for (id, _) in entries {
            idx.extend(id);
        }
        idx.extend(vec![0u8; entries.len() * 4]);
        for (_, at) in entries {
            idx.extend((*at as u32).to_be_bytes());
        }
        idx.extend([0u8; 40]);
        idx
    }

    /// Writes `x.pack` and `x.idx` into a new directory, and checks it against an empty store.
    fn check_pack(pack: &[u8], idx: &[u8], limits: Limits) -> Result<(), AbsorbError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.pack"), pack).unwrap();
        std::fs::write(dir.path().join("x.idx"), idx).unwrap();
        let odb = git2::Odb::new().unwrap();
        check(dir.path(), &odb, limits)
    }

    fn pack_start(entries: u32) -> Vec<u8> {
        let mut pack = b"PACK".to_vec();
        pack.extend(2u32.to_be_bytes());
        pack.extend(entries.to_be_bytes());
        pack
    }

    #[test]
    fn an_index_that_claims_four_billion_objects_is_refused_before_anything_is_allocated() {
        // Regression: mvk reserved room for the count in the index's last fanout entry (137 GB
        // for 0xffffffff) and aborted when the allocation failed.
        let mut idx = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
        idx.extend([0xffu8; 256 * 4]);
        let err = check_pack(&pack_start(0), &idx, LIMITS).unwrap_err();
        assert!(
            matches!(err, AbsorbError::Pack { .. } | AbsorbError::TooMany { .. }),
            "{err:?}"
        );
        // A fanout that goes down is no index either.
        let mut idx = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
        for i in 0..256u32 {
            idx.extend(if i == 10 { 5u32 } else { 0 }.to_be_bytes());
        }
        idx.extend([0u8; 40]);
        let err = check_pack(&pack_start(0), &idx, LIMITS).unwrap_err();
        assert!(matches!(err, AbsorbError::Pack { .. }), "{err:?}");
    }

    #[test]
    fn an_index_that_lists_an_id_twice_is_refused() {
        // Regression: mvk kept the last of two entries with one id, libgit2 finds either by
        // binary search: a delta mvk charged against a small base read a big one.
        let mut pack = pack_start(2);
        let small = b"x".to_vec();
        let big = vec![b'y'; 1000];
        let first = pack.len() as u64;
        pack.extend(header(3, small.len() as u64));
        pack.extend(zlib(&small));
        let second = pack.len() as u64;
        pack.extend(header(3, big.len() as u64));
        pack.extend(zlib(&big));
        let id = blob_id(&small);
        let err = check_pack(&pack, &index(&[(id, first), (id, second)]), LIMITS).unwrap_err();
        assert!(matches!(err, AbsorbError::Pack { .. }), "{err:?}");
    }

    #[test]
    fn a_delta_whose_base_the_index_does_not_list_is_refused() {
        // Regression: a chain of twenty thousand unlisted empty deltas cost nothing by the
        // limits, and mvk walked every one of them (a gigabyte of such links made mvk spend
        // gigabytes of memory and twenty minutes before libgit2 read anything).
        let links = 20_000;
        let mut pack = pack_start(links + 1);
        let mut at = pack.len() as u64;
        pack.extend(header(3, 0));
        pack.extend(zlib(b""));
        for _ in 0..links {
            let next = pack.len() as u64;
            pack.extend(header(6, 2));
            pack.extend(ofs(next - at));
            pack.extend(zlib(&[0, 0]));
            at = next;
        }
        let err = check_pack(&pack, &index(&[(blob_id(b""), at)]), LIMITS).unwrap_err();
        assert!(matches!(err, AbsorbError::Pack { .. }), "{err:?}");
    }

    #[test]
    fn a_delta_whose_base_is_only_in_the_shared_store_is_refused() {
        // Regression: such a base was charged its size only, while libgit2 rebuilds it from
        // the store's own chain of deltas (up to 50 long, 250 for old `--aggressive` packs) at
        // each read. git keeps no thin pack, so none is accepted.
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path().join("repo")).unwrap();
        let base = vec![b'b'; 1000];
        let base_id = repo.blob(&base).unwrap();
        let result = b"made from the shared base".to_vec();
        let mut delta = vec![0xe8, 0x07, result.len() as u8, result.len() as u8];
        delta.extend(&result);
        let mut pack = pack_start(1);
        let at = pack.len() as u64;
        pack.extend(header(REF_DELTA, delta.len() as u64));
        pack.extend(base_id.as_bytes());
        pack.extend(zlib(&delta));
        let packs = dir.path().join("pack");
        std::fs::create_dir(&packs).unwrap();
        std::fs::write(packs.join("x.pack"), &pack).unwrap();
        std::fs::write(packs.join("x.idx"), index(&[(blob_id(&result), at)])).unwrap();
        let err = check(&packs, &repo.odb().unwrap(), LIMITS).unwrap_err();
        assert!(
            matches!(&err, AbsorbError::Pack { why, .. } if why.contains("not in the pack")),
            "{err:?}"
        );
    }

    /// An object directory `from` holding one pack and one loose object of the agent's, and
    /// beside it `other`, another repository's (files named alike: their names are all mvk
    /// copies by), and `to`, mvk's copy.
    fn two_object_dirs() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        for (dir, whose) in [("from", "mine"), ("other", "theirs")] {
            let objects = tmp.path().join(dir);
            std::fs::create_dir_all(objects.join("pack")).unwrap();
            std::fs::create_dir_all(objects.join("ab")).unwrap();
            for file in [
                "pack/pack-1.pack",
                "pack/pack-1.idx",
                &format!("ab/{LOOSE}"),
            ] {
                std::fs::write(objects.join(file), whose).unwrap();
            }
            std::fs::write(objects.join("pack/pack-2.pack"), whose).unwrap();
            std::fs::write(objects.join("pack/pack-2.idx"), whose).unwrap();
        }
        std::fs::remove_file(tmp.path().join("from/pack/pack-2.pack")).unwrap();
        std::fs::remove_file(tmp.path().join("from/pack/pack-2.idx")).unwrap();
        let to = tmp.path().join("to");
        std::fs::create_dir(&to).unwrap();
        (tmp, to)
    }

    const LOOSE: &str = "cdef0123456789abcdef0123456789abcdef01";

    /// What mvk copied: each file's path under `to` and content.
    fn copied(to: &Path) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = walkdir::WalkDir::new(to)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                let name = e.path().strip_prefix(to).unwrap().display().to_string();
                (name, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        out.sort();
        out
    }

    /// Replaces `dir` by a symlink to `target`, keeping the directory aside (as a process
    /// racing mvk would: the directory it listed still exists).
    fn swap_for_symlink(dir: &Path, target: &Path) {
        let mut aside = dir.as_os_str().to_os_string();
        aside.push(".aside");
        std::fs::rename(dir, &aside).unwrap();
        std::os::unix::fs::symlink(target, dir).unwrap();
    }

    #[test]
    fn an_object_directory_swapped_for_a_symlink_during_the_copy_is_not_followed() {
        // Regression: `pack/` and each loose directory were checked (not a symlink), then
        // listed and their files opened again by path: swapped for a symlink in between, by
        // a process the agent left running, they made mvk copy another repository's objects.
        let limits = LIMITS;
        // The object directory itself, a symlink from the start.
        let (tmp, to) = two_object_dirs();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("other"), &link).unwrap();
        copy_checked(&link, &to, limits).unwrap();
        assert_eq!(copied(&to), Vec::<(String, String)>::new());
        // `pack/` swapped once listed, before it is opened.
        let (tmp, to) = two_object_dirs();
        let (from, other) = (tmp.path().join("from"), tmp.path().join("other"));
        untrusted::race::set(move |name| {
            if name == Path::new("pack") && !from.join("pack.aside").exists() {
                swap_for_symlink(&from.join("pack"), &other.join("pack"));
            }
        });
        let done = copy_checked(&tmp.path().join("from"), &to, limits);
        untrusted::race::clear();
        done.unwrap();
        assert_eq!(copied(&to), [(format!("ab/{LOOSE}"), "mine".to_string())]);
        // A loose directory swapped while its file is opened: the file read is the one
        // listed, in the directory listed.
        let (tmp, to) = two_object_dirs();
        let (from, other) = (tmp.path().join("from"), tmp.path().join("other"));
        untrusted::race::set(move |name| {
            if name == Path::new(LOOSE) && !from.join("ab.aside").exists() {
                swap_for_symlink(&from.join("ab"), &other.join("ab"));
            }
        });
        let done = copy_checked(&tmp.path().join("from"), &to, limits);
        untrusted::race::clear();
        done.unwrap();
        let mine = |name: &str| (name.to_string(), "mine".to_string());
        assert_eq!(
            copied(&to),
            [
                mine(&format!("ab/{LOOSE}")),
                mine("pack/pack-1.idx"),
                mine("pack/pack-1.pack")
            ]
        );
    }
}
