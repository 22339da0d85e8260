//! The command's one reading of its own process environment.
//!
//! What vgpu itself obeys is read by `vgpu_policy::config` (stage 1 of the configuration). The
//! CLI needs the environment for another job: `vgpu run` and `vgpu doctor` compose the
//! environment of the program they start (`LD_PRELOAD` to extend, `VGPU_LIB` to find the
//! library, the limit variables to replace or remove). [`Inherited::capture`] takes that
//! environment once, in `main`, and the commands are handed it; nothing below reads the
//! process environment again.
use std::ffi::{OsStr, OsString};

/// The environment the command was started with, as it was at start.
pub struct Inherited {
    vars: Vec<(OsString, OsString)>,
}

impl Inherited {
    /// The process environment, read once.
    pub fn capture() -> Inherited {
        Inherited {
            vars: std::env::vars_os().collect(),
        }
    }

    /// An environment given as pairs (tests).
    #[cfg(test)]
    pub fn of(vars: &[(&str, &str)]) -> Inherited {
        Inherited {
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// Every variable's name.
    pub fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.vars.iter().map(|(k, _)| k.as_os_str())
    }

    /// The variables whose names are UTF-8, values made UTF-8 (lossily): what
    /// `vgpu_policy::config::Config::from_vars` reads.
    pub fn utf8(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.vars
            .iter()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v.to_string_lossy().into_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_see_what_was_captured() {
        let e = Inherited::of(&[("LD_PRELOAD", "/a.so"), ("VGPU_LIB", "/b.so")]);
        assert_eq!(e.get("LD_PRELOAD"), Some(OsStr::new("/a.so")));
        assert_eq!(e.get("VGPU_LIB_X"), None);
        assert_eq!(e.names().count(), 2);
        assert_eq!(e.utf8().next(), Some(("LD_PRELOAD".into(), "/a.so".into())));
    }
}
