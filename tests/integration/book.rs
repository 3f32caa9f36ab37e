//! Every ```kdl block of the book compiles as a file of its own (```kdl,fragment blocks are
//! excerpts and are skipped).

use std::path::Path;

/// (file, line, code) of each fenced block whose info string is exactly `kdl`.
fn kdl_blocks(root: &Path) -> Vec<(String, usize, String)> {
    fenced_blocks(root, "kdl")
}

/// (file, line, code) of each fenced block whose info string is exactly `info`.
fn fenced_blocks(root: &Path, info: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.expect("walk book/src");
        if entry.path().extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read chapter");
        let name = entry
            .path()
            .strip_prefix(root)
            .expect("below")
            .display()
            .to_string();
        let mut current: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let fence = line.trim_start();
            match &mut current {
                None if fence.starts_with("```") => {
                    let found = fence.trim_start_matches('`').trim();
                    current = Some((
                        i + 1,
                        if found == info {
                            String::new()
                        } else {
                            "\u{0}skip".into()
                        },
                    ));
                }
                Some((start, code)) if fence.starts_with("```") => {
                    if code != "\u{0}skip" {
                        out.push((name.clone(), *start, std::mem::take(code)));
                    }
                    current = None;
                }
                Some((_, code)) if code != "\u{0}skip" => {
                    code.push_str(line);
                    code.push('\n');
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_kdl_block_in_the_book_compiles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src");
    let blocks = kdl_blocks(&root);
    assert!(
        blocks.len() >= 20,
        "the book's kdl blocks were found ({} of them)",
        blocks.len()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    for (file, line, code) in &blocks {
        // Named after the chapter and line, so a diagnostic's file name says where the block is.
        let path = dir
            .path()
            .join(format!("{}-line{line}.kdl", file.replace(['/', '.'], "_")));
        std::fs::write(&path, code).expect("write block");
        let compiled = mvk::resolve::compile(
            &path,
            &mvk::resolve::Options {
                repo_root: None,
                ..Default::default()
            },
        );
        if compiled.program.is_none() {
            let rendered =
                mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
            failures.push(format!("book/src/{file}:{line}\n{rendered}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} block(s) do not compile:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The tutorial's `sh,tutorial` blocks, run in order as one script in an empty directory with
/// this build's mvk first on `PATH`: they must end in an accepted change on `main`.
#[test]
fn the_tutorial_runs_as_written() {
    crate::stdlib_gates::require("python3", &["-m", "pytest", "--version"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src");
    let blocks: Vec<String> = fenced_blocks(&root, "sh,tutorial")
        .into_iter()
        .filter(|(file, _, _)| file == "tutorial.md")
        .map(|(_, _, code)| code)
        .collect();
    assert!(blocks.len() >= 5, "the tutorial's steps: {blocks:?}");
    let script = format!("set -euo pipefail\n{}", blocks.concat());
    let tmp = tempfile::tempdir().expect("tempdir");
    let mvk = Path::new(env!("CARGO_BIN_EXE_mvk"));
    let path = format!(
        "{}:{}",
        mvk.parent().expect("mvk's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(tmp.path())
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "tutorial")
        .env("GIT_AUTHOR_EMAIL", "tutorial@mvk.invalid")
        .env("GIT_COMMITTER_NAME", "tutorial")
        .env("GIT_COMMITTER_EMAIL", "tutorial@mvk.invalid")
        .env("MVK_WORKTREE_ROOT", tmp.path().join("worktrees"))
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tutorial's script failed ({:?}):\n{script}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("accepted (exit 0)"), "{stdout}");
    let repo = tmp.path().join("greet");
    let fixed = std::fs::read_to_string(repo.join("src/greet/__init__.py")).expect("read");
    assert!(fixed.contains("capitalize()"), "main has the fix: {fixed}");
    let page = std::fs::read_to_string(repo.join("run.html")).expect("the report was written");
    assert!(
        page.contains("<div class=\"timeline\" id=\"timeline\">"),
        "the report has its timeline"
    );
    assert!(
        page.contains("<details class=\"diff\">") && page.contains("capitalize()"),
        "the report has the attempt's diff"
    );
}
