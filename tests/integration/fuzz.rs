//! The parsers of untrusted text never panic: the compiler on random text and mutated real loop
//! files (only diagnostics), the evidence scanner (no pass without proof) and the agents' output
//! readers on lines like what gates and agents print. The long runs are cargo-fuzz's (`fuzz/`).

use proptest::prelude::*;

const SEED: &str = include_str!("../../loops/pagination.kdl");

fn compile_text(text: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("loop.kdl");
    std::fs::write(&path, text).expect("write");
    let compiled = mvk::resolve::compile(&path, &mvk::resolve::Options::default());
    // Rendering must not panic either, whatever the spans are.
    let _ = mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
    assert!(
        compiled.program.is_some() || compiled.diags.has_errors(),
        "no program means an error was reported"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_does_not_panic(text in "\\PC{0,200}") {
        compile_text(&text);
    }

    #[test]
    fn mutated_loop_files_do_not_panic(
        cut in 0usize..SEED.len(),
        len in 0usize..40,
        insert in prop::sample::select(vec!["", "{", "}", "\"", "#true", "=", "gate x", " use=", "\n", "/-", "{{", "rung human", "after a", "30", "\"0s\"", "é"]),
    ) {
        let mut text = SEED.to_string();
        let start = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (start + len).min(text.len());
        let end = (end..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        text.replace_range(start..end, insert);
        compile_text(&text);
    }
}

/// Lines that look like what gates and agents print, to mix with random text.
const LINES: &[&str] = &[
    "MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"0123456789abcdef0123456789abcdef\",\"executed\":2,\"passed\":2,\"failed\":0,\"skipped\":0}",
    "MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"0123456789abcdef0123456789abcdef\",\"executed\":0,\"passed\":0,\"failed\":0,\"skipped\":0}",
    "MVK_EVIDENCE={",
    "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
    "running 0 tests",
    "== 2 passed, 1 skipped in 0.12s ==",
    "ok  \texample.com/pkg\t0.01s",
    "# pass 4",
    "Tests:       3 passed, 3 total",
    "{\"type\":\"result\",\"total_cost_usd\":0.5,\"usage\":{\"input_tokens\":10,\"output_tokens\":5}}",
    "MVK_USAGE={\"input_tokens\":1,\"usd\":0.1}",
    "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}",
    "Tokens: 1.2k sent, 300 received. Cost: $0.01 message, $0.02 session.",
    "rate limit exceeded, retry after 30s",
];

fn output() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(LINES).prop_map(str::to_string),
            "\\PC{0,80}",
        ],
        0..12,
    )
    .prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_evidence_scanner_never_passes_without_proof(
        mode in prop::sample::select(mvk::ir::EvidenceMode::NAMES.to_vec()),
        text in output(),
    ) {
        use mvk::run::judge::evidence::{self, Evidence, GateVerdict};
        let mode = mvk::ir::EvidenceMode::parse(mode).unwrap();
        let found = evidence::scan_str(mode.into(), "0123456789abcdef0123456789abcdef", &text);
        let (verdict, _) = evidence::verdict(Some(0), &found);
        if verdict == GateVerdict::Pass && mode != mvk::ir::EvidenceMode::None {
            let Evidence::Proven { counts, .. } = found else {
                panic!("a pass without proof: {found:?}");
            };
            prop_assert!(counts.executed > 0);
        }
    }

    #[test]
    fn the_agents_output_readers_do_not_panic(
        adapter in prop::sample::select(mvk::ir::Adapter::NAMES.to_vec()),
        text in output(),
    ) {
        let adapter = mvk::ir::Adapter::parse(adapter).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.out");
        std::fs::write(&log, &text).unwrap();
        mvk::run::judge::adapter::read_usage(adapter, &log).unwrap();
        let matcher = mvk::run::judge::adapter::RateLimitMatcher::new(adapter, &[]).unwrap();
        let _ = matcher.check(&text);
    }
}
