//! Helpers shared by the CLI's integration tests: the `vgpu` command with a clean
//! environment, long-lived probe processes, a strict exposition reader and an HTTP client.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use vgpu_tests::{Probe, probe};

#[allow(unused_imports)]
pub use vgpu_tests::{GIB, MIB, SIM_CTX, fresh_region, libvgpu, sim_dir};

/// The `vgpu` binary with no CUDA/vgpu variables inherited; it dies with the test.
pub fn vgpu() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vgpu"));
    vgpu_tests::dies_with_parent(&mut c);
    for (k, _) in std::env::vars() {
        if k.starts_with("CUDA_")
            || k.starts_with("VGPU_")
            || k == "LD_PRELOAD"
            || matches!(k.as_str(), "POD_NAME" | "POD_NAMESPACE" | "CONTAINER_NAME")
        {
            c.env_remove(k);
        }
    }
    // The node directory of this test process, as the probes have (not the machine's default).
    c.env("VGPU_NODE_DIR", vgpu_tests::test_node_dir());
    c.stdin(Stdio::null());
    c
}

pub fn run(c: &mut Command) -> (bool, String, String) {
    let o = c.output().expect("run vgpu");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A probe that runs `ops`, then reads further ops from its stdin (`hold` waits for a line);
/// lines it prints are read on demand.
pub struct Holder {
    pub child: Child,
    out: BufReader<ChildStdout>,
    #[allow(dead_code)]
    stdin: Option<ChildStdin>,
}

impl Holder {
    pub fn start(p: Probe, ops: &[&str]) -> (Holder, Vec<String>) {
        let mut all: Vec<&str> = ops.to_vec();
        all.push("hold");
        Holder::spawn(p.ops(&all).command())
    }
    /// Spawns `c` (a probe whose last op is `hold`, possibly under `vgpu run`) and reads
    /// its lines up to `OK hold`.
    pub fn spawn(mut c: Command) -> (Holder, Vec<String>) {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take();
        let mut h = Holder { child, out, stdin };
        let lines = h.until("OK hold");
        (h, lines)
    }
    pub fn until(&mut self, prefix: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                panic!("probe ended before {prefix}: {lines:?}");
            }
            let done = l.starts_with(prefix);
            lines.push(l.trim_end().to_owned());
            if done {
                return lines;
            }
        }
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"\n");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `line` is a process row of `top` or `status` for `pid`: the PID is the first column,
/// so the line's first number. (Found by "contains the PID", a row was once the title above the
/// table: the region path in it has a long random number, where a PID's digits can be.)
pub fn process_row(line: &str, pid: u32) -> bool {
    line.split(|c: char| !c.is_ascii_digit())
        .find(|t| !t.is_empty())
        .is_some_and(|t| t == pid.to_string())
}

/// The command line the region records for a probe run with `ops` (the probe's path, then
/// its arguments, cut at 63 bytes as the region stores it).
pub fn probe_command(ops: &[&str]) -> String {
    let mut s = probe().display().to_string();
    for o in ops {
        s.push(' ');
        s.push_str(o);
    }
    let mut cut = s.into_bytes();
    cut.truncate(63);
    String::from_utf8_lossy(&cut).trim_end().to_owned()
}

/// A strict reader of the OpenMetrics text format (the subset prometheus-client writes):
/// returns the samples `(name, labels) -> value` and the declared types.
pub type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

