#!/usr/bin/env python3
"""Structural figures of a Rust crate's src/ tree, for before/after comparisons of a refactoring.

Usage: python3 benches/structure.py [--json] [ROOT]

ROOT defaults to the repository holding this script; the script reads ROOT/src only, so it works
on any checkout (e.g. `git worktree add /tmp/before <commit>`). Standard library only: it lexes
Rust itself instead of parsing it, so the figures are heuristics (see Limits below).

Figures:
  1. files over FILE_LOC_LIMIT lines of code, total LOC of src/ and of the `run` module tree;
  2. functions over FN_LINE_LIMIT lines (from the `fn` line to its closing brace);
  3. import cycles: strongly connected components of the file-module reference graph;
  4. `pub` items, `pub` struct fields, and restricted-visibility (`pub(...)`) items and fields.
Unit-test code is left out of every figure: an inline `#[cfg(test)] mod test… { … }` block, and
a whole file declared `#[cfg(test)] mod test…;`.

Limits, all in the direction of a lexer not knowing names or cfgs:
  - other `#[cfg(test)]` code (a `#[cfg(test)] mod race`, gated fns or uses) is counted;
  - macro bodies are scanned as code: a `pub` or `crate::` inside `macro_rules!` counts;
  - references through a name brought in by `use` (`use crate::run; run::gate::Gate`) count
    once, at the `use`; references in strings (`#[serde(with = "crate::x")]`) or doc links
    do not count; a bare `child::` path counts only for a child declared with `mod child`;
  - a module's root file is keyed by its path (`#[path]` attributes are not followed), and
    binary roots (main.rs, src/bin/) stay out of the module graph.
"""

import argparse
import json
import re
import signal
import sys
from pathlib import Path

FILE_LOC_LIMIT = 600
FN_LINE_LIMIT = 80
TOP = 15

# Keywords that may follow `pub` and make it an item rather than a field.
ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "mod", "use",
                 "union", "extern", "macro"}
# Qualifiers that can sit between `pub` and `fn` (`pub const unsafe extern "C" fn`).
FN_QUALIFIERS = {"const", "async", "unsafe", "extern", "safe"}


# ---------------------------------------------------------------------------------------------
# Lexer

class Tok:
    __slots__ = ("kind", "text", "line", "end")

    def __init__(self, kind, text, line, end):
        self.kind = kind      # ident | punct | str | char | lifetime | num | eof
        self.text = text      # for str/char only a placeholder: their content never matters
        self.line = line      # first line (1-based)
        self.end = end        # last line, for literals spanning lines

    def __repr__(self):
        return f"Tok({self.kind},{self.text!r},{self.line})"


RAW_STR = re.compile(r'(?:br|cr|r)(#*)"')
IDENT = re.compile(r"(?:r#)?[^\W\d]\w*")
NUMBER = re.compile(r"\d[\w]*(?:\.\d[\w]*)?")
# `::` and `->` are the only multi-character punctuation the analyses need whole: `::` joins
# paths, and `->` must not be read as a closing `>` of generics.
PUNCT2 = ("::", "->", "=>")


def lex(src):
    """Tokens of Rust source, comments dropped. Strings, chars and lifetimes are told apart so
    that braces and `//` inside literals never count."""
    toks = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            # Rust block comments nest.
            depth, j = 0, i
            while j < n:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                    if depth == 0:
                        break
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
            continue
        m = RAW_STR.match(src, i)
        if m:
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            j = n if j < 0 else j + len(close)
            end = line + src.count("\n", i, j)
            toks.append(Tok("str", '""', line, end))
            line, i = end, j
            continue
        if c == '"' or (c in "bc" and src.startswith('"', i + 1)):
            j = i + (1 if c == '"' else 2)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            end = line + src.count("\n", i, j)
            toks.append(Tok("str", '""', line, end))
            line, i = end, j
            continue
        if c == "'" or (c == "b" and src.startswith("'", i + 1)):
            q = i if c == "'" else i + 1
            # A char literal is an escape or exactly one character between quotes; anything
            # else after a quote ('a, 'static, 'outer:) is a lifetime or a label.
            if src.startswith("\\", q + 1):
                j = q + 1
                while j < n and src[j] != "'":
                    j += 2 if src[j] == "\\" else 1
                toks.append(Tok("char", "' '", line, line))
                i = j + 1
                continue
            if q + 2 < n and src[q + 2] == "'" and src[q + 1] != "\n":
                toks.append(Tok("char", "' '", line, line))
                i = q + 3
                continue
            if c == "'":
                m = IDENT.match(src, i + 1)
                j = m.end() if m else i + 1
                toks.append(Tok("lifetime", src[i:j], line, line))
                i = j
                continue
        m = IDENT.match(src, i)
        if m:
            text = m.group(0)
            toks.append(Tok("ident", text[2:] if text.startswith("r#") else text, line, line))
            i = m.end()
            continue
        m = NUMBER.match(src, i)
        if m:
            toks.append(Tok("num", m.group(0), line, line))
            i = m.end()
            continue
        two = src[i:i + 2]
        if two in PUNCT2:
            toks.append(Tok("punct", two, line, line))
            i += 2
            continue
        toks.append(Tok("punct", c, line, line))
        i += 1
    toks.append(Tok("eof", "", line, line))
    return toks


