//! A file's text and its [`pieces`](super::pieces) in; its syntax tree and the lowering's
//! diagnostics out, or the KDL parser's errors, or where the parsed document nests too deep.
//!
//! The pieces are parsed on parser threads (one per core, at most [`MAX_PARSERS`]), each with the
//! stack a piece may need, while the calling thread lowers them in file order as they arrive.
//! Parsed KDL takes some hundred bytes per byte of text, so at most [`AHEAD`] parsed pieces wait
//! and each is dropped once lowered: a large file is never held as one document. A top-level
//! `flow` split into pieces is lowered child by child ([`FlowLowering`]); any other node split
//! into pieces is put back together first, as one parse of the file would give it.
//!
//! A piece in the plain subset generated files use is read by [`fast`](super::fast), the
//! others by the kdl crate's parser.
//!
//! What comes out is what one parse of the whole file followed by [`items::lower_file`] gives:
//! the same nodes, spans, errors in the same order, the same first block nested too deep.

use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use kdl::{KdlDocument, KdlNode};
use miette::SourceSpan;

use super::ast::{FileAst, Item};
use super::flow::FlowLowering;
use super::pieces::Piece;
use super::{Cx, NodeView, SyntaxError, items, nesting, shift};
use crate::diag::Diagnostics;
use crate::source::FileId;

/// More parser threads than this would each reserve a stack for little gain: lowering, on the
/// calling thread, keeps up with about this many.
const MAX_PARSERS: usize = 4;

/// How many pieces past the one being lowered may be claimed by a parser: enough to keep every
/// parser busy, few enough that the parsed pieces waiting stay some tens of megabytes.
const AHEAD: usize = MAX_PARSERS + 1;

pub(super) enum Outcome {
    Ast(FileAst, Diagnostics),
    Err(Vec<SyntaxError>),
    /// An offset inside the first block nested too deep.
    TooDeep(usize),
}

/// One parse.
enum Job {
    /// Whole nodes, `level` split blocks deep.
    Whole { range: Range<usize>, level: usize },
    /// A node too large for one parse, with the inside of its block (`block`) cut out.
    Head {
        node: Range<usize>,
        block: Range<usize>,
        level: usize,
    },
}

/// What the lowering reads, in file order: a parse, or the end of a split node's block.
enum Step {
    Parse(usize),
    Close,
}

/// One parse's result.
#[derive(Default)]
struct Done {
    nodes: Vec<KdlNode>,
    /// For a head: which of `nodes` holds the block (none when `/-` commented it out).
    holder: Option<usize>,
    errors: Vec<SyntaxError>,
    /// Inside the first block too deep among the nodes (for a head, those up to its holder).
    too_deep: Option<usize>,
    /// For a head: the same among the nodes after its holder, which stand after its block.
    too_deep_after: Option<usize>,
}

/// Parses and lowers `text` cut into `pieces`, on parser threads of `stack` bytes each; an
/// error only when not one parser thread could be started.
pub(super) fn run(
    file: FileId,
    text: &str,
    pieces: &[Piece],
    stack: usize,
) -> std::io::Result<Outcome> {
    let (mut jobs, mut steps) = (Vec::new(), Vec::new());
    flatten(pieces, 0, &mut jobs, &mut steps);
    let parsers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_PARSERS)
        .min(jobs.len().max(1));
    let board = Board {
        state: Mutex::new(State {
            done: jobs.iter().map(|_| None).collect(),
            claimed: 0,
            lowered: 0,
            parsers: 0,
            stop: false,
        }),
        changed: Condvar::new(),
    };
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for _ in 0..parsers {
            board.lock().parsers += 1;
            let spawned = std::thread::Builder::new()
                .name("kdl-parse".into())
                .stack_size(stack)
                .spawn_scoped(scope, || parse_jobs(text, &jobs, &board));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(why) => {
                    board.lock().parsers -= 1;
                    // Fewer parsers only make it slower; none at all is an error.
                    if handles.is_empty() {
                        return Err(why);
                    }
                    break;
                }
            }
        }
        // Parsers wait for the lowering to catch up; whatever ends it, they must not wait on.
        let _stop = Stop(&board);
        let mut lowering = Lowering {
            items: Vec::new(),
            stack: Vec::new(),
            errors: jobs.iter().map(|_| Vec::new()).collect(),
            too_deep: None,
            broken: false,
        };
        let mut diags = Diagnostics::default();
        let mut cx = Cx {
            file,
            diags: &mut diags,
        };
        let mut complete = true;
        for step in &steps {
            match *step {
                Step::Parse(j) => {
                    let Some(done) = board.take(j) else {
                        complete = false;
                        break;
                    };
                    lowering.piece(&mut cx, j, &jobs[j], done);
                    // The KDL parser makes an error of nearly every byte of stray text: a file
                    // of megabytes of it would take minutes and gigabytes to hear out. The
                    // first piece with syntax errors says what is wrong; the rest are not read.
                    if lowering.broken {
                        break;
                    }
                }
                Step::Close => lowering.close(&mut cx),
            }
        }
        drop(_stop);
        for handle in handles {
            // A parser does not panic on input (the fuzz target holds the parser to that); if
            // one ever did, the panic is carried on to the caller as without the threads.
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        if !complete {
            // Every parser ended with a piece not parsed, and none panicked: not reachable, but
            // said as a syntax error rather than an empty file.
            return Ok(Outcome::Err(vec![SyntaxError::cut(0)]));
        }
        Ok(lowering.outcome(pieces, diags))
    })
}

