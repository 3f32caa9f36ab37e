//! `cargo bench --bench compile`: where compile time goes on a generated flow — the KDL parse
//! alone (the kdl crate) against the whole compiler (parse, resolve, digest), in the same run.

use std::time::{Duration, Instant};

fn flow(n: usize) -> String {
    let mut s = String::from(
        "agent bot timeout=\"5m\" { run \"sh\" \"agent.sh\" \"{{prompt_file}}\"; }\n\
         gate unit { param target default=\"\"; run \"cargo\" \"test\" \"{{target}}\"; }\n\
         flow big {\n  parallel 16\n",
    );
    for i in 0..n {
        let after = if i == 0 {
            String::new()
        } else {
            format!("after t{}; ", i / 2)
        };
        s.push_str(&format!(
            "  task t{i} {{ {after}goal \"task {i}\"; agent bot; gate g use=unit target=\"--test=t{i}\"; budget iterations=2; }}\n"
        ));
    }
    s.push_str("}\n");
    s
}

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "{:>7} {:>10} {:>10} {:>8}",
        "tasks", "kdl_parse", "compile", "ratio"
    );
    for n in [1_000, 10_000] {
        let text = flow(n);
        let path = dir.path().join(format!("flow-{n}.kdl"));
        std::fs::write(&path, &text).expect("write");
        let parse = best_of(3, || {
            let doc: Result<kdl::KdlDocument, _> = text.parse();
            assert!(doc.is_ok());
        });
        let compile = best_of(3, || {
            let c = mvk::resolve::compile(&path, &mvk::resolve::Options::default());
            assert!(c.program.is_some());
        });
        println!(
            "{n:>7} {:>9.3}s {:>9.3}s {:>7.2}x",
            parse.as_secs_f64(),
            compile.as_secs_f64(),
            compile.as_secs_f64() / parse.as_secs_f64()
        );
    }
}
