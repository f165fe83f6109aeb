//! The operator's modules import each other in one direction only: at every level of the module
//! tree, the sibling modules form a graph without cycles. A module may use its parent's items
//! (`super::Type`) and its own children; any other reference — `crate::a::…`, `super::sibling`,
//! a child path — is an edge between the two subtrees where the paths part. A new circle fails
//! this test, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root; the root is the empty path.
type ModPath = Vec<String>;

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Source code with comments, string and character literals blanked out.
fn code_only(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\'') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The module path of a source file under `src/`; `None` for binaries.
fn module_of(relative: &Path) -> Option<ModPath> {
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") || parts == ["main.rs"] {
        return None;
    }
    let mut m: ModPath = parts;
    let last = m.pop()?;
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        file => m.push(file.trim_end_matches(".rs").to_string()),
    }
    Some(m)
}

/// A module's own code (inline child modules removed), its declared children, and the inline
/// children with their code.
struct Parsed {
    code: String,
    children: BTreeSet<String>,
    inline: Vec<(String, String)>,
}

fn parse(code: &str) -> Parsed {
    let chars: Vec<char> = code.chars().collect();
    let mut own = String::new();
    let mut children = BTreeSet::new();
    let mut inline = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let at_word = (i == 0 || !is_ident(chars[i - 1]))
            && chars[i..].starts_with(&['m', 'o', 'd'])
            && chars.get(i + 3).is_some_and(|c| c.is_whitespace());
        if at_word {
            let mut j = i + 3;
            while chars.get(j).is_some_and(|c| c.is_whitespace()) {
                j += 1;
            }
            let start = j;
            while chars.get(j).is_some_and(|c| is_ident(*c)) {
                j += 1;
            }
            let name: String = chars[start..j].iter().collect();
            while chars.get(j).is_some_and(|c| c.is_whitespace()) {
                j += 1;
            }
            match chars.get(j) {
                Some(';') if !name.is_empty() => {
                    children.insert(name);
                    i = j + 1;
                    continue;
                }
                Some('{') if !name.is_empty() => {
                    let mut depth = 0;
                    let mut k = j;
                    while k < chars.len() {
                        match chars[k] {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    children.insert(name.clone());
                    inline.push((name, chars[j + 1..k.min(chars.len())].iter().collect()));
                    i = k + 1;
                    continue;
                }
                _ => {}
            }
        }
        own.push(chars[i]);
        i += 1;
    }
    Parsed {
        code: own,
        children,
        inline,
    }
}

/// Expands a `use`-style tree (`a::{b, c::{d, e as f}}`) starting at `chars[i]` into paths of
/// segments.
fn expand(chars: &[char], i: &mut usize) -> Vec<Vec<String>> {
    let skip_ws = |i: &mut usize| {
        while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    let mut prefix: Vec<String> = Vec::new();
    loop {
        skip_ws(i);
        if chars.get(*i) == Some(&'{') {
            *i += 1;
            let mut out = Vec::new();
            loop {
                skip_ws(i);
                match chars.get(*i) {
                    Some('}') => {
                        *i += 1;
                        break;
                    }
                    Some(',') => *i += 1,
                    None => break,
                    _ => {
                        for tail in expand(chars, i) {
                            let mut p = prefix.clone();
                            p.extend(tail.into_iter().filter(|s| s != "self"));
                            out.push(p);
                        }
                    }
                }
            }
            return out;
        }
        let start = *i;
        while chars.get(*i).is_some_and(|c| is_ident(*c) || *c == '*') {
            *i += 1;
        }
        if *i == start {
            return vec![prefix];
        }
        prefix.push(chars[start..*i].iter().collect());
        skip_ws(i);
        if chars.get(*i) == Some(&':') && chars.get(*i + 1) == Some(&':') {
            *i += 2;
            continue;
        }
        // `x as y`: the alias does not matter.
        let save = *i;
        if chars[*i..].starts_with(&['a', 's'])
            && chars.get(*i + 2).is_some_and(|c| c.is_whitespace())
        {
            *i += 2;
            skip_ws(i);
            while chars.get(*i).is_some_and(|c| is_ident(*c)) {
                *i += 1;
            }
        } else {
            *i = save;
        }
        return vec![prefix];
    }
}

/// Every module path referenced by a module's code, resolved against the known modules.
fn references(
    module: &[String],
    parsed: &Parsed,
    modules: &BTreeSet<ModPath>,
) -> BTreeSet<ModPath> {
    let chars: Vec<char> = parsed.code.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let boundary =
            (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':')) && is_ident(chars[i]);
        if !boundary {
            i += 1;
            continue;
        }
        let start = i;
        while chars.get(i).is_some_and(|c| is_ident(*c)) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        if !(chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':')) {
            continue;
        }
        let base: Option<ModPath> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(module.to_vec()),
            "super" => Some(module[..module.len().saturating_sub(1)].to_vec()),
            w if parsed.children.contains(w) => {
                let mut m = module.to_vec();
                m.push(w.to_string());
                Some(m)
            }
            _ => None,
        };
        let Some(mut base) = base else {
            continue;
        };
        let mut j = i + 2;
        // `super::super::…`
        while chars[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
            base.pop();
            j += 7;
        }
        for tail in expand(&chars, &mut j) {
            let mut full = base.clone();
            full.extend(tail);
            let target = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|p| modules.contains(p))
                .unwrap_or_default();
            out.insert(target);
        }
        i = j;
    }
    out
}