/// `pieces` as parses and steps in file order: a split node's head, its children, its close.
fn flatten(pieces: &[Piece], level: usize, jobs: &mut Vec<Job>, steps: &mut Vec<Step>) {
    for piece in pieces {
        steps.push(Step::Parse(jobs.len()));
        match piece {
            Piece::Whole(range) => jobs.push(Job::Whole {
                range: range.clone(),
                level,
            }),
            Piece::Split {
                node,
                block,
                children,
            } => {
                jobs.push(Job::Head {
                    node: node.clone(),
                    block: block.clone(),
                    level,
                });
                flatten(children, level + 1, jobs, steps);
                steps.push(Step::Close);
            }
        }
    }
}

/// The parses in the order their errors are reported: a split node's children before its head,
/// as the recursive parse of before reported them.
fn error_order(pieces: &[Piece], next: &mut usize, out: &mut Vec<usize>) {
    for piece in pieces {
        let at = *next;
        *next += 1;
        if let Piece::Split { children, .. } = piece {
            error_order(children, next, out);
        }
        out.push(at);
    }
}

/// The parses shared between the parser threads and the lowering.
struct Board {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    done: Vec<Option<Done>>,
    /// The next parse no parser has taken.
    claimed: usize,
    /// How many parses the lowering has taken.
    lowered: usize,
    /// Parser threads still running.
    parsers: usize,
    stop: bool,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned lock still holds sound counts.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Parse `j`'s result, once a parser has it; `None` if every parser has ended without it.
    fn take(&self, j: usize) -> Option<Done> {
        let mut state = self.lock();
        loop {
            if let Some(done) = state.done.get_mut(j).and_then(Option::take) {
                state.lowered = j + 1;
                self.changed.notify_all();
                return Some(done);
            }
            if state.parsers == 0 {
                return None;
            }
            state = self.wait(state);
        }
    }
}

/// Tells the parsers to stop when dropped: at the end of the lowering, or if it unwinds.
struct Stop<'a>(&'a Board);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.lock().stop = true;
        self.0.changed.notify_all();
    }
}

/// Counts a parser out when it ends, panicking or not, so the lowering never waits on it.
struct Leaving<'a>(&'a Board);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.lock().parsers -= 1;
        self.0.changed.notify_all();
    }
}

/// A parser thread: takes the next parse while it is not too far ahead of the lowering.
fn parse_jobs(text: &str, jobs: &[Job], board: &Board) {
    let _leaving = Leaving(board);
    loop {
        let j = {
            let mut state = board.lock();
            loop {
                if state.stop || state.claimed >= jobs.len() {
                    return;
                }
                if state.claimed < state.lowered + AHEAD {
                    break;
                }
                state = board.wait(state);
            }
            state.claimed += 1;
            state.claimed - 1
        };
        let done = jobs.get(j).map(|job| parse_job(text, job));
        let mut state = board.lock();
        if let Some(slot) = state.done.get_mut(j) {
            *slot = done;
        }
        board.changed.notify_all();
    }
}

