//! The program a run was promised (its stored IR and sources) and the program compiled now in;
//! a drift report out: which tasks changed, which fields, the old and new values with both
//! locations, and which downstream tasks the change invalidates.
//!
//! Digests decide what changed (a field whose component digest is equal is unchanged, however it
//! is written); the values are only there to say how. A task whose own fields are equal but
//! whose `after` digests differ is not changed itself: it is invalidated by what it waits for.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diag::{Diagnostic, Diagnostics};
use crate::digest::{self, Digest};
use crate::ir::{FlowSettings, Program, Task};
use crate::source::{FileId, Origin, SourceFile, Sources, Span};

/// The schema of the stored IR (`programs.ir_json`).
pub(crate) const STORED_SCHEMA: &str = "mvk.ir.v1";

/// A program as stored in the ledger when a run begins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredIr {
    pub(crate) schema: String,
    pub(crate) name: String,
    pub(crate) flow: Option<FlowSettings>,
    pub(crate) digest: String,
    pub(crate) tasks: Vec<StoredTask>,
}

/// One task of a stored program: the task, its digests, and where each field was written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredTask {
    #[serde(flatten)]
    pub(crate) task: Task,
    pub(crate) digest: String,
    pub(crate) fields: BTreeMap<String, String>,
    /// Field → `[file, offset, len]` into the stored sources (absent in ledgers written before
    /// spans were stored).
    #[serde(default)]
    pub(crate) spans: BTreeMap<String, [usize; 3]>,
}

impl StoredIr {
    /// The stored form of a compiled program.
    pub(crate) fn of(program: &Program) -> StoredIr {
        StoredIr {
            schema: STORED_SCHEMA.into(),
            name: program.name.clone(),
            flow: program.flow.clone(),
            digest: program.digest.to_string(),
            tasks: program
                .tasks
                .iter()
                .map(|t| StoredTask {
                    task: t.clone(),
                    digest: t.meta.digest.to_string(),
                    fields: t
                        .meta
                        .fields
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_string()))
                        .collect(),
                    spans: t
                        .meta
                        .field_spans
                        .iter()
                        .map(|(k, s)| (k.clone(), [s.file.0 as usize, s.offset, s.len]))
                        .collect(),
                })
                .collect(),
        }
    }

    pub(crate) fn task(&self, name: &str) -> Option<&StoredTask> {
        self.tasks.iter().find(|t| t.task.name == name)
    }
}

/// A location shown in a report: `path:line:col`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One leaf of a field's value that differs: `budget.iterations` 5 → 8.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ValueChange {
    /// A dotted path inside the field (`""` for the field itself).
    pub(crate) path: String,
    pub(crate) old: Option<Value>,
    pub(crate) new: Option<Value>,
}

/// A field of a task whose component digest changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FieldDrift {
    pub(crate) field: String,
    pub(crate) changes: Vec<ValueChange>,
    /// Where it was written when the run began (in the stored sources).
    pub(crate) old_at: Option<Location>,
    /// Where it is written now.
    pub(crate) new_at: Option<Location>,
    #[serde(skip)]
    pub(crate) new_span: Option<Span>,
    #[serde(skip)]
    pub(crate) old_span: Option<Span>,
}

/// A task whose own meaning changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TaskDrift {
    pub(crate) task: String,
    pub(crate) old_digest: String,
    pub(crate) new_digest: String,
    pub(crate) fields: Vec<FieldDrift>,
}

/// A task that must run again because a task it waits for changed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Invalidated {
    pub(crate) task: String,
    /// The changed tasks upstream of it.
    pub(crate) because: Vec<String>,
}

/// Everything that differs between the program a run began with and the one compiled now.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct DriftReport {
    pub(crate) schema: String,
    pub(crate) run: String,
    pub(crate) old_digest: String,
    pub(crate) new_digest: String,
    pub(crate) changed: Vec<TaskDrift>,
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    pub(crate) invalidated: Vec<Invalidated>,
    /// The flow's own settings (`parallel`, `continue-on-failure`, its budget), when changed.
    pub(crate) flow: Vec<ValueChange>,
    #[serde(skip)]
    pub(crate) sources: Sources,
}

