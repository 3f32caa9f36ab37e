//! The fast reader against the kdl crate's: wherever it reads a text, it reads what the crate
//! reads, to every span mvk looks at; wherever the crate refuses a text, it gives way.

use proptest::prelude::*;

use super::parse;
use kdl::{KdlDocument, KdlNode, KdlValue};

/// What mvk reads of a node: its name and span, its entries (key and its span, value, span,
/// type), its own span and type, and its block (span and nodes).
fn seen(n: &KdlNode) -> String {
    let span = |s: miette::SourceSpan| format!("{}+{}", s.offset(), s.len());
    let value = |v: &KdlValue| match v {
        KdlValue::Float(f) => format!("f{}", f.to_bits()),
        other => format!("{other:?}"),
    };
    let mut out = format!(
        "node {:?}@{} span {} ty {:?} [",
        n.name().value(),
        span(n.name().span()),
        span(n.span()),
        n.ty().map(|t| t.value().to_string())
    );
    for e in n.entries() {
        out.push_str(&format!(
            "{}{} @{} ty {:?}; ",
            e.name()
                .map(|k| format!("{:?}@{}=", k.value(), span(k.span())))
                .unwrap_or_default(),
            value(e.value()),
            span(e.span()),
            e.ty().map(|t| t.value().to_string())
        ));
    }
    out.push(']');
    if let Some(c) = n.children() {
        out.push_str(&format!(" {{{} ", span(c.span())));
        for child in c.nodes() {
            out.push_str(&seen(child));
        }
        out.push('}');
    }
    out.push('\n');
    out
}

fn all(nodes: &[KdlNode]) -> String {
    nodes.iter().map(seen).collect()
}

/// Asserts that where the fast reader reads `text`, the crate reads the same.
fn agrees(text: &str) -> bool {
    let fast = parse(text, 0);
    let slow = text.parse::<KdlDocument>();
    match (fast, slow) {
        (Some(fast), Ok(slow)) => {
            assert_eq!(all(&fast), all(slow.nodes()), "text:\n{text}");
            true
        }
        (Some(fast), Err(e)) => panic!(
            "read what the crate refuses ({e:?}):\n{text}\n{}",
            all(&fast)
        ),
        (None, _) => false,
    }
}

#[test]
fn the_texts_of_the_subset_read_as_the_crate_reads_them() {
    let read = [
        "",
        "  \n\n",
        "a",
        "a\n",
        "a;b;c",
        "node 1 -2 3.25 -0.5 007 #true #false #null\n",
        "node \"quoted\" bare key=value k2=\"v 2\" k3=3 k4=#true\n",
        "\"quoted name\" x\n",
        "n \"esc \\n \\t \\\\ \\\" \\b \\f \\s \\r end\"\n",
        "n \"tab\there\"\n",
        "a { b; c { d e=1 } }\n",
        "a {\n    b\n    c\n}\n",
        "a {}\n",
        "a { }\n",
        "a {\n}\n",
        "a{b}\n",
        "a   \n",
        "a 1   ;  b\n",
        "a { b }   \nc\n",
        "a { b }   ;c\n",
        "a x {\n  y\n}\nz\n",
        "flow big {\n  parallel 16\n  task t0 {\n    goal \"Fix t0.\"\n    agent bot\n    gate g use=unit target=\"--test=t0\"\n    budget iterations=2\n  }\n}\n",
        "agent bot timeout=\"5m\" { run \"sh\" \"agent.sh\" \"{{prompt_file}}\"; }\n",
        "a b.c-d_e:f@g+h*i!j$k%l&m'n,o<p>q?r^s|t~u`v\n",
        "a\n\n\n    b\n",
        "a {b;}\n",
        "a 170141183460469231731687303715884105727 -170141183460469231731687303715884105727\n",
        "a 170141183460469231731687303715884105727.170141183460469231731687303715884105727\n",
        "a {b\n}\n",
        "a { b; }\n",
    ];
    for text in read {
        assert!(agrees(text), "not read by the fast reader:\n{text}");
    }
}

