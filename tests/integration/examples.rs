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

pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
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