/// The module graph of a crate's sources (`relative path → text`): module → modules it refers to.
fn graph(files: &[(PathBuf, String)]) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut parsed: Vec<(ModPath, Parsed)> = Vec::new();
    let mut queue: Vec<(ModPath, String)> = files
        .iter()
        .filter_map(|(path, text)| module_of(path).map(|m| (m, code_only(text))))
        .collect();
    while let Some((m, code)) = queue.pop() {
        let p = parse(&code);
        for (name, inner) in &p.inline {
            let mut child = m.clone();
            child.push(name.clone());
            queue.push((child, inner.clone()));
        }
        parsed.push((m, p));
    }
    let modules: BTreeSet<ModPath> = parsed.iter().map(|(m, _)| m.clone()).collect();
    parsed
        .iter()
        .map(|(m, p)| (m.clone(), references(m, p, &modules)))
        .collect()
}

/// Edges between siblings: a reference from `a` to `b` counts between their ancestors just
/// below the deepest module both lie in; references along one line of descent do not count.
fn sibling_edges(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeSet<(ModPath, ModPath)> {
    let mut edges = BTreeSet::new();
    for (from, targets) in graph {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            edges.insert((from[..=common].to_vec(), to[..=common].to_vec()));
        }
    }
    edges
}

/// The first cycle among the edges, as a path that returns to its start.
fn find_cycle(edges: &BTreeSet<(ModPath, ModPath)>) -> Option<Vec<ModPath>> {
    let mut next: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    fn visit<'a>(
        node: &'a ModPath,
        next: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
        path: &mut Vec<&'a ModPath>,
        done: &mut BTreeSet<&'a ModPath>,
    ) -> Option<Vec<ModPath>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<ModPath> = path[at..].iter().map(|m| (*m).clone()).collect();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for n in next.get(node).into_iter().flatten() {
            if let Some(c) = visit(n, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for start in next.keys() {
        if let Some(c) = visit(start, &next, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).expect("read the source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read a source file");
            out.push((path.strip_prefix(root).unwrap().to_path_buf(), text));
        }
    }
}

#[test]
fn operator_modules_import_each_other_in_one_direction() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    let g = graph(&files);
    assert!(
        g.len() > 30,
        "the scan found the modules ({} found)",
        g.len()
    );
    let edges = sibling_edges(&g);
    assert!(
        edges.contains(&(vec!["mirror_topic".into()], vec!["lifecycle".into()])),
        "the scan sees references (mirror_topic uses lifecycle)"
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!(
            "operator modules import each other in a circle: {}",
            cycle
                .iter()
                .map(|m| show(m))
                .collect::<Vec<_>>()
                .join(" -> ")
        );
    }
}

fn files(list: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    list.iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
}

#[test]
fn a_circle_through_nested_modules_and_grouped_imports_is_found() {
    let g = graph(&files(&[
        ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
        ("a/mod.rs", "pub mod inner;\nuse inner::X;"),
        ("a/inner.rs", "use crate::{c::{Y, Z as W}, context};"),
        ("b.rs", "pub fn f() { crate::a::inner::g(); }"),
        (
            "c.rs",
            "// use crate::a; is a comment\nconst S: &str = \"crate::a::x\";\nfn g() { super::b::f(); let c = 'x'; }",
        ),
    ]));
    let cycle = find_cycle(&sibling_edges(&g)).expect("a cycle");
    let names: Vec<String> = cycle.iter().map(|m| show(m)).collect();
    assert_eq!(names.first(), names.last());
    for m in ["a", "b", "c"] {
        assert!(names.contains(&m.to_string()), "{names:?}");
    }
}

#[test]
fn parents_and_children_may_use_each_other_and_comments_do_not_count() {
    let g = graph(&files(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        (
            "a/mod.rs",
            "pub mod plan;\npub struct T;\nfn run() { plan::plan(); }\n#[cfg(test)]\nmod tests { use super::*; use crate::b::B; }",
        ),
        ("a/plan.rs", "use super::T;\npub fn plan() {}"),
        (
            "b.rs",
            "/* crate::a::T */ pub struct B; // crate::a\nfn s() -> &'static str { r#\"crate::a\"# }",
        ),
    ]));
    assert_eq!(find_cycle(&sibling_edges(&g)), None);
    assert!(g[&vec!["a".to_string(), "tests".to_string()]].contains(&vec!["b".to_string()]));
}