#[test]
fn what_the_subset_leaves_out_goes_to_the_crate() {
    let left = [
        "a // comment\n",
        "// comment\na\n",
        "/* c */ a\n",
        "a /-b\n",
        "(t)a\n",
        "a (t)1\n",
        "a #\"raw\"#\n",
        "a \"\"\"\nmulti\n\"\"\"\n",
        "a \"\\u{41}\"\n",
        "a \"bad \\q\"\n",
        "a \"line\\\n   cont\"\n",
        "a 1e5\n",
        "a 1_000\n",
        "a 0x1f\n",
        "a #inf\n",
        "a true\n",
        "a key = value\n",
        "a key= value\n",
        "a\r\nb\n",
        "a \\\n b\n",
        "a \"é\"\n",
        "é\n",
        "a -b\n",
        "a .b\n",
        "a 1b\n",
        "a\"b\"\n",
        "a \"b\"c\n",
        "a }\n",
        "{ a }\n",
        "a {\n",
        "a b=\n",
        ";\n",
        "a ;;\n",
        "a \"unterminated\n",
        // Each run of digits must fit an i128, as the crate reads them.
        "a -170141183460469231731687303715884105728\n",
        "a 170141183460469231731687303715884105728\n",
        "a 1000000000000000000000000000000000000000.5\n",
        "a 1.340282366920938463463374607431768211456\n",
    ];
    for text in left {
        assert!(!agrees(text), "read by the fast reader:\n{text}");
    }
}

#[test]
fn spans_move_by_the_base() {
    let at0 = parse("a b=1 { c }\n", 0).unwrap();
    let at7 = parse("a b=1 { c }\n", 7).unwrap();
    assert_eq!(at7[0].span().offset(), at0[0].span().offset() + 7);
    let c = |n: &[KdlNode]| n[0].children().unwrap().nodes()[0].name().span().offset();
    assert_eq!(c(&at7), c(&at0) + 7);
}

#[test]
fn every_kdl_file_of_the_repository_reads_alike() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut read = 0;
    for dir in ["examples", "loops", "stdlib", "tests/fixtures", "benches"] {
        for entry in walkdir::WalkDir::new(root.join(dir)).into_iter().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "kdl")
                && let Ok(text) = std::fs::read_to_string(path)
            {
                agrees(&text);
                // Most have comments, which the subset leaves out: without them, more are read.
                let bare: String = text
                    .lines()
                    .map(|l| match l.find("//") {
                        Some(i) if !l[..i].contains('"') => format!("{}\n", &l[..i]),
                        _ => format!("{l}\n"),
                    })
                    .collect();
                if agrees(&bare) {
                    read += 1;
                }
            }
        }
    }
    assert!(read > 20, "{read} files read");
}

/// A text of the subset (or near it): tokens joined by separators, some of them wrong.
fn text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        "[a-z_][a-z0-9_.-]{0,6}",
        "\"[ -~]{0,8}\"".prop_map(|s| s.replace('\\', "\\\\")),
        "\"[a-z\\\\nts\"]{0,6}\"",
        "-?[0-9]{1,4}(\\.[0-9]{1,3})?",
        "-?[0-9]{37,41}(\\.[0-9]{37,41})?",
        Just("#true".to_string()),
        Just("#null".to_string()),
        "[a-z]{1,3}=[a-z0-9\"]{1,4}",
        Just("{".to_string()),
        Just("}".to_string()),
        Just(";".to_string()),
        Just("=".to_string()),
        Just("true".to_string()),
        Just("//c".to_string()),
        Just("1e3".to_string()),
    ];
    let sep = prop_oneof![
        Just(" ".to_string()),
        Just("\n".to_string()),
        Just("  ".to_string()),
        Just("\t".to_string()),
        Just("".to_string()),
        Just(" \n  ".to_string()),
    ];
    proptest::collection::vec((token, sep), 0..24)
        .prop_map(|parts| parts.into_iter().map(|(t, s)| format!("{t}{s}")).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_the_fast_reader_reads_the_crate_reads_alike(text in text()) {
        agrees(&text);
    }

    #[test]
    fn well_formed_documents_are_read_alike(
        names in proptest::collection::vec(
            "[a-z][a-z0-9-]{0,5}".prop_filter("a keyword is no name", |n| {
                !matches!(n.as_str(), "true" | "false" | "null" | "inf" | "nan")
            }),
            1..6,
        ),
        nested in any::<bool>(),
    ) {
        let inner: String = names.iter().map(|n| format!("    {n} \"g {n}\" k=1\n")).collect();
        let text = if nested {
            format!("flow f {{\n  task t {{\n{inner}  }}\n}}\n")
        } else {
            inner
        };
        prop_assert!(agrees(&text), "{}", text);
    }
}
