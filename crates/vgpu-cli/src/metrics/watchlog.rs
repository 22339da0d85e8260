//! What the exporter tells its operator on stderr, one line each: what it watches (at start),
//! and what it found and what it skipped (at start, and again whenever that changes; the set
//! is refreshed at each scrape).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::shared::regions::RegionSet;

/// Skipped files named in the skipped line (the rest are counted).
const NAMED: usize = 5;

/// The line saying what the exporter watches.
pub fn watching(files: &[PathBuf], dirs: &[PathBuf]) -> String {
    let list = |what: &str, v: &[PathBuf]| {
        (!v.is_empty()).then(|| {
            let names: Vec<String> = v.iter().map(|p| p.display().to_string()).collect();
            format!("{what} {}", names.join(", "))
        })
    };
    let parts: Vec<String> = [list("directory", dirs), list("region", files)]
        .into_iter()
        .flatten()
        .collect();
    format!(
        "vgpu metrics: watching {} (regions read-only; directories one level down)",
        parts.join("; ")
    )
}

/// The found and skipped lines as last printed.
#[derive(Debug, Default)]
pub struct WatchLog {
    found: String,
    skipped: String,
}

impl WatchLog {
    /// The lines to print after the refresh of `set` at `now`: the found line and the skipped
    /// line, each when it differs from the last one printed (the first call prints both).
    pub fn lines(&mut self, set: &RegionSet, now: SystemTime) -> Vec<String> {
        let (mut live, mut stale) = (0usize, 0usize);
        for w in set.shown_at(now) {
            if w.stale {
                stale += 1;
            } else {
                live += 1;
            }
        }
        let found = format!(
            "vgpu metrics: found {} region(s): {live} with a live process, {stale} stale",
            live + stale
        );
        let skipped: Vec<String> = set
            .errors
            .iter()
            .cloned()
            .chain(set.unreadable.iter().map(|(p, e)| skip(p, e)))
            .chain(set.skipped.iter().map(|(d, n)| {
                format!(
                    "{}: {n} entries not read (a container directory adds at most {} regions, \
                     and {} entries are looked at)",
                    d.display(),
                    crate::shared::regions::MAX_REGIONS_PER_CONTAINER_DIR,
                    crate::shared::regions::MAX_ENTRIES_PER_CONTAINER_DIR
                )
            }))
            .collect();
        let mut line = format!("vgpu metrics: skipped {}", skipped.len());
        if !skipped.is_empty() {
            line.push_str(": ");
            line.push_str(&skipped[..skipped.len().min(NAMED)].join("; "));
            if skipped.len() > NAMED {
                line.push_str(&format!("; and {} more", skipped.len() - NAMED));
            }
        }
        let mut out = Vec::new();
        if found != self.found {
            out.push(found.clone());
            self.found = found;
        }
        if line != self.skipped {
            out.push(line.clone());
            self.skipped = line;
        }
        out
    }
}

fn skip(path: &Path, why: &str) -> String {
    // The reason often starts with the path already.
    let p = path.display().to_string();
    if why.contains(&p) {
        why.to_owned()
    } else {
        format!("{p} ({why})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watching_line_names_directories_and_files() {
        let l = watching(&[PathBuf::from("/r/a.cache")], &[PathBuf::from("/c")]);
        assert_eq!(
            l,
            "vgpu metrics: watching directory /c; region /r/a.cache (regions read-only; directories one level down)"
        );
    }

    #[test]
    fn found_and_skipped_are_printed_once_then_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("b.cache");
        std::fs::File::create(&bad)
            .unwrap()
            .set_len(vgpu_region::layout::FILE_SIZE as u64)
            .unwrap();
        let mut set = RegionSet::new(Vec::new(), vec![dir.path().to_owned()]);
        set.read_only = true;
        let mut log = WatchLog::default();
        set.refresh();
        let l = log.lines(&set, SystemTime::now());
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(
            l[0],
            "vgpu metrics: found 0 region(s): 0 with a live process, 0 stale"
        );
        assert!(l[1].starts_with("vgpu metrics: skipped 1: ") && l[1].contains("b.cache"));
        set.refresh();
        assert!(log.lines(&set, SystemTime::now()).is_empty());
        std::fs::remove_file(&bad).unwrap();
        set.refresh();
        assert_eq!(
            log.lines(&set, SystemTime::now()),
            vec!["vgpu metrics: skipped 0".to_owned()]
        );
    }
}
