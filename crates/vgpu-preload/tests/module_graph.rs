//! The crate's modules form no import circle (issue 10): hooks depend on the runtime, the
//! runtime on the driver facade and accounting, never the reverse. The graph is read from the
//! sources: a module depends on another when its code (comments aside) names `crate::<other>`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        let name = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if p.is_dir() {
            modules(&p, &format!("{prefix}{name}::"), out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let module = match name.as_str() {
                "lib" => "crate".to_owned(),
                "mod" => prefix.trim_end_matches("::").to_owned(),
                _ => format!("{prefix}{name}"),
            };
            let text = std::fs::read_to_string(&p).expect("read module");
            let code = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(module, code);
        }
    }
}

/// The module a `crate::a::b::c` path lands in: the longest known prefix.
fn owner<'a>(mods: &'a BTreeMap<String, String>, path: &str) -> Option<&'a str> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|k| parts[..k].join("::"))
        .find_map(|c| mods.get_key_value(&c).map(|(k, _)| k.as_str()))
}

fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut g: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, code) in mods {
        let set = g.entry(m.as_str()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let path = rest[..end].trim_end_matches(':');
            if let Some(o) = owner(mods, path) {
                // A module and its own parent or children are one unit here.
                let related =
                    o == m || m.starts_with(&format!("{o}::")) || o.starts_with(&format!("{m}::"));
                if !related {
                    set.insert(o);
                }
            }
        }
    }
    g
}

/// Modules that can reach themselves again: the members of every circle.
fn in_circles<'a>(g: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> BTreeSet<&'a str> {
    let reach = |from: &'a str| {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = g[from].iter().copied().collect();
        while let Some(v) = todo.pop() {
            if seen.insert(v) {
                todo.extend(g.get(v).into_iter().flatten().copied());
            }
        }
        seen
    };
    g.keys().copied().filter(|m| reach(m).contains(m)).collect()
}

#[test]
fn the_preload_has_no_import_circle() {
    let mut mods = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut mods,
    );
    assert!(
        mods.len() > 10,
        "read the crate's modules: {:?}",
        mods.keys()
    );
    let g = edges(&mods);
    // The reader itself must see the layering it guards.
    assert!(
        g["hooks::memory"].contains("runtime"),
        "{:?}",
        g["hooks::memory"]
    );
    let circles = in_circles(&g);
    assert!(
        circles.is_empty(),
        "modules in an import circle: {circles:?}\n{g:#?}"
    );
}

#[test]
fn a_circle_is_found_when_there_is_one() {
    let mut mods = BTreeMap::new();
    mods.insert("a".to_owned(), "use crate::b::x;".to_owned());
    mods.insert("b".to_owned(), "fn f() { crate::a::y() }".to_owned());
    mods.insert("c".to_owned(), "use crate::a;".to_owned());
    let g = edges(&mods);
    assert_eq!(in_circles(&g), BTreeSet::from(["a", "b"]));
}
