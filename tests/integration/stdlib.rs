//! The stdlib: every file under stdlib/ is embedded, and every embedded KDL file compiles.

#[test]
fn every_stdlib_file_is_embedded() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("stdlib");
    let mut on_disk = Vec::new();
    for entry in walkdir::WalkDir::new(&root) {
        let entry = entry.expect("walk");
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(&root)
                .expect("below")
                .to_string_lossy()
                .replace('\\', "/");
            on_disk.push(format!("std/{rel}"));
        }
    }
    on_disk.sort();
    let mut embedded: Vec<String> = mvk::stdlib::paths().map(str::to_string).collect();
    embedded.sort();
    assert_eq!(
        on_disk, embedded,
        "src/stdlib.rs FILES must list exactly the files under stdlib/"
    );
    for (path, text) in mvk::stdlib::FILES {
        let on_disk =
            std::fs::read_to_string(root.join(path.trim_start_matches("std/"))).expect("read");
        assert_eq!(&on_disk, text, "{path} is embedded as written");
    }
}

#[test]
fn every_stdlib_library_compiles_when_imported() {
    for path in mvk::stdlib::paths().filter(|p| p.ends_with(".kdl")) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("uses.kdl");
        std::fs::write(&file, format!("import \"{path}\"\n")).expect("write");
        let compiled = mvk::resolve::compile(&file, &mvk::resolve::Options::default());
        let rendered =
            mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
        assert!(
            compiled.program.is_some() && compiled.diags.is_empty(),
            "{path}:\n{rendered}"
        );
    }
}

#[test]
fn stdlib_templates_render_every_field() {
    for path in [mvk::stdlib::MAKER_PROMPT, mvk::stdlib::REVIEWER_PROMPT] {
        let text = mvk::stdlib::get(path).expect("embedded");
        let out = mvk::prompt::render(text, &mvk::prompt::sample()).expect("renders");
        assert!(
            out.contains("goal") && out.contains("tests/**"),
            "{path} names the goal and the seal:\n{out}"
        );
    }
}

/// Regression: an adapter that reads JSON finds nothing when the stdlib's agent leaves its tool
/// printing text (gemini and goose did), and budgets then count no tokens.
#[test]
fn stdlib_agents_ask_their_tools_for_the_output_their_adapters_read() {
    let wanted: &[(&str, &[&str])] = &[
        ("claude", &["--output-format", "stream-json", "--verbose"]),
        ("codex", &["--json"]),
        ("gemini", &["--output-format", "stream-json"]),
        ("goose", &["--output-format", "json"]),
        // aider prints its `Tokens: … Cost: …` lines as text.
        ("aider", &["--message-file"]),
    ];
    for (name, flags) in wanted {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("uses.kdl");
        std::fs::write(
            &file,
            format!(
                "import \"std/agents.kdl\"\nloop l {{\n    goal \"g\"\n    agent {name}\n    \
                 gate g evidence=none {{ run \"true\"; }}\n}}\n"
            ),
        )
        .expect("write");
        let compiled = mvk::resolve::compile(&file, &mvk::resolve::Options::default());
        let program = compiled.program.expect("compiles");
        let Some(mvk::ir::Rung::Agent { agent, .. }) = program.tasks[0].ladder.first() else {
            panic!("{name}: the loop's one rung is the agent");
        };
        assert_eq!(agent.adapter.name(), *name, "{name}'s adapter");
        assert!(
            agent.argv.windows(flags.len()).any(|w| w == *flags),
            "{name} runs {:?}, without {flags:?}",
            agent.argv
        );
    }
}

/// The agents of a loop file compiled from TEXT: (label, price model, input $/Mtok in micros).
fn priced(text: &str) -> Vec<(String, Option<(String, u64)>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.kdl");
    std::fs::write(&file, text).expect("write");
    let compiled = mvk::resolve::compile(&file, &mvk::resolve::Options::default());
    let rendered = mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
    let program = compiled.program.unwrap_or_else(|| panic!("{rendered}"));
    program.tasks[0]
        .ladder
        .iter()
        .filter_map(|r| match r {
            mvk::ir::Rung::Agent { agent, .. } => Some(agent),
            mvk::ir::Rung::Human => None,
        })
        .map(|a| {
            (
                a.label(),
                a.price.as_ref().map(|p| (p.model.clone(), p.input)),
            )
        })
        .collect()
}

#[test]
fn prices_come_from_the_loop_before_the_stdlib_and_models_are_found_without_their_provider() {
    let got = priced(
        "import \"std/agents.kdl\"\n\
         price \"gemini-2.5-pro\" input=9.0 output=9.0\n\
         loop t {\n    goal \"g\"\n    ladder {\n        rung agent=codex\n        rung agent=gemini\n        \
         rung agent=aider model=\"openai/gpt-4.1\"\n        rung agent=claude\n    }\n    \
         gate t { run \"true\"; }\n    budget usd=1.0\n}\n",
    );
    assert_eq!(
        got,
        [
            (
                "codex (model=gpt-6.1-sol sandbox=workspace-write)".to_string(),
                Some(("gpt-6.1-sol".to_string(), 2_000_000))
            ),
            (
                "gemini (model=gemini-2.5-pro)".to_string(),
                Some(("gemini-2.5-pro".to_string(), 9_000_000))
            ),
            (
                "aider (map-tokens=0 model=openai/gpt-4.1)".to_string(),
                Some(("gpt-4.1".to_string(), 2_000_000))
            ),
            // Claude Code prints its dollars at its end; its stream's tokens are priced while it
            // runs.
            (
                "claude (model=sonnet)".to_string(),
                Some(("sonnet".to_string(), 3_000_000))
            ),
        ]
    );
}
