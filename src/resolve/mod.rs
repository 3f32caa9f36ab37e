//! Syntax trees in, the resolved [`Program`](crate::ir::Program) out: imports loaded (relative
//! files and the embedded `std/…`), definitions applied with their parameters, templates read
//! and checked, defaults written in, fan-outs expanded against the repository, digests computed.
//!
//! [`defs`] resolves `gate` and `agent` definitions; [`task`] turns loop bodies and flows into
//! tasks; [`interp`] fills `{{name}}` placeholders; [`repo`] lists the files `each=` matches;
//! [`git`] fetches git imports into the cache; [`lock`] reads and writes `mvk.lock`; [`notify`]
//! resolves `notify` nodes and the definitions they use; [`first_prompt`] holds each task's
//! first prompt to its `context-tokens`, beside the compile.

pub(crate) mod confine;
pub(crate) mod defs;
pub(crate) mod first_prompt;
pub(crate) mod git;
pub(crate) mod interp;
pub(crate) mod lock;
pub(crate) mod notify;
pub(crate) mod repo;
pub(crate) mod task;

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use crate::diag::{Diagnostic, Diagnostics, suggest};
use crate::ir::Program;
use crate::source::{FileId, GitFile, Origin, SourceFile, Sources, Span, display_path};
use crate::syntax::ast::{FileAst, Import, Item, Spanned};

/// What the compiler needs besides the entry file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The repository whose files `each=` globs match; `None` means fan-outs see no files.
    pub repo_root: Option<PathBuf>,
    /// How `mvk.lock` beside the entry file is used.
    pub lock: lock::Mode,
    /// mvk's cache directory for git imports (`None`: [`git::default_root`]).
    pub cache_dir: Option<PathBuf>,
    /// Where every file read must lie (`None`: this process's fence, [`confine::current`],
    /// if it has one).
    pub confine: Option<confine::Confine>,
}

/// The result of a compilation: a program when there were no errors, and every diagnostic.
#[derive(Debug)]
pub struct Compiled {
    pub program: Option<Program>,
    pub diags: Diagnostics,
    pub sources: Sources,
    /// Every import reached, as `mvk.lock` would record it, by key.
    pub pins: BTreeMap<String, lock::Entry>,
    /// The lock file that belongs to the entry file (whether or not it exists).
    pub lock_path: PathBuf,
}

/// Compiles one entry file: a loop, a flow, or a library of definitions.
pub fn compile(entry: &Path, options: &Options) -> Compiled {
    let entry = normalize(entry);
    let mut world = World::new(options.clone());
    world.open_lock(&entry);
    let program = match world.load(Origin::Disk(entry), None, LoadAs::Entry) {
        Some(root) => {
            // Every loop sees the stdlib's price table, imported or not.
            world.load(
                Origin::Std(crate::stdlib::PRICES.to_string()),
                None,
                LoadAs::Import,
            );
            world.check_all_definitions();
            let program = task::build_program(&mut world, root);
            world.first_prompts.settle(&mut world.diags);
            world.check_prices();
            program
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
        pins: world.pins,
        lock_path: world.lock_path,
    }
}

/// Every agent the stdlib defines (`std/agents.kdl`), with its parameters' defaults, as a loop
/// that writes `agent NAME` would run it (for `mvk doctor` without a file).
pub(crate) fn stdlib_agents() -> Vec<crate::ir::Agent> {
    let mut world = World::new(Options::default());
    let Some(m) = world.load(Origin::Std("std/agents.kdl".into()), None, LoadAs::Import) else {
        return Vec::new();
    };
    world.load(
        Origin::Std(crate::stdlib::PRICES.to_string()),
        None,
        LoadAs::Import,
    );
    let names: Vec<Spanned<String>> = world.modules[m]
        .ast
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Agent(a) => Some(a.name.clone()),
            _ => None,
        })
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let use_ = crate::syntax::ast::AgentUse {
                span: name.span,
                name,
                bindings: Vec::new(),
            };
            world.instantiate_agent(m, &use_, None)
        })
        .collect()
}

/// Why a file is being loaded, which decides what it may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoadAs {
    /// The file named on the command line.
    Entry,
    /// A flow task's `loop=` file: definitions and one loop.
    LoopFile,
    /// An `import`: definitions only.
    Import,
}

