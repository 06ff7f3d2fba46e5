#!/usr/bin/env python3
"""Import circles between the top-level modules of each crate.

For every crate under crates/*/src, the top-level modules are the files src/X.rs and the
directories src/X/ (lib.rs and main.rs are the crate roots, not modules; a module the root
declares under #[cfg(test)], such as `tests` or `test_support`, is left out). Module A imports
module B when code in A (A.rs, A/**) names a path `crate::B...` or reaches B with `super::`,
in a `use` (groups included: `use crate::{b, c::D}`) or anywhere else in code. Doc links are
not imports (they tie nothing at compile time) and are not counted.
Code inside a module declared under #[cfg(test)] (a `mod tests`, inline or in its own file)
is not counted: tests may import anything.

Prints each crate's cycles, or "no cycles", with where each edge of a cycle comes from, and
exits 1 when any crate has one. Python 3 standard library only.

    .ci/module-cycles.py [CRATE ...]     # default: every crate under crates/
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT_FILES = ("lib.rs", "main.rs")
IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
# A path that starts at the crate root or goes up: `crate::`, `$crate::`, `super::`, `self::`.
PATH_START = re.compile(r"(?<![\w$:])(\$crate|crate|super|self)\s*::")
MOD_ITEM = re.compile(
    r"(?P<attrs>(?:#\s*\[[^\]]*\]\s*)*)"
    r"(?:pub\s*(?:\([^)]*\))?\s*)?"
    r"\bmod\s+(?P<name>(?:r#)?[A-Za-z_][A-Za-z0-9_]*)\s*(?P<end>[{;])"
)
CFG = re.compile(r"#\s*\[\s*cfg\s*\((?P<pred>.*)\)\s*\]", re.S)
MAX_CYCLES_SHOWN = 25


# ---------------------------------------------------------------------------------------------
# Lexing: comments and literals blanked out, so braces and `crate::` in them do not count.


def strip(src: str) -> tuple[str, list[tuple[int, str]]]:
    """The source with comments and string/char literals replaced by spaces (same length, newlines
    kept), and the doc comments' texts with their offsets (doc links are paths too)."""
    out = list(src)
    docs: list[tuple[int, str]] = []
    n = len(src)
    i = 0

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            if (src.startswith("///", i) and not src.startswith("////", i)) or src.startswith(
                "//!", i
            ):
                docs.append((i, src[i + 3 : j]))
            blank(i, j)
            i = j
        elif src.startswith("/*", i):
            doc = src.startswith("/**", i) and not src.startswith("/**/", i) or src.startswith(
                "/*!", i
            )
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if doc:
                docs.append((i, src[i + 3 : j - 2]))
            blank(i, j)
            i = j
        elif c in "rb" and re.match(r"(?:br|r)#*\"", src[i:i + 300]) and not _ident_before(src, i):
            m = re.match(r"(?:br|r)(#*)\"", src[i:])
            assert m
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            blank(i + m.end(), j - len(close))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and not _ident_before(src, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + (2 if c == "b" else 1), j)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime / label ('a, 'static).
            if src.startswith("\\", i + 1):
                j = src.find("'", i + 3)
                j = n if j < 0 else j
                blank(i + 1, j)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                blank(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out), docs


def _ident_before(src: str, i: int) -> bool:
    return i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")