def match_braces(toks):
    """Index of the matching closer for each `{`, `(`, `[` (and the reverse). Unbalanced input
    (a lexer miss) degrades to unmatched entries rather than an exception."""
    pairs = {"}": "{", ")": "(", "]": "["}
    match, stack = {}, []
    for k, t in enumerate(toks):
        if t.kind != "punct":
            continue
        if t.text in "{([":
            stack.append(k)
        elif t.text in pairs:
            # Pop to the nearest opener of the same kind so one stray token does not shift
            # every later match.
            for s in range(len(stack) - 1, -1, -1):
                if toks[stack[s]].text == pairs[t.text]:
                    o = stack[s]
                    del stack[s:]
                    match[o], match[k] = k, o
                    break
    return match


def skip_attr(toks, k, match):
    """Past the attribute `#[..]` / `#![..]` starting at k (k itself if there is none)."""
    if toks[k].text == "#":
        b = k + 2 if toks[k + 1].text == "!" else k + 1
        if toks[b].text == "[" and b in match:
            return match[b] + 1
    return k


def skip_vis(toks, k, match):
    """Past a visibility (`pub`, `pub(crate)`, `pub(in a::b)`) starting at k."""
    if toks[k].text == "pub":
        k += 1
        if toks[k].text == "(" and k in match:
            k = match[k] + 1
    return k


def is_cfg_test(toks, k):
    return [t.text for t in toks[k:k + 7]] == ["#", "[", "cfg", "(", "test", ")", "]"]


# ---------------------------------------------------------------------------------------------
# One file

