//! `mvk completions` and `mvk man` through the binary: every command the clap definition has
//! is completed by bash and has its section (and its own page) in the manual. And the output
//! switches every command takes: `--quiet`, `--verbose`, and colour on a terminal unless
//! `NO_COLOR` is set.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use clap::CommandFactory;

/// The names and long flags of the commands a user sees, from the definition itself.
fn commands() -> Vec<(String, Vec<String>)> {
    mvk::cli::Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let flags = c
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !a.is_global_set())
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .collect();
            (c.get_name().to_string(), flags)
        })
        .collect()
}

/// `mvk ARGS…`, which must succeed; its standard output.
fn mvk(args: &[&str]) -> String {
    let (code, stdout, stderr) = crate::init::mvk(std::env::temp_dir().as_path(), args);
    assert_eq!(code, 0, "mvk {args:?} failed\n{stderr}");
    stdout
}

/// What bash's completion function offers for the words typed so far (the last is the one
/// being completed), with the script `mvk completions bash` printed loaded.
fn bash_complete(script: &str, words: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mvk.bash");
    std::fs::write(&path, script).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{}'\nCOMP_POINT=${{#COMP_LINE}}\n\
         _mvk mvk '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        path.display(),
        quoted.join(" "),
        words.len() - 1,
        words.join(" "),
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash failed\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_every_command_and_its_flags() {
    let script = mvk(&["completions", "bash"]);
    let offered = bash_complete(&script, &["mvk", ""]);
    let all = commands();
    assert!(all.len() >= 15, "the commands were found: {all:?}");
    for (name, flags) in &all {
        assert!(
            offered.contains(name),
            "bash does not complete `mvk {name}`: {offered:?}"
        );
        let offered = bash_complete(&script, &["mvk", name, "--"]);
        for flag in flags {
            assert!(
                offered.contains(flag),
                "bash does not complete `mvk {name} {flag}`: {offered:?}"
            );
        }
    }
    // Only what was typed so far is offered.
    assert_eq!(bash_complete(&script, &["mvk", "sta"]), ["status", "stats"]);
}

#[test]
fn every_shell_gets_a_script_naming_every_command() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = mvk(&["completions", shell]);
        for (name, _) in commands() {
            assert!(
                script.contains(&name),
                "the {shell} script does not mention `{name}`"
            );
        }
    }
    let (code, _, stderr) =
        crate::init::mvk(std::env::temp_dir().as_path(), &["completions", "tcsh"]);
    assert_eq!(code, 64, "{stderr}");
}

/// The lines of the section headed `.SH "TITLE"`, up to the next `.SH`.
fn section<'a>(page: &'a str, title: &str) -> Option<Vec<&'a str>> {
    let head = format!(".SH \"{title}\"");
    let mut lines = page.lines().skip_while(|l| *l != head);
    lines.next()?;
    Some(lines.take_while(|l| !l.starts_with(".SH ")).collect())
}

#[test]
fn the_manual_has_a_section_for_every_command_with_its_flags() {
    let page = mvk(&["man"]);
    assert!(page.contains("\n.TH mvk 1 "), "{page}");
    for (name, flags) in commands() {
        let title = format!("MVK {}", name.to_uppercase());
        let lines = section(&page, &title)
            .unwrap_or_else(|| panic!("no section `{title}` in the manual page"));
        let text = lines.join("\n");
        assert!(text.contains(".SS SYNOPSIS"), "{title}:\n{text}");
        for flag in flags {
            // roff escapes dashes: `\-\-json`.
            let escaped = flag.replace('-', "\\-");
            assert!(
                text.contains(&escaped),
                "the section `{title}` does not describe `{flag}`:\n{text}"
            );
        }
    }
}

#[test]
fn man_out_writes_one_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let printed = mvk(&["man", "--out", out.to_str().unwrap()]);
    let mut expected = vec!["mvk.1".to_string()];
    expected.extend(commands().iter().map(|(name, _)| format!("mvk-{name}.1")));
    // A command's own subcommands (`mvk lessons pin`) get a page each, which its page names.
    for c in mvk::cli::Cli::command().get_subcommands() {
        for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            expected.push(format!("mvk-{}-{}.1", c.get_name(), s.get_name()));
        }
    }
    for file in &expected {
        let text = std::fs::read_to_string(out.join(file))
            .unwrap_or_else(|e| panic!("`{file}` was not written ({e}); mvk said:\n{printed}"));
        assert!(text.contains(".TH "), "`{file}` is not a manual page");
    }
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), expected.len());
    let apply = std::fs::read_to_string(out.join("mvk-apply.1")).unwrap();
    assert!(apply.contains("\\-\\-task"), "{apply}");
}