/// Where a definition lives: module index and item index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct DefRef {
    pub(crate) module: usize,
    pub(crate) item: usize,
}

/// The names visible in one file: its own definitions and those its imports bring.
#[derive(Debug, Default)]
pub(crate) struct Scope {
    pub(crate) gates: BTreeMap<String, (DefRef, Span)>,
    pub(crate) agents: BTreeMap<String, (DefRef, Span)>,
    pub(crate) notifies: BTreeMap<String, (DefRef, Span)>,
    /// An import failed (and was reported): an unknown name may be one it would have brought.
    pub(crate) incomplete: bool,
}

#[derive(Debug)]
pub(crate) struct Module {
    pub(crate) file: FileId,
    pub(crate) ast: FileAst,
    pub(crate) scope: Scope,
}

/// Everything loaded so far, the diagnostics, and memoized definitions.
pub(crate) struct World {
    pub(crate) options: Options,
    pub(crate) sources: Sources,
    pub(crate) modules: Vec<Module>,
    pub(crate) diags: Diagnostics,
    by_origin: HashMap<Origin, usize>,
    loading: Vec<(Origin, String)>,
    pub(crate) gate_defs: HashMap<DefRef, Option<Rc<defs::GateDef>>>,
    pub(crate) agent_defs: HashMap<DefRef, Option<Rc<defs::AgentDef>>>,
    pub(crate) notify_defs: HashMap<DefRef, Option<std::sync::Arc<crate::ir::Notify>>>,
    pub(crate) resolving: Vec<DefRef>,
    repo_files: Option<Result<Rc<Vec<String>>, String>>,
    /// Whether a `scope` or `seal` pattern covers a tracked file, by pattern: tasks of a
    /// fan-out share their patterns, and a flow of thousands must not scan the files for each.
    pub(crate) pattern_hits: std::collections::HashMap<String, bool>,
    /// The first components of the tracked files, each once: what a pattern that matches
    /// nothing is compared with for a near miss, made once rather than per pattern.
    pub(crate) file_roots: Option<Rc<Vec<String>>>,
    /// Template texts that passed `prompt::check`, each shared by every task that uses it.
    pub(crate) checked_templates: std::collections::HashSet<std::sync::Arc<str>>,
    /// The standard library's templates that passed, by name.
    pub(crate) std_templates: HashMap<String, std::sync::Arc<str>>,
    /// Each task's first prompt held to its `context-tokens`, beside the compile.
    pub(crate) first_prompts: first_prompt::FirstPromptChecks,
    /// The git repositories imports come from, fetched into the cache.
    pub(crate) git: git::GitCache,
    /// The entry file's `mvk.lock` (whether or not it exists) and what it holds.
    lock_path: PathBuf,
    lock: Option<lock::LockFile>,
    /// Every import reached, as the lock would record it.
    pins: BTreeMap<String, lock::Entry>,
}

impl World {
    pub(crate) fn new(mut options: Options) -> World {
        if options.confine.is_none() {
            options.confine = confine::current();
        }
        World {
            sources: Sources::default(),
            modules: Vec::new(),
            diags: Diagnostics::default(),
            by_origin: HashMap::new(),
            loading: Vec::new(),
            gate_defs: HashMap::new(),
            agent_defs: HashMap::new(),
            notify_defs: HashMap::new(),
            resolving: Vec::new(),
            repo_files: None,
            pattern_hits: std::collections::HashMap::new(),
            file_roots: None,
            checked_templates: std::collections::HashSet::new(),
            std_templates: HashMap::new(),
            first_prompts: first_prompt::FirstPromptChecks::default(),
            git: git::GitCache::new(options.cache_dir.clone().unwrap_or_else(git::default_root)),
            lock_path: PathBuf::from(lock::FILE_NAME),
            lock: None,
            pins: BTreeMap::new(),
            options,
        }
    }

    /// Reads the lock beside `entry` when the mode uses one; a lock that cannot be read is an
    /// error, not a lock ignored.
    fn open_lock(&mut self, entry: &Path) {
        self.lock_path = lock::path_for(entry);
        if !matches!(self.options.lock, lock::Mode::Verify | lock::Mode::Refresh) {
            return;
        }
        if let Err(why) = self.confined(&self.lock_path.clone(), None) {
            self.diags.push(*why);
            return;
        }
        match lock::read(&self.lock_path) {
            Ok(found) => self.lock = found,
            Err(e) => self.diags.push(
                Diagnostic::error("mvk::bad-lock", e.to_string()).help(format!(
                    "`{}` is written by `mvk lock`; restore it from version control, or delete it and run `mvk lock --update`",
                    lock::FILE_NAME
                )),
            ),
        }
    }

