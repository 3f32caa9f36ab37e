//! Syntax trees in, the resolved [`Program`](crate::ir::Program) out: imports loaded (relative
//! files and the embedded `std/…`), definitions applied with their parameters, templates read
//! and checked, defaults written in, fan-outs expanded against the repository, digests computed.
//!
//! [`defs`] resolves `gate` and `agent` definitions; [`task`] turns loop bodies and flows into
//! tasks; [`interp`] fills `{{name}}` placeholders; [`repo`] lists the files `each=` matches.

pub mod defs;
pub mod interp;
pub mod repo;
pub mod task;

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use crate::diag::{Diagnostic, Diagnostics, suggest};
use crate::ir::Program;
use crate::source::{FileId, Origin, SourceFile, Sources, Span, display_path};
use crate::syntax::ast::{FileAst, Item};

/// What the compiler needs besides the entry file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The repository whose files `each=` globs match; `None` means fan-outs see no files.
    pub repo_root: Option<PathBuf>,
}

/// The result of a compilation: a program when there were no errors, and every diagnostic.
#[derive(Debug)]
pub struct Compiled {
    pub program: Option<Program>,
    pub diags: Diagnostics,
    pub sources: Sources,
}

/// Compiles one entry file: a loop, a flow, or a library of definitions.
pub fn compile(entry: &Path, options: &Options) -> Compiled {
    let mut world = World::new(options.clone());
    let program = match world.load(Origin::Disk(normalize(entry)), None, LoadAs::Entry) {
        Some(root) => {
            world.check_all_definitions();
            task::build_program(&mut world, root)
        }
        None => None,
    };
    let program = if world.diags.has_errors() {
        None
    } else {
        program
    };
    Compiled {
        program,
        diags: world.diags,
        sources: world.sources,
    }
}

/// Why a file is being loaded, which decides what it may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadAs {
    /// The file named on the command line.
    Entry,
    /// A flow task's `loop=` file: definitions and one loop.
    LoopFile,
    /// An `import`: definitions only.
    Import,
}

/// Where a definition lives: module index and item index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DefRef {
    pub module: usize,
    pub item: usize,
}

/// The names visible in one file: its own definitions and those its imports bring.
#[derive(Debug, Default)]
pub struct Scope {
    pub gates: BTreeMap<String, (DefRef, Span)>,
    pub agents: BTreeMap<String, (DefRef, Span)>,
    /// An import failed (and was reported): an unknown name may be one it would have brought.
    pub incomplete: bool,
}

#[derive(Debug)]
pub struct Module {
    pub file: FileId,
    pub ast: FileAst,
    pub scope: Scope,
}

/// Everything loaded so far, the diagnostics, and memoized definitions.
pub struct World {
    pub options: Options,
    pub sources: Sources,
    pub modules: Vec<Module>,
    pub diags: Diagnostics,
    by_origin: HashMap<Origin, usize>,
    loading: Vec<(Origin, String)>,
    pub(crate) gate_defs: HashMap<DefRef, Option<Rc<defs::GateDef>>>,
    pub(crate) agent_defs: HashMap<DefRef, Option<Rc<defs::AgentDef>>>,
    pub(crate) resolving: Vec<DefRef>,
    repo_files: Option<Result<Rc<Vec<String>>, String>>,
    /// Template texts that passed `prompt::check`.
    pub(crate) checked_templates: std::collections::HashSet<String>,
}

impl World {
    pub fn new(options: Options) -> World {
        World {
            options,
            sources: Sources::default(),
            modules: Vec::new(),
            diags: Diagnostics::default(),
            by_origin: HashMap::new(),
            loading: Vec::new(),
            gate_defs: HashMap::new(),
            agent_defs: HashMap::new(),
            resolving: Vec::new(),
            repo_files: None,
            checked_templates: std::collections::HashSet::new(),
        }
    }

    pub fn file_of(&self, module: usize) -> &SourceFile {
        self.sources.get(self.modules[module].file)
    }