class SourceFile:
    def __init__(self, path, rel, text):
        self.path = path
        self.rel = rel                      # "src/run/driver.rs"
        self.raw_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        all_toks = lex(text)
        all_match = match_braces(all_toks)
        # Test modules: inline ones are cut out of the token stream; out-of-line ones name a
        # file the caller leaves out.
        self.test_child_mods = set()
        drop = []
        k = 0
        while k < len(all_toks):
            if is_cfg_test(all_toks, k):
                j = k
                while all_toks[j].text == "#":
                    nj = skip_attr(all_toks, j, all_match)
                    if nj == j:
                        break
                    j = nj
                j = skip_vis(all_toks, j, all_match)
                if (all_toks[j].text == "mod" and all_toks[j + 1].kind == "ident"
                        and all_toks[j + 1].text.startswith("test")):
                    if all_toks[j + 2].text == ";":
                        self.test_child_mods.add(all_toks[j + 1].text)
                    elif all_toks[j + 2].text == "{" and (j + 2) in all_match:
                        close = all_match[j + 2]
                        drop.append((k, close))
                        k = close + 1
                        continue
            k += 1
        keep = []
        last = 0
        for a, b in drop:
            keep.extend(all_toks[last:a])
            last = b + 1
        keep.extend(all_toks[last:])
        self.toks = keep
        self.match = match_braces(keep)
        self.excluded_test_blocks = [(all_toks[a].line, all_toks[b].line) for a, b in drop]

        lines = text.split("\n")
        code = set()
        for t in self.toks:
            if t.kind != "eof":
                code.update(range(t.line, t.end + 1))
        # A line inside a multi-line string can be blank: still blank, so not counted.
        self.loc = sum(1 for ln in code if ln <= len(lines) and lines[ln - 1].strip())

    # -- functions ---------------------------------------------------------------------------

    def functions(self):
        """(line, label, length) of every `fn` with a body; nested ones too."""
        toks, match = self.toks, self.match
        owners = self._impl_owners()
        fns = []   # (open, close, label)
        out = []
        for k, t in enumerate(toks):
            if not (t.kind == "ident" and t.text == "fn" and toks[k + 1].kind == "ident"):
                continue  # `fn(u8) -> u8` pointer types, `fn $name` in macro_rules
            body = self._body_after(k)
            if body is None:
                continue  # a declaration ending in `;`
            close = match.get(body)
            if close is None:
                continue
            name = toks[k + 1].text
            # Innermost enclosing fn or impl/trait block names the function.
            enclosing = [(o, c, lbl) for o, c, lbl in fns + owners if o < k < c]
            if enclosing:
                name = max(enclosing, key=lambda e: e[0])[2] + "::" + name
            fns.append((body, close, name))
            out.append((t.line, name, toks[close].line - t.line + 1))
        return out

    def _body_after(self, k):
        """Index of the `{` opening the body of the fn at k, None if it ends in `;`."""
        toks, depth = self.toks, 0
        for j in range(k + 1, len(toks)):
            x = toks[j].text
            if toks[j].kind != "punct":
                continue
            if x in "([":
                depth += 1
            elif x in ")]":
                depth -= 1
            elif depth == 0 and x == "{":
                return j
            elif depth == 0 and x in (";", "}"):
                return None
        return None

    def _impl_owners(self):
        """(open, close, type name) of each `impl …` and `trait …` block."""
        toks, match = self.toks, self.match
        out = []
        for k, t in enumerate(toks):
            if t.kind != "ident" or t.text not in ("impl", "trait"):
                continue
            prev = toks[k - 1].text if k else ";"
            # Item-level only: `-> impl Iterator`, `x: impl Fn()` are types. A `)` before
            # `trait` ends `pub(crate)`; nothing item-level puts one before `impl`.
            item_start = (";", "{", "}", "]", "unsafe", "pub", "default", "auto")
            if prev not in item_start and not (prev == ")" and t.text == "trait"):
                continue
            j, angle, header = k + 1, 0, []
            while j < len(toks):
                x = toks[j]
                if x.text == "<":
                    angle += 1
                elif x.text == ">":
                    angle -= 1
                elif angle == 0 and x.text in ("{", ";", "where"):
                    break
                header.append((x, angle))
                j += 1
            while j < len(toks) and toks[j].text not in ("{", ";"):
                j += 1  # through a where clause
            if toks[j].text != "{" or j not in match:
                continue
            if t.text == "trait":
                name = header[0][0].text if header else "?"
            else:
                # `impl<T> Trait for Type<T>` is named by Type; `impl Type` by Type.
                fors = [i for i, (x, a) in enumerate(header) if x.text == "for" and a == 0
                        and not (i + 1 < len(header) and header[i + 1][0].text == "<")]
                ty = header[fors[-1] + 1:] if fors else header
                name = "?"
                for x, a in ty:
                    if a == 0 and x.kind == "ident" and x.text not in ("dyn", "mut", "const"):
                        name = x.text
                    elif a == 0 and x.text == "<" and name != "?":
                        break
            out.append((j, match[j], name))
        return out

    # -- visibility ----------------------------------------------------------------------------

    def visibility(self):
        """Counts of `pub` items by kind, `pub` fields, and `pub(..)` items and fields."""
        toks, match = self.toks, self.match
        pub_items, pub_fields, restricted_items, restricted_fields = {}, 0, 0, 0
        for k, t in enumerate(toks):
            if not (t.kind == "ident" and t.text == "pub"):
                continue
            if toks[k - 1].text == "$":
                continue
            j = k + 1
            restricted = toks[j].text == "("
            if restricted:
                # `pub (a, b)`-style tuple types never follow `pub`, so `(` is a restriction.
                if j not in match:
                    continue
                j = match[j] + 1
            kind = self._item_kind(j)
            if restricted:
                if kind is None:
                    restricted_fields += 1
                else:
                    restricted_items += 1
            elif kind is None:
                pub_fields += 1
            else:
                pub_items[kind] = pub_items.get(kind, 0) + 1
        return pub_items, pub_fields, restricted_items, restricted_fields

    def _item_kind(self, j):
        """What follows a visibility at j: an item keyword, or None for a struct field."""
        toks = self.toks
        first = toks[j].text
        # Walk over fn qualifiers (and an extern ABI string) to see whether a `fn` follows.
        q = j
        while toks[q].text in FN_QUALIFIERS or (toks[q].kind == "str" and q > j):
            q += 1
        if toks[q].text == "fn":
            return None if toks[q + 1].text == "(" else "fn"  # `pub fn(u8)` is a field type
        if toks[q].text in ("trait", "impl") and q > j:
            return toks[q].text  # `pub unsafe trait`
        if first == "extern" and toks[j + 1].text == "crate":
            return "use"
        if first == "union" and toks[j + 1].kind != "ident":
            return None
        if first in ITEM_KEYWORDS:
            return first
        return None

    # -- module references ---------------------------------------------------------------------

    def references(self, mod_path):
        """Absolute module paths (lists of segments) this file's code refers to: `use` trees and
        inline paths starting with crate::, super::, self:: or a child module declared here."""
        toks, match = self.toks, self.match
        n = len(toks)
        # Inline `mod x { … }` blocks shift what `super::` and `self::` mean inside them.
        scopes = []   # (open, close, name)
        children = set()   # (scope tuple, name) of every `mod name` declaration
        stack = []
        scope_at = [None] * n
        for k, t in enumerate(toks):
            while stack and k > stack[-1][1]:
                stack.pop()
            scope_at[k] = tuple(s[2] for s in stack)
            if t.text == "mod" and toks[k + 1].kind == "ident" and toks[k - 1].text != "$":
                name = toks[k + 1].text
                children.add((scope_at[k], name))
                if toks[k + 2].text == "{" and (k + 2) in match:
                    stack.append((k + 2, match[k + 2], name))
                    scopes.append(stack[-1])

        refs = []

        def absolute(segs, k):
            """segs as an absolute path from the crate root, or None if extern/unknown."""
            here = list(mod_path) + list(scope_at[k])
            head = segs[0]
            if head == "crate":
                out = segs[1:]
            elif head == "self":
                out = here + segs[1:]
            elif head == "super":
                up = 0
                while up < len(segs) and segs[up] == "super":
                    up += 1
                out = here[:max(0, len(here) - up)] + segs[up:]
            elif (scope_at[k], head) in children:
                out = here + segs
            else:
                return None
            # `use a::b::{self, c}` yields [a, b, self]: `self` in a group is its prefix.
            return [s for s in out if s != "self"]

        k = 0
        while k < n:
            t = toks[k]
            prev = toks[k - 1].text if k else ""
            if t.text == "use" and t.kind == "ident" and prev != "$":
                paths, end = parse_use_tree(toks, k + 1)
                for p in paths:
                    if p and p[0] != "::":
                        a = absolute(p, k)
                        if a is not None:
                            refs.append(a)
                k = max(end, k + 1)
                continue
            if t.text == "pub" and toks[k + 1].text == "(" and toks[k + 2].text == "in":
                k = match.get(k + 1, k) + 1   # `pub(in crate::x)` is no dependency
                continue
            if (t.kind == "ident" and toks[k + 1].text == "::" and prev not in ("::", "$")
                    and (t.text in ("crate", "super", "self")
                         or (scope_at[k], t.text) in children)):
                segs, j = [t.text], k + 1
                while toks[j].text == "::" and toks[j + 1].kind == "ident":
                    segs.append(toks[j + 1].text)
                    j += 2
                a = absolute(segs, k)
                if a is not None:
                    refs.append(a)
                k = j
                continue
            k += 1
        return refs


