//! The one integration-test binary: every test module is listed here, and `forgotten_files`
//! fails when a file in this directory is not.

// Tests may unwrap: a panic is the failure report (clippy.toml allows it in #[test] bodies only).
#![allow(clippy::unwrap_used)]

mod apply;
mod book;
mod caps;
mod crash_campaign;
mod digests;
mod doctor;
mod example_python;
mod example_run;
mod examples;
mod faults;
mod flows;
mod fuzz;
mod hardening;
mod human;
mod imports;
mod init;
mod invalid;
mod knots;
mod landing;
mod lessons;
mod mcp;
mod notify;
mod pools;
mod progress;
mod prompts;
mod pull_requests;
mod reading;
mod real_agents;
mod report;
mod resume;
mod review;
mod sandbox;
mod shell;
mod stdlib;
mod stdlib_gates;
mod support;
mod tamper;
mod temporal;
mod watch;

#[test]
fn forgotten_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read main.rs");
    for entry in std::fs::read_dir(&dir).expect("list tests/integration") {
        let path = entry.expect("dir entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "main" {
            assert!(
                main.contains(&format!("mod {stem};")),
                "tests/integration/{stem}.rs is not listed in main.rs"
            );
        }
    }
}
