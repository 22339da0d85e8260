//! `vgpu top`: a live view of one or more regions, refreshed every interval: per device the
//! limits, use, share of GPU time against the SM limit and a short history; per process the same
//! with pid and command. Full screen (ratatui) on a terminal, plain text otherwise.

use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Sparkline, Table};
use vgpu_policy::size::format_size;
use vgpu_region::Snapshot;

use crate::common::{RegionSet, size_or_none};
use crate::error::{Error, Result};
use crate::status::{self, Shares};

const HISTORY: usize = 120;

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Region file (default: $CUDA_DEVICE_MEMORY_SHARED_CACHE, else /tmp/vgpu-<uid>/region).
    #[arg(long, value_name = "PATH", conflicts_with = "dir")]
    region: Option<PathBuf>,
    /// A directory of region files (every container of a node).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Refresh interval, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..))]
    interval: u64,
    /// Print one text refresh (GPU shares measured over one interval) and exit.
    #[arg(long)]
    once: bool,
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
    snap: Snapshot,
    shares: Shares,
    /// Per device: GPU share (percent) and used bytes, oldest first.
    gpu_hist: Vec<VecDeque<u64>>,
    mem_hist: Vec<VecDeque<u64>>,
    last: Option<(Instant, Snapshot)>,
}

struct State {
    set: RegionSet,
    views: Vec<View>,
    sort: Sort,
}

impl State {
    fn sample(&mut self) {
        self.set.refresh();
        let now = Instant::now();
        let mut old: HashMap<PathBuf, View> =
            self.views.drain(..).map(|v| (v.path.clone(), v)).collect();
        for (path, region) in self.set.regions() {
            // Clear the slots of processes that died since the last vgpu process looked (a
            // non-blocking try-lock per slot), so a stopped container does not show stale use.
            region.reap_dead();
            let snap = region.snapshot();
            let mut v = old.remove(path).unwrap_or_else(|| View {
                path: path.to_owned(),
                snap: Snapshot::default(),
                shares: Shares::default(),
                gpu_hist: Vec::new(),
                mem_hist: Vec::new(),
                last: None,
            });
            v.shares = shares(v.last.as_ref(), now, &snap);
            let n = snap.devices.len();
            v.gpu_hist.resize_with(n, VecDeque::new);
            v.mem_hist.resize_with(n, VecDeque::new);
            for (i, d) in snap.devices.iter().enumerate() {
                let share = v.shares.devices[i].unwrap_or(0.0).round() as u64;
                push(&mut v.gpu_hist[i], share);
                push(&mut v.mem_hist[i], d.used);
            }
            v.last = Some((now, snap.clone()));
            v.snap = snap;
            sort(&mut v.snap, &v.shares, self.sort);
            self.views.push(v);
        }
    }

    fn resort(&mut self) {
        for v in &mut self.views {
            sort(&mut v.snap, &v.shares, self.sort);
        }
    }
}

fn push(h: &mut VecDeque<u64>, v: u64) {
    if h.len() == HISTORY {
        h.pop_front();
    }
    h.push_back(v);
}

/// GPU-time shares between two samples: Δgpu_ns / Δwall, percent.
fn shares(last: Option<&(Instant, Snapshot)>, now: Instant, snap: &Snapshot) -> Shares {
    let Some((then, prev)) = last else {
        return Shares {
            devices: vec![None; snap.devices.len()],
            processes: HashMap::new(),
        };
    };
    let wall = now.duration_since(*then).as_nanos().max(1) as f64;
    let pct = |a: u64, b: u64| 100.0 * a.saturating_sub(b) as f64 / wall;
    let devices = snap
        .devices
        .iter()
        .map(|d| {
            let before = prev.devices.iter().find(|p| p.uuid == d.uuid)?;
            Some(pct(d.gpu_ns, before.gpu_ns))
        })
        .collect();
    let mut processes = HashMap::new();
    for p in &snap.processes {
        let Some(q) = prev
            .processes
            .iter()
            .find(|q| q.slot == p.slot && q.pid == p.pid && q.start_time == p.start_time)
        else {
            continue;
        };
        for (i, g) in p.gpu_ns.iter().enumerate() {
            let before = q.gpu_ns.get(i).copied().unwrap_or(0);
            processes.insert((p.slot, i), pct(*g, before));
        }
    }
    Shares { devices, processes }
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
    let (files, dirs) = match (&args.region, &args.dir) {
        (_, Some(d)) => (Vec::new(), vec![d.clone()]),
        (r, None) => (
            vec![
                r.clone()
                    .unwrap_or_else(|| crate::common::default_location().path),
            ],
            Vec::new(),
        ),
    };
    let mut st = State {
        set: RegionSet::new(files, dirs),
        views: Vec::new(),
        sort: Sort::Memory,
    };
    let interval = Duration::from_millis(args.interval);
    st.sample();
    if st.views.is_empty() {
        for e in &st.set.errors {
            eprintln!("vgpu top: {e}");
        }
        if args.dir.is_none() {
            return Ok(ExitCode::from(1));
        }
    }
    if args.once || !std::io::stdout().is_terminal() {
        loop {
            std::thread::sleep(interval);
            st.sample();
            print!("{}", text(&st));
            if args.once {
                return Ok(ExitCode::SUCCESS);
            }
            println!();
        }
    }
    tui(&mut st, interval).map_err(|e| Error::io("terminal", e))?;
    Ok(ExitCode::SUCCESS)
}

