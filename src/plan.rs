//! A resolved [`Program`] in, its DAG out: petgraph of tasks and dependencies, a topological
//! order, the batches that `parallel` allows, and the worst-case cost the budgets allow.

use std::time::Duration;

use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::ir::{Program, Rung, Task};

/// An upper bound that may not exist: a budget left open is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Bound {
    Limited(u64),
    #[serde(serialize_with = "unbounded")]
    Unbounded,
}

fn unbounded<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_none()
}

impl Bound {
    fn add(self, other: Bound) -> Bound {
        match (self, other) {
            (Bound::Limited(a), Bound::Limited(b)) => Bound::Limited(a.saturating_add(b)),
            _ => Bound::Unbounded,
        }
    }

    fn cap(self, cap: Option<u64>) -> Bound {
        match (self, cap) {
            (b, None) => b,
            (Bound::Unbounded, Some(c)) => Bound::Limited(c),
            (Bound::Limited(a), Some(c)) => Bound::Limited(a.min(c)),
        }
    }
}

/// The most a task (or the whole program) can spend before its budgets stop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Cost {
    /// Agent attempts, over the whole ladder.
    pub(crate) attempts: u64,
    pub(crate) usd_micros: Bound,
    pub(crate) tokens: Bound,
    /// Wall time in milliseconds.
    pub(crate) wall_ms: Bound,
}

/// The program as a graph, ready to be printed or run.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Task indices in an order where every task comes after its dependencies.
    pub(crate) order: Vec<usize>,
    /// Groups of tasks that may run at the same time: by depth in the DAG, at most `parallel` each.
    pub(crate) batches: Vec<Vec<usize>>,
    pub(crate) costs: Vec<Cost>,
    pub(crate) total: Cost,
}

/// A topological order of the tasks in which, of the tasks ready at any point, the one written
/// first comes first: independent tasks start in the order the file gives them (petgraph's
/// `toposort` is depth-first and yields them in reverse). Kahn's algorithm with the ready set
/// ordered by index; a task on a cycle (the resolver refuses them) is left out.
fn written_order(graph: &DiGraph<usize, ()>, nodes: &[NodeIndex]) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut waiting: Vec<usize> = nodes
        .iter()
        .map(|&n| {
            graph
                .neighbors_directed(n, petgraph::Direction::Incoming)
                .count()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len())
        .filter(|&i| waiting[i] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for next in graph.neighbors_directed(nodes[i], petgraph::Direction::Outgoing) {
            let j = graph[next];
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.push(Reverse(j));
            }
        }
    }
    order
}

