//! `hami-monitor [--interval-ms N] [--rounds N] REGION...`: runs the model of HAMi's node
//! monitor over container regions and prints one line per container per round:
//! `<unix ms> <region> active=<0|1> recent_kernel=<n> switch=<0|1> priority=<p>`.
//! Used by the GPU demo (tests/gpu/hami/) and by hand.
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vgpu_hami_model::Monitor;

fn main() {
    let mut interval = Duration::from_secs(5);
    let mut rounds: Option<u64> = None;
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--interval-ms" => {
                interval =
                    Duration::from_millis(args.next().and_then(|v| v.parse().ok()).unwrap_or(5000))
            }
            "--rounds" => rounds = args.next().and_then(|v| v.parse().ok()),
            "-h" | "--help" => {
                eprintln!("usage: hami-monitor [--interval-ms N] [--rounds N] REGION...");
                return;
            }
            _ => paths.push(PathBuf::from(a)),
        }
    }
    let mut monitor = Monitor::new();
    let mut pending = paths.clone();
    let mut round = 0u64;
    loop {
        // Regions appear when their containers start: watch each as soon as it is valid.
        pending.retain(|p| monitor.watch(p).is_err());
        match monitor.observe() {
            Ok(ds) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                for (d, c) in ds.iter().zip(monitor.containers()) {
                    println!(
                        "{now} {} active={} recent_kernel={} switch={} priority={}",
                        d.path.display(),
                        u8::from(d.active),
                        d.recent_kernel,
                        d.utilization_switch,
                        c.priority().unwrap_or(-1)
                    );
                }
            }
            Err(e) => eprintln!("hami-monitor: {e}"),
        }
        round += 1;
        if rounds.is_some_and(|n| round >= n) {
            break;
        }
        std::thread::sleep(interval);
    }
}
