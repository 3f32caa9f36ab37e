//! Digests change when and only when meaning changes: cosmetic edits keep every digest,
//! each kind of semantic edit changes the edited task and its dependents, nothing else.

use std::collections::BTreeMap;
use std::path::Path;

use mvk::resolve::{Options, compile};

const LIB: &str = r#"
gate unit {
    param target default="--lib"
    run "cargo" "test" "{{target}}"
}
agent bot timeout="5m" {
    param model default="small"
    run "sh" "bot.sh" "{{model}}" "{{prompt_file}}"
}
"#;

const TEMPLATE: &str = "Do {{goal}}.\n";

const FLOW: &str = r#"
// A flow whose digests the tests compare.
import "lib.kdl" as=lib

flow digests {
    parallel 2
    task a {
        goal "first"
        agent lib.bot model="big"
        prompt "maker.hbs"
        gate t use=lib.unit target="--lib"
        budget iterations=3 wall="30m" usd=1.5
        seal "tests/**" "fixtures/**"
    }
    task b {
        after a
        goal "second"
        agent lib.bot
        gate t { run "make" "check"; }
    }
    task c {
        goal "third"
        agent lib.bot
        gate t use=lib.unit
    }
    task d {
        each "x" "y"
        goal "port {{item}}"
        agent lib.bot
        gate t { run "check" "{{item}}"; }
    }
}
"#;

fn write_all(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write fixture");
    }
}

/// Compiles the flow with some files replaced; returns the task digests and the program digest.
fn digests(changes: &[(&str, &str)]) -> (BTreeMap<String, String>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_all(
        dir.path(),
        &[
            ("lib.kdl", LIB),
            ("maker.hbs", TEMPLATE),
            ("flow.kdl", FLOW),
        ],
    );
    write_all(dir.path(), changes);
    let compiled = compile(
        &dir.path().join("flow.kdl"),
        &Options {
            repo_root: None,
            ..Default::default()
        },
    );
    let rendered = mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
    let program = compiled
        .program
        .unwrap_or_else(|| panic!("the flow compiles:\n{rendered}"));
    let tasks = program
        .tasks
        .iter()
        .map(|t| (t.name.clone(), t.meta.digest.hex()))
        .collect();
    (tasks, program.digest.hex())
}

/// The tasks whose digests differ from the baseline's.
fn changed(changes: &[(&str, &str)]) -> Vec<String> {
    let (base, base_program) = digests(&[]);
    let (new, new_program) = digests(changes);
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        new.keys().collect::<Vec<_>>(),
        "same tasks"
    );
    let diff: Vec<String> = base
        .iter()
        .filter(|(k, v)| new[*k] != **v)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(
        diff.is_empty(),
        base_program == new_program,
        "the program digest follows its tasks"
    );
    diff
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "fixture contains {from:?}");
    text.replacen(from, to, 1)
}

#[test]
fn cosmetic_edits_change_no_digest() {
    let reformatted = FLOW
        .replace("    ", "\t")
        .replace(
            "// A flow whose digests the tests compare.",
            "/* reworded comment */ // and another",
        )
        .replace(
            "budget iterations=3 wall=\"30m\" usd=1.5",
            "budget usd=1.50 wall=\"30m\" /-tokens=5 iterations=3",
        )
        .replace(
            "seal \"tests/**\" \"fixtures/**\"",
            "seal \"fixtures/**\" \"tests/**\"",
        );
    assert!(changed(&[("flow.kdl", &reformatted)]).is_empty());
    // The same duration and amount, written differently.
    let respelled = edit(FLOW, "wall=\"30m\" usd=1.5", "wall=\"1800s\" usd=1.500000");
    assert!(changed(&[("flow.kdl", &respelled)]).is_empty());
    // Definitions reordered, and a doc string added: documentation is not meaning.
    let lib = format!(
        "{}\n{}",
        &LIB[LIB.find("agent").unwrap()..],
        &LIB[..LIB.find("agent").unwrap()]
    );
    let lib = edit(&lib, "param target", "doc \"unit tests\"\n    param target");
    assert!(changed(&[("lib.kdl", &lib)]).is_empty());
}

#[test]
fn import_order_changes_no_digest() {
    let lib2 = "gate other { run \"true\"; }\n";
    let one = edit(
        FLOW,
        "import \"lib.kdl\" as=lib",
        "import \"lib.kdl\" as=lib\nimport \"lib2.kdl\"",
    );
    let two = edit(
        FLOW,
        "import \"lib.kdl\" as=lib",
        "import \"lib2.kdl\"\nimport \"lib.kdl\" as=lib",
    );
    assert_eq!(
        digests(&[("lib2.kdl", lib2), ("flow.kdl", &one)]),
        digests(&[("lib2.kdl", lib2), ("flow.kdl", &two)])
    );
}

#[test]
fn a_budget_change_touches_the_task_and_its_dependents_only() {
    let f = edit(FLOW, "iterations=3", "iterations=4");
    assert_eq!(changed(&[("flow.kdl", &f)]), ["a", "b"]);
}

#[test]
fn a_gate_argument_change_touches_that_task() {
    let f = edit(FLOW, "run \"make\" \"check\"", "run \"make\" \"test\"");
    assert_eq!(changed(&[("flow.kdl", &f)]), ["b"]);
}

