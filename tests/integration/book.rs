//! Every ```kdl block of the book compiles as a file of its own (```kdl,fragment blocks are
//! excerpts and are skipped).

use std::path::Path;

/// (file, line, code) of each fenced block whose info string is exactly `kdl`.
fn kdl_blocks(root: &Path) -> Vec<(String, usize, String)> {
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
                    let info = fence.trim_start_matches('`').trim();
                    current = Some((
                        i + 1,
                        if info == "kdl" {
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
