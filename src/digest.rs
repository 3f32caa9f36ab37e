//! Resolved IR in, content digests out: a canonical, versioned encoding of each task's fields,
//! hashed with blake3, one component per field, then the task (Merkle over its dependencies) and
//! the program.
//!
//! The encoding is not JSON text: values are tagged and length-prefixed, maps are sorted by key,
//! so formatting, comments, property order and import order cannot reach a digest. Durations
//! are milliseconds and dollars micro-dollars, so equal meanings written differently agree.
//!
//! Notifications (`notify`, [`Task::notify`] and [`Program::notify`](crate::ir::Program)) are
//! left out, on purpose. A digest answers "would this task do the same work?": it decides
//! drift (a resume refuses a changed task with exit 5) and which tasks run again. Who hears of
//! a run, and how, changes neither the attempts, nor the oracle, nor what lands, so adding a
//! webhook to a waiting run, or pointing it at another channel, must not read as drift that
//! stops `mvk resume` or re-plans accepted work. (Secrets could not be hashed anyway: they are
//! read from the environment when sent.)

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Write;
use std::sync::Arc;

use serde::ser;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ir::{FlowSettings, ProgramKind, Task};

/// The version of the canonical encoding; bump it when the IR's meaning changes shape.
pub(crate) const SCHEMA: &str = "mvk.ir.v1";

