//! `vgpu top`: a live view of one or more regions, refreshed every interval.
//!
//! Full screen (ratatui) on a terminal: one pane per container, titled by its identity
//! (`pod/container`, `vgpu run <pid>`, else the file) and marked when stale, with a row per
//! device (GPU share over the last interval against the SM limit, memory against the limit)
//! and, where the terminal has room beside the table, each device's GPU-share history (a
//! sparkline of the last [`HISTORY`] refreshes, as many as fit); the container's newest refused
//! allocation on the pane's lower border; a line per physical GPU with the memory NVML sees in
//! use outside vgpu; and a process table whose rows name their container. Columns are dropped,
//! lowest priority first, rather than numbers cut when the terminal is narrow; the process table
//! scrolls (↑ ↓ PgUp PgDn Home End), container panes that do not fit are paged (Tab,
//! Shift-Tab); `s` cycles the sort; `q`, Esc or Ctrl-C quits, and SIGTERM, SIGHUP, SIGINT or
//! SIGQUIT restore the terminal before `top` exits (128 + the signal). Text otherwise (a pipe,
//! or `--once`, with `--json`): each refresh starts with a `--- <UTC time> UTC ---` line, and
//! output stops quietly when the reader goes away (`vgpu top | head`).

use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Sparkline, Table};
use serde::Serialize;
use vgpu_policy::size::format_size;
use vgpu_region::Snapshot;

use crate::error::{Error, Result};
use crate::nvml::{Gpu, Nvml};
use crate::shared::locate::run_pid;
use crate::shared::output::{secs, size_or_none, utc_ms, write_stdout};
use crate::shared::regions::{Identity, RegionArgs, RegionSet};
use crate::shared::report::{self, Shares, StatusJson, shares};

const HISTORY: usize = 120;

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    regions: RegionArgs,
    /// Refresh interval, milliseconds (at least 10).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = parse_interval)]
    interval: u64,
    /// Print one text refresh (GPU shares measured over one interval) and exit.
    #[arg(long)]
    once: bool,
    /// With --once: print JSON (each region as `status --json` plus `title`, `stale` and GPU
    /// shares in percent; `gpus`: NVML's view of each physical GPU).
    #[arg(long, requires = "once")]
    json: bool,
}

/// The shortest refresh interval, milliseconds.
const MIN_INTERVAL_MS: u64 = 10;

fn parse_interval(s: &str) -> std::result::Result<u64, String> {
    let what = "the refresh interval is a whole number of milliseconds";
    match s.trim().parse::<u64>() {
        Ok(ms) if ms >= MIN_INTERVAL_MS => Ok(ms),
        Ok(_) => Err(format!(
            "{what}, at least {MIN_INTERVAL_MS} (e.g. 1000 for one refresh a second)"
        )),
        Err(_) => Err(format!("{what} (e.g. 1000 for one refresh a second)")),
    }
}

/// Process sort order (`s` cycles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sort {
    Memory,
    Gpu,
    Pid,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Memory => Sort::Gpu,
            Sort::Gpu => Sort::Pid,
            Sort::Pid => Sort::Memory,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Sort::Memory => "memory",
            Sort::Gpu => "gpu",
            Sort::Pid => "pid",
        }
    }
}

/// One region's latest state and history.
struct View {
    path: PathBuf,
    /// Its container.
    identity: Identity,
    title: String,
    stale: bool,
    snap: Snapshot,
    shares: Shares,
    /// Per device: GPU share (percent), oldest first.
    gpu_hist: Vec<VecDeque<u64>>,
    last: Option<(Instant, Snapshot)>,
}

/// What the screen shows: everything `draw` needs, nothing it must fetch.
struct Model {
    views: Vec<View>,
    /// NVML's physical GPUs (empty without NVML).
    gpus: Vec<Gpu>,
    sort: Sort,
    /// First process row shown.
    scroll: usize,
    /// First container pane shown (when they do not all fit).
    first_pane: usize,
}

struct State {
    set: RegionSet,
    nvml: Option<Nvml>,
    model: Model,
}

