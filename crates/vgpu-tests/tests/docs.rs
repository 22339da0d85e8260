//! The documentation holds together:
//!
//! - `docs/GPU-RESULTS.md` is what `scripts/gpu-results-table.py` builds from the run files
//!   (`docs/gpu-results/run-*.md`): a run added without re-running the script, or a table edited
//!   by hand, fails here. The script needs only python3; without it the test is skipped, with the
//!   reason printed, except under `CI=true`.
//! - Every relative link in the repository's Markdown files (`README.md`, `docs/`, `deploy/`, the
//!   crates' READMEs, ...) names a file or directory that exists, and a `#fragment` names a
//!   heading of the file it points into (GitHub's anchors: lower case, punctuation dropped, spaces
//!   as `-`, `-1`, `-2` for repeated headings).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// python3, or `None` (skip) outside CI when there is none.
fn python3() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("python3");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "python3 is needed for scripts/gpu-results-table.py under CI"
    );
    eprintln!("skipped: no python3 to run scripts/gpu-results-table.py");
    None
}

/// Runs `scripts/gpu-results-table.py --check` as it lies under `root`.
fn check_table(python: &str, root: &Path) -> (bool, String) {
    let out = Command::new(python)
        .arg(root.join("scripts/gpu-results-table.py"))
        .arg("--check")
        .output()
        .expect("run scripts/gpu-results-table.py --check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_gpu_results_table_is_what_the_run_files_give() {
    let Some(python) = python3() else { return };
    let (ok, text) = check_table(python, &workspace_root());
    assert!(
        ok,
        "{text}\ndocs/GPU-RESULTS.md is out of date: run python3 scripts/gpu-results-table.py"
    );
    assert!(text.contains("is up to date"), "{text}");
}

/// The check itself can fail: a copy of the script and the run files, with a run's figure
/// changed after the table was built, is reported; rebuilt, it passes again.
#[test]
fn a_run_file_changed_without_the_table_fails_the_check() {
    let Some(python) = python3() else { return };
    let root = workspace_root();
    let copy =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("scripts")).unwrap();
    std::fs::create_dir_all(copy.join("docs/gpu-results")).unwrap();
    std::fs::copy(
        root.join("scripts/gpu-results-table.py"),
        copy.join("scripts/gpu-results-table.py"),
    )
    .unwrap();
    std::fs::copy(
        root.join("docs/GPU-RESULTS.md"),
        copy.join("docs/GPU-RESULTS.md"),
    )
    .unwrap();
    let mut last = None;
    for entry in std::fs::read_dir(root.join("docs/gpu-results")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        std::fs::copy(&path, copy.join("docs/gpu-results").join(&name)).unwrap();
        if std::fs::read_to_string(&path)
            .unwrap()
            .contains("\n    value: ")
        {
            last = last.max(Some(name));
        }
    }
    assert!(
        check_table(python, &copy).0,
        "the copy must start up to date"
    );

    let changed = copy
        .join("docs/gpu-results")
        .join(last.expect("a run with figures"));
    let text = std::fs::read_to_string(&changed).unwrap();
    let text = text.replacen("\n    value: \"", "\n    value: \"CHANGED ", 1);
    std::fs::write(&changed, text).unwrap();
    let (ok, out) = check_table(python, &copy);
    assert!(!ok, "a stale table passed the check: {out}");
    assert!(out.contains("not what the run files give"), "{out}");

    let rebuilt = Command::new(python)
        .arg(copy.join("scripts/gpu-results-table.py"))
        .status()
        .unwrap();
    assert!(rebuilt.success());
    assert!(check_table(python, &copy).0);
    assert!(
        std::fs::read_to_string(copy.join("docs/GPU-RESULTS.md"))
            .unwrap()
            .contains("CHANGED ")
    );
    let _ = std::fs::remove_dir_all(&copy);
}

/// Markdown files of the repository, outside build outputs and hidden directories.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || ["target", "dist", "node_modules"].contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The lines of a Markdown text, `None` for those inside (and opening or closing) a fenced
/// code block. A fence closes only on a line of at least as many of its characters.
fn outside_fences(text: &str) -> Vec<Option<&str>> {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        let ticks: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence = ticks.len() >= 3 && ticks.chars().all(|c| c == ticks.as_bytes()[0] as char);
        match &fence {
            Some(open) if is_fence && ticks.starts_with(open.as_str()) && trimmed == ticks => {
                fence = None;
                lines.push(None);
            }
            Some(_) => lines.push(None),
            None if is_fence => {
                fence = Some(ticks);
                lines.push(None);
            }
            None => lines.push(Some(line)),
        }
    }
    lines
}

