//! Resolved IR in, content digests out: a canonical, versioned encoding of each task's fields,
//! hashed with blake3, one component per field, then the task (Merkle over its dependencies) and
//! the program.
//!
//! The encoding is not JSON text: values are tagged and length-prefixed, maps are sorted by key,
//! so formatting, comments, property order and import order cannot reach a digest. Durations
//! are milliseconds and dollars micro-dollars, so equal meanings written differently agree.

use std::collections::BTreeMap;
use std::fmt;

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

/// Appends the canonical encoding of `v`: a tag byte, then length-prefixed content.
pub(crate) fn encode(v: &Value, out: &mut Vec<u8>) {
    fn bytes(tag: u8, b: &[u8], out: &mut Vec<u8>) {
        out.push(tag);
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    match v {
        Value::Null => out.push(b'n'),
        Value::Bool(false) => out.push(b'f'),
        Value::Bool(true) => out.push(b't'),
        // Numbers in the IR are integers (milliseconds, micro-dollars, counts); their decimal
        // text is canonical. A float would only come from a user parameter and is kept as written.
        Value::Number(n) => bytes(b'i', n.to_string().as_bytes(), out),
        Value::String(s) => bytes(b's', s.as_bytes(), out),
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
                bytes(b's', k.as_bytes(), out);
                encode(v, out);
            }
        }
    }
}

/// Hashes a value under a purpose; the schema version is part of the key derivation context.
pub(crate) fn hash(purpose: &str, v: &Value) -> Digest {
    let mut buf = Vec::new();
    encode(v, &mut buf);
    let context = format!("mvk 2026-12 {SCHEMA} {purpose}");
    let mut hasher = blake3::Hasher::new_derive_key(&context);
    hasher.update(&buf);
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
    let mut f = BTreeMap::new();
    f.insert("name".into(), Value::String(task.name.clone()));
    f.insert("item".into(), to_value(&task.item));
    f.insert("goal".into(), Value::String(task.goal.clone()));
    f.insert("prompt".into(), to_value(&task.prompt));
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
    let fields = task_fields(task, deps);
    let components: BTreeMap<String, Digest> = fields
        .iter()
        .map(|(k, v)| (k.clone(), hash(&format!("field {k}"), v)))
        .collect();
    let summary = Value::Object(
        components
            .iter()
            .map(|(k, d)| (k.clone(), Value::String(d.hex())))
            .collect(),
    );
    task.meta.digest = hash("task", &summary);
    task.meta.fields = components;
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

    #[test]
    fn hex_round_trips() {
        let d = hash("t", &json!(1));
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(d.short().len(), 12);
    }
}