impl State {
    fn sample(&mut self) {
        self.set.refresh();
        let now = Instant::now();
        let mut old: HashMap<PathBuf, View> = self
            .model
            .views
            .drain(..)
            .map(|v| (v.path.clone(), v))
            .collect();
        for w in self.set.shown() {
            let snap = w.snap.clone();
            let mut v = old.remove(&w.path).unwrap_or_else(|| View {
                path: w.path.clone(),
                identity: Identity::default(),
                title: String::new(),
                stale: false,
                snap: Snapshot::default(),
                shares: Shares::default(),
                gpu_hist: Vec::new(),
                last: None,
            });
            v.title = title(&w.identity, &w.path, &snap);
            v.identity = w.identity.clone();
            v.stale = w.stale;
            v.shares = shares(v.last.as_ref(), now, &snap);
            let n = snap.devices.len();
            v.gpu_hist.resize_with(n, VecDeque::new);
            for i in 0..n {
                // A percentage: clamped to [0, 1000] before the (saturating) cast.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let share = v.shares.devices[i]
                    .unwrap_or(0.0)
                    .round()
                    .clamp(0.0, 1000.0) as u64;
                push(&mut v.gpu_hist[i], share);
            }
            v.last = Some((now, snap.clone()));
            v.snap = snap;
            sort(&mut v.snap, &v.shares, self.model.sort);
            self.model.views.push(v);
        }
        self.model.gpus = self.nvml.as_ref().map(Nvml::gpus).unwrap_or_default();
    }

    fn resort(&mut self) {
        for v in &mut self.model.views {
            sort(&mut v.snap, &v.shares, self.model.sort);
        }
    }
}

fn title(id: &Identity, path: &std::path::Path, s: &Snapshot) -> String {
    let t = id.title(path);
    // A `vgpu run` region: add the command of its first process.
    match (run_pid(path), s.processes.first()) {
        (Some(_), Some(p)) if id.container.is_none() => {
            let cmd = p.command.split_whitespace().next().unwrap_or("");
            let cmd = cmd.rsplit('/').next().unwrap_or(cmd);
            format!("{t} ({cmd})")
        }
        _ => t,
    }
}

fn push(h: &mut VecDeque<u64>, v: u64) {
    if h.len() == HISTORY {
        h.pop_front();
    }
    h.push_back(v);
}

fn sort(s: &mut Snapshot, sh: &Shares, by: Sort) {
    let share = |slot: usize| -> f64 {
        sh.processes
            .iter()
            .filter(|((s, _), _)| *s == slot)
            .map(|(_, v)| *v)
            .sum()
    };
    match by {
        Sort::Memory => s
            .processes
            .sort_by_key(|p| std::cmp::Reverse(p.used.iter().sum::<u64>())),
        Sort::Gpu => s
            .processes
            .sort_by(|a, b| share(b.slot).total_cmp(&share(a.slot))),
        Sort::Pid => s.processes.sort_by_key(|p| p.pid),
    }
}

pub fn main(args: TopArgs) -> Result<ExitCode> {
    let (files, dirs) = args.regions.resolve()?;
    let mut st = State {
        set: RegionSet::new(files, dirs),
        nvml: Nvml::load(),
        model: Model {
            views: Vec::new(),
            gpus: Vec::new(),
            sort: Sort::Memory,
            scroll: 0,
            first_pane: 0,
        },
    };
    let interval = Duration::from_millis(args.interval);
    st.sample();
    if st.model.views.is_empty() && !st.set.errors.is_empty() {
        return Err(Error::Missing(st.set.errors.join("\n")));
    }
    if args.once || !std::io::stdout().is_terminal() {
        loop {
            std::thread::sleep(interval);
            st.sample();
            if args.json {
                let s = serde_json::to_string_pretty(&json(&st.model))
                    .map_err(|e| Error::io("JSON", e.into()))?;
                write_stdout(format!("{s}\n").as_bytes())?;
            } else {
                let mut out = stamp(SystemTime::now());
                out.push_str(&text(&st.model));
                write_stdout(out.as_bytes())?;
            }
            if args.once {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGQUIT,
    ] {
        // A signal only sets the flag; the loop restores the terminal and returns.
        let id = usize::try_from(sig).unwrap_or(0);
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), id)
            .map_err(|e| Error::io("installing the signal handlers", e))?;
    }
    tui(&mut st, interval, &signal).map_err(|e| Error::io("terminal", e))?;
    Ok(match signal.load(Ordering::Acquire) {
        0 => ExitCode::SUCCESS,
        // The shell's convention for a command ended by a signal.
        sig => ExitCode::from(u8::try_from(128 + sig).unwrap_or(u8::MAX)),
    })
}

