//! Mounting a pool's filesystems through FUSE and cleaning up the mountpoint directories oxzfs
//! made for them, shared by `zpool import` and `zfs mount`/`zfs rename`.

use oxzfs::dsl::{DatasetKind, PropValue};
use oxzfs::pool::Pool;
use oxzfs::txg::PoolHandle;
use oxzfs_fuse::{MountHandle, MountOpts};
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::Arc;

pub fn prop_of(props: &[PropValue], name: &str) -> String {
    props.iter().find(|p| p.name == name).map(|p| p.value.clone()).unwrap_or_default()
}

/// The mountpoints libzfs's remove_mountpoint takes away once file systems are unmounted (on
/// export and rename): those of the default or inherited mountpoint. Gathered before the
/// unmounts; `remove_mountpoints` runs after all of them, so a child's mountpoint directory
/// inside its (by then unmounted) parent stays, as in OpenZFS.
pub fn derived_mountpoints(pool: &Pool, mounts: &[&MountHandle]) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter(|m| pool.prop(&m.dataset, "mountpoint").map(|p| p.source == "default" || p.source.starts_with("inherited")).unwrap_or(false))
        .map(|m| m.mountpoint.clone())
        .collect()
}

/// The mounts of file system `fs` and of those below it, deepest first (taken out of `mounts`).
pub fn take_below(mounts: &mut Vec<MountHandle>, fs: &str) -> Vec<MountHandle> {
    let below = |d: &str| d == fs || d.starts_with(&format!("{fs}/"));
    let (mut gone, keep): (Vec<_>, Vec<_>) = std::mem::take(mounts).into_iter().partition(|m| below(&m.dataset));
    *mounts = keep;
    gone.sort_by_key(|m| std::cmp::Reverse(m.mountpoint.components().count()));
    gone
}

/// Unmount `gone` (from `take_below`) in its order: the datasets unmounted, and a "cannot
/// unmount" line for each that refused (which goes back to `mounts`, still mounted).
pub fn unmount_all(pool: &Pool, mounts: &mut Vec<MountHandle>, gone: Vec<MountHandle>, force: bool) -> (Vec<String>, String) {
    let (mut done, mut err) = (Vec::new(), String::new());
    for m in gone {
        let ds = m.dataset.clone();
        match m.unmount(force) {
            Ok(()) => {
                pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
                done.push(ds);
            }
            Err((m, e)) => {
                let _ = writeln!(err, "cannot unmount '{}': {e}", m.mountpoint.display());
                mounts.push(m);
            }
        }
    }
    (done, err)
}

/// rmdir each of `dirs` that is no longer a mount point, ignoring errors (remove_mountpoint).
pub fn remove_mountpoints(dirs: &[PathBuf], still_mounted: &[MountHandle]) {
    for d in dirs {
        if !still_mounted.iter().any(|m| &m.mountpoint == d) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The intent logs an import with -N claimed and left: replayed before the first mount (as
/// OpenZFS's zfs_mount replays), each file system's outcome logged as the import logs it.
fn replay_deferred(h: &Arc<PoolHandle>, err: &mut String) {
    let mut g = h.lock();
    if !g.replay_deferred {
        return;
    }
    match oxzfs::zfs_replay::replay_pool(&mut g, true) {
        Ok(rep) => {
            rep.replayed.iter().for_each(|r| tracing::info!("{r}"));
            rep.refused.iter().for_each(|r| tracing::warn!("{r}"));
        }
        Err(e) => {
            let _ = writeln!(err, "cannot replay the intent logs of '{}': {e}", g.spa.name);
        }
    }
}

/// Mount every filesystem with canmount=on and a path mountpoint (altroot already applied by
/// the engine's properties), parents before children. Returns the number of failures.
pub fn mount_all(pool: &Arc<Pool>, rw: Option<&Arc<PoolHandle>>, mounts: &mut Vec<MountHandle>, err: &mut String) -> usize {
    mount_some(pool, rw, mounts, err, None)
}

/// `mount_all`, limited to one dataset when `only` names it.
pub fn mount_some(pool: &Arc<Pool>, rw: Option<&Arc<PoolHandle>>, mounts: &mut Vec<MountHandle>, err: &mut String, only: Option<&str>) -> usize {
    if let Some(h) = rw {
        replay_deferred(h, err);
    }
    let list = match pool.datasets() {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "cannot mount datasets of '{}': {e}", pool.name());
            return 1;
        }
    };
    let mut todo = Vec::new();
    let mut no_key = 0;
    for ds in list.iter().filter(|d| d.kind == DatasetKind::Filesystem && only.map_or(true, |o| o == d.name)) {
        let props = match pool.props(&ds.name) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(err, "cannot mount '{}': {e}", ds.name);
                continue;
            }
        };
        let mp = prop_of(&props, "mountpoint");
        if prop_of(&props, "canmount") != "on" || !mp.starts_with('/') {
            continue;
        }
        if pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&ds.name) {
            continue;
        }
        // An encrypted file system whose key is not loaded: `zfs mount -a` passes it by, a
        // mount of it by name says why not (as OpenZFS's share_mount_one).
        if ds.ds.bp.encrypted && !oxzfs::dsl_crypt::register(&pool.spa, ds) {
            if only.is_some() {
                let _ = writeln!(err, "cannot mount '{}': encryption key not loaded", ds.name);
                no_key += 1;
            }
            continue;
        }
        let snapdir_visible = prop_of(&props, "snapdir") == "visible";
        todo.push((ds.name.clone(), PathBuf::from(mp), snapdir_visible, ds.ds_obj));
    }
    todo.sort_by(|a, b| a.1.components().count().cmp(&b.1.components().count()).then(a.1.cmp(&b.1)));
    let mut failures = no_key;
    for (name, mp, snapdir_visible, dsobj) in todo {
        let ro_mount = || {
            pool.open_fs(&name).and_then(|fs| {
                let opts = MountOpts { snapdir_visible, ..MountOpts::default() };
                oxzfs_fuse::mount(fs, pool.clone(), name.clone(), &mp, &opts)
            })
        };
        let res = match rw {
            // A dataset the writer cannot change yet (snapshots, system attributes) is served
            // read-only, with a note.
            Some(h) => match oxzfs_fuse::mount_rw(h.clone(), dsobj, name.clone(), &mp, Some((pool.clone(), snapdir_visible))) {
                Err(e) if e.errno() == libc::EROFS || matches!(e, oxzfs::ZfsError::Unsupported(_)) => {
                    let _ = writeln!(err, "note: '{name}' is mounted read-only: {e}");
                    ro_mount()
                }
                r => r,
            },
            None => ro_mount(),
        };
        match res {
            Ok(h) => {
                pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), mp.clone());
                mounts.push(h);
            }
            Err(e) => {
                failures += 1;
                let msg = e.to_string();
                let _ = writeln!(err, "{}", if msg.starts_with("cannot") { msg } else { format!("cannot mount '{name}': {msg}") });
            }
        }
    }
    failures
}