    /// Where a reference written in `module` points: `std/…` or a path relative to that file.
    pub fn origin_for(&self, module: usize, path: &str) -> Origin {
        if path.starts_with("std/") {
            return Origin::Std(path.to_string());
        }
        let base = self
            .file_of(module)
            .dir()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Origin::Disk(normalize(&base.join(path)))
    }

    /// Loads a file and everything it imports; `via` is the reference that named it.
    pub fn load(&mut self, origin: Origin, via: Option<Span>, load_as: LoadAs) -> Option<usize> {
        if let Some(&i) = self.by_origin.get(&origin) {
            return Some(i);
        }
        let name = match &origin {
            Origin::Disk(p) => display_path(p),
            Origin::Std(p) => p.clone(),
        };
        if let Some(pos) = self.loading.iter().position(|(o, _)| *o == origin) {
            let mut chain: Vec<String> = self.loading[pos..]
                .iter()
                .map(|(_, n)| format!("`{n}`"))
                .collect();
            chain.push(format!("`{name}`"));
            let mut d = Diagnostic::error(
                "mvk::import-cycle",
                format!("import cycle: {}", chain.join(" → ")),
            );
            if let Some(via) = via {
                d = d.at(via, "imports a file that is still being loaded");
            }
            self.diags
                .push(d.help("move the shared definitions into a file that both import"));
            return None;
        }
        let text = match &origin {
            Origin::Std(p) => match crate::stdlib::get(p) {
                Some(t) => t.to_string(),
                None => {
                    let paths: Vec<&str> = crate::stdlib::paths()
                        .filter(|p| p.ends_with(".kdl"))
                        .collect();
                    let mut d = Diagnostic::error(
                        "mvk::missing-import",
                        format!("the standard library has no `{p}`"),
                    );
                    if let Some(via) = via {
                        d = d.at(via, "not in the standard library");
                    }
                    self.diags
                        .push(d.help(suggest("the standard library has", p, &paths)));
                    return None;
                }
            },
            Origin::Disk(p) => match std::fs::read_to_string(p) {
                Ok(t) => t,
                Err(e) => {
                    let what = match load_as {
                        LoadAs::Entry => "loop file",
                        LoadAs::LoopFile => "task's loop file",
                        LoadAs::Import => "import",
                    };
                    let mut d = Diagnostic::error(
                        if load_as == LoadAs::Import {
                            "mvk::missing-import"
                        } else {
                            "mvk::missing-file"
                        },
                        format!("cannot read {what} `{name}`: {}", io_reason(&e)),
                    );
                    if let Some(via) = via {
                        d = d.at(via, "named here");
                    }
                    let help = if load_as == LoadAs::Entry {
                        "check the path; it is relative to the current directory".to_string()
                    } else {
                        "paths are relative to the file that names them; `std/…` names the standard library".to_string()
                    };
                    self.diags.push(d.help(help));
                    return None;
                }
            },
        };
        let file = self.sources.add(SourceFile {
            origin: origin.clone(),
            name: name.clone(),
            text: std::sync::Arc::new(text),
        });
        let text = std::sync::Arc::clone(&self.sources.get(file).text);
        let ast = crate::syntax::parse(file, &text, &mut self.diags);
        let idx = self.modules.len();
        self.modules.push(Module {
            file,
            ast,
            scope: Scope::default(),
        });
        self.loading.push((origin.clone(), name));
        self.build_scope(idx, load_as);
        self.loading.pop();
        self.by_origin.insert(origin, idx);
        Some(idx)
    }

