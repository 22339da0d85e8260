//! Who holds each GPU's node token and who waits (`vgpu status --node`), read-only.
//!
//! The token file (`<node dir>/<uuid>.sched`, see `vgpu_region::node`) names its holder and
//! waiters by random ids; the processes behind them are found in `/proc`: every process taking
//! part keeps one descriptor of the file open, the holder's with an open-file-description lock
//! on the holder byte (`/proc/<pid>/fdinfo` lists it). Waiters are counted from the file's
//! slots (an announced key); they are named when every other process with the file open waits
//! (the file does not say which id is which process). PIDs are as this process's PID namespace
//! sees them; processes of other users are visible to root only.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vgpu_region::layout;
use vgpu_region::node::{self, TokenStatus};

/// A process with a token file open.
#[derive(Clone, Debug, Serialize)]
pub struct Taker {
    pub pid: u32,
    /// Its command line (arguments joined by spaces, at most 80 bytes).
    pub command: String,
    /// The region file it has open (its container's), as it names it.
    pub region: Option<String>,
    /// It holds the token's holder lock.
    #[serde(skip)]
    holds: bool,
}

/// One GPU's token.
#[derive(Debug, Serialize)]
pub struct Gpu {
    pub uuid: String,
    pub file: String,
    /// The holder (`null`: the token is free).
    pub holder: Option<HolderJson>,
    /// Processes waiting (announced keys).
    pub waiting: usize,
    /// The waiting processes, when they can be told apart (every other process with the file
    /// open waits).
    pub waiters: Vec<Taker>,
    /// Every process with the file open.
    pub open_by: Vec<Taker>,
}

/// The holder of a token.
#[derive(Debug, Serialize)]
pub struct HolderJson {
    /// Its id in the file.
    pub id: u64,
    /// The process, if visible here.
    pub process: Option<Taker>,
    /// How long it has held the token, ms (`null`: unknown).
    pub held_ms: Option<u64>,
    /// Its heartbeat's age, ms.
    pub heartbeat_ms: u64,
    /// Its holder lock is held (a live process).
    pub locked: bool,
}

/// Every token file of `dir`, with who holds it and who waits; errors per file.
pub fn read(dir: &Path) -> (Vec<Gpu>, Vec<String>) {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sched"))
        .collect();
    files.sort();
    let procs = scan_proc();
    let now = vgpu_region::sys::monotonic_ns();
    let mut gpus = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let st = match node::peek(&f) {
            Ok(st) => st,
            Err(e) => {
                errors.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        let Ok(md) = fs::metadata(&f) else {
            continue;
        };
        let id = (md.dev(), md.ino());
        let open_by: Vec<Taker> = procs.iter().filter_map(|p| p.token(id)).collect();
        gpus.push(gpu(&f, &st, open_by, now));
    }
    (gpus, errors)
}

fn gpu(file: &Path, st: &TokenStatus, open_by: Vec<Taker>, now: u64) -> Gpu {
    let ms = |ns: u64| ns / 1_000_000;
    let holder = (st.holder != 0).then(|| HolderJson {
        id: st.holder,
        process: open_by.iter().find(|t| t.holds).cloned(),
        held_ms: st
            .slots
            .iter()
            .find(|s| s.owner == st.holder && s.served != 0)
            .map(|s| ms(now.saturating_sub(s.served))),
        heartbeat_ms: ms(now.saturating_sub(st.beat)),
        locked: st.holder_locked,
    });
    let waiting = st
        .slots
        .iter()
        .filter(|s| s.key != 0 && s.owner != st.holder)
        .count();
    let others: Vec<Taker> = open_by.iter().filter(|t| !t.holds).cloned().collect();
    let waiters = if waiting > 0 && waiting == others.len() {
        others
    } else {
        Vec::new()
    };
    Gpu {
        uuid: file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file: file.display().to_string(),
        holder,
        waiting,
        waiters,
        open_by,
    }
}

/// A process and the files it has open: (dev, ino) of each descriptor, whether it holds an
/// open-file-description lock on the holder byte, and a region file's path.
struct Proc {
    pid: u32,
    command: String,
    fds: Vec<((u64, u64), bool)>,
    region: Option<String>,
}

impl Proc {
    fn token(&self, id: (u64, u64)) -> Option<Taker> {
        let mine: Vec<bool> = self
            .fds
            .iter()
            .filter(|(f, _)| *f == id)
            .map(|(_, l)| *l)
            .collect();
        (!mine.is_empty()).then(|| Taker {
            pid: self.pid,
            command: self.command.clone(),
            region: self.region.clone(),
            holds: mine.contains(&true),
        })
    }
}

/// Whether an fdinfo text lists an open-file-description lock on the token's holder byte.
fn holds_holder_byte(fdinfo: &str) -> bool {
    let b = node::HOLDER_BYTE.to_string();
    fdinfo.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        l.starts_with("lock:")
            && w.contains(&"OFDLCK")
            && w.len() >= 2
            && w[w.len() - 2] == b
            && w[w.len() - 1] == b
    })
}