def matching_brace(code: str, i: int) -> int:
    """The offset just after the `}` that closes the `{` at `i`."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def test_only(attrs: str) -> bool:
    """Whether the attributes compile the item only in tests: `cfg(test)`, `cfg(all(test, ..))`."""
    for m in CFG.finditer(attrs):
        pred = re.sub(r"\s+", "", m.group("pred"))
        if pred == "test":
            return True
        inner = re.fullmatch(r"all\((.*)\)", pred)
        if inner and "test" in split_top(inner.group(1)):
            return True
    return False


def split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p]


# ---------------------------------------------------------------------------------------------
# Paths and use trees.


def skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def parse_tree(s: str, i: int, depth: int = 0) -> tuple[list[list[str]], int]:
    """The paths a (use) tree at `i` names: `a::b`, `a::{b, c::d}`, `a::*`."""
    i = skip_ws(s, i)
    if depth > 32 or i >= len(s):
        return [[]], i
    if s[i] == "{":
        i += 1
        paths: list[list[str]] = []
        while True:
            i = skip_ws(s, i)
            if i >= len(s):
                return paths, i
            if s[i] == "}":
                return paths or [[]], i + 1
            sub, j = parse_tree(s, i, depth + 1)
            paths += sub
            j = skip_ws(s, j)
            if j < len(s) and s[j] == ",":
                j += 1
            elif j < len(s) and s[j] != "}":
                # Something we do not parse: stop at the group's end.
                return paths, j
            i = j
    if s[i] == "*":
        return [["*"]], i + 1
    m = IDENT.match(s, i) if not s.startswith("$crate", i) else re.compile(r"\$crate").match(s, i)
    if not m:
        return [[]], i
    seg, i = m.group(0).removeprefix("r#"), m.end()
    j = skip_ws(s, i)
    if s.startswith("::", j):
        k = skip_ws(s, j + 2)
        if k < len(s) and s[k] == "<":  # `a::<T>` turbofish: the path ends here.
            return [[seg]], k
        sub, i = parse_tree(s, k, depth + 1)
        return [[seg] + p for p in sub], i
    return [[seg]], i


def resolve(here: list[str], path: list[str]) -> list[str] | None:
    """The crate-absolute module path `path` names from module `here`, or None."""
    if not path:
        return None
    if path[0] in ("crate", "$crate"):
        return path[1:]
    cur = list(here)
    k = 0
    while k < len(path) and path[k] in ("super", "self"):
        if path[k] == "super":
            if not cur:
                return None
            cur.pop()
        k += 1
    return cur + path[k:]


# ---------------------------------------------------------------------------------------------
# A crate.


@dataclass
class Edge:
    source: str
    target: str
    where: list[str] = field(default_factory=list)


@dataclass
class SourceFile:
    path: Path
    module: list[str]  # the module path of the file: src/a/b.rs -> [a, b]
    code: str
    docs: list[tuple[int, str]]
    # Inline modules: (start, end, name, test_only).
    inline: list[tuple[int, int, str, bool]]
    # File modules declared here: (name, test_only, inline-module path at the declaration).
    declared: list[tuple[str, bool, list[str]]]


def read(path: Path, module: list[str]) -> SourceFile:
    code, docs = strip(path.read_text(encoding="utf-8"))
    f = SourceFile(path, module, code, docs, [], [])
    declarations = []
    for m in MOD_ITEM.finditer(code):
        name = m.group("name").removeprefix("r#")
        test = test_only(m.group("attrs"))
        if m.group("end") == "{":
            start = m.end() - 1
            f.inline.append((start, matching_brace(code, start), name, test))
        else:
            declarations.append((name, test, m.start()))
    for name, test, at in declarations:
        # A declaration inside a test-only inline module is test-only too.
        names, in_test = enclosing(f, at)
        f.declared.append((name, test or in_test, names))
    return f


def enclosing(f: SourceFile, at: int) -> tuple[list[str], bool]:
    """The inline modules around offset `at` (outermost first), and whether any is test-only."""
    around = sorted((s for s in f.inline if s[0] < at < s[1]), key=lambda s: s[0])
    return [s[2] for s in around], any(s[3] for s in around)


def references(f: SourceFile) -> list[tuple[list[str], int]]:
    """Crate-absolute paths named outside test-only modules, with their line numbers."""
    found = []

    def scan(text: str, offset_of) -> None:
        for m in PATH_START.finditer(text):
            at = offset_of(m.start())
            names, test = enclosing(f, at)
            if test:
                continue
            paths, _ = parse_tree(text, m.start())
            for p in paths:
                absolute = resolve(f.module + names, p)
                if absolute:
                    found.append((absolute, f.code.count("\n", 0, at) + 1))

    scan(f.code, lambda k: k)
    return found


def file_of(src: Path, parent: SourceFile, name: str, inline: list[str]) -> tuple[Path, bool] | None:
    """The file of module `name` declared in `parent` (inside its inline modules `inline`)."""
    if parent.path.name in ROOT_FILES + ("mod.rs",):
        base = parent.path.parent
    else:
        base = parent.path.parent / parent.path.stem
    base = base.joinpath(*inline) if inline else base
    for candidate, is_dir in ((base / f"{name}.rs", False), (base / name / "mod.rs", True)):
        if candidate.is_file():
            return candidate, is_dir
    return None


def crate_graph(src: Path) -> tuple[dict[str, dict[str, Edge]], list[str], list[str]]:
    """Edges between the crate's top-level modules, the modules, and notes."""
    notes: list[str] = []
    roots = [src / r for r in ROOT_FILES if (src / r).is_file()]
    on_disk = sorted(
        {p.stem for p in src.glob("*.rs") if p.name not in ROOT_FILES}
        | {p.name for p in src.iterdir() if p.is_dir() and p.name != "bin"}
    )
    # Walk the module tree from the roots, so test-only modules (and their files) are known.
    test_modules: set[str] = set()
    files: dict[Path, SourceFile] = {}
    todo: list[tuple[Path, list[str], bool]] = []
    for root in roots:
        rf = read(root, [])
        for name, test, inline in rf.declared:
            if inline:
                continue
            if test:
                test_modules.add(name)
            found = file_of(src, rf, name, [])
            if found:
                todo.append((found[0], [name], test))
    seen_files: set[Path] = set()
    while todo:
        path, module, test = todo.pop()
        if path in seen_files:
            continue
        seen_files.add(path)
        f = read(path, module)
        if not test:
            files[path] = f
        for name, child_test, inline in f.declared:
            found = file_of(src, f, name, inline)
            if found:
                todo.append((found[0], module + inline + [name], test or child_test))
    modules = [m for m in on_disk if m not in test_modules]
    # Files on disk the module tree does not reach (not declared, or behind #[path]): still
    # counted, under the top-level module their place on disk names.
    for path in sorted(src.rglob("*.rs")):
        if path in seen_files or path.parent == src and path.name in ROOT_FILES:
            continue
        rel = path.relative_to(src).with_suffix("").parts
        if rel[0] in test_modules or rel[0] == "bin":
            continue
        module = [p for p in rel if p != "mod"]
        notes.append(f"{path.relative_to(src.parent)} is not declared as a module; counted anyway")
        files[path] = read(path, module)
    edges: dict[str, dict[str, Edge]] = {m: {} for m in modules}
    for path, f in sorted(files.items()):
        source = f.module[0]
        if source not in edges:
            continue
        for absolute, line in references(f):
            target = absolute[0]
            if target == source or target not in edges:
                continue
            e = edges[source].setdefault(target, Edge(source, target))
            where = f"{path.relative_to(src.parent)}:{line}"
            if where not in e.where:
                e.where.append(where)
    return edges, modules, notes