/// The line that starts each text refresh: `--- YYYY-MM-DD HH:MM:SS.mmm UTC ---`.
fn stamp(now: SystemTime) -> String {
    let ms = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    format!("--- {} UTC ---\n", utc_ms(ms))
}

/// Memory NVML sees in use on `g` by processes outside the watched vgpu regions.
fn outside(g: &Gpu, views: &[View]) -> Option<u64> {
    let inside: u64 = views
        .iter()
        .flat_map(|v| v.snap.devices.iter())
        .filter(|d| d.uuid == g.uuid)
        .map(|d| d.used)
        .sum();
    g.used.map(|u| u.saturating_sub(inside))
}

fn gpu_line(g: &Gpu, views: &[View]) -> String {
    let mut s = format!("GPU {}", g.index);
    if let (Some(u), Some(t)) = (g.used, g.total) {
        s.push_str(&format!(" mem {} / {}", format_size(u), format_size(t)));
    }
    if let Some(o) = outside(g, views) {
        s.push_str(&format!(", outside vgpu {}", format_size(o)));
    }
    if let Some(u) = g.util {
        // GPU time outside vgpu: NVML's busy share less what the watched containers measured.
        let inside: f64 = views
            .iter()
            .flat_map(|v| v.snap.devices.iter().zip(&v.shares.devices))
            .filter(|(d, _)| d.uuid == g.uuid)
            .filter_map(|(_, s)| *s)
            .sum();
        s.push_str(&format!(
            ", util {u}% (outside vgpu {:.0}%)",
            (f64::from(u) - inside).max(0.0)
        ));
    }
    s.push_str(&format!("  {}", g.uuid));
    s
}

fn text(m: &Model) -> String {
    let mut out = String::new();
    for g in &m.gpus {
        out.push_str(&gpu_line(g, &m.views));
        out.push('\n');
    }
    if !m.gpus.is_empty() {
        out.push('\n');
    }
    for v in &m.views {
        let stale = if v.stale {
            " [stale: no live process]"
        } else {
            ""
        };
        out.push_str(&format!("{}{stale}\n", v.title));
        out.push_str(&report::render(
            &v.path,
            &v.snap,
            &v.identity,
            Some(&v.shares),
        ));
        out.push('\n');
    }
    if m.views.is_empty() {
        out.push_str("no region files\n");
    }
    out
}

#[derive(Serialize)]
struct TopJson<'a> {
    regions: Vec<TopRegionJson<'a>>,
    gpus: Vec<GpuJson>,
}

#[derive(Serialize)]
struct TopRegionJson<'a> {
    title: &'a str,
    stale: bool,
    #[serde(flatten)]
    status: StatusJson<'a>,
    /// Per device (region order): share of GPU time over the interval, percent.
    gpu_percent: Vec<Option<f64>>,
    /// Per process and device.
    process_gpu_percent: Vec<ProcessShare>,
}

#[derive(Serialize)]
struct ProcessShare {
    pid: u32,
    index: usize,
    percent: f64,
}

#[derive(Serialize)]
struct GpuJson {
    gpu: u32,
    uuid: String,
    used: Option<u64>,
    total: Option<u64>,
    /// NVML's used minus what the watched regions account for, bytes.
    outside_vgpu: Option<u64>,
    util_percent: Option<u32>,
}

fn json(m: &Model) -> TopJson<'_> {
    TopJson {
        regions: m
            .views
            .iter()
            .map(|v| TopRegionJson {
                title: &v.title,
                stale: v.stale,
                status: StatusJson::new(&v.path, &v.snap, &v.identity),
                gpu_percent: v.shares.devices.clone(),
                process_gpu_percent: v
                    .snap
                    .processes
                    .iter()
                    .flat_map(|p| {
                        (0..v.snap.devices.len()).filter_map(|i| {
                            Some(ProcessShare {
                                pid: p.pid,
                                index: i,
                                percent: *v.shares.processes.get(&(p.slot, i))?,
                            })
                        })
                    })
                    .collect(),
            })
            .collect(),
        gpus: m
            .gpus
            .iter()
            .map(|g| GpuJson {
                gpu: g.index,
                uuid: g.uuid.clone(),
                used: g.used,
                total: g.total,
                outside_vgpu: outside(g, &m.views),
                util_percent: g.util,
            })
            .collect(),
    }
}

/// How long the event loop waits at most before it looks at the signal flag again.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