/// Regenerates `book/src/cli.md`'s reference (with `MVK_BLESS=1`, writes it instead).
#[test]
fn cli_reference_in_the_book_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/cli.md");
    let now = mvk::cli::reference::markdown();
    if std::env::var_os(mvk::env::MVK_BLESS).is_some_and(|v| v == "1") {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let book = std::fs::read_to_string(&path).unwrap_or_default();
    if book != now {
        let first = book
            .lines()
            .zip(now.lines())
            .position(|(a, b)| a != b)
            .map_or(book.lines().count().min(now.lines().count()), |i| i);
        panic!(
            "book/src/cli.md is not the reference the clap definition gives (first difference \
             at line {}: book {:?}, now {:?}); refresh it with \
             `MVK_BLESS=1 cargo test --test integration cli_reference` and commit it",
            first + 1,
            book.lines().nth(first),
            now.lines().nth(first)
        );
    }
    // Every command the definition has is in the page.
    for (name, flags) in commands() {
        assert!(book.contains(&format!("\n## `mvk {name}`\n")), "{name}");
        for flag in flags {
            assert!(book.contains(&format!("`{flag}")), "mvk {name} {flag}");
        }
    }
}

/// `mvk apply` of a loop whose agent fixes the bug at once, with FLAGS: (stdout, stderr).
fn apply_with_flags(flags: &[&str]) -> (String, String) {
    let fixture = crate::support::Fixture::new(&crate::support::simple_loop("fix.sh", ""));
    let out = fixture
        .mvk()
        .args(["apply", "loops/t.kdl"])
        .args(flags)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// Regression: `--verbose` was accepted and changed nothing.
#[test]
fn verbose_shows_every_event_with_its_details_and_quiet_only_the_result() {
    let (stdout, normal) = apply_with_flags(&[]);
    let run = stdout.lines().next().unwrap().to_string();
    assert!(normal.contains("t #1: gate tests pass"), "{normal}");
    assert!(!normal.contains("[agent.finished]"), "{normal}");

    let (_, verbose) = apply_with_flags(&["--verbose"]);
    let line = |name: &str| {
        verbose
            .lines()
            .find(|l| l.contains(&format!("[{name}]")))
            .unwrap_or_else(|| panic!("no `{name}` line:\n{verbose}"))
            .to_string()
    };
    // Described events keep their words and gain their details: the duration, the log file.
    assert!(
        line("agent.finished").contains("agent exited 0 after "),
        "{verbose}"
    );
    assert!(
        line("agent.finished").contains("\"duration_ms\":"),
        "{verbose}"
    );
    let gate = line("gate.finished");
    assert!(
        gate.starts_with("t #1: [gate.finished] gate tests pass")
            && gate.contains("gate-tests.log"),
        "{verbose}"
    );
    // Events the normal output leaves to the summary are shown too.
    for name in ["task.finished", "run.finished"] {
        line(name);
    }

    let (stdout, quiet) = apply_with_flags(&["--quiet"]);
    assert!(
        stdout.lines().next().is_some_and(|l| l.len() == run.len()),
        "the run id first:\n{stdout}"
    );
    assert!(
        !quiet.contains("gate tests"),
        "--quiet shows no progress:\n{quiet}"
    );
}

/// `mvk check` of an invalid file on a terminal (a pty from util-linux `script`), with or
/// without `NO_COLOR`: its stderr as the terminal shows it.
fn check_on_a_terminal(no_color: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.kdl"), "loop x {\n    goal 42\n}\n").unwrap();
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let mut cmd = Command::new("script");
    cmd.current_dir(dir.path())
        .args([
            "-qec",
            &format!("'{}' check bad.kdl", mvk.display()),
            "/dev/null",
        ])
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("bad.kdl"),
        "the diagnostic names the file:\n{text}"
    );
    text
}

#[test]
fn colour_on_a_terminal_and_none_with_no_color() {
    assert!(
        check_on_a_terminal(false).contains("\u{1b}["),
        "coloured on a terminal"
    );
    let plain = check_on_a_terminal(true);
    assert!(
        !plain.contains("\u{1b}["),
        "NO_COLOR: no escape codes:\n{plain:?}"
    );
}
