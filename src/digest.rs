//! Resolved IR in, content digests out: a canonical, versioned encoding of each task's fields,
//! hashed with blake3, one component per field, then the task (Merkle over its dependencies) and
//! the program.
//!
//! The encoding is not JSON text: values are tagged and length-prefixed, maps are sorted by key,
//! so formatting, comments, property order and import order cannot reach a digest. Durations
//! are milliseconds and dollars micro-dollars, so equal meanings written differently agree.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Write;
use std::sync::Arc;

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
        s.serialize_str(&self.hex())
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

fn to_value<T: Serialize>(t: &T) -> Value {
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
    f.insert("budget".into(), to_value(&task.budget));
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
    pub(crate) fn seal(&mut self, task: &mut Task, deps: &BTreeMap<String, Digest>) {
        let fields = fields_but_prompt(task, deps);
        let mut components: BTreeMap<String, Digest> = fields
            .into_iter()
            .map(|(k, v)| {
                let d = self.field(&k, &v);
                (k, d)
            })
            .collect();
        let text = &task.prompt.text;
        let prompt = match self.prompts.get(&(Arc::as_ptr(text).cast::<u8>() as usize)) {
            Some((_, d)) => *d,
            None => {
                let d = self.field(PROMPT, &to_value(&task.prompt));
                let at = Arc::as_ptr(text).cast::<u8>() as usize;
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

    /// The component of field `name` holding `v`.
    fn field(&mut self, name: &str, v: &Value) -> Digest {
        self.purpose.clear();
        self.purpose.push_str("field ");
        self.purpose.push_str(name);
        self.buf.clear();
        encode(v, &mut self.buf);
        hash_encoded(&self.purpose, &self.buf)
    }
}

/// The program's digest: its kind, name, flow settings and every task's digest.
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