impl DriftReport {
    pub(crate) fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.flow.is_empty()
    }

    /// The tasks a resume must plan again: changed, added and invalidated ones.
    pub(crate) fn replanned(&self) -> BTreeSet<String> {
        self.changed
            .iter()
            .map(|t| t.task.clone())
            .chain(self.added.iter().cloned())
            .chain(self.invalidated.iter().map(|i| i.task.clone()))
            .collect()
    }

    /// Adds a drift of sealed files' contents in the base to `task` (a field `seal.content`).
    pub(crate) fn add_sealed_change(
        &mut self,
        task: &str,
        digest_pair: (&str, &str),
        changes: Vec<ValueChange>,
    ) {
        let field = FieldDrift {
            field: "seal.content".into(),
            changes,
            old_at: None,
            new_at: None,
            new_span: None,
            old_span: None,
        };
        match self.changed.iter_mut().find(|t| t.task == task) {
            Some(t) => t.fields.push(field),
            None => self.changed.push(TaskDrift {
                task: task.into(),
                old_digest: digest_pair.0.into(),
                new_digest: digest_pair.1.into(),
                fields: vec![field],
            }),
        }
    }

    /// One diagnostic per changed field, at its new location, with the old location as a note.
    pub(crate) fn diagnostics(&self) -> Diagnostics {
        let mut out = Diagnostics::default();
        for t in &self.changed {
            for f in &t.fields {
                let summary = f
                    .changes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                let mut d = Diagnostic::error(
                    "mvk::drift",
                    format!(
                        "`{}` of task `{}` changed since the run began",
                        f.field, t.task
                    ),
                )
                .help(format!("was → now: {summary}"));
                if let Some(span) = f.new_span {
                    d = d.at(span, "now");
                }
                if let Some(span) = f.old_span {
                    d = d.also(span, "was written so");
                }
                out.push(d);
            }
        }
        for name in &self.added {
            out.push(Diagnostic::error(
                "mvk::drift",
                format!("task `{name}` is new since the run began"),
            ));
        }
        for name in &self.removed {
            out.push(Diagnostic::error(
                "mvk::drift",
                format!("task `{name}` was removed since the run began"),
            ));
        }
        if !self.flow.is_empty() {
            let summary = self
                .flow
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            out.push(
                Diagnostic::error(
                    "mvk::drift",
                    "the flow's settings changed since the run began",
                )
                .help(format!("was → now: {summary}")),
            );
        }
        out
    }
}

impl std::fmt::Display for ValueChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| match v {
            None => "(absent)".to_string(),
            Some(v) => shorten(&v.to_string(), 80),
        };
        let path = if self.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", self.path)
        };
        write!(f, "{path}{} → {}", show(&self.old), show(&self.new))
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

/// Compares the stored program of run `run` with `new`. `old_sources` are the stored sources
/// (`(path, text)`, in file order) that the stored spans point into.
pub(crate) fn compare(
    run: &str,
    old: &StoredIr,
    old_sources: &[(String, String)],
    new: &Program,
) -> DriftReport {
    // One source table for both programs: the new files first (their spans stay valid), then the
    // stored ones, named so that a reader can tell them apart.
    let mut sources = new.sources.clone();
    let offset = sources.iter().count();
    for (path, text) in old_sources {
        sources.add(SourceFile {
            origin: Origin::Std(format!("ledger:{run}:{path}")),
            name: format!("{path} (when run {run} began)"),
            text: std::sync::Arc::new(text.clone()),
        });
    }
    let old_span = |st: &StoredTask, field: &str| -> Option<Span> {
        let [file, off, len] = *st.spans.get(field)?;
        let file = u32::try_from(offset + file).ok()?;
        let span = Span {
            file: FileId(file),
            offset: off,
            len,
        };
        // A span past its stored text would be a damaged ledger: leave it out rather than panic.
        let text_len = old_sources.get(file as usize - offset)?.1.len();
        (off + len <= text_len).then_some(span)
    };
    let locate = |span: Option<Span>| {
        span.map(|s| {
            let (line, column) = sources.line_col(s);
            Location {
                file: sources.get(s.file).name.clone(),
                line,
                column,
            }
        })
    };

    let old_digests: BTreeMap<String, Digest> = old
        .tasks
        .iter()
        .filter_map(|t| Some((t.task.name.clone(), Digest::from_hex(&t.digest)?)))
        .collect();
    let new_digests: BTreeMap<String, Digest> = new
        .tasks
        .iter()
        .map(|t| (t.name.clone(), t.meta.digest))
        .collect();
    let mut report = DriftReport {
        schema: "mvk.drift.v1".into(),
        run: run.into(),
        old_digest: old.digest.clone(),
        new_digest: new.digest.to_string(),
        ..DriftReport::default()
    };
    let mut changed_names = BTreeSet::new();
    for t in &new.tasks {
        let Some(st) = old.task(&t.name) else {
            report.added.push(t.name.clone());
            continue;
        };
        if st.digest == t.meta.digest.to_string() {
            continue;
        }
        let old_deps = deps_of(&st.task, &old_digests);
        let new_deps = deps_of(t, &new_digests);
        let old_values = digest::task_fields(&st.task, &old_deps);
        let new_values = digest::task_fields(t, &new_deps);
        let mut fields = Vec::new();
        let names: BTreeSet<&String> = st.fields.keys().chain(t.meta.fields.keys()).collect();
        for name in names {
            // Dependencies are reported as invalidation, not as a change of the task itself.
            if name == "after" {
                continue;
            }
            let was = st.fields.get(name);
            let now = t.meta.fields.get(name).map(ToString::to_string);
            if was == now.as_ref() {
                continue;
            }
            let mut changes = Vec::new();
            diff_values(
                name,
                old_values.get(name.as_str()),
                new_values.get(name.as_str()),
                &mut changes,
            );
            let new_span = t.meta.field_spans.get(name.as_str()).copied();
            let old_span = old_span(st, name);
            fields.push(FieldDrift {
                field: name.clone(),
                changes,
                old_at: locate(old_span),
                new_at: locate(new_span),
                new_span,
                old_span,
            });
        }
        // The `after` list itself (not the digests behind it) is the task's own setting.
        if st.task.after != t.after {
            fields.push(FieldDrift {
                field: "after".into(),
                changes: vec![ValueChange {
                    path: String::new(),
                    old: Some(serde_json::json!(st.task.after)),
                    new: Some(serde_json::json!(t.after)),
                }],
                old_at: None,
                new_at: None,
                new_span: None,
                old_span: None,
            });
        }
        if !fields.is_empty() {
            changed_names.insert(t.name.clone());
            report.changed.push(TaskDrift {
                task: t.name.clone(),
                old_digest: st.digest.clone(),
                new_digest: t.meta.digest.to_string(),
                fields,
            });
        }
    }
    for st in &old.tasks {
        if new.task(&st.task.name).is_none() {
            report.removed.push(st.task.name.clone());
        }
    }
    let old_flow = serde_json::to_value(&old.flow).unwrap_or(Value::Null);
    let new_flow = serde_json::to_value(&new.flow).unwrap_or(Value::Null);
    diff_values("flow", Some(&old_flow), Some(&new_flow), &mut report.flow);
    report.invalidated = downstream(new, &changed_names, &report.added);
    report.sources = sources;
    report
}

