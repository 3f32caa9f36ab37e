//! Any text as a loop file: the compiler answers with a program or diagnostics, never a panic,
//! and the diagnostics render.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One directory for the whole run: the file is rewritten for each input.
fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mvk-fuzz-compile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the fuzz directory");
        dir.join("loop.kdl")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    std::fs::write(file(), text).expect("write the loop file");
    let compiled = mvk::resolve::compile(file(), &mvk::resolve::Options::default());
    let _ = mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
    assert!(compiled.program.is_some() || compiled.diags.has_errors());
});