/// One parse, its spans moved to where they stand in `text`, checked for depth; a document too
/// deep is dropped here, on the thread whose stack was sized for it.
fn parse_job(text: &str, job: &Job) -> Done {
    match job {
        Job::Whole { range, level } => {
            let base = range.start;
            let at = |s: SourceSpan| SourceSpan::new((base + s.offset()).into(), s.len());
            let Some(piece) = text.get(range.clone()) else {
                return broken(SyntaxError::cut(range.start));
            };
            // Generated text in the plain subset is read without the crate's parser.
            let nodes = match super::fast::parse(piece, base) {
                Some(nodes) => nodes,
                None => {
                    let mut doc = match piece.parse::<KdlDocument>() {
                        Ok(doc) => doc,
                        Err(e) => return parse_errors(e, &at),
                    };
                    let mut nodes = std::mem::take(doc.nodes_mut());
                    if base > 0 {
                        for node in &mut nodes {
                            shift(node, &at);
                        }
                    }
                    nodes
                }
            };
            let too_deep = deeper(&nodes, *level);
            checked(nodes, None, too_deep, None)
        }
        Job::Head { node, block, level } => {
            // The node with its block's inside cut out (`flow f {}`); what stands after the cut
            // moves back by the block's length.
            let (Some(before), Some(after)) = (
                text.get(node.start..block.start),
                text.get(block.end..node.end),
            ) else {
                return broken(SyntaxError::cut(node.start));
            };
            let head = format!("{before}{after}");
            let (base, cut, gap) = (node.start, block.start - node.start, block.len());
            let at = |s: SourceSpan| {
                let (start, end) = (s.offset(), s.offset() + s.len());
                let start = base + start + if start >= cut { gap } else { 0 };
                let end = (base + end + if end > cut { gap } else { 0 }).max(start);
                SourceSpan::new(start.into(), end - start)
            };
            let mut nodes = match super::fast::parse(&head, 0) {
                Some(nodes) => nodes,
                None => match head.parse::<KdlDocument>() {
                    Ok(mut doc) => std::mem::take(doc.nodes_mut()),
                    Err(e) => return parse_errors(e, &at),
                },
            };
            for n in &mut nodes {
                shift(n, &at);
            }
            // The block goes to the first node with one, unless `/-` commented it out.
            let holder = nodes.iter().position(|n| n.children().is_some());
            if let Some(children) = holder.and_then(|h| nodes.get_mut(h)?.children_mut().as_mut()) {
                children.set_span(SourceSpan::from(block.clone()));
            }
            let split = holder.map_or(nodes.len(), |h| h + 1);
            let too_deep = deeper(nodes.get(..split).unwrap_or_default(), *level);
            let too_deep_after = deeper(nodes.get(split..).unwrap_or_default(), *level);
            checked(nodes, holder, too_deep, too_deep_after)
        }
    }
}

/// Where the first block nested deeper than a file may go starts, among nodes `level` split
/// blocks deep.
fn deeper(nodes: &[KdlNode], level: usize) -> Option<usize> {
    match nesting::MAX_DEPTH.checked_sub(level) {
        Some(max) => super::deeper_than(nodes, max),
        // Not reachable: the head that opened this level was found too deep first.
        None => nodes.first().map(|n| n.span().offset()),
    }
}

fn checked(
    nodes: Vec<KdlNode>,
    holder: Option<usize>,
    too_deep: Option<usize>,
    too_deep_after: Option<usize>,
) -> Done {
    let nodes = if too_deep.is_some() || too_deep_after.is_some() {
        drop(nodes);
        Vec::new()
    } else {
        nodes
    };
    Done {
        nodes,
        holder,
        too_deep,
        too_deep_after,
        errors: Vec::new(),
    }
}

fn broken(error: SyntaxError) -> Done {
    Done {
        errors: vec![error],
        ..Done::default()
    }
}

fn parse_errors(e: kdl::KdlError, at: &impl Fn(SourceSpan) -> SourceSpan) -> Done {
    Done {
        errors: e
            .diagnostics
            .into_iter()
            .map(|d| SyntaxError {
                span: at(d.span),
                message: d.message,
                label: d.label,
                help: d.help,
            })
            .collect(),
        ..Done::default()
    }
}

/// The lowering, fed the parses in file order.
struct Lowering {
    items: Vec<Item>,
    /// The split nodes whose blocks are being read, outermost first.
    stack: Vec<Frame>,
    /// Each parse's errors, by parse.
    errors: Vec<Vec<SyntaxError>>,
    too_deep: Option<usize>,
    /// A syntax error or a block too deep was found: what is lowered would be thrown away, so
    /// nothing more is; the parses are still read, for their errors.
    broken: bool,
}