fn tui(st: &mut State, interval: Duration, signal: &AtomicUsize) -> std::io::Result<()> {
    let mut term = ratatui::try_init()?;
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now() + interval;
        let mut drawn = false;
        loop {
            if signal.load(Ordering::Acquire) != 0 {
                return Ok(());
            }
            if !drawn {
                term.draw(|f| draw(f, &st.model))?;
                drawn = true;
            }
            let wait = next.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                st.sample();
                next = Instant::now() + interval;
                drawn = false;
                continue;
            }
            // A signal interrupts the wait (or the next look at the flag comes soon).
            let ready = match event::poll(wait.min(SIGNAL_POLL)) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => false,
                Err(e) => return Err(e),
            };
            if !ready {
                continue;
            }
            drawn = false;
            {
                // Any event redraws (a resize too); keys act first.
                if let Event::Key(k) = event::read()?
                    && k.kind == KeyEventKind::Press
                {
                    let rows = process_rows(&st.model.views);
                    let m = &mut st.model;
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(());
                        }
                        KeyCode::Char('s') => {
                            m.sort = m.sort.next();
                            st.resort();
                        }
                        KeyCode::Down | KeyCode::Char('j') => {
                            m.scroll = (m.scroll + 1).min(rows.saturating_sub(1));
                        }
                        KeyCode::Up | KeyCode::Char('k') => m.scroll = m.scroll.saturating_sub(1),
                        KeyCode::PageDown => m.scroll = (m.scroll + 10).min(rows.saturating_sub(1)),
                        KeyCode::PageUp => m.scroll = m.scroll.saturating_sub(10),
                        KeyCode::Home => m.scroll = 0,
                        KeyCode::End => m.scroll = rows.saturating_sub(1),
                        KeyCode::Tab => {
                            m.first_pane = (m.first_pane + 1) % m.views.len().max(1);
                        }
                        KeyCode::BackTab => {
                            let n = m.views.len().max(1);
                            m.first_pane = (m.first_pane + n - 1) % n;
                        }
                        _ => {}
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// A table column: header, cells, and its priority (lower is kept longer).
struct Column {
    header: &'static str,
    cells: Vec<String>,
    priority: u8,
}

/// A terminal dimension from a count, saturating (a terminal is never 65,535 cells wide).
fn u16_of(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// A column's width: its widest cell or header.
fn col_width(c: &Column) -> u16 {
    u16_of(
        c.cells
            .iter()
            .map(|s| s.chars().count())
            .chain([c.header.len()])
            .max()
            .unwrap_or(0),
    )
}

/// The width of every column side by side, one space apart.
fn natural_width(cols: &[Column]) -> u16 {
    let gaps = u16_of(cols.len().saturating_sub(1));
    cols.iter()
        .map(col_width)
        .fold(gaps, |a, w| a.saturating_add(w))
}

/// The narrowest GPU-share history worth drawing, columns (one refresh each).
const MIN_HISTORY: u16 = 16;
/// The device table keeps at least this much before the history gets room.
const MIN_TABLE: u16 = 60;

/// Splits a container pane's inner `width` between the device table (whose columns need
/// `full` side by side) and its history, one column apart: on a wide terminal the table at full
/// width and the history all the rest; else a [`MIN_HISTORY`] history if the table keeps
/// [`MIN_TABLE`]; else the table alone.
fn split_history(full: u16, width: u16) -> (u16, u16) {
    if width >= full.saturating_add(1 + MIN_HISTORY) {
        (full, width - full - 1)
    } else if width >= MIN_TABLE + 1 + MIN_HISTORY {
        (width - 1 - MIN_HISTORY, MIN_HISTORY)
    } else {
        (width, 0)
    }
}

/// The newest refusal of `v`'s container, for its pane's lower border.
fn refusal_line(v: &View) -> Option<String> {
    let r = v.snap.refusals.first()?;
    let clock = utc_ms(r.time_ms);
    let clock = clock.split(' ').nth(1).unwrap_or(&clock);
    let holder = r.holder_pid.map_or_else(String::new, |p| {
        format!("; pid {p} holds {}", format_size(r.holder_used))
    });
    Some(format!(
        " last refusal {clock} UTC: pid {} asked {} on dev {} ({} of {} in use{holder}) ",
        r.pid,
        format_size(r.requested),
        r.device,
        format_size(r.used),
        format_size(r.limit),
    ))
}

/// Draws each device's GPU-share history into `area`: a title line, then one sparkline per
/// device row (the newest refresh on the right, 0 to 100 %).
fn draw_history(f: &mut ratatui::Frame, v: &View, area: Rect) {
    if area.width == 0 || area.height == 0 {
        return;
    }
    let title = Rect { height: 1, ..area };
    f.render_widget(
        Paragraph::new("GPU% history").style(Style::default().add_modifier(Modifier::REVERSED)),
        title,
    );
    for (i, h) in v.gpu_hist.iter().enumerate() {
        let y = area.y + 1 + u16_of(i);
        if y >= area.y + area.height {
            break;
        }
        let n = h.len().min(usize::from(area.width));
        let data: Vec<u64> = h.iter().skip(h.len() - n).copied().collect();
        let row = Rect {
            y,
            height: 1,
            ..area
        };
        f.render_widget(Sparkline::default().data(data).max(100), row);
    }
}

/// The columns that fit in `width` (one space between columns), in their original order,
/// each as wide as its widest cell: lowest priority dropped first. A column with priority
/// `u8::MAX` (free text) takes what is left, or is dropped if nothing is.
fn fit(cols: Vec<Column>, width: u16) -> (Vec<Column>, Vec<Constraint>) {
    let w = col_width;
    let mut order: Vec<usize> = (0..cols.len()).collect();
    order.sort_by_key(|&i| cols[i].priority);
    let mut keep = vec![false; cols.len()];
    let mut used: u16 = 0;
    for &i in &order {
        let need = if cols[i].priority == u8::MAX {
            8
        } else {
            w(&cols[i])
        };
        let gap = u16::from(used > 0);
        if used + gap + need <= width {
            keep[i] = true;
            used += gap + need;
        }
    }
    let mut out = Vec::new();
    let mut widths = Vec::new();
    for (i, c) in cols.into_iter().enumerate() {
        if keep[i] {
            widths.push(if c.priority == u8::MAX {
                Constraint::Min(8)
            } else {
                Constraint::Length(w(&c))
            });
            out.push(c);
        }
    }
    (out, widths)
}

fn table(cols: Vec<Column>, width: u16) -> (Table<'static>, usize) {
    let (cols, widths) = fit(cols, width);
    let n = cols.first().map_or(0, |c| c.cells.len());
    let header = Row::new(cols.iter().map(|c| c.header).collect::<Vec<_>>())
        .style(Style::default().add_modifier(Modifier::REVERSED));
    let rows: Vec<Row> = (0..n)
        .map(|r| Row::new(cols.iter().map(|c| c.cells[r].clone()).collect::<Vec<_>>()))
        .collect();
    (Table::new(rows, widths).header(header).column_spacing(1), n)
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{s:.0}%"))
}

fn device_columns(v: &View) -> Vec<Column> {
    let d = &v.snap.devices;
    let col = |header, priority, f: &dyn Fn(usize) -> String| Column {
        header,
        priority,
        cells: (0..d.len()).map(f).collect(),
    };
    vec![
        col("DEV", 0, &|i| i.to_string()),
        col("GPU%", 1, &|i| {
            pct(v.shares.devices.get(i).copied().flatten())
        }),
        col("SM", 3, &|i| {
            d[i].sm_limit
                .map_or_else(|| "none".to_owned(), |s| format!("{s}%"))
        }),
        col("USED", 2, &|i| format_size(d[i].used)),
        col("LIMIT", 2, &|i| size_or_none(d[i].limit)),
        col("PEAK", 5, &|i| format_size(d[i].peak)),
        col("DENIED", 4, &|i| d[i].denied.to_string()),
        col("THROTTLED", 6, &|i| secs(d[i].throttled_ns)),
        col("UUID", 7, &|i| d[i].uuid.clone()),
    ]
}

/// Number of rows of the process table.
fn process_rows(views: &[View]) -> usize {
    views
        .iter()
        .map(|v| v.snap.processes.len() * v.snap.devices.len())
        .sum()
}

fn process_columns(views: &[View], skip: usize) -> Vec<Column> {
    let mut rows: Vec<[String; 10]> = Vec::new();
    for v in views {
        for p in &v.snap.processes {
            for i in 0..v.snap.devices.len() {
                let at = |x: &[u64]| x.get(i).copied().unwrap_or(0);
                rows.push([
                    p.pid.to_string(),
                    v.title.clone(),
                    i.to_string(),
                    pct(v.shares.processes.get(&(p.slot, i)).copied()),
                    format_size(at(&p.used)),
                    format_size(at(&p.peak)),
                    secs(at(&p.throttled_ns)),
                    at(&p.denied).to_string(),
                    at(&p.launches).to_string(),
                    p.command.clone(),
                ]);
            }
        }
    }
    let rows: Vec<_> = rows.into_iter().skip(skip).collect();
    let spec: [(&str, u8); 10] = [
        ("PID", 0),
        ("CONTAINER", 3),
        ("DEV", 2),
        ("GPU%", 1),
        ("USED", 1),
        ("PEAK", 5),
        ("THROTTLED", 6),
        ("DENIED", 4),
        ("LAUNCHES", 7),
        ("COMMAND", u8::MAX),
    ];
    spec.iter()
        .enumerate()
        .map(|(k, &(header, priority))| Column {
            header,
            priority,
            cells: rows.iter().map(|r| r[k].clone()).collect(),
        })
        .collect()
}

/// The container panes that fit above a process table of at least 6 rows, from
/// `m.first_pane` on.
fn panes(m: &Model, height: u16) -> std::ops::Range<usize> {
    let first = m.first_pane.min(m.views.len());
    let mut room = height.saturating_sub(1 + u16_of(m.gpus.len()) + 6);
    let mut end = first;
    for v in &m.views[first..] {
        let h = u16_of(v.snap.devices.len()) + 3;
        if h > room {
            break;
        }
        room -= h;
        end += 1;
    }
    first..end
}

fn draw(f: &mut ratatui::Frame, m: &Model) {
    let area = f.area();
    let shown = panes(m, area.height);
    let mut constraints = vec![Constraint::Length(1)];
    constraints.extend(m.gpus.iter().map(|_| Constraint::Length(1)));
    for v in &m.views[shown.clone()] {
        constraints.push(Constraint::Length(u16_of(v.snap.devices.len()) + 3));
    }
    constraints.push(Constraint::Min(3));
    let areas = Layout::vertical(constraints).split(area);
    let rows = process_rows(&m.views);
    let which = if shown.len() == m.views.len() {
        String::new()
    } else {
        format!(" ({}-{} shown, Tab)", shown.start + 1, shown.end)
    };
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "vgpu top: {} container(s){which}, sort {} (s), scroll ↑↓ {}/{rows}, quit q/^C",
            m.views.len(),
            m.sort.name(),
            m.scroll.min(rows),
        )))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        areas[0],
    );
    let mut k = 1;
    for g in &m.gpus {
        f.render_widget(Paragraph::new(gpu_line(g, &m.views)), areas[k]);
        k += 1;
    }
    for v in &m.views[shown] {
        let stale = if v.stale { " [stale]" } else { "" };
        let mut block = Block::bordered().title(format!(" {}{stale} ", v.title));
        if let Some(r) = refusal_line(v) {
            block = block.title_bottom(r);
        }
        let inner = block.inner(areas[k]);
        f.render_widget(block, areas[k]);
        let cols = device_columns(v);
        let (table_w, hist_w) = split_history(natural_width(&cols), inner.width);
        let (t, _) = table(cols, table_w);
        f.render_widget(
            t,
            Rect {
                width: table_w,
                ..inner
            },
        );
        draw_history(
            f,
            v,
            Rect {
                x: inner.x + table_w + 1,
                width: hist_w,
                ..inner
            },
        );
        k += 1;
    }
    let Some(&last) = areas.get(k) else { return };
    let block = Block::bordered().title(" processes ");
    let inner: Rect = block.inner(last);
    f.render_widget(block, last);
    let (t, _) = table(process_columns(&m.views, m.scroll), inner.width);
    f.render_widget(t, inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use vgpu_region::{DeviceStatus, ProcessStatus};

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn model() -> Model {
        let dev = |uuid: &str, used, limit, sm| DeviceStatus {
            uuid: uuid.to_owned(),
            limit: Some(limit),
            sm_limit: sm,
            used,
            context: 0,
            free: Some(limit - used),
            peak: used,
            gpu_ns: 0,
            throttled_ns: 1_500_000_000,
            denied: 3,
            launches: 12_345,
        };
        let proc_ = |slot, pid, used: u64| ProcessStatus {
            slot,
            pid,
            command: "/usr/bin/python3 train.py --epochs 100".into(),
            start_time: 1_700_000_000,
            used: vec![used],
            context: vec![0],
            peak: vec![used],
            gpu_ns: vec![0],
            throttled_ns: vec![0],
            denied: vec![0],
            launches: vec![0],
            library: Some("0.1.0 0123456789ab".into()),
            observing: false,
        };
        let uuid = "GPU-0f8c2c8e-8c0e-4a5b-9d1e-2f3a4b5c6d7e";
        let view = |title: &str, stale, pids: &[u32]| {
            let mut shares = Shares {
                devices: vec![Some(37.0)],
                processes: HashMap::new(),
            };
            for (slot, _) in pids.iter().enumerate() {
                shares.processes.insert((slot, 0), 12.0);
            }
            View {
                path: PathBuf::from("/x/containers/region.cache"),
                identity: Identity::default(),
                title: title.to_owned(),
                stale,
                snap: Snapshot {
                    devices: vec![dev(uuid, 3 * GIB + 512 * MIB, 14 * GIB, Some(30))],
                    processes: pids
                        .iter()
                        .enumerate()
                        .map(|(s, &p)| proc_(s, p, 1234 * MIB))
                        .collect(),
                    identity: Default::default(),
                    refusals: Vec::new(),
                },
                shares,
                gpu_hist: vec![VecDeque::new()],
                last: None,
            }
        };
        Model {
            views: vec![
                view("pod 0f8c2c8e/trainer", false, &[4_194_301, 4_194_302]),
                view("vgpu run 31337 (python3)", true, &[31337]),
            ],
            gpus: vec![Gpu {
                index: 0,
                uuid: uuid.to_owned(),
                used: Some(9 * GIB),
                total: Some(16 * GIB),
                util: Some(55),
            }],
            sort: Sort::Memory,
            scroll: 0,
            first_pane: 0,
        }
    }

    fn render(m: &Model, w: u16, h: u16) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, m)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_owned()).collect())
            .collect()
    }

    #[test]
    fn fits_80_by_24_with_share_and_memory_columns() {
        let m = model();
        let screen = render(&m, 80, 24);
        let all = screen.join("\n");
        // Panes titled by container identity, the stale one marked.
        assert!(all.contains("pod 0f8c2c8e/trainer"), "{all}");
        assert!(all.contains("vgpu run 31337 (python3) [stale]"), "{all}");
        // Device rows: GPU share, memory used and limit, in full.
        let dev = screen
            .iter()
            .find(|l| l.contains("3.50 GiB"))
            .unwrap_or_else(|| panic!("{all}"));
        for s in ["37%", "14 GiB", "30%"] {
            assert!(dev.contains(s), "{s} in {dev}\n{all}");
        }
        // Process rows: full PIDs, container, share, memory with units.
        let row = screen
            .iter()
            .find(|l| l.contains("4194301"))
            .unwrap_or_else(|| panic!("{all}"));
        for s in ["pod 0f8c2c8e/trainer", "12%", "1.21 GiB"] {
            assert!(row.contains(s), "{s} in {row}\n{all}");
        }
        // NVML: 9 GiB used of which the containers hold 7 GiB; 55 % busy, 2 × 37 % theirs.
        assert!(all.contains("outside vgpu 2 GiB"), "{all}");
        assert!(all.contains("util 55% (outside vgpu 0%)"), "{all}");
        assert!(all.contains("GPU%") && all.contains("USED"), "{all}");
    }

    #[test]
    fn narrow_terminals_drop_columns_not_digits() {
        let m = model();
        for w in [40u16, 50, 60, 70] {
            let screen = render(&m, w, 24);
            let all = screen.join("\n");
            let row = screen
                .iter()
                .find(|l| l.contains("4194301"))
                .unwrap_or_else(|| panic!("width {w}: the PID is cut\n{all}"));
            assert!(row.contains("1.21 GiB"), "width {w}: {row}\n{all}");
            // Whatever is shown of a size keeps its unit.
            for l in &screen {
                assert!(!l.contains("1.21 G "), "width {w}: {l}");
            }
        }
        // At 40 columns the lower-priority ones are gone.
        let all = render(&m, 40, 24).join("\n");
        assert!(!all.contains("LAUNCHES"), "{all}");
        assert!(!all.contains("THROTTLED"), "{all}");
    }

    #[test]
    fn the_process_table_scrolls() {
        let mut m = model();
        m.scroll = 2;
        let all = render(&m, 80, 24).join("\n");
        assert!(!all.contains("4194301"), "{all}");
        assert!(all.contains("31337"), "{all}");
        assert!(all.contains("2/3"), "{all}");
    }

    #[test]
    fn container_panes_that_do_not_fit_are_paged() {
        let mut m = model();
        let extra: Vec<View> = (0..6)
            .map(|i| {
                let mut v = model().views.remove(0);
                v.title = format!("pod 0f8c2c8e/worker-{i}");
                v
            })
            .collect();
        m.views.extend(extra);
        let all = render(&m, 80, 24).join("\n");
        // 8 panes of 4 rows do not fit in 24: the first four do, the process table keeps
        // its rows, and the header says how to page.
        assert!(all.contains("8 container(s) (1-4 shown, Tab)"), "{all}");
        assert!(all.contains("4194301"), "{all}");
        assert!(!all.contains("worker-5 "), "{all}");
        m.first_pane = 7;
        let all = render(&m, 80, 24).join("\n");
        assert!(all.contains("worker-5"), "{all}");
        assert!(all.contains("(8-8 shown, Tab)"), "{all}");
    }

    /// Issue 26 item 12: a wide terminal shows every device column and, beside them, the
    /// history of each device's GPU share as a sparkline, newest on the right; the newest
    /// refusal sits on the pane's lower border.
    #[test]
    fn a_wide_terminal_shows_every_column_and_the_gpu_share_history() {
        let mut m = model();
        // 0 %, then ramping to 100 %: the newest bars are the tallest.
        m.views[0].gpu_hist[0] = (0..=100u64).step_by(5).collect();
        m.views[0].snap.refusals.push(vgpu_region::RefusalStatus {
            seq: 3,
            device: 0,
            time_ms: 1_700_000_000_123,
            pid: 4_194_302,
            requested: 600 * MIB,
            used: 13 * GIB,
            limit: 14 * GIB,
            own: GIB,
            holder_pid: Some(4_194_301),
            holder_used: 12 * GIB,
        });
        let screen = render(&m, 200, 30);
        let all = screen.join("\n");
        for h in ["UUID", "THROTTLED", "PEAK", "DENIED", "GPU% history"] {
            assert!(all.contains(h), "{h}\n{all}");
        }
        let row = screen
            .iter()
            .find(|l| l.contains("3.50 GiB") && l.contains("GPU-0f8c"))
            .unwrap_or_else(|| panic!("{all}"));
        let bars: String = row.chars().filter(|c| "▁▂▃▄▅▆▇█".contains(*c)).collect();
        assert!(bars.chars().count() >= 15, "{row}");
        assert_eq!(bars.chars().last(), Some('█'), "{row}");
        assert!(
            all.contains("last refusal 22:13:20.123 UTC: pid 4194302 asked 600 MiB on dev 0 (13 GiB of 14 GiB in use; pid 4194301 holds 12 GiB)"),
            "{all}"
        );
        // At 80 columns a short history still fits beside the columns that matter.
        let screen = render(&m, 80, 24);
        let all = screen.join("\n");
        assert!(all.contains("GPU% history"), "{all}");
        let row = screen.iter().find(|l| l.contains("3.50 GiB")).unwrap();
        for s in ["37%", "14 GiB", "30%"] {
            assert!(row.contains(s), "{s} in {row}");
        }
        assert!(row.contains('█'), "{row}");
        // Too narrow for both: the table alone.
        let all = render(&m, 60, 24).join("\n");
        assert!(!all.contains("GPU% history"), "{all}");
    }

    #[test]
    fn refreshes_in_a_pipe_start_with_a_utc_timestamp() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(stamp(t), "--- 2023-11-14 22:13:20.123 UTC ---\n");
    }

    #[test]
    fn the_interval_says_what_it_takes() {
        assert_eq!(parse_interval("250"), Ok(250));
        let e = parse_interval("0").unwrap_err();
        assert!(e.contains("milliseconds, at least 10"), "{e}");
        assert!(!e.contains("18446744073709551615"), "{e}");
        assert!(parse_interval("1s").unwrap_err().contains("milliseconds"));
    }

    #[test]
    fn columns_fit_by_priority() {
        let c = |h, p, cell: &str| Column {
            header: h,
            priority: p,
            cells: vec![cell.to_owned()],
        };
        let (kept, _) = fit(
            vec![c("A", 0, "1234"), c("B", 2, "12345"), c("C", 1, "123")],
            9,
        );
        let names: Vec<_> = kept.iter().map(|c| c.header).collect();
        assert_eq!(names, ["A", "C"]);
    }
}
