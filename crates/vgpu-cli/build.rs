//! Build metadata for `vgpu --version`, `vgpu_build_info` and the library's `vgpu_version()`
//! (vgpu-preload builds with this same script): the git commit (short hash, with
//! `-dirty` when the tree has changes) and the build date (UTC, `SOURCE_DATE_EPOCH` when set, for
//! reproducible builds). Either is "unknown" when git or `date` is missing, e.g. building from a
//! source archive.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let commit = run("git", &["rev-parse", "--short=12", "HEAD"]).map(|c| {
        match run("git", &["status", "--porcelain", "--untracked-files=no"]) {
            Some(_) => format!("{c}-dirty"),
            None => c,
        }
    });
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => run("date", &["-u", "-d", &format!("@{epoch}"), "+%Y-%m-%d"]),
        Err(_) => run("date", &["-u", "+%Y-%m-%d"]),
    };
    println!(
        "cargo:rustc-env=VGPU_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=VGPU_BUILD_DATE={}",
        date.as_deref().unwrap_or("unknown")
    );
    // Re-run when HEAD moves (a commit or a checkout), not on every build.
    if let Some(head) = run("git", &["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(refs) = run("git", &["rev-parse", "--git-path", "refs/heads"]) {
        println!("cargo:rerun-if-changed={refs}");
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // This script's path from either package (vgpu-cli, vgpu-preload).
    println!("cargo:rerun-if-changed=../vgpu-cli/build.rs");
}