    /// `path` resolved when this compilation may read it (it is fenced in a repository, see
    /// [`confine`]), else the error saying why not; nothing of the file is read.
    pub(crate) fn confined(
        &self,
        path: &Path,
        via: Option<Span>,
    ) -> Result<PathBuf, Box<Diagnostic>> {
        let Some(fence) = &self.options.confine else {
            return Ok(path.to_path_buf());
        };
        fence.check(path).map_err(|why| {
            let d = Diagnostic::error("mvk::outside-repository", format!("refused to read: {why}"));
            let d = match via {
                Some(via) => d.at(via, "names a file outside the repository"),
                None => d,
            };
            Box::new(d.help("this mvk was started by `mvk mcp`, which reads the files of its repository only, never its git directory"))
        })
    }

    pub(crate) fn file_of(&self, module: usize) -> &SourceFile {
        self.sources.get(self.modules[module].file)
    }

    /// Where a reference written in `module` points: `std/…` or a path relative to that file.
    pub(crate) fn origin_for(&self, module: usize, path: &str) -> Origin {
        if path.starts_with("std/") {
            return Origin::Std(path.to_string());
        }
        if let Origin::Git(file) = &self.file_of(module).origin {
            return Origin::Git(file.sibling(path));
        }
        let base = self
            .file_of(module)
            .dir()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Origin::Disk(normalize(&base.join(path)))
    }

