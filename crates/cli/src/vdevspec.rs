//! The vdev grammar of `zpool create` and `zpool add`, with OpenZFS's checks and messages.
//!
//! ```text
//!   VDEV...   := GROUP... [log GROUP...] [special GROUP...] [dedup GROUP...]
//!                [cache DEV...] [spare DEV...]
//!   GROUP     := DEV | mirror DEV DEV... | raidz[1|2|3] DEV DEV...
//! ```
//!
//! Devices are files (which must exist, as with OpenZFS) or block devices, named by absolute
//! path or relative to the current directory.

use std::path::{Path, PathBuf};

/// One top-level group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Group {
    Disk(PathBuf),
    Mirror(Vec<PathBuf>),
    Raidz(u8, Vec<PathBuf>),
}

impl Group {
    /// The replication kind and level, as OpenZFS compares them ("disk" 1, "mirror" n, "raidz" p).
    fn replication(&self) -> (&'static str, usize) {
        match self {
            Group::Disk(_) => ("disk", 1),
            Group::Mirror(d) => ("mirror", d.len()),
            Group::Raidz(p, _) => ("raidz", *p as usize),
        }
    }
    pub fn devices(&self) -> Vec<PathBuf> {
        match self {
            Group::Disk(p) => vec![p.clone()],
            Group::Mirror(d) | Group::Raidz(_, d) => d.clone(),
        }
    }
}

/// A parsed vdev specification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub data: Vec<Group>,
    pub log: Vec<Group>,
    pub special: Vec<Group>,
    pub dedup: Vec<Group>,
    pub cache: Vec<PathBuf>,
    pub spare: Vec<PathBuf>,
}

impl Spec {
    pub fn all_devices(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = Vec::new();
        for g in self.data.iter().chain(&self.log).chain(&self.special).chain(&self.dedup) {
            v.extend(g.devices());
        }
        v.extend(self.cache.iter().cloned());
        v.extend(self.spare.iter().cloned());
        v
    }
}

pub fn resolve(cwd: &Path, d: &str) -> PathBuf {
    let p = Path::new(d);
    if p.is_absolute() {
        p.to_path_buf()
    } else if d.contains('/') || cwd.join(d).exists() {
        cwd.join(d)
    } else {
        // A bare name: a disk under /dev, as zpool looks for it.
        PathBuf::from("/dev").join(d)
    }
}