def parse_use_tree(toks, i):
    """Expands the use tree starting at i into full paths; returns (paths, index after)."""
    prefix = []
    while True:
        t = toks[i]
        if t.kind == "eof":
            return [prefix], i
        if t.text == "{":
            paths = []
            i += 1
            while toks[i].text != "}" and toks[i].kind != "eof":
                sub, ni = parse_use_tree(toks, i)
                paths += [prefix + s for s in sub]
                i = ni + 1 if toks[ni].text == "," else ni
                if ni == i and toks[i].text not in ("}",):
                    i += 1   # malformed: make progress
            return paths, i + 1
        if t.text == "*":
            return [prefix], i + 1   # a glob depends on the module it globs
        if t.text == "::":
            if not prefix:
                prefix.append("::")   # `::name` is an extern crate
            i += 1
            continue
        if t.kind == "ident":
            prefix.append(t.text)
            i += 1
            if toks[i].text == "::":
                i += 1
                continue
            if toks[i].text == "as":
                i += 2
            return [prefix], i
        return [prefix], i


# ---------------------------------------------------------------------------------------------
# The tree

def module_path(rel_to_src):
    """`run/driver/remote.rs` -> ('run','driver','remote'); `foo/mod.rs` -> ('foo',);
    `lib.rs` -> (). Binary roots return None: their `crate::` is another crate."""
    parts = list(Path(rel_to_src).with_suffix("").parts)
    if parts == ["main"] or parts[0] == "bin":
        return None
    if parts == ["lib"]:
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def mod_name(path):
    return "::".join(path) if path else "crate"


