//! The compiler never panics: random text and mutated real loop files only produce diagnostics.

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