/// A blake3 digest, printed as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn hex(&self) -> String {
        blake3::Hash::from(self.0).to_hex().to_string()
    }

    /// The first 12 hex digits: enough to tell digests apart in a listing.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }

    pub fn from_hex(s: &str) -> Option<Digest> {
        blake3::Hash::from_hex(s)
            .ok()
            .map(|h| Digest(*h.as_bytes()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The hex digits on the stack: `plan --json` writes tens of thousands of digests.
        s.serialize_str(blake3::Hash::from(self.0).to_hex().as_str())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::from_hex(&s).ok_or_else(|| serde::de::Error::custom("not a 64-digit hex digest"))
    }
}

/// Appends a tag, a length and `b`: how strings and numbers are encoded.
fn put_bytes(tag: u8, b: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends the canonical encoding of `v`: a tag byte, then length-prefixed content.
pub(crate) fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(b'n'),
        Value::Bool(false) => out.push(b'f'),
        Value::Bool(true) => out.push(b't'),
        // Numbers in the IR are integers (milliseconds, micro-dollars, counts); their decimal
        // text is canonical. A float would only come from a user parameter and is kept as written.
        Value::Number(n) => {
            // The text is written in place and its length put in front of it after: a flow's
            // thousands of numbers need no string each.
            out.push(b'i');
            let at = out.len();
            out.extend_from_slice(&[0; 8]);
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{n}");
            let len = (out.len() - at - 8) as u64;
            out[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
        Value::String(s) => put_bytes(b's', s.as_bytes(), out),
        Value::Array(items) => {
            out.push(b'[');
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                encode(item, out);
            }
        }
        Value::Object(map) => {
            // serde_json's map is ordered by key (no `preserve_order`), which makes this canonical.
            out.push(b'{');
            out.extend_from_slice(&(map.len() as u64).to_le_bytes());
            for (k, v) in map {
                put_bytes(b's', k.as_bytes(), out);
                encode(v, out);
            }
        }
    }
}

/// A hasher keyed for `purpose` under the schema version. Deriving a key is a hash of its own,
/// and a flow of thousands of tasks hashes under each of a few purposes thousands of times, so
/// each is derived once per thread and cloned.
fn keyed(purpose: &str) -> blake3::Hasher {
    thread_local! {
        static KEYED: RefCell<HashMap<String, blake3::Hasher>> = RefCell::new(HashMap::new());
    }
    KEYED.with_borrow_mut(|keyed| {
        if let Some(h) = keyed.get(purpose) {
            return h.clone();
        }
        let h = blake3::Hasher::new_derive_key(&format!("mvk 2026-12 {SCHEMA} {purpose}"));
        keyed.insert(purpose.to_string(), h.clone());
        h
    })
}

/// Hashes a value under a purpose; the schema version is part of the key derivation context.
pub(crate) fn hash(purpose: &str, v: &Value) -> Digest {
    let mut buf = Vec::new();
    encode(v, &mut buf);
    hash_encoded(purpose, &buf)
}

/// Hashes an encoding made by [`encode`] (or one equal to it) under a purpose.
fn hash_encoded(purpose: &str, encoded: &[u8]) -> Digest {
    let mut hasher = keyed(purpose);
    hasher.update(encoded);
    Digest(*hasher.finalize().as_bytes())
}

fn to_value<T: Serialize + ?Sized>(t: &T) -> Value {
    // The IR's types serialize infallibly: no maps with non-string keys, no failing impls.
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// The canonical value of each field of a task, by field name. Gates get one field each
/// (`gate.NAME`) besides their order (`gates`), so a report can name the gate that changed.
/// `after` holds the dependencies' digests (Merkle): a changed dependency changes its dependents.
pub(crate) fn task_fields(
    task: &Task,
    deps: &BTreeMap<String, crate::digest::Digest>,
) -> BTreeMap<String, Value> {
    let mut f = fields_but_prompt(task, deps);
    f.insert(PROMPT.into(), to_value(&task.prompt));
    f
}

/// The field of a task's prompt template: its text, which many tasks share.
const PROMPT: &str = "prompt";

/// [`task_fields`] without the prompt's.
fn fields_but_prompt(task: &Task, deps: &BTreeMap<String, Digest>) -> BTreeMap<String, Value> {
    let mut f = BTreeMap::new();
    f.insert("name".into(), Value::String(task.name.clone()));
    f.insert("item".into(), to_value(&task.item));
    f.insert("goal".into(), Value::String(task.goal.clone()));
    f.insert("scope".into(), to_value(&task.scope));
    f.insert("seal".into(), to_value(&task.seal));
    f.insert(
        "gates".into(),
        Value::Array(
            task.gates
                .iter()
                .map(|g| Value::String(g.name.clone()))
                .collect(),
        ),
    );
    for g in &task.gates {
        f.insert(format!("gate.{}", g.name), to_value(g));
    }
    f.insert("review".into(), to_value(&task.review));
    f.insert("budget".into(), to_value(&digested_budget(&task.budget)));
    f.insert("ladder".into(), to_value(&task.ladder));
    f.insert("merge".into(), to_value(&task.merge));
    f.insert("uncertified".into(), Value::Bool(task.uncertified));
    // Only when written: loops without a sandbox keep the digests they had before it existed.
    if let Some(sandbox) = &task.sandbox {
        f.insert("sandbox".into(), to_value(sandbox));
    }
    // The file's name, not its text: a lesson pinned there is not drift.
    if let Some(lessons) = &task.lessons {
        f.insert("lessons".into(), Value::String(lessons.clone()));
    }
    f.insert(
        "after".into(),
        Value::Object(
            deps.iter()
                .map(|(k, d)| (k.clone(), Value::String(d.hex())))
                .collect(),
        ),
    );
    f
}

/// Computes and stores a task's field components and digest, given its dependencies' digests.
pub(crate) fn seal_task(task: &mut Task, deps: &BTreeMap<String, Digest>) {
    Sealer::default().seal(task, deps);
}

/// Seals task after task as [`seal_task`] does, hashing each prompt template's text once: the
/// tasks of a fan-out share one text (one `Arc`), and it is most of the bytes a task's fields
/// hold.
#[derive(Default)]
pub(crate) struct Sealer {
    /// The `prompt` component of each text seen, by the text's address; the text is held, so
    /// that its address cannot be another text's while it is here.
    prompts: HashMap<usize, (Arc<str>, Digest)>,
    purpose: String,
    buf: Vec<u8>,
}

impl Sealer {
    /// Computes and stores a task's field components and digest, given its dependencies' digests.
    /// Each field is encoded straight from the IR, as [`task_fields`]'s value of it is.
    pub(crate) fn seal(&mut self, task: &mut Task, deps: &BTreeMap<String, Digest>) {
        let mut components: BTreeMap<String, Digest> = BTreeMap::new();
        let mut put = |sealer: &mut Sealer, name: &str, v: &dyn Fn(&mut Vec<u8>)| {
            let d = sealer.field(name, v);
            components.insert(name.to_string(), d);
        };
        put(self, "name", &|out| {
            put_bytes(b's', task.name.as_bytes(), out)
        });
        put(self, "item", &|out| encode_direct(&task.item, out));
        put(self, "goal", &|out| {
            put_bytes(b's', task.goal.as_bytes(), out)
        });
        put(self, "scope", &|out| encode_direct(&task.scope, out));
        put(self, "seal", &|out| encode_direct(&task.seal, out));
        put(self, "gates", &|out| {
            let names: Vec<&str> = task.gates.iter().map(|g| g.name.as_str()).collect();
            encode_direct(&names, out);
        });
        for g in &task.gates {
            put(self, &format!("gate.{}", g.name), &|out| {
                encode_direct(g, out)
            });
        }
        put(self, "review", &|out| encode_direct(&task.review, out));
        put(self, "budget", &|out| {
            encode_direct(&digested_budget(&task.budget), out);
        });
        put(self, "ladder", &|out| encode_direct(&task.ladder, out));
        put(self, "merge", &|out| encode_direct(&task.merge, out));
        put(self, "uncertified", &|out| {
            encode_direct(&task.uncertified, out)
        });
        if let Some(sandbox) = &task.sandbox {
            put(self, "sandbox", &|out| encode_direct(sandbox, out));
        }
        if let Some(lessons) = &task.lessons {
            put(self, "lessons", &|out| {
                put_bytes(b's', lessons.as_bytes(), out)
            });
        }
        // The dependencies' digests serialize as their hex digits, as the value holds them.
        put(self, "after", &|out| encode_direct(deps, out));
        let text = &task.prompt.text;
        let at = Arc::as_ptr(text).cast::<u8>() as usize;
        let prompt = match self.prompts.get(&at) {
            Some((_, d)) => *d,
            None => {
                let d = self.field(PROMPT, &|out| encode_direct(&task.prompt, out));
                self.prompts.insert(at, (Arc::clone(text), d));
                d
            }
        };
        components.insert(PROMPT.to_string(), prompt);
        // The encoding of the object of each field's hex digest by field name, written without
        // making that object: the key order is the map's, as it would be the object's.
        let buf = &mut self.buf;
        buf.clear();
        buf.push(b'{');
        buf.extend_from_slice(&(components.len() as u64).to_le_bytes());
        for (k, d) in &components {
            put_bytes(b's', k.as_bytes(), buf);
            put_bytes(b's', blake3::Hash::from(d.0).to_hex().as_bytes(), buf);
        }
        task.meta.digest = hash_encoded("task", buf);
        task.meta.fields = components;
    }

    /// The component of field `name`, whose encoding `encode` writes.
    fn field(&mut self, name: &str, encode: &dyn Fn(&mut Vec<u8>)) -> Digest {
        self.purpose.clear();
        self.purpose.push_str("field ");
        self.purpose.push_str(name);
        self.buf.clear();
        encode(&mut self.buf);
        hash_encoded(&self.purpose, &self.buf)
    }
}

/// Writes the canonical encoding of a serializable value as [`encode`] writes that of its
/// `serde_json::to_value`, without making the value: a flow's tasks made a tree of strings and
/// maps per field only to hash and free it. What `to_value` does not make plainly (floats,
/// 128-bit integers, bytes, keys other than strings) is refused with [`Unplain`], and the caller
/// encodes through the value instead.
struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

/// A value [`Encoder`] leaves to `serde_json::to_value`.
#[derive(Debug)]
struct Unplain;

impl fmt::Display for Unplain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value encoded through serde_json::Value")
    }
}

