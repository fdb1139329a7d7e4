//! `zpool upgrade`: which pools lack features oxzfs supports (none, -v: the features and
//! legacy versions), and enabling them (`-a`, pools), in zpool_main.c's words and layout.
//! "Supported" is what oxzfs enables on a new pool (spa_feature::DEFAULT_FEATURES); the
//! features it implements but leaves disabled there (OPTIONAL_FEATURES) are listed with (*),
//! not applied by an upgrade, as OpenZFS lists its no-upgrade features. A legacy-version pool
//! (11-28) moves to feature flags first (PoolW::upgrade_to_features).

use crate::opts::{parse, verb_opts};
use crate::verb::{err_out, usage, Out, State};
use oxzfs::spa_feature::{DEFAULT_FEATURES, OPTIONAL_FEATURES};
use std::fmt::Write;

pub const UPGRADE_USAGE: &str = "usage:\n\tupgrade\n\tupgrade -v\n\tupgrade [-V version] <-a | pool ...>\n";

const SPA_VERSION: u64 = 5000;

verb_opts!(
    /// `zpool upgrade`'s options.
    UpgradeOpts {
    #[arg(short = 'a')]
    all: bool,
    #[arg(short = 'v')]
    versions: bool,
    #[arg(short = 'V')]
    version: Option<String>,
});

const LEGACY: &[&str] = &[
    " 1   Initial ZFS version",
    " 2   Ditto blocks (replicated metadata)",
    " 3   Hot spares and double parity RAID-Z",
    " 4   zpool history",
    " 5   Compression using the gzip algorithm",
    " 6   bootfs pool property",
    " 7   Separate intent log devices",
    " 8   Delegated administration",
    " 9   refquota and refreservation properties",
    " 10  Cache devices",
    " 11  Improved scrub performance",
    " 12  Snapshot properties",
    " 13  snapused property",
    " 14  passthrough-x aclinherit",
    " 15  user/group space accounting",
    " 16  stmf property support",
    " 17  Triple-parity RAID-Z",
    " 18  Snapshot user holds",
    " 19  Log device removal",
    " 20  Compression using zle (zero-length encoding)",
    " 21  Deduplication",
    " 22  Received properties",
    " 23  Slim ZIL",
    " 24  System attributes",
    " 25  Improved scrub stats",
    " 26  Improved snapshot deletion performance",
    " 27  Improved snapshot creation performance",
    " 28  Multiple vdev replacements",
];

/// The features oxzfs can enable: (guid, name, description, applied by an upgrade), those a
/// new pool gets in the order `zpool create` enables them (OpenZFS's), then the others.
fn supported() -> Vec<(&'static str, &'static str, &'static str, bool)> {
    let auto = DEFAULT_FEATURES.iter().map(|d| (d.0, d.1, d.3, true));
    auto.chain(OPTIONAL_FEATURES.iter().map(|d| (d.0, d.1, d.3, false))).collect()
}

/// The pools' (name, version, enabled feature guids), by name.
fn pools(st: &State) -> Vec<(String, u64, Vec<String>)> {
    st.pools
        .iter()
        .map(|(n, i)| {
            let enabled = match &i.rw {
                Some(h) => h.lock().features.keys().cloned().collect(),
                None => i.pool.spa.features_enabled().into_iter().map(|(g, _)| g).collect(),
            };
            (n.clone(), i.pool.spa.version(), enabled)
        })
        .collect()
}

