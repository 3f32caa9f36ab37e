//! Any gate output under every evidence mode: the scanner and the verdict never panic, and
//! nothing without this run's nonce or a runner's summary proves a pass.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mvk::ir::EvidenceMode;
use mvk::run::judge::evidence::{self, Evidence, GateVerdict};

const NONCE: &str = "0123456789abcdef0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let names = EvidenceMode::NAMES;
    let Some(mode) = EvidenceMode::parse(names[usize::from(pick) % names.len()]) else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let found = evidence::scan_str(mode.into(), NONCE, &text);
    let (verdict, _) = evidence::verdict(Some(0), &found);
    if verdict == GateVerdict::Pass && mode != EvidenceMode::None {
        let Evidence::Proven { counts, .. } = found else {
            panic!("a pass without proof: {found:?}");
        };
        assert!(
            counts.executed > 0,
            "a pass with nothing executed: {counts:?}"
        );
    }
});
