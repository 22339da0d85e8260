//! Where libvgpu.so is (`--lib`, `$VGPU_LIB`, next to the executable) and the `LD_PRELOAD`
//! value that puts it first: what `vgpu run` and `vgpu doctor` both need.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// File name of the preload library.
pub const LIB_NAME: &str = "libvgpu.so";
/// Environment variable naming the preload library when `--lib` is not given.
pub const LIB_ENV: &str = "VGPU_LIB";

/// Finds libvgpu.so: `flag`, else `env` (`$VGPU_LIB`), else next to the executable `exe`
/// (its directory, then `deps/`, then `../lib/`). Returns an absolute, canonical path.
pub fn find_lib(
    flag: Option<&Path>,
    env: Option<OsString>,
    exe: io::Result<PathBuf>,
) -> Result<PathBuf> {
    let given = |origin: String, path: &Path| {
        existing_file(path).map_err(|problem| Error::LibPath { origin, problem })
    };
    if let Some(path) = flag {
        return given(format!("--lib {}", path.display()), path);
    }
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return given(format!("{LIB_ENV}={}", path.display()), &path);
    }
    let exe = exe.map_err(|e| Error::LibNotFound {
        looked: format!("the vgpu executable's directory, which cannot be located: {e}"),
    })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(LIB_NAME),
        dir.join("deps").join(LIB_NAME),
        dir.join("..").join("lib").join(LIB_NAME),
    ];
    for candidate in &candidates {
        if let Ok(path) = existing_file(candidate) {
            return Ok(path);
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(Error::LibNotFound {
        looked: looked.join(", "),
    })
}

fn existing_file(path: &Path) -> Result<PathBuf, String> {
    let canonical = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if !canonical.is_file() {
        return Err("not a file".to_owned());
    }
    Ok(canonical)
}

/// `LD_PRELOAD` with `lib` first, then the entries of `existing` (space- or colon-separated)
/// other than `lib` itself, joined by colons.
pub fn preload_value(lib: &Path, existing: Option<&OsStr>) -> Result<OsString> {
    let lib_bytes = lib.as_os_str().as_bytes();
    if lib_bytes.iter().any(|&c| c == b' ' || c == b':') {
        return Err(Error::PreloadPath(lib.to_owned()));
    }
    let mut out = lib_bytes.to_vec();
    if let Some(existing) = existing {
        for entry in existing
            .as_bytes()
            .split(|&c| c == b' ' || c == b':')
            .filter(|e| !e.is_empty() && *e != lib_bytes)
        {
            out.push(b':');
            out.extend_from_slice(entry);
        }
    }
    Ok(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_prepends_and_dedups() {
        let lib = Path::new("/opt/vgpu/libvgpu.so");
        assert_eq!(preload_value(lib, None).unwrap(), "/opt/vgpu/libvgpu.so");
        assert_eq!(
            preload_value(lib, Some(OsStr::new(""))).unwrap(),
            "/opt/vgpu/libvgpu.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/a.so /b.so:/c.so"))).unwrap(),
            "/opt/vgpu/libvgpu.so:/a.so:/b.so:/c.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/opt/vgpu/libvgpu.so:/a.so"))).unwrap(),
            "/opt/vgpu/libvgpu.so:/a.so"
        );
        assert!(preload_value(Path::new("/my dir/libvgpu.so"), None).is_err());
        assert!(preload_value(Path::new("/a:b/libvgpu.so"), None).is_err());
    }

    #[test]
    fn lib_search_order() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin").join("vgpu");
        std::fs::create_dir_all(dir.path().join("bin/deps")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        let none = find_lib(None, None, Ok(exe.clone()))
            .unwrap_err()
            .to_string();
        assert!(none.contains("cannot find libvgpu.so"), "{none}");
        assert!(none.contains("--lib"), "{none}");

        let in_lib = dir.path().join("lib").join(LIB_NAME);
        std::fs::write(&in_lib, b"").unwrap();
        let found = find_lib(None, None, Ok(exe.clone())).unwrap();
        assert_eq!(found, in_lib.canonicalize().unwrap());

        let in_deps = dir.path().join("bin/deps").join(LIB_NAME);
        std::fs::write(&in_deps, b"").unwrap();
        assert_eq!(
            find_lib(None, None, Ok(exe.clone())).unwrap(),
            in_deps.canonicalize().unwrap()
        );

        let beside = dir.path().join("bin").join(LIB_NAME);
        std::fs::write(&beside, b"").unwrap();
        assert_eq!(
            find_lib(None, None, Ok(exe.clone())).unwrap(),
            beside.canonicalize().unwrap()
        );

        // $VGPU_LIB beats the executable's directory, --lib beats both.
        let other = dir.path().join("other.so");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(
            find_lib(None, Some(other.clone().into()), Ok(exe.clone())).unwrap(),
            other.canonicalize().unwrap()
        );
        assert_eq!(
            find_lib(Some(&in_deps), Some(other.clone().into()), Ok(exe.clone())).unwrap(),
            in_deps.canonicalize().unwrap()
        );
        // An empty $VGPU_LIB is ignored; a wrong one is an error, not a fallback.
        assert_eq!(
            find_lib(None, Some("".into()), Ok(exe.clone())).unwrap(),
            beside.canonicalize().unwrap()
        );
        let e = find_lib(None, Some("/nonexistent/x.so".into()), Ok(exe.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("VGPU_LIB=/nonexistent/x.so"), "{e}");
        let e = find_lib(Some(Path::new("/nonexistent/y.so")), None, Ok(exe))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--lib /nonexistent/y.so"), "{e}");
        let e = find_lib(Some(dir.path()), None, Err(io::Error::other("x")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a file"), "{e}");
    }
}