impl std::error::Error for Unplain {}

impl serde::ser::Error for Unplain {
    fn custom<T: fmt::Display>(_: T) -> Unplain {
        Unplain
    }
}

/// Appends the encoding of `v`, as [`encode`] of its value does.
fn encode_direct<T: Serialize>(v: &T, out: &mut Vec<u8>) {
    let at = out.len();
    if v.serialize(Encoder { out: &mut *out }).is_err() {
        out.truncate(at);
        encode(&to_value(v), out);
    }
}

impl<'a> Encoder<'a> {
    fn integer(self, n: impl fmt::Display) -> Result<(), Unplain> {
        // As `encode` writes a number: its decimal text, which is what a JSON integer prints.
        let out = self.out;
        out.push(b'i');
        let at = out.len();
        out.extend_from_slice(&[0; 8]);
        let _ = write!(out, "{n}");
        let len = (out.len() - at - 8) as u64;
        out[at..at + 8].copy_from_slice(&len.to_le_bytes());
        Ok(())
    }

    /// A map of one entry, `variant` to what follows: how `to_value` writes an enum's variant
    /// that holds data.
    fn variant(self, variant: &str) -> Self {
        self.out.push(b'{');
        self.out.extend_from_slice(&1u64.to_le_bytes());
        put_bytes(b's', variant.as_bytes(), self.out);
        self
    }