    fn build_scope(&mut self, idx: usize, load_as: LoadAs) {
        let items = self.modules[idx].ast.items.clone();
        let mut scope = Scope::default();
        for item in &items {
            let Item::Import(import) = item else { continue };
            let origin = self.origin_for(idx, &import.path.node);
            let Some(j) = self.load(origin, Some(import.path.span), LoadAs::Import) else {
                scope.incomplete = true;
                continue;
            };
            let prefix = import.alias.as_ref().map(|a| format!("{}.", a.node));
            for (k, other) in self.modules[j].ast.items.iter().enumerate() {
                let (table, name, kind) = match other {
                    Item::Gate(g) => (&mut scope.gates, &g.name.node, "gate"),
                    Item::Agent(a) => (&mut scope.agents, &a.name.node, "agent"),
                    _ => continue,
                };
                let qualified = format!("{}{name}", prefix.as_deref().unwrap_or(""));
                let def = DefRef { module: j, item: k };
                if let Some((prev, prev_span)) = table.get(&qualified) {
                    if *prev != def {
                        let d = Diagnostic::error(
                            "mvk::duplicate-name",
                            format!("{kind} `{qualified}` is brought in twice"),
                        )
                        .at(import.span, "this import brings it again")
                        .also(*prev_span, "first brought in here")
                        .help("give one of the imports a namespace: import \"…\" as=name");
                        self.diags.push(d);
                    }
                    continue;
                }
                table.insert(qualified, (def, import.span));
            }
        }
        for (k, item) in items.iter().enumerate() {
            let (table, name, kind) = match item {
                Item::Gate(g) => (&mut scope.gates, &g.name, "gate"),
                Item::Agent(a) => (&mut scope.agents, &a.name, "agent"),
                Item::Loop(l) if load_as == LoadAs::Import => {
                    self.diags.push(
                        Diagnostic::error("mvk::loop-in-library", "an imported file may only define gates and agents")
                            .at(l.name.span, "a loop in an imported file")
                            .help("run this loop on its own, or name it from a flow with `task NAME loop=\"file.kdl\"`"),
                    );
                    continue;
                }
                Item::Flow(f) if load_as != LoadAs::Entry => {
                    self.diags.push(
                        Diagnostic::error("mvk::flow-not-allowed", "a flow can only be run from the file named on the command line")
                            .at(f.name.span, "a flow in an imported or task file")
                            .help("a task's `loop=` file holds one loop; an imported file holds definitions"),
                    );
                    continue;
                }
                _ => continue,
            };
            let def = DefRef {
                module: idx,
                item: k,
            };
            if let Some((_, prev_span)) = table.get(&name.node) {
                let d = Diagnostic::error("mvk::duplicate-name", format!("{kind} `{}` is defined twice", name.node))
                    .at(name.span, "defined again here")
                    .also(*prev_span, "first defined or imported here")
                    .help(format!("rename one of them, or import the other with a namespace (as=…) and write `ns.{}`", name.node));
                self.diags.push(d);
                continue;
            }
            table.insert(name.node.clone(), (def, name.span));
        }
        self.modules[idx].scope = scope;
    }

    /// Resolves every definition of every loaded file, so a library's mistakes surface even
    /// when no loop uses the broken definition.
    pub fn check_all_definitions(&mut self) {
        for m in 0..self.modules.len() {
            for k in 0..self.modules[m].ast.items.len() {
                let def = DefRef { module: m, item: k };
                match &self.modules[m].ast.items[k] {
                    Item::Gate(_) => {
                        self.gate_def(def);
                    }
                    Item::Agent(_) => {
                        self.agent_def(def);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The repository's files, listed once per compilation.
    pub fn repo_files(&mut self) -> Result<Rc<Vec<String>>, String> {
        if self.repo_files.is_none() {
            let listed = match &self.options.repo_root {
                Some(root) => repo::list_files(root).map(Rc::new),
                None => Ok(Rc::new(Vec::new())),
            };
            self.repo_files = Some(listed);
        }
        self.repo_files
            .clone()
            .unwrap_or_else(|| Ok(Rc::new(Vec::new())))
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// Makes a path absolute and removes `.` and `..` without touching the file system, so that
/// one file reached by two spellings is loaded once.
pub fn normalize(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