struct Frame {
    kind: Open,
    /// Nodes the head's parse gave after the node holding the block.
    after: Vec<KdlNode>,
    too_deep_after: Option<usize>,
}

enum Open {
    /// A top-level flow, lowered child by child.
    Flow(FlowLowering),
    /// Any other split node, its children gathered back into it.
    Gather(KdlNode, Vec<KdlNode>),
    /// Read for errors only: lowering stopped.
    Skip,
    /// A block `/-` commented out (or whose head did not parse): one parse of the file does not
    /// hold it, so neither its depth nor its nodes count.
    Dead,
}

impl Lowering {
    fn dead(&self) -> bool {
        self.stack.iter().any(|f| matches!(f.kind, Open::Dead))
    }

    fn deep(&mut self, at: Option<usize>) {
        if let Some(at) = at {
            self.too_deep.get_or_insert(at);
            self.broken = true;
        }
    }

    fn piece(&mut self, cx: &mut Cx<'_>, j: usize, job: &Job, done: Done) {
        let Done {
            mut nodes,
            holder,
            errors,
            too_deep,
            too_deep_after,
        } = done;
        self.broken |= !errors.is_empty();
        if let Some(slot) = self.errors.get_mut(j) {
            *slot = errors;
        }
        let dead = self.dead();
        if !dead {
            self.deep(too_deep);
        }
        match job {
            Job::Whole { .. } => {
                if !dead && !self.broken {
                    for node in nodes {
                        self.deliver(cx, node);
                    }
                }
            }
            Job::Head { .. } => {
                let live = !dead && holder.is_some();
                let too_deep_after = too_deep_after.filter(|_| !dead);
                if dead || self.broken {
                    self.stack.push(Frame {
                        kind: if live { Open::Skip } else { Open::Dead },
                        after: Vec::new(),
                        too_deep_after,
                    });
                    return;
                }
                let split = holder.map_or(nodes.len(), |h| h + 1);
                let after = nodes.split_off(split.min(nodes.len()));
                let held = holder.and_then(|_| nodes.pop());
                for node in nodes {
                    self.deliver(cx, node);
                }
                let kind = match held {
                    None => Open::Dead,
                    Some(node) if self.stack.is_empty() && node.name().value() == "flow" => {
                        let mut view = NodeView::new(cx, &node);
                        Open::Flow(FlowLowering::start(cx, &mut view))
                    }
                    Some(node) => Open::Gather(node, Vec::new()),
                };
                self.stack.push(Frame {
                    kind,
                    after,
                    too_deep_after,
                });
            }
        }
    }

    /// The end of the innermost split node's block.
    fn close(&mut self, cx: &mut Cx<'_>) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        self.deep(frame.too_deep_after);
        if self.broken {
            return;
        }
        match frame.kind {
            Open::Flow(flow) => self.items.extend(flow.end(cx).map(Item::Flow)),
            Open::Gather(mut node, children) => {
                if let Some(block) = node.children_mut() {
                    *block.nodes_mut() = children;
                }
                self.deliver(cx, node);
            }
            Open::Skip | Open::Dead => {}
        }
        for node in frame.after {
            self.deliver(cx, node);
        }
    }

    /// A node, whole, to the block it stands in (or the file).
    fn deliver(&mut self, cx: &mut Cx<'_>, node: KdlNode) {
        match self.stack.last_mut().map(|f| &mut f.kind) {
            None => self.items.extend(items::lower_node(cx, &node)),
            Some(Open::Flow(flow)) => flow.child(cx, &node),
            Some(Open::Gather(_, children)) => children.push(node),
            Some(Open::Skip | Open::Dead) => {}
        }
    }

    fn outcome(mut self, pieces: &[Piece], diags: Diagnostics) -> Outcome {
        if self.errors.iter().any(|e| !e.is_empty()) {
            let mut order = Vec::new();
            error_order(pieces, &mut 0, &mut order);
            let errors = order
                .into_iter()
                .filter_map(|j| self.errors.get_mut(j).map(std::mem::take))
                .flatten()
                .collect();
            return Outcome::Err(errors);
        }
        if let Some(at) = self.too_deep {
            return Outcome::TooDeep(at);
        }
        Outcome::Ast(FileAst { items: self.items }, diags)
    }
}