/// Builds the plan; the resolver has already refused cycles and unknown dependencies.
pub(crate) fn plan(program: &Program) -> Plan {
    let mut graph = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..program.tasks.len())
        .map(|i| graph.add_node(i))
        .collect();
    let index: std::collections::HashMap<&str, usize> = program
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    for (i, t) in program.tasks.iter().enumerate() {
        for dep in &t.after {
            if let Some(&j) = index.get(dep.as_str()) {
                graph.add_edge(nodes[j], nodes[i], ());
            }
        }
    }
    let order = written_order(&graph, &nodes);
    // Depth = longest chain of dependencies above a task.
    let mut depth = vec![0usize; program.tasks.len()];
    for &i in &order {
        for dep in graph.neighbors_directed(nodes[i], petgraph::Direction::Incoming) {
            depth[i] = depth[i].max(depth[graph[dep]] + 1);
        }
    }
    let parallel = program.flow.as_ref().map_or(1, |f| f.parallel.max(1)) as usize;
    let levels = depth.iter().copied().max().map_or(0, |m| m + 1);
    let mut by_depth: Vec<Vec<usize>> = vec![Vec::new(); levels];
    for &i in &order {
        by_depth[depth[i]].push(i);
    }
    let mut batches = Vec::new();
    for at in by_depth {
        for chunk in at.chunks(parallel) {
            batches.push(chunk.to_vec());
        }
    }
    let costs: Vec<Cost> = program.tasks.iter().map(task_cost).collect();
    let mut total = Cost {
        attempts: 0,
        usd_micros: Bound::Limited(0),
        tokens: Bound::Limited(0),
        wall_ms: Bound::Limited(0),
    };
    for c in &costs {
        total.attempts = total.attempts.saturating_add(c.attempts);
        total.usd_micros = total.usd_micros.add(c.usd_micros);
        total.tokens = total.tokens.add(c.tokens);
        // Serial time is an upper bound whatever the parallelism.
        total.wall_ms = total.wall_ms.add(c.wall_ms);
    }
    if let Some(flow) = &program.flow {
        total.usd_micros = total.usd_micros.cap(flow.budget.usd_micros);
        total.tokens = total.tokens.cap(flow.budget.tokens);
        total.wall_ms = total.wall_ms.cap(flow.budget.wall.map(ms));
    }
    Plan {
        order,
        batches,
        costs,
        total,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The most attempts a task can make: its iterations, or fewer if every rung is bounded.
pub(crate) fn max_attempts(task: &Task) -> u64 {
    let iterations = u64::from(task.budget.iterations);
    let mut ladder: u64 = 0;
    for rung in &task.ladder {
        match rung {
            Rung::Agent {
                attempts: Some(n), ..
            } => ladder = ladder.saturating_add(u64::from(*n)),
            Rung::Agent { attempts: None, .. } => return iterations,
            Rung::Human => break,
        }
    }
    iterations.min(ladder)
}

fn task_cost(task: &Task) -> Cost {
    let attempts = max_attempts(task);
    let agent_timeout = task
        .ladder
        .iter()
        .filter_map(|r| match r {
            Rung::Agent { agent, .. } => Some(agent.timeout),
            Rung::Human => None,
        })
        .max()
        .unwrap_or_default();
    let gates: Duration = task.gates.iter().map(|g| g.timeout).sum();
    let review = task
        .review
        .as_ref()
        .map(|r| r.agent.timeout)
        .unwrap_or_default();
    let merge_gates: Duration = task.merge.gates.iter().map(|g| g.timeout).sum();
    let per_attempt = ms(agent_timeout + gates + review);
    let wall = Bound::Limited(
        per_attempt
            .saturating_mul(attempts)
            .saturating_add(ms(merge_gates)),
    );
    Cost {
        attempts,
        usd_micros: Bound::Unbounded.cap(task.budget.usd_micros),
        tokens: Bound::Unbounded.cap(task.budget.tokens),
        wall_ms: wall.cap(task.budget.wall.map(ms)),
    }
}

/// `$5.00` from micro-dollars.
pub(crate) fn format_usd(micros: u64) -> String {
    let cents = micros.div_ceil(10_000);
    format!("${}.{:02}", cents / 100, cents % 100)
}

/// `1h30m`, `45s`, `250ms`: the shortest exact spelling.
pub(crate) fn format_duration(d: Duration) -> String {
    let total_ms = ms(d);
    if total_ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = total_ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// An argv as a person would type it: quoted where needed.
pub(crate) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%{}".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_money_and_time() {
        assert_eq!(format_usd(5_000_000), "$5.00");
        assert_eq!(format_usd(250_000), "$0.25");
        assert_eq!(format_usd(1), "$0.01");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s500ms");
    }

    #[test]
    fn bounds_add_and_cap() {
        assert_eq!(Bound::Limited(2).add(Bound::Limited(3)), Bound::Limited(5));
        assert_eq!(Bound::Limited(2).add(Bound::Unbounded), Bound::Unbounded);
        assert_eq!(Bound::Unbounded.cap(Some(7)), Bound::Limited(7));
        assert_eq!(Bound::Limited(9).cap(Some(7)), Bound::Limited(7));
    }
}