pub fn upgrade(st: &mut State, args: &[String]) -> Out {
    let o: UpgradeOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{UPGRADE_USAGE}")),
    };
    let version = match &o.version {
        None => SPA_VERSION,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n == SPA_VERSION || (1..=28).contains(&n) => n,
            _ => return usage(format!("invalid version '{v}'\n{UPGRADE_USAGE}")),
        },
    };
    if o.version.is_some() && !o.all && o.operands.is_empty() {
        return usage(format!("-V option is incompatible with other arguments\n{UPGRADE_USAGE}"));
    }
    if o.versions && (o.all || !o.operands.is_empty()) {
        return usage(format!("-v option is incompatible with other arguments\n{UPGRADE_USAGE}"));
    }
    if o.all && !o.operands.is_empty() {
        return usage(format!("-a option should not be used along with a pool name\n{UPGRADE_USAGE}"));
    }
    let mut out = String::from("This system supports ZFS pool feature flags.\n\n");
    if o.versions {
        out.push_str("The following features are supported:\n\nFEAT DESCRIPTION\n");
        out.push_str(&format!("{}\n", "-".repeat(61)));
        for (guid, name, desc, _) in supported() {
            let ro = oxzfs_format::features::lookup(guid).is_some_and(|f| f.readonly_compat);
            let _ = writeln!(out, "{:<37}{}", name, if ro { " (read-only compatible)" } else { "" });
            let _ = writeln!(out, "     {desc}");
        }
        out.push_str("\nThe following legacy versions are also supported:\n\nVER  DESCRIPTION\n");
        out.push_str(&format!("---  {}\n", "-".repeat(52)));
        for l in LEGACY {
            let _ = writeln!(out, "{l}");
        }
        out.push_str("\nFor more information on a particular version, including supported releases,\nsee the ZFS Administration Guide.\n\n");
        return (out, String::new(), 0);
    }
    let all = pools(st);
    if !o.all && o.operands.is_empty() {
        let legacy: Vec<&(String, u64, Vec<String>)> = all.iter().filter(|p| p.1 < SPA_VERSION).collect();
        if legacy.is_empty() {
            out.push_str("All pools are formatted using feature flags.\n\n");
        } else {
            out.push_str(
                "The following pools are formatted with legacy version numbers and can\nbe upgraded to use feature flags.  After being upgraded, these pools\nwill no longer be accessible by software that does not support feature\nflags.\n\nNote that setting a pool's 'compatibility' feature to 'legacy' will\ninhibit upgrades.\n\nVER  POOL\n---  ------------\n",
            );
            for (n, v, _) in legacy {
                let _ = writeln!(out, "{v:2}   {n}");
            }
            out.push_str("\nUse 'zpool upgrade -v' for a list of available legacy versions.\n");
        }
        let mut first = true;
        for (n, _, enabled) in all.iter().filter(|p| p.1 >= SPA_VERSION) {
            let missing: Vec<_> = supported().into_iter().filter(|f| !enabled.iter().any(|g| g == f.0)).collect();
            if missing.is_empty() {
                continue;
            }
            if first {
                out.push_str("\nSome supported features are not enabled on the following pools. Once a\nfeature is enabled the pool may become incompatible with software\nthat does not support the feature. See zpool-features(7) for details.\n\nNote that the pool 'compatibility' feature can be used to inhibit\nfeature upgrades.\n\nFeatures marked with (*) are not applied automatically on upgrade, and\nmust be applied explicitly with zpool-set(7).\n\nPOOL  FEATURE\n---------------\n");
                first = false;
            }
            let _ = writeln!(out, "{n}");
            for (_, name, _, auto) in missing {
                let _ = writeln!(out, "      {name}{}", if auto { "" } else { "(*)" });
            }
        }
        out.push_str(if first { "Every feature flags pool has all supported and requested features enabled.\n" } else { "\n" });
        return (out, String::new(), 0);
    }
    let names: Vec<String> = if o.all { all.iter().map(|p| p.0.clone()).collect() } else { o.operands.clone() };
    let mut err = String::new();
    let mut changed_any = false;
    for name in &names {
        let Some(imp) = st.pools.get(name) else {
            err.push_str(&format!("cannot open '{name}': no such pool\n"));
            continue;
        };
        let cur = imp.pool.spa.version();
        if cur > version {
            let _ = write!(out, "Pool '{name}' is already formatted using more current version '{cur}'.\n\n");
            continue;
        }
        if version != SPA_VERSION && cur == version {
            let _ = write!(out, "Pool '{name}' is already formatted using version {version}.\n\n");
            continue;
        }
        if cur != version && version != SPA_VERSION {
            err.push_str(&format!("cannot upgrade '{name}': oxzfs upgrades legacy pools to feature flags only, not to version {version}\n"));
            continue;
        }
        let Some(h) = imp.rw.clone() else {
            err.push_str(&format!("cannot upgrade '{name}': pool is read-only\n"));
            continue;
        };
        let mut w = h.lock();
        if cur < SPA_VERSION {
            if let Err(e) = w.upgrade_to_features() {
                err.push_str(&err_out(e, &format!("cannot upgrade '{name}'")).1);
                continue;
            }
            changed_any = true;
            let _ = writeln!(out, "Successfully upgraded '{name}' from version {cur} to feature flags.");
        }
        let mut enabled_now = Vec::new();
        for (guid, fname, _, auto) in supported() {
            if !auto || w.features.contains_key(guid) {
                continue;
            }
            if let Err(e) = w.feature_enable(guid) {
                let (_, m, _) = err_out(e, &format!("cannot set property for '{name}'"));
                err.push_str(&m);
                break;
            }
            enabled_now.push(fname);
        }
        if let Err(e) = w.sync() {
            err.push_str(&err_out(e, &format!("cannot upgrade '{name}'")).1);
            continue;
        }
        if enabled_now.is_empty() {
            if !o.all {
                let _ = writeln!(out, "Pool '{name}' already has all supported and requested features enabled.");
            }
        } else {
            changed_any = true;
            let _ = writeln!(out, "Enabled the following features on '{name}':");
            for f in enabled_now {
                let _ = writeln!(out, "  {f}");
            }
            out.push('\n');
        }
    }
    if o.all && !changed_any && err.is_empty() {
        out.push_str("All pools are already formatted using feature flags.\n\nEvery feature flags pool already has all supported and requested features enabled.\n");
    }
    let code = if err.is_empty() { 0 } else { 1 };
    (out, err, code)
}