fn text(st: &State) -> String {
    let mut out = String::new();
    for v in &st.views {
        out.push_str(&status::render(&v.path, &v.snap, Some(&v.shares)));
        out.push('\n');
    }
    if st.views.is_empty() {
        out.push_str("no region files\n");
    }
    out
}

fn tui(st: &mut State, interval: Duration) -> std::io::Result<()> {
    let mut term = ratatui::try_init()?;
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now() + interval;
        loop {
            term.draw(|f| draw(f, st))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()?
                    && k.kind == KeyEventKind::Press
                {
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('s') => {
                            st.sort = st.sort.next();
                            st.resort();
                        }
                        _ => {}
                    }
                }
                continue;
            }
            st.sample();
            next = Instant::now() + interval;
        }
    })();
    ratatui::restore();
    result
}

fn draw(f: &mut ratatui::Frame, st: &State) {
    let devices: usize = st.views.iter().map(|v| v.snap.devices.len()).sum();
    let procs: usize = st
        .views
        .iter()
        .map(|v| v.snap.processes.len() * v.snap.devices.len().max(1))
        .sum();
    let mut constraints = vec![Constraint::Length(1)];
    constraints.extend(std::iter::repeat_n(Constraint::Length(5), devices));
    constraints.push(Constraint::Min((procs as u16).saturating_add(3).min(20)));
    let areas = Layout::vertical(constraints).split(f.area());
    f.render_widget(
        Paragraph::new(Line::from(format!(
            "vgpu top — {} region(s) — sort: {} (s) — quit: q",
            st.views.len(),
            st.sort.name()
        )))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        areas[0],
    );
    let mut k = 1;
    let mut rows = Vec::new();
    for v in &st.views {
        for (i, d) in v.snap.devices.iter().enumerate() {
            let share = v.shares.devices.get(i).copied().flatten();
            let title = format!(
                " {} #{i} {} — mem {} / {} (peak {}) — GPU {} / {} — denied {} ",
                v.path.file_name().map_or_else(
                    || v.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned()
                ),
                d.uuid,
                format_size(d.used),
                size_or_none(d.limit),
                format_size(d.peak),
                share.map_or_else(|| "-".to_owned(), |s| format!("{s:.0}%")),
                d.sm_limit
                    .map_or_else(|| "none".to_owned(), |s| format!("{s}%")),
                d.denied,
            );
            let block = Block::bordered().title(title);
            let inner = block.inner(areas[k]);
            f.render_widget(block, areas[k]);
            let halves =
                Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                    .split(inner);
            let g: Vec<u64> = v.gpu_hist[i].iter().copied().collect();
            let m: Vec<u64> = v.mem_hist[i].iter().copied().collect();
            let gw = halves[0].width as usize;
            let mw = halves[1].width as usize;
            f.render_widget(
                Sparkline::default()
                    .block(Block::new().title("GPU %"))
                    .data(&g[g.len().saturating_sub(gw)..])
                    .max(100),
                halves[0],
            );
            let mmax = d.limit.unwrap_or(d.peak).max(1);
            f.render_widget(
                Sparkline::default()
                    .block(Block::new().title("memory"))
                    .data(&m[m.len().saturating_sub(mw)..])
                    .max(mmax),
                halves[1],
            );
            k += 1;
        }
        for p in &v.snap.processes {
            for (i, _) in v.snap.devices.iter().enumerate() {
                let at = |x: &[u64]| x.get(i).copied().unwrap_or(0);
                rows.push(Row::new(vec![
                    p.pid.to_string(),
                    i.to_string(),
                    format_size(at(&p.used)),
                    format_size(at(&p.peak)),
                    v.shares
                        .processes
                        .get(&(p.slot, i))
                        .map_or_else(|| "-".to_owned(), |s| format!("{s:.0}")),
                    crate::common::secs(at(&p.throttled_ns)),
                    at(&p.denied).to_string(),
                    at(&p.launches).to_string(),
                    p.command.clone(),
                ]));
            }
        }
    }
    let table = Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(4),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(5),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Min(10),
        ],
    )
    .header(
        Row::new(vec![
            "PID",
            "DEV",
            "USED",
            "PEAK",
            "GPU%",
            "THROTTLED",
            "DENIED",
            "LAUNCHES",
            "COMMAND",
        ])
        .style(Style::default().add_modifier(Modifier::REVERSED)),
    )
    .block(Block::bordered().title(" processes "));
    if let Some(a) = areas.get(k) {
        f.render_widget(table, *a);
    }
}
