//! Every shipped KDL file compiles: the shared spec examples, stdlib, loops/ and examples/.

use assert_cmd::Command;

fn mvk() -> Command {
    Command::cargo_bin("mvk").expect("the mvk binary is built")
}

#[test]
fn shared_spec_examples_pass_check() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/spec/examples");
    if !dir.exists() {
        // The contract lives beside the checkout; CI has it, a lone clone may not.
        eprintln!("skipping: {} not found", dir.display());
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&dir, tmp.path());
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(tmp.path()) {
        let entry = entry.expect("walk");
        if entry.path().extension().is_some_and(|e| e == "kdl") {
            files.push(entry.path().to_path_buf());
        }
    }
    assert!(
        files.len() >= 5,
        "expected the spec's example files, found {files:?}"
    );
    mvk()
        .current_dir(tmp.path())
        .arg("check")
        .args(&files)
        .assert()
        .success();
}

pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.expect("walk");
        let rel = entry.path().strip_prefix(from).expect("below root");
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).expect("mkdir");
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy");
        }
    }
}

#[test]
fn repository_loops_pass_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["loops", "examples"] {
        for entry in walkdir::WalkDir::new(root.join(dir)) {
            let entry = entry.expect("walk");
            if entry.path().extension().is_some_and(|e| e == "kdl") {
                files.push(entry.path().to_path_buf());
            }
        }
    }
    assert!(!files.is_empty(), "loops/ holds loop files");
    mvk()
        .current_dir(root)
        .arg("check")
        .args(&files)
        .assert()
        .success();
}

#[test]
fn an_invalid_file_exits_65_and_a_usage_error_64() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = tmp.path().join("bad.kdl");
    std::fs::write(&bad, "loop x { goal \"g\"; budget iterations=\"3\" }\n").expect("write");
    let out = mvk()
        .arg("check")
        .arg(&bad)
        .env("NO_COLOR", "1")
        .assert()
        .code(65);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        stderr.contains("mvk::wrong-type") && stderr.contains("bad.kdl"),
        "{stderr}"
    );
    mvk().arg("check").assert().code(64);
    mvk().arg("frobnicate").assert().code(64);
}

#[test]
fn plan_json_is_one_document_with_digests() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = mvk()
        .current_dir(root)
        .args(["plan", "loops/pagination.kdl", "--json"])
        .assert()
        .success();
    let doc: serde_json::Value =
        serde_json::from_slice(&out.get_output().stdout).expect("one JSON document");
    assert_eq!(doc["kind"], "loop");
    let task = &doc["tasks"][0];
    assert_eq!(task["name"], "pagination");
    assert_eq!(task["digest"].as_str().map(str::len), Some(64));
    assert_eq!(
        task["worst_case"]["attempts"], 5,
        "3 + 2 agent rungs before the human, under 8 iterations"
    );
    assert_eq!(task["worst_case"]["usd"], 5.0);
}

#[test]
fn graph_prints_dot_and_mermaid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("flow.kdl");
    std::fs::write(
        &file,
        "agent a { run \"true\"; }\nflow f {\n  task one { goal \"1\"; agent a; gate g { run \"true\"; } }\n  task two { after one; goal \"2\"; agent a; gate g { run \"true\"; } }\n}\n",
    )
    .expect("write");
    let dot = mvk()
        .args(["graph", "--format", "dot"])
        .arg(&file)
        .assert()
        .success();
    let dot = String::from_utf8_lossy(&dot.get_output().stdout).into_owned();
    assert!(dot.contains("\"one\" -> \"two\";"), "{dot}");
    // Regression: the label's line break was written `\\n` (an escaped backslash and an `n`),
    // which Graphviz prints as the text `\n`; dot's line break is a single backslash-n.
    assert!(
        dot.contains("  \"one\" [label=\"one\\ngates: g\"];\n"),
        "{dot}"
    );
    assert!(
        dot.contains("  \"two\" [label=\"two\\ngates: g\"];\n"),
        "{dot}"
    );
    assert!(!dot.contains("\\\\"), "no doubled backslash: {dot}");
    let mm = mvk()
        .args(["graph", "--format", "mermaid"])
        .arg(&file)
        .assert()
        .success();
    assert!(String::from_utf8_lossy(&mm.get_output().stdout).contains("t0 --> t1"));
}