/// The processes that have a `.sched` file (or any file) open: their descriptors' identities.
fn scan_proc() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let base = e.path();
        let Ok(fds) = fs::read_dir(base.join("fd")) else {
            continue;
        };
        let mut p = Proc {
            pid,
            command: command(&base),
            fds: Vec::new(),
            region: None,
        };
        for fd in fds.flatten() {
            let link = fd.path();
            let Ok(md) = fs::metadata(&link) else {
                continue;
            };
            if !md.is_file() {
                continue;
            }
            let target = fs::read_link(&link).unwrap_or_default();
            if md.len() == layout::FILE_SIZE as u64 && p.region.is_none() {
                p.region = Some(target.display().to_string());
            }
            if target.extension().is_none_or(|x| x != "sched") {
                continue;
            }
            let info =
                fs::read_to_string(base.join("fdinfo").join(fd.file_name())).unwrap_or_default();
            p.fds.push(((md.dev(), md.ino()), holds_holder_byte(&info)));
        }
        if !p.fds.is_empty() {
            out.push(p);
        }
    }
    out
}

fn command(base: &Path) -> String {
    let raw = fs::read(base.join("cmdline")).unwrap_or_default();
    let s: String = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut cut: String = s.chars().filter(|c| !c.is_control()).take(80).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    cut
}

fn who(t: &Taker) -> String {
    let region = t
        .region
        .as_deref()
        .map_or_else(String::new, |r| format!(", region {r}"));
    format!("pid {} ({}{region})", t.pid, t.command)
}

/// The text form.
pub fn render(dir: &Path, gpus: &[Gpu], errors: &[String]) -> String {
    let mut out = format!("node dir {}\n", dir.display());
    if gpus.is_empty() && errors.is_empty() {
        out.push_str("no node token files (no container with a compute limit has run here)\n");
    }
    for g in gpus {
        out.push_str(&format!("GPU {}\n", g.uuid));
        match &g.holder {
            None => out.push_str("  holder: none (the token is free)\n"),
            Some(h) => {
                let proc_ = h
                    .process
                    .as_ref()
                    .map_or_else(|| format!("id {:#x} (no process visible here)", h.id), who);
                let held = h
                    .held_ms
                    .map_or_else(String::new, |ms| format!(", held for {ms} ms"));
                let dead = if h.locked {
                    ""
                } else {
                    " [its lock is gone: taken over at the next turn]"
                };
                out.push_str(&format!(
                    "  holder: {proc_}{held}, heartbeat {} ms ago{dead}\n",
                    h.heartbeat_ms
                ));
            }
        }
        if g.waiters.is_empty() {
            out.push_str(&format!("  waiting: {}\n", g.waiting));
        } else {
            let names: Vec<String> = g.waiters.iter().map(who).collect();
            out.push_str(&format!("  waiting: {}: {}\n", g.waiting, names.join("; ")));
        }
        let open: Vec<String> = g.open_by.iter().map(|t| t.pid.to_string()).collect();
        out.push_str(&format!(
            "  open by: {}\n",
            if open.is_empty() {
                "none visible here".to_owned()
            } else {
                format!("pid {}", open.join(", "))
            }
        ));
    }
    for e in errors {
        out.push_str(&format!("cannot read {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_the_descriptor_with_the_holder_byte_locked() {
        let held = "pos:\t0\nflags:\t02100002\nmnt_id:\t30\nino:\t10011073\n\
                    lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10011073 4096 4096\n";
        assert!(holds_holder_byte(held));
        let other = "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10011073 4097 4097\n";
        assert!(!holds_holder_byte(other));
        assert!(!holds_holder_byte("pos:\t0\n"));
        let posix = "lock:\t1: POSIX  ADVISORY  WRITE 77 fe:00:10011073 4096 4096\n";
        assert!(!holds_holder_byte(posix));
    }
}