    /// Loads a file and everything it imports; `via` is the reference that named it.
    pub(crate) fn load(
        &mut self,
        origin: Origin,
        via: Option<Span>,
        load_as: LoadAs,
    ) -> Option<usize> {
        if let Some(&i) = self.by_origin.get(&origin) {
            return Some(i);
        }
        let name = match &origin {
            Origin::Disk(p) => display_path(p),
            Origin::Std(p) => p.clone(),
            Origin::Git(g) => g.name(),
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
            Origin::Git(g) => match self.git.read(&g.url, g.commit, &g.path) {
                Ok(t) => t,
                Err(e) => {
                    if let Some(via) = via {
                        self.diags.push(git_diagnostic(&e, via));
                    }
                    return None;
                }
            },
            Origin::Disk(p) => match self.confined(p, via).and_then(|p| {
                read_bounded(&p).map_err(|e| Box::new(unreadable(&e, &name, load_as, via)))
            }) {
                Ok(t) => t,
                Err(d) => {
                    self.diags.push(*d);
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
            let Some(origin) = self.import_origin(idx, import) else {
                scope.incomplete = true;
                continue;
            };
            let Some(j) = self.load(origin, Some(import.path.span), LoadAs::Import) else {
                scope.incomplete = true;
                continue;
            };
            self.pin(j, import.span, import.git.is_none());
            let prefix = import.alias.as_ref().map(|a| format!("{}.", a.node));
            for (k, other) in self.modules[j].ast.items.iter().enumerate() {
                let (table, name, kind) = match other {
                    Item::Gate(g) => (&mut scope.gates, &g.name.node, "gate"),
                    Item::Agent(a) => (&mut scope.agents, &a.name.node, "agent"),
                    Item::Notify(n) => (&mut scope.notifies, &n.name.node, "notification"),
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
                Item::Notify(n) => (&mut scope.notifies, &n.name, "notification"),
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

    /// Where an import points; a git import's rev is resolved to a commit here (the locked one
    /// when the lock pins it), fetching only when the cache lacks what is needed.
    fn import_origin(&mut self, module: usize, import: &Import) -> Option<Origin> {
        let Some(src) = &import.git else {
            return Some(self.origin_for(module, &import.path.node));
        };
        let url = &src.url.node;
        if let Some(fence) = &self.options.confine
            && let Err(why) = fence.check_url(url)
        {
            self.diags.push(
                Diagnostic::error("mvk::outside-repository", format!("refused to read: {why}"))
                    .at(src.url.span, "names a repository outside this one")
                    .help("this mvk was started by `mvk mcp`, which reads the files of its repository only, never its git directory"),
            );
            return None;
        }
        let rev = src.rev.as_ref().map(|r| r.node.clone());
        let path = crate::source::join_in_repo("", &import.path.node);
        let original = lock::Original {
            git: Some(url.clone()),
            path: path.clone(),
            rev: rev.clone(),
        };
        let locked = match (self.options.lock, &self.lock) {
            (lock::Mode::Verify, Some(l)) => l
                .imports
                .get(&original.key())
                .and_then(|e| e.locked.commit.as_deref())
                .and_then(|c| git2::Oid::from_str(c).ok()),
            _ => None,
        };
        let resolved = match locked {
            Some(commit) => self.git.ensure(url, commit).map(|()| commit),
            None => self.git.resolve(url, rev.as_deref()),
        };
        match resolved {
            Ok(commit) => Some(Origin::Git(GitFile {
                url: url.clone(),
                rev,
                commit,
                path,
            })),
            Err(e) => {
                let span = match &e {
                    git::GitError::UnknownRev { .. } | git::GitError::MissingCommit { .. } => {
                        src.rev.as_ref().map_or(import.span, |r| r.span)
                    }
                    _ => src.url.span,
                };
                self.diags.push(git_diagnostic(&e, span));
                None
            }
        }
    }

    /// Records the import of module `j` as the lock would, and holds it against the lock.
    /// `relative` imports name no repository of their own: inside a git library they share its
    /// commit, so only their content can drift (the library's own import reports the commit).
    fn pin(&mut self, j: usize, at: Span, relative: bool) {
        let file = self.file_of(j);
        let blake3 = blake3::hash(file.text.as_bytes()).to_hex().to_string();
        let lock_dir = self
            .lock_path
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let (original, locked) = match file.origin.clone() {
            Origin::Std(p) => (
                lock::Original {
                    git: None,
                    path: p,
                    rev: None,
                },
                lock::Locked {
                    blake3,
                    commit: None,
                    mvk: Some(crate::stdlib::VERSION.to_string()),
                },
            ),
            Origin::Disk(p) => (
                lock::Original {
                    git: None,
                    path: lock::relative(&p, &lock_dir),
                    rev: None,
                },
                lock::Locked {
                    blake3,
                    commit: None,
                    mvk: None,
                },
            ),
            Origin::Git(g) => (
                lock::Original {
                    git: Some(g.url),
                    path: g.path,
                    rev: g.rev,
                },
                lock::Locked {
                    blake3,
                    commit: Some(g.commit.to_string()),
                    mvk: None,
                },
            ),
        };
        let key = original.key();
        if let Some(lock) = &self.lock
            && matches!(self.options.lock, lock::Mode::Verify | lock::Mode::Refresh)
        {
            let lock_name = display_path(&self.lock_path);
            match lock.imports.get(&key) {
                Some(entry)
                    if !(entry.locked.matches(&locked)
                        || relative && entry.locked.blake3 == locked.blake3) =>
                {
                    self.diags.push(
                    Diagnostic::error(
                        "mvk::lock-drift",
                        format!(
                            "import {} has changed since it was locked: `{lock_name}` has {}, found {}",
                            original.describe(),
                            entry.locked.describe(),
                            locked.describe()
                        ),
                    )
                    .at(at, "not what the lock holds")
                    .help("run `mvk lock --update` to accept the new version"),
                    );
                }
                Some(_) => {}
                None if self.options.lock == lock::Mode::Verify => {
                    let other_rev = lock.imports.values().find(|e| {
                        original.git.is_some()
                            && e.original.git == original.git
                            && e.original.path == original.path
                    });
                    let d = match other_rev {
                        Some(e) => Diagnostic::error(
                            "mvk::lock-drift",
                            format!(
                                "import {} has changed since it was locked: `{lock_name}` has rev `{}` ({})",
                                original.describe(),
                                e.original.rev.as_deref().unwrap_or("HEAD"),
                                e.locked.describe()
                            ),
                        )
                        .at(at, "another rev than the lock holds")
                        .help("run `mvk lock --update` to accept the new version"),
                        None => Diagnostic::error(
                            "mvk::not-locked",
                            format!("import {} is not in `{lock_name}`", original.describe()),
                        )
                        .at(at, "not locked")
                        .help("run `mvk lock` to add it"),
                    };
                    self.diags.push(d);
                }
                None => {}
            }
        }
        self.pins.insert(key, lock::Entry { original, locked });
    }

    /// Resolves every definition of every loaded file, so a library's mistakes surface even
    /// when no loop uses the broken definition.
    pub(crate) fn check_all_definitions(&mut self) {
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
                    Item::Notify(_) => {
                        self.notify_def(def);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The repository's files, listed once per compilation.
    pub(crate) fn repo_files(&mut self) -> Result<Rc<Vec<String>>, String> {
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

/// A git import's failure as a diagnostic at `span`, with what to do about it.
fn git_diagnostic(e: &git::GitError, span: Span) -> Diagnostic {
    use git::GitError as E;
    let (code, label, help) = match e {
        E::Fetch { .. } => (
            "mvk::git-fetch",
            "cannot fetch this repository",
            "check the URL; this mvk reads repositories on this machine (a path or `file://…`): https and ssh URLs need a git2 built with its network features".to_string(),
        ),
        E::UnknownRev { rev, known, .. } => (
            "mvk::unknown-rev",
            "no such branch, tag or commit",
            suggest_among(
                "its branches and tags are",
                rev,
                known,
                "the repository has no branches or tags yet",
            ),
        ),
        E::MissingCommit { .. } => (
            "mvk::unknown-rev",
            "the locked commit is gone",
            "the repository no longer has the commit `mvk.lock` names; run `mvk lock --update` to lock what the rev names now".to_string(),
        ),
        E::MissingPath { path, files, .. } => (
            "mvk::missing-import",
            "not in the repository",
            format!(
                "the path is relative to the repository's root; {}",
                suggest_among(
                    "its `.kdl` files are",
                    path,
                    files,
                    "that commit has no `.kdl` files"
                )
            ),
        ),
        E::NotText { .. } => (
            "mvk::missing-import",
            "not a text file",
            "import a KDL file".to_string(),
        ),
        E::Cache { .. } => (
            "mvk::git-cache",
            "cannot be fetched into the cache",
            format!(
                "set `{}` to a directory mvk may write",
                crate::env::MVK_CACHE_DIR
            ),
        ),
    };
    Diagnostic::error(code, e.to_string())
        .at(span, label)
        .help(help)
}

/// [`suggest`] over owned names, or `none` when there are none.
fn suggest_among(what: &str, name: &str, items: &[String], none: &str) -> String {
    if items.is_empty() {
        return none.to_string();
    }
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    suggest(what, name, &items)
}

/// A loop file or import that cannot be read, as the error naming it.
fn unreadable(e: &std::io::Error, name: &str, load_as: LoadAs, via: Option<Span>) -> Diagnostic {
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
        format!("cannot read {what} `{name}`: {}", io_reason(e)),
    );
    if let Some(via) = via {
        d = d.at(via, "named here");
    }
    let help = if load_as == LoadAs::Entry {
        "check the path; it is relative to the current directory".to_string()
    } else {
        "paths are relative to the file that names them; `std/…` names the standard library"
            .to_string()
    };
    d.help(help)
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
pub(crate) fn normalize(path: &Path) -> PathBuf {
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

/// How much of a loop file or template is read: past this it is too large. A few bytes over
/// what the parser takes, so a longer file is told too large ("at least …") from what was read,
/// and `/dev/zero` fills no more memory than the largest file allowed.
pub(crate) const READ_LIMIT: usize = crate::syntax::MAX_BYTES + 4;

/// `O_NONBLOCK`, for `OpenOptionsExt::custom_flags`.
fn libc_nonblock() -> i32 {
    i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0)
}

/// A file's text, read no further than what tells a file too large from one that is not
/// (`/dev/zero` named as a loop file must not fill memory, review r8e): the parser refuses more
/// than [`crate::syntax::MAX_BYTES`] and says how much it read.
pub(crate) fn read_bounded(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let limit = u64::try_from(READ_LIMIT).unwrap_or(u64::MAX);
    // Not blocking in the open: a FIFO with no writer would hold `mvk check` for good.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_nonblock())
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a FIFO or socket, not a file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        // Cut inside a character by the limit: what came before it.
        Err(e) if e.utf8_error().error_len().is_none() && e.as_bytes().len() as u64 == limit => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }
        Err(e) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
    }
}