pub fn parse_openmetrics(text: &str) -> (Samples, BTreeMap<String, String>) {
    assert!(text.ends_with("# EOF\n"), "must end with # EOF: {text}");
    let mut types = BTreeMap::new();
    let mut samples = Samples::new();
    let mut seen_eof = false;
    for line in text.lines() {
        assert!(!seen_eof, "content after # EOF");
        if line == "# EOF" {
            seen_eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let kind = w.next().unwrap();
            let name = w.next().expect("metric name").to_owned();
            let value = w.next().unwrap_or("");
            match kind {
                "TYPE" => {
                    assert!(
                        ["gauge", "counter"].contains(&value),
                        "unexpected type {value}"
                    );
                    assert!(types.insert(name, value.to_owned()).is_none(), "dup TYPE");
                }
                "HELP" | "UNIT" => {}
                _ => panic!("bad comment line {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                let mut s = body;
                while !s.is_empty() {
                    let (k, r) = s.split_once("=\"").expect("label=\"");
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "label name {k:?}"
                    );
                    let mut v = String::new();
                    let mut chars = r.char_indices();
                    let end = loop {
                        let (i, c) = chars.next().expect("closing quote");
                        match c {
                            '\\' => v.push(chars.next().expect("escape").1),
                            '"' => break i,
                            c => v.push(c),
                        }
                    };
                    labels.insert(k.to_owned(), v);
                    s = &r[end + 1..];
                    s = s.strip_prefix(',').unwrap_or(s);
                }
                (name.to_owned(), labels)
            }
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name:?}"
        );
        let family = types
            .keys()
            .find(|t| name == **t || name.strip_prefix(t.as_str()) == Some("_total"))
            .unwrap_or_else(|| panic!("sample {name} before its TYPE"));
        if types[family] == "counter" {
            assert!(name.ends_with("_total"), "counter sample {name}");
        }
        assert!(
            samples.insert((name, labels), value).is_none(),
            "dup {line}"
        );
    }
    assert!(seen_eof);
    (samples, types)
}

/// GET `path` from `addr` with extra request headers; returns (head, body).
pub fn http_get_with(addr: &str, path: &str, headers: &str) -> (String, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

pub fn http_get(addr: &str, path: &str) -> (String, String) {
    http_get_with(addr, path, "")
}

/// `vgpu metrics --listen 127.0.0.1:0` with `args`; returns the server and its address.
pub fn serve(args: &[&str]) -> (Child, String) {
    let mut server = vgpu()
        .args(["metrics", "--listen", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (server, addr)
}

/// Kills a child on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `vgpu status --json --region REGION`, parsed.
pub fn status_json(region: &std::path::Path) -> serde_json::Value {
    let (ok, out, err) = run(vgpu().args(["status", "--json", "--region"]).arg(region));
    assert!(ok, "status failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Runs `tmux ARGS`; its stdout when it succeeds.
pub fn tmux(args: &[&str]) -> Option<String> {
    let out = Command::new("tmux").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A detached tmux session, killed on drop.
pub struct TmuxSession(pub String);

impl TmuxSession {
    /// Starts `cmd` (a shell command line) in a new detached session named `name` on a
    /// `cols`×`rows` terminal (`TERM=xterm`).
    pub fn start(name: &str, cols: u16, rows: u16, cmd: &str) -> TmuxSession {
        let (x, y) = (cols.to_string(), rows.to_string());
        tmux(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &x,
            "-y",
            &y,
            "-e",
            "TERM=xterm",
            cmd,
        ])
        .expect("tmux new-session");
        TmuxSession(name.to_owned())
    }
}

impl Drop for TmuxSession {
    fn drop(&mut self) {
        let _ = tmux(&["kill-session", "-t", &self.0]);
    }
}

/// Polls the tmux pane until its screen passes `want` (at most ~20 s); returns the last
/// capture.
pub fn pane_until(session: &str, want: impl Fn(&str) -> bool) -> String {
    let mut screen = String::new();
    for _ in 0..200 {
        screen = tmux(&["capture-pane", "-p", "-t", session]).unwrap_or_default();
        if want(&screen) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    screen
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS:`, `VmHWM:`, `RssFile:`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// A probe holding 100 MiB under 1 GiB in a region of its own, and an exporter serving that
/// region, scraped once (200): (holder, exporter, address, exporter PID).
pub fn exporter_of_a_holder() -> (Holder, Killed, String, u32) {
    let region = fresh_region();
    let (h, _) = Holder::start(
        Probe::new().limit("1g").region(&region),
        &["init", "ctx", "alloc:100m"],
    );
    let (server, addr) = serve(&["--region", region.to_str().unwrap()]);
    let pid = server.id();
    let server = Killed(server);
    let (head, _) = http_get(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    (h, server, addr, pid)
}