/// Parse the vdev operands. `force` turns the replication-level mismatch into a warning.
pub fn parse(args: &[String], cwd: &Path, force: bool) -> Result<Spec, String> {
    let mut spec = Spec::default();
    #[derive(PartialEq, Clone, Copy)]
    enum Section {
        Data,
        Log,
        Special,
        Dedup,
        Cache,
        Spare,
    }
    let mut section = Section::Data;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "log" | "special" | "dedup" | "cache" | "spare" => {
                section = match a {
                    "log" => Section::Log,
                    "special" => Section::Special,
                    "dedup" => Section::Dedup,
                    "cache" => Section::Cache,
                    _ => Section::Spare,
                };
                i += 1;
                // A class keyword must be followed by at least one device.
                if i >= args.len() || matches!(args[i].as_str(), "log" | "special" | "dedup" | "cache" | "spare") {
                    return Err(format!("invalid vdev specification: {a} requires at least 1 device"));
                }
                continue;
            }
            _ => {}
        }
        let (kind, nparity) = match a {
            "mirror" => (Some("mirror"), 0u8),
            "raidz" | "raidz1" => (Some("raidz"), 1),
            "raidz2" => (Some("raidz"), 2),
            "raidz3" => (Some("raidz"), 3),
            _ if a.starts_with("raidz") || a.starts_with("draid") => return Err(format!("invalid vdev specification: unsupported vdev type '{a}'")),
            _ => (None, 0),
        };
        let group = if let Some(kind) = kind {
            if matches!(section, Section::Cache | Section::Spare) {
                return Err(format!("invalid vdev specification: {kind} is not supported for {} devices", if section == Section::Cache { "cache" } else { "spare" }));
            }
            if kind == "raidz" && section == Section::Log {
                return Err("invalid vdev specification: raidz is not supported for log devices".into());
            }
            i += 1;
            let start = i;
            while i < args.len()
                && !matches!(args[i].as_str(), "mirror" | "log" | "special" | "dedup" | "cache" | "spare")
                && !args[i].starts_with("raidz")
                && !args[i].starts_with("draid")
            {
                i += 1;
            }
            let devs: Vec<PathBuf> = args[start..i].iter().map(|d| resolve(cwd, d)).collect();
            if kind == "mirror" {
                if devs.len() < 2 {
                    return Err(format!("invalid vdev specification: {a} requires at least 2 devices"));
                }
                Group::Mirror(devs)
            } else {
                if devs.len() < nparity as usize + 1 {
                    return Err(format!("invalid vdev specification: {a} requires at least {} devices", nparity + 1));
                }
                Group::Raidz(nparity, devs)
            }
        } else {
            i += 1;
            match section {
                Section::Cache => {
                    spec.cache.push(resolve(cwd, a));
                    continue;
                }
                Section::Spare => {
                    spec.spare.push(resolve(cwd, a));
                    continue;
                }
                _ => Group::Disk(resolve(cwd, a)),
            }
        };
        match section {
            Section::Data => spec.data.push(group),
            Section::Log => spec.log.push(group),
            Section::Special => spec.special.push(group),
            Section::Dedup => spec.dedup.push(group),
            Section::Cache | Section::Spare => unreachable!("handled above"),
        }
    }
    if spec.data.is_empty() {
        return Err("invalid vdev specification: at least one toplevel vdev must be specified".into());
    }
    // Every device once.
    let all = spec.all_devices();
    for (k, d) in all.iter().enumerate() {
        if all[..k].contains(d) {
            return Err(format!("invalid vdev specification: {} is specified more than once", d.display()));
        }
    }
    // Replication levels must match within the data class (and within each other class).
    if !force {
        for (name, groups) in [("", &spec.data), ("special ", &spec.special), ("dedup ", &spec.dedup)] {
            if let Some(first) = groups.first() {
                let (k0, n0) = first.replication();
                for g in &groups[1..] {
                    let (k, n) = g.replication();
                    if k != k0 {
                        return Err(format!(
                            "invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: both {k0} and {k} vdevs are present{}",
                            if name.is_empty() { String::new() } else { format!(" in the {}class", name) }
                        ));
                    }
                    if n != n0 {
                        let what = if k == "mirror" { "-way mirror" } else { "-parity raidz" };
                        return Err(format!(
                            "invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: both {n0}{what} and {n}{what} vdevs are present"
                        ));
                    }
                }
            }
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str], force: bool) -> Result<Spec, String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse(&v, Path::new("/d"), force)
    }

    #[test]
    fn groups_and_classes() {
        let s = p(&["mirror", "/a", "/b", "mirror", "/c", "/d", "special", "mirror", "/e", "/f", "log", "/g", "cache", "/h", "spare", "/i"], false).unwrap();
        assert_eq!(s.data.len(), 2);
        assert_eq!(s.special, vec![Group::Mirror(vec!["/e".into(), "/f".into()])]);
        assert_eq!(s.log, vec![Group::Disk("/g".into())]);
        assert_eq!((s.cache.clone(), s.spare.clone()), (vec![PathBuf::from("/h")], vec![PathBuf::from("/i")]));
        let s = p(&["raidz2", "/a", "/b", "/c", "/d"], false).unwrap();
        assert_eq!(s.data, vec![Group::Raidz(2, vec!["/a".into(), "/b".into(), "/c".into(), "/d".into()])]);
        // Relative names are taken from the current directory when they contain a slash.
        assert_eq!(p(&["x/f1"], false).unwrap().data, vec![Group::Disk("/d/x/f1".into())]);
    }

    #[test]
    fn openzfs_refusals() {
        let e = p(&["mirror", "/a", "/b", "raidz", "/c", "/d", "/e"], false).unwrap_err();
        assert!(e.contains("mismatched replication level: both mirror and raidz vdevs are present") && e.contains("-f"), "{e}");
        assert!(p(&["mirror", "/a", "/b", "raidz", "/c", "/d", "/e"], true).is_ok());
        let e = p(&["/a", "mirror", "/b", "/c"], false).unwrap_err();
        assert!(e.contains("both disk and mirror"), "{e}");
        let e = p(&["mirror", "/a", "/b", "mirror", "/c", "/d", "/e"], false).unwrap_err();
        assert!(e.contains("both 2-way mirror and 3-way mirror"), "{e}");
        assert!(p(&["mirror", "/a"], false).unwrap_err().contains("at least 2 devices"));
        assert!(p(&["raidz3", "/a", "/b", "/c"], false).unwrap_err().contains("at least 4 devices"));
        assert!(p(&["/a", "/a"], false).unwrap_err().contains("more than once"));
        assert!(p(&["log", "/a"], false).unwrap_err().contains("at least one toplevel vdev"));
        assert!(p(&["/a", "log"], false).unwrap_err().contains("requires at least 1 device"));
        assert!(p(&["/a", "log", "raidz", "/b", "/c"], false).unwrap_err().contains("not supported for log"));
        assert!(p(&["/a", "cache", "mirror", "/b", "/c"], false).unwrap_err().contains("not supported for cache"));
        assert!(p(&["draid2", "/a"], false).unwrap_err().contains("unsupported vdev type"));
    }
}