#[test]
fn an_imported_definition_change_touches_every_user() {
    // `c` uses the default target; `a` overrides it, so only the command's program matters to it.
    let lib = edit(LIB, "default=\"--lib\"", "default=\"--bins\"");
    assert_eq!(changed(&[("lib.kdl", &lib)]), ["c"]);
    let lib = edit(LIB, "\"cargo\" \"test\"", "\"cargo\" \"nextest\"");
    assert_eq!(changed(&[("lib.kdl", &lib)]), ["a", "b", "c"]);
}

#[test]
fn a_template_text_change_touches_its_task_and_dependents() {
    assert_eq!(
        changed(&[("maker.hbs", "Please do {{goal}}.\n")]),
        ["a", "b"]
    );
}

#[test]
fn a_fan_out_item_change_touches_that_item_only() {
    let (base, _) = digests(&[]);
    let f = edit(FLOW, "each \"x\" \"y\"", "each \"x\" \"z\"");
    let (new, _) = digests(&[("flow.kdl", &f)]);
    assert_eq!(base["d[x]"], new["d[x]"]);
    assert!(!new.contains_key("d[y]") && new.contains_key("d[z]"));
    for t in ["a", "b", "c"] {
        assert_eq!(base[t], new[t]);
    }
}

#[test]
fn field_components_name_the_field_that_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_all(
        dir.path(),
        &[
            ("lib.kdl", LIB),
            ("maker.hbs", TEMPLATE),
            ("flow.kdl", FLOW),
        ],
    );
    let before = compile(&dir.path().join("flow.kdl"), &Options::default())
        .program
        .expect("compiles");
    write_all(
        dir.path(),
        &[("flow.kdl", &edit(FLOW, "goal \"third\"", "goal \"3rd\""))],
    );
    let after = compile(&dir.path().join("flow.kdl"), &Options::default())
        .program
        .expect("compiles");
    let (b, a) = (before.task("c").expect("c"), after.task("c").expect("c"));
    let differing: Vec<&String> = b
        .meta
        .fields
        .keys()
        .filter(|k| b.meta.fields[*k] != a.meta.fields[*k])
        .collect();
    assert_eq!(differing, ["goal"]);
}

/// Who hears of a run is not what it does: notifications at every level (top, flow, task, and
/// one used from an imported definition) change no digest, so adding a webhook to a waiting run
/// is not drift.
#[test]
fn notifications_change_no_digest() {
    let lib = format!(
        "{LIB}\nnotify chat on=\"waiting finished\" format=\"slack\" {{ webhook env=\"CHAT_URL\" format=\"slack\"; }}\n"
    )
    .replace(" format=\"slack\" {", " {");
    let flow = edit(
        FLOW,
        "flow digests {\n    parallel 2\n",
        "notify desk { run \"notify-send\" \"{{message}}\"; }\nflow digests {\n    parallel 2\n    notify chat use=lib.chat on=\"budget\" at=0.5\n",
    );
    let flow = edit(
        &flow,
        "        goal \"second\"\n",
        "        goal \"second\"\n        notify ops timeout=\"3s\" retries=0 { webhook \"https://ops.example.com/mvk\"; }\n",
    );
    assert!(changed(&[("lib.kdl", &lib), ("flow.kdl", &flow)]).is_empty());
    // And they are there, where they were written.
    let dir = tempfile::tempdir().expect("tempdir");
    write_all(
        dir.path(),
        &[
            ("lib.kdl", &lib),
            ("maker.hbs", TEMPLATE),
            ("flow.kdl", &flow),
        ],
    );
    let program = compile(&dir.path().join("flow.kdl"), &Options::default())
        .program
        .expect("compiles");
    let names: Vec<&str> = program.notify.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["desk", "chat"]);
    let b = program.task("b").expect("task b");
    assert_eq!(b.notify.len(), 1);
    assert_eq!(b.notify[0].name, "ops");
    assert!(program.task("a").expect("task a").notify.is_empty());
}

#[test]
fn a_budgets_warning_changes_no_digest_and_is_kept() {
    let task = edit(FLOW, "usd=1.5", "usd=1.5 warn-at=0.6");
    assert!(changed(&[("flow.kdl", &task)]).is_empty());
    let flow = |budget: &str| {
        edit(
            FLOW,
            "flow digests {\n    parallel 2\n",
            &format!("flow digests {{\n    parallel 2\n    {budget}\n"),
        )
    };
    let without = flow("budget usd=9.0");
    let with = flow("budget usd=9.0 warn-at=0.75");
    assert_eq!(
        digests(&[("flow.kdl", &without)]),
        digests(&[("flow.kdl", &with)])
    );
    // The limits still count.
    assert_ne!(
        digests(&[("flow.kdl", &without)]),
        digests(&[("flow.kdl", &flow("budget usd=8.0 warn-at=0.75"))])
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let both = edit(&with, "usd=1.5", "usd=1.5 warn-at=0.6");
    write_all(
        dir.path(),
        &[
            ("lib.kdl", LIB),
            ("maker.hbs", TEMPLATE),
            ("flow.kdl", &both),
        ],
    );
    let program = compile(&dir.path().join("flow.kdl"), &Options::default())
        .program
        .expect("compiles");
    assert_eq!(program.task("a").expect("task a").budget.warn_at, Some(600));
    assert_eq!(program.flow.expect("a flow").budget.warn_at, Some(750));
}