def tarjan(nodes, edges):
    """Strongly connected components, iteratively (deep graphs would overflow recursion)."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))
    return sccs


def analyse(root):
    src = root / "src"
    if not src.is_dir():
        sys.exit(f"structure.py: no src/ directory under {root}")
    files = {}
    for p in sorted(src.rglob("*.rs")):
        rel = p.relative_to(root).as_posix()
        files[rel] = SourceFile(p, rel, p.read_text(encoding="utf-8", errors="replace"))

    # A file declared `#[cfg(test)] mod test…;` is test code, and so is everything under it.
    modules = {}   # module path -> rel
    for rel in files:
        mp = module_path(Path(rel).relative_to("src"))
        if mp is not None:
            modules[mp] = rel
    test_mods = set()
    for mp, rel in modules.items():
        for child in files[rel].test_child_mods:
            test_mods.add(mp + (child,))
    excluded = sorted(rel for mp, rel in modules.items()
                      if any(mp[:len(t)] == t for t in test_mods))
    for rel in excluded:
        del files[rel]
    modules = {mp: rel for mp, rel in modules.items() if rel in files}

    # 1. lines of code
    loc = {rel: f.loc for rel, f in files.items()}
    big_files = sorted(((rel, n) for rel, n in loc.items() if n > FILE_LOC_LIMIT),
                       key=lambda e: (-e[1], e[0]))
    run_rels = {rel for mp, rel in modules.items() if mp[:1] == ("run",)}

    # 2. functions
    long_fns = []
    for rel, f in files.items():
        for line, name, length in f.functions():
            if length > FN_LINE_LIMIT:
                long_fns.append({"path": rel, "line": line, "fn": name, "lines": length})
    long_fns.sort(key=lambda e: (-e["lines"], e["path"], e["line"]))

    # 3. module graph
    edges = {}
    for mp, rel in modules.items():
        targets = set()
        for ref in files[rel].references(mp):
            ref = tuple(ref)
            # Longest prefix that is a file; the crate root () always exists for a library.
            for cut in range(len(ref), -1, -1):
                if ref[:cut] in modules:
                    if ref[:cut] != mp:
                        targets.add(ref[:cut])
                    break
        edges[mp] = targets
    sccs = [c for c in tarjan(sorted(modules), edges) if len(c) > 1]
    sccs.sort(key=lambda c: (-len(c), c))
    # The same graph without the edges between a module and its own ancestors or descendants:
    # a folder's files using their mod.rs and back is one room with its door, not a tangle; a
    # cycle left here runs between rooms.
    def related(a, b):
        n = min(len(a), len(b))
        return a[:n] == b[:n]
    across = {m: {t for t in ts if not related(m, t)} for m, ts in edges.items()}
    room_sccs = [c for c in tarjan(sorted(modules), across) if len(c) > 1]
    room_sccs.sort(key=lambda c: (-len(c), c))

    # 4. visibility
    pub_items, pub_fields, r_items, r_fields = {}, 0, 0, 0
    for f in files.values():
        items, fields, ri, rf = f.visibility()
        for kind, c in items.items():
            pub_items[kind] = pub_items.get(kind, 0) + c
        pub_fields += fields
        r_items += ri
        r_fields += rf

    return {
        "root": str(root),
        "figures": {
            "files": len(files),
            f"files_over_{FILE_LOC_LIMIT}_loc": len(big_files),
            "loc_src": sum(loc.values()),
            "loc_src_run": sum(loc[r] for r in run_rels),
            f"functions_over_{FN_LINE_LIMIT}_lines": len(long_fns),
            "modules": len(modules),
            "module_edges": sum(len(t) for t in edges.values()),
            "import_cycles": len(sccs),
            "largest_cycle": max((len(c) for c in sccs), default=0),
            "files_in_cycles": sum(len(c) for c in sccs),
            "cycles_across_rooms": len(room_sccs),
            "largest_cycle_across_rooms": max((len(c) for c in room_sccs), default=0),
            "pub_items": sum(pub_items.values()),
            "pub_fields": pub_fields,
            "restricted_pub_items_and_fields": r_items + r_fields,
        },
        "pub_items_by_kind": dict(sorted(pub_items.items())),
        "restricted_pub": {"items": r_items, "fields": r_fields},
        "files_over_loc_limit": [{"path": r, "loc": n} for r, n in big_files],
        "functions_over_line_limit": long_fns,
        "import_cycles": [[mod_name(m) for m in c] for c in sccs],
        "cycles_across_rooms": [[mod_name(m) for m in c] for c in room_sccs],
        "loc_by_file": dict(sorted(loc.items(), key=lambda e: (-e[1], e[0]))),
        "raw_lines_by_file": {rel: f.raw_lines for rel, f in sorted(files.items())},
        "excluded_test_files": excluded,
        "module_graph": {mod_name(m): sorted(mod_name(t) for t in ts)
                         for m, ts in sorted(edges.items())},
    }


def print_text(r):
    fig = r["figures"]
    labels = [
        ("files", "source files (test files left out)"),
        (f"files_over_{FILE_LOC_LIMIT}_loc", f"files over {FILE_LOC_LIMIT} LOC"),
        ("loc_src", "LOC in src/"),
        ("loc_src_run", "LOC in src/run/ (module run)"),
        (f"functions_over_{FN_LINE_LIMIT}_lines", f"functions over {FN_LINE_LIMIT} lines"),
        ("modules", "modules (library files)"),
        ("module_edges", "module reference edges"),
        ("import_cycles", "import cycles (SCCs > 1 file)"),
        ("largest_cycle", "largest cycle (files)"),
        ("files_in_cycles", "files in cycles"),
        ("cycles_across_rooms", "cycles across rooms (parent/child left out)"),
        ("largest_cycle_across_rooms", "largest cycle across rooms (files)"),
        ("pub_items", "pub items"),
        ("pub_fields", "pub fields"),
        ("restricted_pub_items_and_fields", "pub(crate|super|in ..) items+fields"),
    ]
    print(f"structure of {r['root']}/src")
    for key, label in labels:
        print(f"  {label + ':':<40} {fig[key]}")
    kinds = ", ".join(f"{k} {v}" for k, v in r["pub_items_by_kind"].items())
    print(f"  {'pub items by kind:':<40} {kinds}")
    rp = r["restricted_pub"]
    print(f"  {'restricted pub:':<40} items {rp['items']}, fields {rp['fields']}")
    if r["excluded_test_files"]:
        print(f"  {'test files left out:':<40} {', '.join(r['excluded_test_files'])}")

    def section(title, rows):
        print(f"\n{title} ({min(TOP, len(rows))} of {len(rows)}):")
        for row in rows[:TOP]:
            print("  " + row)

    section(f"Files over {FILE_LOC_LIMIT} LOC",
            [f"{e['loc']:>6}  {e['path']}" for e in r["files_over_loc_limit"]])
    section(f"Functions over {FN_LINE_LIMIT} lines",
            [f"{e['lines']:>6}  {e['path']}:{e['line']} fn {e['fn']}"
             for e in r["functions_over_line_limit"]])
    section("Import cycles",
            [f"{len(c):>6}  {', '.join(c)}" for c in r["import_cycles"]])
    section("Cycles across rooms",
            [f"{len(c):>6}  {', '.join(c)}" for c in r["cycles_across_rooms"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print a JSON object")
    ap.add_argument("root", nargs="?", type=Path,
                    default=Path(__file__).resolve().parent.parent,
                    help="repository root (default: the one holding this script)")
    args = ap.parse_args()
    # Piped into `head`, end quietly like other command-line tools.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    result = analyse(args.root.resolve())
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_text(result)


if __name__ == "__main__":
    main()