/// The text outside fenced code blocks and inline code spans, line by line.
fn prose(text: &str) -> Vec<String> {
    outside_fences(text)
        .into_iter()
        .map(|line| {
            let Some(line) = line else {
                return String::new();
            };
            // Drop inline code spans (a run of backticks up to the same run).
            let mut kept = String::new();
            let mut rest = line;
            while let Some(at) = rest.find('`') {
                kept.push_str(&rest[..at]);
                let run = rest[at..].chars().take_while(|&c| c == '`').count();
                let after = &rest[at + run..];
                match after.find(&"`".repeat(run)) {
                    Some(end) => rest = &after[end + run..],
                    None => {
                        kept.push_str(&rest[at..]);
                        rest = "";
                    }
                }
            }
            kept.push_str(rest);
            kept
        })
        .collect()
}

/// The link targets of a Markdown text: inline `[text](target)` and reference definitions
/// `[label]: target`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose(text).iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(at) = trimmed.find("]: ")
            && !trimmed[..at].contains("](")
        {
            let target = trimmed[at + 3..].split_whitespace().next().unwrap_or("");
            found.push((n + 1, target.to_string()));
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let target = if let Some(inner) = after.strip_prefix('<') {
                inner.split('>').next().unwrap_or("")
            } else {
                let mut depth = 0usize;
                let end = after
                    .char_indices()
                    .find(|&(_, c)| match c {
                        '(' => {
                            depth += 1;
                            false
                        }
                        ')' if depth == 0 => true,
                        ')' => {
                            depth -= 1;
                            false
                        }
                        c => c.is_whitespace(),
                    })
                    .map_or(after.len(), |(i, _)| i);
                &after[..end]
            };
            found.push((n + 1, target.to_string()));
            rest = after;
        }
    }
    found
}

/// GitHub's anchors for the headings of a Markdown text (code spans keep their words).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in outside_fences(text).into_iter().flatten() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// `base` joined with a relative `target`, `..` resolved lexically.
fn resolve(base: &Path, target: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(target).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Every broken relative link of the Markdown file `file` (its text `text`), as messages.
fn broken_links(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    for (line, target) in links(text) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('/')
        {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target.as_str(), None),
        };
        if path.is_empty() {
            if let Some(fragment) = fragment
                && !anchors(text).contains(fragment)
            {
                broken.push(format!("{shown}:{line}: {target}: no heading #{fragment}"));
            }
            continue;
        }
        let dest = resolve(file.parent().unwrap(), path);
        if !dest.starts_with(root) || !dest.exists() {
            broken.push(format!("{shown}:{line}: {target}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment
            && dest.extension().is_some_and(|e| e == "md")
            && !anchors(&std::fs::read_to_string(&dest).unwrap_or_default()).contains(fragment)
        {
            broken.push(format!("{shown}:{line}: {target}: no heading #{fragment}"));
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_markdown_files_resolves() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.iter().any(|f| f.ends_with("README.md")));
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read markdown");
        checked += links(&text).len();
        broken.extend(broken_links(&root, file, &text));
    }
    assert!(
        checked > 100,
        "only {checked} links found: the link finder is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The link checker finds what it should: a missing file, a missing heading, and neither
/// inside code; it accepts a heading with code, punctuation and a repeat.
#[test]
fn the_link_checker_reports_missing_files_and_headings() {
    let root = workspace_root();
    let file = root.join("docs/example.md");
    let text = "# Title\n\n## The `vgpu run` command, in short\n\n## Twice\n\n## Twice\n\n\
        [ok](../README.md) [ok](#title) [ok](#the-vgpu-run-command-in-short) [ok](#twice-1)\n\
        [gone](missing.md) [gone](../README.md#no-such-heading) [gone](#twice-2)\n\
        `[code](missing-in-code.md)`\n\n```\n[fenced](missing-in-fence.md)\n```\n\
        [ref]: ../docs/nothing-here.md\n[web](https://example.com/x) [dir](gpu-results/)\n";
    let broken = broken_links(&root, &file, text);
    assert_eq!(
        broken,
        [
            "docs/example.md:10: missing.md: no such file",
            "docs/example.md:10: ../README.md#no-such-heading: no heading #no-such-heading",
            "docs/example.md:10: #twice-2: no heading #twice-2",
            "docs/example.md:16: ../docs/nothing-here.md: no such file",
        ],
        "{broken:#?}"
    );
}