# ---------------------------------------------------------------------------------------------
# Cycles.


def strongly_connected(nodes: list[str], edges: dict[str, dict[str, Edge]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(c for c in out if len(c) > 1)


def elementary_cycles(comp: list[str], edges: dict[str, dict[str, Edge]], limit: int) -> list[list[str]]:
    """Simple cycles within one component, each starting at its smallest module, up to `limit`."""
    members = set(comp)
    cycles: list[list[str]] = []
    for start in comp:
        allowed = {m for m in members if m >= start}

        def dfs(v: str, path: list[str], on_path: set[str]) -> None:
            if len(cycles) >= limit:
                return
            for w in sorted(edges[v]):
                if w not in allowed:
                    continue
                if w == start:
                    cycles.append(path + [start])
                elif w not in on_path:
                    on_path.add(w)
                    dfs(w, path + [w], on_path)
                    on_path.discard(w)

        dfs(start, [start], {start})
    return sorted(cycles, key=lambda c: (len(c), c))


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parent.parent
    crates = sorted(p for p in (repo / "crates").iterdir() if (p / "src").is_dir())
    if argv:
        wanted = set(argv)
        unknown = wanted - {c.name for c in crates}
        if unknown:
            print(f"no such crate: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        crates = [c for c in crates if c.name in wanted]
    failed = False
    for crate in crates:
        edges, modules, notes = crate_graph(crate / "src")
        comps = strongly_connected(modules, edges)
        for note in notes:
            print(f"{crate.name}: note: {note}")
        if not comps:
            print(f"{crate.name}: no cycles")
            continue
        failed = True
        for comp in comps:
            cycles = elementary_cycles(comp, edges, MAX_CYCLES_SHOWN + 1)
            more = len(cycles) > MAX_CYCLES_SHOWN
            print(f"{crate.name}: cycle among {', '.join(comp)}")
            for c in cycles[:MAX_CYCLES_SHOWN]:
                print(f"  {' -> '.join(c)}")
            if more:
                print("  ... and more")
            for a in comp:
                for b in sorted(edges[a]):
                    if b in comp:
                        where = edges[a][b].where
                        extra = f" (+{len(where) - 3} more)" if len(where) > 3 else ""
                        print(f"    {a} -> {b}: {', '.join(where[:3])}{extra}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