    fn array(self) -> Array<'a> {
        self.out.push(b'[');
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 8]);
        Array {
            out: self.out,
            at,
            len: 0,
        }
    }

    fn object(self) -> Object<'a> {
        self.out.push(b'{');
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 8]);
        Object {
            out: self.out,
            at,
            entries: Vec::new(),
        }
    }
}

impl<'a> Serializer for Encoder<'a> {
    type Ok = ();
    type Error = Unplain;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Array<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Unplain> {
        self.out.push(if v { b't' } else { b'f' });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Unplain> {
        self.integer(v)
    }
    fn serialize_f32(self, _: f32) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_f64(self, _: f64) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_char(self, v: char) -> Result<(), Unplain> {
        put_bytes(b's', v.encode_utf8(&mut [0; 4]).as_bytes(), self.out);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Unplain> {
        put_bytes(b's', v.as_bytes(), self.out);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_none(self) -> Result<(), Unplain> {
        self.out.push(b'n');
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Unplain> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unplain> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unplain> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Unplain> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Unplain> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Unplain> {
        v.serialize(self.variant(variant))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Array<'a>, Unplain> {
        Ok(self.array())
    }
    fn serialize_tuple(self, _: usize) -> Result<Array<'a>, Unplain> {
        Ok(self.array())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Array<'a>, Unplain> {
        Ok(self.array())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Array<'a>, Unplain> {
        Ok(self.variant(variant).array())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, Unplain> {
        Ok(self.object())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Object<'a>, Unplain> {
        Ok(self.object())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Object<'a>, Unplain> {
        Ok(self.variant(variant).object())
    }
}

/// An array being encoded: its length is written in front of it at the end.
struct Array<'a> {
    out: &'a mut Vec<u8>,
    at: usize,
    len: u64,
}

impl Array<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.len += 1;
        v.serialize(Encoder { out: self.out })
    }

    fn finish(self) -> Result<(), Unplain> {
        self.out[self.at..self.at + 8].copy_from_slice(&self.len.to_le_bytes());
        Ok(())
    }
}

impl ser::SerializeSeq for Array<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.element(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

impl ser::SerializeTuple for Array<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.element(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Array<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.element(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Array<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.element(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

/// An object being encoded, its entries written as they come: at the end they are put in the
/// order of their keys, the last of equal keys kept, as a `serde_json::Map` keeps them, and
/// their count written in front.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    at: usize,
    /// Each entry's start in `out` and its key's bytes' range.
    entries: Vec<(usize, std::ops::Range<usize>)>,
}

impl Object<'_> {
    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unplain> {
        let start = self.out.len();
        key.serialize(KeyEncoder { out: self.out })?;
        self.entries.push((start, start + 9..self.out.len()));
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        v.serialize(Encoder { out: self.out })
    }

    fn finish(self) -> Result<(), Unplain> {
        let Object { out, at, entries } = self;
        let key = |e: &(usize, std::ops::Range<usize>)| e.1.clone();
        let sorted = entries
            .windows(2)
            .all(|w| out[key(&w[0])] < out[key(&w[1])]);
        let count = if sorted {
            entries.len()
        } else {
            // Rare: a struct whose fields are not declared in the order of their names.
            let body = out.split_off(at + 8);
            let base = at + 8;
            let ends: Vec<usize> = entries
                .iter()
                .skip(1)
                .map(|e| e.0)
                .chain([base + body.len()])
                .collect();
            let mut order: Vec<usize> = (0..entries.len()).collect();
            let name = |i: usize| &body[entries[i].1.start - base..entries[i].1.end - base];
            // Stable: of equal keys the last comes last, and only it is kept.
            order.sort_by(|&a, &b| name(a).cmp(name(b)));
            let mut count = 0;
            for (n, &i) in order.iter().enumerate() {
                if order.get(n + 1).is_some_and(|&j| name(j) == name(i)) {
                    continue;
                }
                out.extend_from_slice(&body[entries[i].0 - base..ends[i] - base]);
                count += 1;
            }
            count
        };
        out[at..at + 8].copy_from_slice(&(count as u64).to_le_bytes());
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unplain> {
        self.key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unplain> {
        self.value(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Unplain> {
        self.key(key)?;
        self.value(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Unplain;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Unplain> {
        self.key(key)?;
        self.value(v)
    }
    fn end(self) -> Result<(), Unplain> {
        self.finish()
    }
}

/// A map's key: a string, as `to_value` makes every key; any other kind is left to it.
struct KeyEncoder<'a> {
    out: &'a mut Vec<u8>,
}

impl Serializer for KeyEncoder<'_> {
    type Ok = ();
    type Error = Unplain;
    type SerializeSeq = ser::Impossible<(), Unplain>;
    type SerializeTuple = ser::Impossible<(), Unplain>;
    type SerializeTupleStruct = ser::Impossible<(), Unplain>;
    type SerializeTupleVariant = ser::Impossible<(), Unplain>;
    type SerializeMap = ser::Impossible<(), Unplain>;
    type SerializeStruct = ser::Impossible<(), Unplain>;
    type SerializeStructVariant = ser::Impossible<(), Unplain>;

    fn serialize_str(self, v: &str) -> Result<(), Unplain> {
        put_bytes(b's', v.as_bytes(), self.out);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Unplain> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Unplain> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Unplain> {
        v.serialize(self)
    }
    fn serialize_bool(self, _: bool) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_i8(self, _: i8) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_i16(self, _: i16) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_i32(self, _: i32) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_i64(self, _: i64) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_u8(self, _: u8) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_u16(self, _: u16) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_u32(self, _: u32) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_u64(self, _: u64) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_f32(self, _: f32) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_f64(self, _: f64) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_none(self) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_unit(self) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unplain> {
        Err(Unplain)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unplain> {
        Err(Unplain)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unplain> {
        Err(Unplain)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Unplain> {
        Err(Unplain)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unplain> {
        Err(Unplain)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unplain> {
        Err(Unplain)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Unplain> {
        Err(Unplain)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unplain> {
        Err(Unplain)
    }
}

/// The program's digest: its kind, name, flow settings and every task's digest (never its
/// notifications: see the module's doc).
/// A task's budget as its digest counts it: without `warn_at`, which changes who is told of
/// spending, not what the task does.
fn digested_budget(b: &crate::ir::Budget) -> crate::ir::Budget {
    crate::ir::Budget {
        warn_at: None,
        ..b.clone()
    }
}

pub(crate) fn program_digest(
    kind: ProgramKind,
    name: &str,
    flow: Option<&FlowSettings>,
    tasks: &[Task],
) -> Digest {
    let tasks: serde_json::Map<String, Value> = tasks
        .iter()
        .map(|t| (t.name.clone(), Value::String(t.meta.digest.hex())))
        .collect();
    // A warning's threshold says who is told, not what runs.
    let flow = flow.map(|f| {
        let mut f = f.clone();
        f.budget.warn_at = None;
        f
    });
    let v = serde_json::json!({
        "kind": kind,
        "name": name,
        "flow": flow,
        "tasks": tasks,
    });
    hash("program", &v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encoding_distinguishes_types_and_nesting() {
        let a = hash("t", &json!(["ab", "c"]));
        let b = hash("t", &json!(["a", "bc"]));
        let c = hash("t", &json!("1"));
        let d = hash("t", &json!(1));
        assert_ne!(a, b);
        assert_ne!(c, d);
        assert_ne!(hash("t", &json!(null)), hash("t", &json!(false)));
    }

    #[test]
    fn object_key_order_does_not_matter_but_purpose_does() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":2}"#).unwrap_or_default();
        let b: Value = serde_json::from_str(r#"{"y":2,"x":1}"#).unwrap_or_default();
        assert_eq!(hash("t", &a), hash("t", &b));
        assert_ne!(hash("t", &a), hash("u", &a));
    }

    /// A task's components and digest as they were computed before any was memoized: each
    /// field's value hashed, then the object of their hex digests.
    fn sealed_plainly(
        task: &Task,
        deps: &BTreeMap<String, Digest>,
    ) -> (Digest, BTreeMap<String, Digest>) {
        let components: BTreeMap<String, Digest> = task_fields(task, deps)
            .iter()
            .map(|(k, v)| (k.clone(), hash(&format!("field {k}"), v)))
            .collect();
        let summary = Value::Object(
            components
                .iter()
                .map(|(k, d)| (k.clone(), Value::String(d.hex())))
                .collect(),
        );
        (hash("task", &summary), components)
    }

    // Guards the memo of prompt components: tasks sharing one template's text, tasks with
    // equal texts apart, and a task whose text differs, each sealed as if alone and plainly.
    #[test]
    fn a_sealer_seals_as_each_task_sealed_alone_and_plainly() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("loops");
        let compiled = crate::resolve::compile(
            &dir.join("pagination.kdl"),
            &crate::resolve::Options {
                repo_root: None,
                ..Default::default()
            },
        );
        let base = compiled.program.unwrap().tasks.remove(0);
        let other = |text: &str| {
            let mut t = base.clone();
            t.prompt.text = Arc::from(text);
            t
        };
        let mut tasks = vec![
            base.clone(),
            base.clone(),
            other("Do {{goal}}."),
            other(&base.prompt.text),
            other("Do {{goal}} now."),
            base.clone(),
        ];
        tasks[1].name = "second".into();
        tasks[1].scope = vec!["lib/**".into()];
        let deps = BTreeMap::from([("dep".to_string(), hash("t", &serde_json::json!(1)))]);
        let mut sealer = Sealer::default();
        let mut digests = Vec::new();
        for t in &mut tasks {
            sealer.seal(t, &deps);
            let (digest, fields) = sealed_plainly(t, &deps);
            assert_eq!(t.meta.digest, digest, "{}", t.name);
            assert_eq!(t.meta.fields, fields, "{}", t.name);
            let mut alone = t.clone();
            seal_task(&mut alone, &deps);
            assert_eq!(alone.meta.digest, digest);
            digests.push(digest);
        }
        assert_eq!(digests[0], digests[5]);
        assert_eq!(digests[0], digests[3], "an equal text in another place");
        assert_ne!(digests[0], digests[1]);
        assert_ne!(digests[2], digests[4]);
        assert_ne!(tasks[2].meta.fields[PROMPT], tasks[0].meta.fields[PROMPT]);
    }

    // Guards the encoding straight from the IR: every task of every loop file of the
    // repository and its examples is sealed as it is through the values of its fields.
    #[test]
    fn every_task_of_the_loop_files_seals_as_through_values() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<_> = walkdir::WalkDir::new(root.join("loops"))
            .into_iter()
            .chain(walkdir::WalkDir::new(root.join("examples")))
            .filter_map(Result::ok)
            .map(walkdir::DirEntry::into_path)
            .filter(|p| p.extension().is_some_and(|e| e == "kdl"))
            .collect();
        files.sort();
        // And a flow that writes every part of a task the IR holds.
        let dir = tempfile::tempdir().unwrap();
        let rich = dir.path().join("flow.kdl");
        std::fs::write(&rich, crate::cli::plan::tests::FLOW).unwrap();
        files.push(rich.clone());
        let mut sealed = 0;
        for file in &files {
            let options = crate::resolve::Options {
                repo_root: None,
                ..Default::default()
            };
            let Some(program) = crate::resolve::compile(file, &options).program else {
                assert_ne!(file, &rich, "the flow of every part compiles");
                continue;
            };
            let deps = BTreeMap::from([("dep".to_string(), hash("t", &json!(1)))]);
            let mut sealer = Sealer::default();
            for mut t in program.tasks {
                sealer.seal(&mut t, &deps);
                let (digest, fields) = sealed_plainly(&t, &deps);
                assert_eq!(t.meta.fields, fields, "{}: {}", file.display(), t.name);
                assert_eq!(t.meta.digest, digest, "{}: {}", file.display(), t.name);
                sealed += 1;
            }
        }
        assert!(sealed >= 14, "only {sealed} tasks were found");
    }

    /// Every shape of serde data, and what the encoder leaves to the value.
    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u8),
        Tuple(i32, String),
        Struct { z: bool, a: Option<u64> },
    }

    #[derive(Serialize)]
    struct Unsorted {
        zeta: Vec<Shape>,
        alpha: (char, ()),
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        middle: BTreeMap<String, i64>,
        #[serde(flatten)]
        more: BTreeMap<String, u8>,
    }

    #[derive(Serialize)]
    #[serde(tag = "kind")]
    enum Tagged {
        Plain,
        Rich { b: u8, a: Shape },
    }

    fn same_as_through_value<T: Serialize>(v: &T) {
        let mut direct = vec![b'x'];
        encode_direct(v, &mut direct);
        let mut plain = vec![b'x'];
        encode(&to_value(v), &mut plain);
        assert_eq!(direct, plain, "{}", to_value(v));
    }

    #[test]
    fn the_direct_encoding_is_the_values() {
        let shapes = || {
            vec![
                Shape::Unit,
                Shape::Newtype(7),
                Shape::Tuple(-3, "t".into()),
                Shape::Struct { z: true, a: None },
                Shape::Struct {
                    z: false,
                    a: Some(u64::MAX),
                },
            ]
        };
        same_as_through_value(&shapes());
        same_as_through_value(&Unsorted {
            zeta: shapes(),
            alpha: ('é', ()),
            skipped: None,
            middle: BTreeMap::from([("b".into(), -1), ("a".into(), 2)]),
            // Keys before, between, after the fields', and one equal to a field's: the last
            // of equal keys is the one a map keeps.
            more: BTreeMap::from([
                ("aa".into(), 1),
                ("m".into(), 2),
                ("zz".into(), 3),
                ("zeta".into(), 4),
            ]),
        });
        same_as_through_value(&vec![
            Tagged::Plain,
            Tagged::Rich {
                b: 1,
                a: Shape::Unit,
            },
        ]);
        same_as_through_value(&Some(vec![Some("x"), None]));
        // Left to the value: floats, bytes, keys that are not strings.
        same_as_through_value(&vec![1.5f64, f64::NAN]);
        same_as_through_value(&(0.1f32, serde_bytes_like()));
        same_as_through_value(&BTreeMap::from([(3u8, "three"), (1, "one")]));
        same_as_through_value(&BTreeMap::from([(true, 1u8)]));
    }

    fn serde_bytes_like() -> impl Serialize {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b"ab")
            }
        }
        Bytes
    }

    #[test]
    fn numbers_encode_as_their_text() {
        let mut out = Vec::new();
        encode(&json!([0, 18446744073709551615u64, -3, 1.5]), &mut out);
        let mut want = vec![b'['];
        want.extend_from_slice(&4u64.to_le_bytes());
        for text in ["0", "18446744073709551615", "-3", "1.5"] {
            put_bytes(b'i', text.as_bytes(), &mut want);
        }
        assert_eq!(out, want);
    }

    #[test]
    fn hex_round_trips() {
        let d = hash("t", &json!(1));
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(d.short().len(), 12);
    }
}
