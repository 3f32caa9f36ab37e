//! Any agent output read by every adapter: cost and rate-limit readers never panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mvk::ir::Adapter;
use mvk::run::judge::adapter::{self, RateLimitMatcher};

fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mvk-fuzz-adapter-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the fuzz directory");
        dir.join("agent.out")
    })
}

/// Each adapter's matcher, compiled once: compiling its patterns is not what is fuzzed.
fn matcher(i: usize, which: Adapter) -> &'static RateLimitMatcher {
    static MATCHERS: [OnceLock<RateLimitMatcher>; Adapter::NAMES.len()] =
        [const { OnceLock::new() }; Adapter::NAMES.len()];
    MATCHERS[i]
        .get_or_init(|| RateLimitMatcher::new(which, &[]).expect("the built-in patterns compile"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let names = Adapter::NAMES;
    let Some(which) = Adapter::parse(names[usize::from(pick) % names.len()]) else {
        return;
    };
    std::fs::write(file(), rest).expect("write the agent's output");
    let _ = adapter::read_usage(which, file()).expect("read the agent's output");
    let _ = matcher(usize::from(pick) % names.len(), which).check(&String::from_utf8_lossy(rest));
});