/// The digests of the tasks `task` waits for.
fn deps_of(task: &Task, digests: &BTreeMap<String, Digest>) -> BTreeMap<String, Digest> {
    task.after
        .iter()
        .filter_map(|d| Some((d.clone(), *digests.get(d)?)))
        .collect()
}

/// Every task that (transitively) waits for a changed or added one, and is not itself changed.
fn downstream(new: &Program, changed: &BTreeSet<String>, added: &[String]) -> Vec<Invalidated> {
    let roots: BTreeSet<&String> = changed.iter().chain(added.iter()).collect();
    let mut out = Vec::new();
    for t in &new.tasks {
        if roots.contains(&t.name) {
            continue;
        }
        // Walk up the dependencies; which roots does this task reach?
        let mut because = BTreeSet::new();
        let mut stack: Vec<&String> = t.after.iter().collect();
        let mut seen = BTreeSet::new();
        while let Some(d) = stack.pop() {
            if !seen.insert(d.clone()) {
                continue;
            }
            if roots.contains(d) {
                because.insert(d.clone());
            }
            if let Some(dt) = new.task(d) {
                stack.extend(dt.after.iter());
            }
        }
        if !because.is_empty() {
            out.push(Invalidated {
                task: t.name.clone(),
                because: because.into_iter().collect(),
            });
        }
    }
    out
}

/// The leaves where `old` and `new` differ, as dotted paths under `path`.
pub(crate) fn diff_values(
    path: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    out: &mut Vec<ValueChange>,
) {
    match (old, new) {
        (Some(a), Some(b)) if a == b => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_values(&sub, a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_values(&format!("{path}[{i}]"), Some(x), Some(y), out);
            }
        }
        _ => out.push(ValueChange {
            path: path.to_string(),
            old: old.cloned(),
            new: new.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaves_that_differ_are_named_by_path() {
        let mut out = Vec::new();
        diff_values(
            "budget",
            Some(&json!({"iterations": 5, "usd": null, "gates": ["a", "b"]})),
            Some(&json!({"iterations": 8, "usd": null, "gates": ["a", "c"], "wall": 1})),
            &mut out,
        );
        let shown: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "budget.gates[1]: \"b\" → \"c\"",
                "budget.iterations: 5 → 8",
                "budget.wall: (absent) → 1",
            ]
        );
    }
}
