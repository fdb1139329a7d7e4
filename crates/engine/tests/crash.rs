//! Crash consistency: the real engine over seeded simulated disks (`vdev::sim`), crashed at
//! random points of random ZPL workloads, must always import at the last txg whose uberblock
//! landed, with exactly the content the model had at that txg, never older than the last
//! completed fsync, and OpenZFS's zdb must find the crashed pool clean.
//!
//! One case is (layout, ashift, seed); every fourth seed's file system has dedup=on (and
//! compression off). The seed drives everything random: the workload, where
//! the power goes out (the n-th device I/O of a chosen txg sync, or between operations like a
//! kill -9), and which unflushed writes survive ([`Fault`]). After the cut the stable images are
//! imported read-only through the normal path and walked. Then the pool lives on from there:
//! imported read-write (the delete queue drained, as a mount does), more work, a second crash
//! checked the same way, and finally clean work, an export and the same checks.
//!
//! Environment: `OXZFS_CRASH_SEEDS=N` seeds per layout (default 8; `A..B` for seeds A to B-1), `OXZFS_CRASH_SEED=S` one
//! seed only, `OXZFS_CRASH_LAYOUT=name` one layout (e.g. `raidz2-a12`), `OXZFS_CRASH_ZDB=K` run
//! zdb after the first crash of every K-th case and after the final export of about every
//! 2K-th (default 8; 1 = both on every case), `OXZFS_CRASH_KEEP=1` keeps the images (in
//! $TMPDIR/oxzfs-crash-PID/LAYOUT-SEED). A failure names the variables that replay it.

use oxzfs::pool::{ImportOptions, Pool};
use oxzfs::spa;
use oxzfs::dsl_pool::PoolW;
use oxzfs::spa_create::{CreateSpec, VdevClass, VdevSpec};
use oxzfs::vdev::sim::{Fault, SimMachine, SimRng};
use oxzfs::vdev::{register_device, unregister_device, BlockDevice};
use oxzfs::zpl::{Zfs, ZplRead};
use oxzfs::zplw::{self, SetAttr, S_IFDIR, S_IFREG};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const POOL: &str = "crash";
const DEV_SIZE: u64 = 64 << 20;
const ZDB: &str = "/opt/openzfs/bin/zdb";

#[derive(Clone, Copy, Debug)]
struct Layout {
    name: &'static str,
    /// 0 single, 1 mirror of two, or raidz parity over parity + 2 disks.
    kind: &'static str,
    ndev: usize,
    ashift: u8,
}

const LAYOUTS: &[Layout] = &[
    Layout { name: "single-a9", kind: "single", ndev: 1, ashift: 9 },
    Layout { name: "single-a12", kind: "single", ndev: 1, ashift: 12 },
    Layout { name: "mirror-a9", kind: "mirror", ndev: 2, ashift: 9 },
    Layout { name: "mirror-a12", kind: "mirror", ndev: 2, ashift: 12 },
    Layout { name: "raidz1-a9", kind: "raidz1", ndev: 3, ashift: 9 },
    Layout { name: "raidz1-a12", kind: "raidz1", ndev: 3, ashift: 12 },
    Layout { name: "raidz2-a9", kind: "raidz2", ndev: 4, ashift: 9 },
    Layout { name: "raidz2-a12", kind: "raidz2", ndev: 4, ashift: 12 },
];

// ------------------------------------------------------------------------------------ model

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Node {
    dir: bool,
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// Path ("d1/f3") → node; the root is "".
type Model = BTreeMap<String, Node>;

fn digest(m: &Model) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.hash(&mut h);
    h.finish()
}

fn parent_of(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(a, _)| a)
}

fn leaf_of(p: &str) -> &str {
    p.rsplit_once('/').map_or(p, |(_, b)| b)
}

fn describe(m: &Model) -> String {
    m.iter().map(|(k, n)| format!("{k}{}({}b,{}x)", if n.dir { "/" } else { "" }, n.data.len(), n.xattrs.len())).collect::<Vec<_>>().join(" ")
}

/// Where the first difference between two models is.
fn first_diff(want: &Model, got: &Model) -> String {
    for (k, w) in want {
        match got.get(k) {
            None => return format!("'{k}' missing"),
            Some(g) if g.dir != w.dir => return format!("'{k}': dir {} vs {}", w.dir, g.dir),
            Some(g) if g.data != w.data => {
                let at = w.data.iter().zip(&g.data).position(|(a, b)| a != b).unwrap_or(w.data.len().min(g.data.len()));
                return format!("'{k}': {} bytes expected, {} read, first difference at {at}", w.data.len(), g.data.len());
            }
            Some(g) if g.xattrs != w.xattrs => return format!("'{k}': xattrs {:?} vs {:?}", w.xattrs.keys(), g.xattrs.keys()),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            return format!("'{k}' should not exist");
        }
    }
    "no difference".into()
}

// ------------------------------------------------------------------------------- the engine

/// The pool opened for writing, its root file system, and object numbers of the model's paths.
struct Fs {
    pw: PoolW,
    dsobj: u64,
    info: zplw::FsInfo,
    ids: BTreeMap<String, u64>,
    /// Files unlinked while open, not closed yet.
    held: Vec<u64>,
}

fn e2s(e: oxzfs::ZfsError) -> String {
    e.to_string()
}

impl Fs {
    fn open(dir: &Path) -> Result<Fs, String> {
        let scan = spa::scan(&[dir.to_path_buf()]);
        let cand = oxzfs::spa::choose(&scan, POOL).map_err(e2s)?;
        let mut pw = PoolW::open(cand, 32 << 20, "oxzfs-crash").map_err(e2s)?;
        pw.fs_init = oxzfs::zplw::init_fs;
        // The intent log a crash left is replayed before the file system is used.
        let rep = oxzfs::zfs_replay::replay_pool(&mut pw, true).map_err(|e| format!("replay: {e}"))?;
        if let Some(r) = rep.refused.first() {
            return Err(format!("replay refused: {r}"));
        }
        let dsobj = pw.find_dataset(POOL).map_err(e2s)?.ok_or("no root dataset")?;
        let os = pw.objset(dsobj).map_err(e2s)?;
        let info = zplw::open_fs(os, os.props.recordsize).map_err(e2s)?;
        // What a mount does first: files unlinked while open are freed (zfs_unlinked_drain).
        zplw::drain_delete_queue(os, &info).map_err(e2s)?;
        let mut ids = BTreeMap::new();
        ids.insert(String::new(), info.root);
        let mut stack = vec![String::new()];
        while let Some(p) = stack.pop() {
            let obj = ids[&p];
            for e in oxzfs::zpl::Live(os).readdir(obj).map_err(e2s)? {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                let cp = if p.is_empty() { name } else { format!("{p}/{name}") };
                ids.insert(cp.clone(), e.ino);
                if e.mode as u64 & zplw::S_IFMT == S_IFDIR {
                    stack.push(cp);
                }
            }
        }
        Ok(Fs { pw, dsobj, info, ids, held: Vec::new() })
    }

    fn os(&mut self) -> Result<&mut oxzfs::dbuf::ObjsetW, String> {
        self.pw.objset(self.dsobj).map_err(e2s)
    }
}

/// Content generator: random bytes, a repeated byte, or zeros (holes after compression).
fn gen_data(rng: &mut SimRng, len: usize) -> Vec<u8> {
    match rng.below(3) {
        0 => (0..len).map(|_| rng.next_u64() as u8).collect(),
        1 => vec![1 + rng.below(255) as u8; len],
        _ => vec![0; len],
    }
}

fn pick<'a>(rng: &mut SimRng, v: &'a [String]) -> Option<&'a String> {
    if v.is_empty() {
        None
    } else {
        Some(&v[rng.below(v.len() as u64) as usize])
    }
}

/// One random operation, on the engine and on the model alike. Operations the model predicts
/// to fail are not issued.
fn step(fs: &mut Fs, model: &mut Model, rng: &mut SimRng) -> Result<String, String> {
    let dirs: Vec<String> = model.iter().filter(|(_, n)| n.dir).map(|(k, _)| k.clone()).collect();
    let files: Vec<String> = model.iter().filter(|(_, n)| !n.dir).map(|(k, _)| k.clone()).collect();
    let txg = fs.pw.txg;
    let join = |d: &str, n: String| if d.is_empty() { n } else { format!("{d}/{n}") };
    match rng.below(20) {
        0..=3 => {
            let d = pick(rng, &dirs).expect("root").clone();
            let p = join(&d, format!("f{}", rng.below(8)));
            if model.contains_key(&p) {
                return Ok(String::new());
            }
            let dobj = fs.ids[&d];
            let obj = zplw::create(fs.os()?, dobj, leaf_of(&p).as_bytes(), S_IFREG | 0o644, 0, 0, 0, None, txg).map_err(e2s)?;
            fs.ids.insert(p.clone(), obj);
            model.insert(p.clone(), Node { dir: false, data: Vec::new(), xattrs: BTreeMap::new() });
            Ok(format!("create {p}"))
        }
        4..=8 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(String::new()) };
            let n = model.get_mut(&p).expect("listed");
            let off = rng.below(n.data.len() as u64 + 200_000) as usize;
            let len = if rng.chance(1, 3) { 1 + rng.below(300_000) } else { 1 + rng.below(16_384) } as usize;
            let data = gen_data(rng, len);
            let obj = fs.ids[&p];
            let os = fs.os()?;
            let rs = os.props.recordsize;
            zplw::write(os, obj, off as u64, &data, rs).map_err(e2s)?;
            if n.data.len() < off + len {
                n.data.resize(off + len, 0);
            }
            n.data[off..off + len].copy_from_slice(&data);
            Ok(format!("write {p} {off}+{len}"))
        }
        9 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(String::new()) };
            let n = model.get_mut(&p).expect("listed");
            let size = rng.below(n.data.len() as u64 + 100_000);
            let obj = fs.ids[&p];
            let os = fs.os()?;
            let rs = os.props.recordsize;
            zplw::setattr(os, obj, &SetAttr { size: Some(size), ..Default::default() }, rs).map_err(e2s)?;
            n.data.resize(size as usize, 0);
            Ok(format!("truncate {p} {size}"))
        }
        10 | 11 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(String::new()) };
            let d = pick(rng, &dirs).expect("root").clone();
            let q = join(&d, format!("f{}", rng.below(8)));
            if q == p || model.get(&q).is_some_and(|n| n.dir) {
                return Ok(String::new());
            }
            let info = fs.info.clone();
            let (sd, dd) = (fs.ids[parent_of(&p)], fs.ids[&d]);
            zplw::rename(fs.os()?, &info, sd, leaf_of(&p).as_bytes(), dd, leaf_of(&q).as_bytes(), 0, &|_| false).map_err(e2s)?;
            let n = model.remove(&p).expect("listed");
            model.insert(q.clone(), n);
            let obj = fs.ids.remove(&p).expect("known");
            fs.ids.insert(q.clone(), obj);
            Ok(format!("rename {p} {q}"))
        }
        12 | 13 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(String::new()) };
            let info = fs.info.clone();
            let dobj = fs.ids[parent_of(&p)];
            // Sometimes the file is still open: it waits in the delete queue until closed
            // (or, after a crash, until the next mount drains the queue).
            let open = rng.chance(1, 3);
            zplw::unlink(fs.os()?, &info, dobj, leaf_of(&p).as_bytes(), &|_| open).map_err(e2s)?;
            model.remove(&p);
            let obj = fs.ids.remove(&p).expect("known");
            if open {
                fs.held.push(obj);
            }
            Ok(format!("unlink {p}{}", if open { " (open)" } else { "" }))
        }
        17 if !fs.held.is_empty() => {
            let obj = fs.held.remove(rng.below(fs.held.len() as u64) as usize);
            let info = fs.info.clone();
            zplw::release(fs.os()?, &info, obj).map_err(e2s)?;
            Ok(format!("close unlinked object {obj}"))
        }
        14 => {
            let p = format!("d{}", rng.below(4));
            if model.contains_key(&p) {
                // An empty directory goes instead.
                if model.keys().any(|k| parent_of(k) == p) {
                    return Ok(String::new());
                }
                let info = fs.info.clone();
                let root = fs.ids[""];
                zplw::rmdir(fs.os()?, &info, root, p.as_bytes()).map_err(e2s)?;
                model.remove(&p);
                fs.ids.remove(&p);
                return Ok(format!("rmdir {p}"));
            }
            let root = fs.ids[""];
            let obj = zplw::create(fs.os()?, root, p.as_bytes(), S_IFDIR | 0o755, 0, 0, 0, None, txg).map_err(e2s)?;
            fs.ids.insert(p.clone(), obj);
            model.insert(p.clone(), Node { dir: true, data: Vec::new(), xattrs: BTreeMap::new() });
            Ok(format!("mkdir {p}"))
        }
        15 | 16 => {
            let all: Vec<String> = model.keys().filter(|k| !k.is_empty()).cloned().collect();
            let Some(p) = pick(rng, &all).cloned() else { return Ok(String::new()) };
            let name = format!("user.x{}", rng.below(3));
            let len = if rng.chance(1, 4) { rng.below(20_000) } else { rng.below(200) } as usize;
            let value = gen_data(rng, len);
            let obj = fs.ids[&p];
            zplw::setxattr(fs.os()?, obj, name.as_bytes(), &value, 0, txg).map_err(e2s)?;
            model.get_mut(&p).expect("listed").xattrs.insert(name.clone(), value);
            Ok(format!("setxattr {p} {name} {len}"))
        }
        18 => {
            // A config change: the next sync rewrites every label around its uberblocks.
            let c = format!("c{}", rng.below(1000));
            fs.pw.set_pool_prop("comment", &c).map_err(e2s)?;
            Ok(format!("zpool set comment={c}"))
        }
        _ => Ok("fsync".into()),
    }
}

/// The file system as the read-only import sees it.
fn walk(z: &Zfs) -> Result<Model, String> {
    let mut m = Model::new();
    let mut stack = vec![(String::new(), z.root_ino())];
    while let Some((p, ino)) = stack.pop() {
        let a = z.getattr(ino).map_err(e2s)?;
        let dir = a.mode as u64 & zplw::S_IFMT == S_IFDIR;
        let data = if dir { Vec::new() } else { z.read(ino, 0, a.size).map_err(e2s)? };
        let mut xattrs = BTreeMap::new();
        for name in z.listxattr(ino).map_err(e2s)? {
            let v = z.getxattr(ino, &name).map_err(e2s)?;
            xattrs.insert(String::from_utf8_lossy(&name).into_owned(), v);
        }
        if dir {
            for e in z.readdir(ino).map_err(e2s)? {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                stack.push((if p.is_empty() { name } else { format!("{p}/{name}") }, e.ino));
            }
        }
        m.insert(p, Node { dir, data, xattrs });
    }
    Ok(m)
}

/// Import read-only through the normal path: the txg it opened at and the content.
fn import_ro(dir: &Path) -> Result<(u64, Model), String> {
    let opts = ImportOptions { readonly: true, arc_max: Some(32 << 20), ..Default::default() };
    let pool = Pool::import(&[dir.to_path_buf()], POOL, &opts).map_err(|e| format!("import failed: {e}"))?;
    let txg = pool.spa.uberblock.txg;
    let z = pool.open_fs(POOL).map_err(|e| format!("mount failed: {e}"))?;
    let m = walk(&z).map_err(|e| format!("reading the imported pool at txg {txg}: {e}"));
    pool.close();
    Ok((txg, m?))
}

fn zdb_check(dir: &Path) -> Result<(), String> {
    if !Path::new(ZDB).exists() {
        panic!("OpenZFS zdb not found at {ZDB}: run scripts/install-deps.sh");
    }
    let out = std::process::Command::new(ZDB)
        .arg("-e")
        .arg("-p")
        .arg(dir)
        .args(["-bcc", "-d", POOL])
        .output()
        .map_err(|e| format!("running zdb: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tail = || text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    if !out.status.success() {
        return Err(format!("zdb -bcc -d exited {}:\n{}", out.status, tail()));
    }
    if !text.contains("No leaks") {
        return Err(format!("zdb did not report 'No leaks':\n{}", tail()));
    }
    let bad: Vec<&str> = text.lines().filter(|l| (l.contains("leaked") && !l.contains("verify nothing leaked")) || l.to_lowercase().contains("error")).collect();
    if !bad.is_empty() {
        return Err(format!("zdb found problems:\n{}", bad.join("\n")));
    }
    Ok(())
}

/// Put a fresh machine's simulated disks under the image paths (a boot).
fn boot(paths: &[PathBuf], sector: u64) -> SimMachine {
    let m = SimMachine::new();
    for p in paths {
        let d: Arc<dyn BlockDevice> = m.device(p, sector).expect("image");
        register_device(p, d);
    }
    m
}

// ------------------------------------------------------------------------------------- cases

/// What a workload run left: the model at each txg it began to sync, the last txg whose sync
/// returned (an fsync that completed), and the operations done.
struct Run {
    states: BTreeMap<u64, Model>,
    synced: u64,
    log: Vec<String>,
    /// The model's digest after each operation since the last acknowledged fsync (a txg sync
    /// or an intent-log commit that returned), that one first: what a replay may recover.
    since_ack: Vec<u64>,
    /// The model at the last acknowledged fsync.
    acked: Model,
    /// Intent-log commits that returned.
    commits: u64,
}

/// Run `nops` random operations, syncing at each "fsync" and at the end. With a machine, the
/// dice choose where the power goes out: inside one of the syncs (at a random I/O of it, often
/// among its last ones, where the uberblocks are), or after the last operation before the final
/// sync (a kill -9: the open txg is lost). Stops at the first failed I/O (the crash).
fn workload(fs: &mut Fs, model: &mut Model, m: Option<&SimMachine>, rng: &mut SimRng, nops: usize) -> Result<Run, String> {
    let mut run = Run { states: BTreeMap::new(), synced: fs.pw.txg - 1, log: Vec::new(), since_ack: vec![digest(model)], acked: model.clone(), commits: 0 };
    run.states.insert(fs.pw.txg - 1, model.clone());
    let mut last_sync_ops: u64 = 60;
    // The sync to crash in (counted from 0), or None for a kill -9 after the last operation.
    let target = match m {
        Some(_) if !rng.chance(1, 4) => Some(rng.below(nops as u64 / 6 + 1)),
        _ => None,
    };
    let mut nsync = 0;
    let mut armed = false;
    for i in 0..=nops {
        let what = if i == nops { "fsync".to_string() } else { step(fs, model, rng).map_err(|e| format!("op {i} failed before any crash: {e}"))? };
        if what != "fsync" {
            if !what.is_empty() {
                run.log.push(what);
                run.since_ack.push(digest(model));
            }
            continue;
        }
        // Half the fsyncs before the last commit the intent log (zil_commit): only the log
        // blocks are written; the txg stays open.
        if i < nops && rng.chance(1, 2) {
            run.log.push(format!("zil_commit (txg {} open)", fs.pw.txg));
            match fs.pw.zil_commit(fs.dsobj) {
                Ok(()) => {
                    run.commits += 1;
                    run.since_ack = vec![digest(model)];
                    run.acked = model.clone();
                    // A commit that synced the txg (an xattr change has no record) acknowledged it.
                    if fs.pw.synced_txg > run.synced {
                        run.synced = fs.pw.synced_txg;
                        run.states.insert(fs.pw.synced_txg, model.clone());
                    }
                }
                Err(e) => {
                    if m.is_some_and(|m| m.crashed()) {
                        run.log.push(format!("crashed in a zil_commit: {e}"));
                        return Ok(run);
                    }
                    return Err(format!("zil_commit failed without a crash: {e}"));
                }
            }
            continue;
        }
        if i == nops && m.is_some() && target.is_none() {
            run.log.push("killed before the final sync".into());
            return Ok(run);
        }
        if !fs.pw.dirty() {
            continue;
        }
        if let (Some(m), Some(t)) = (m, target) {
            if !armed && (nsync >= t || i == nops) {
                let into = if rng.chance(1, 3) { last_sync_ops.saturating_sub(rng.below(24)) } else { rng.below(last_sync_ops + 1) };
                m.arm_crash(m.ops() + into);
                armed = true;
                run.log.push(format!("armed crash at I/O {} of the next sync (the last had {last_sync_ops})", into));
            }
        }
        nsync += 1;
        let txg = fs.pw.txg;
        run.states.insert(txg, model.clone());
        let before = m.map_or(0, |m| m.ops());
        run.log.push(format!("sync txg {txg}"));
        match fs.pw.sync() {
            Ok(()) => {
                run.synced = txg;
                run.since_ack = vec![digest(model)];
                run.acked = model.clone();
                if let Some(m) = m {
                    last_sync_ops = m.ops() - before;
                }
            }
            Err(e) => {
                if m.is_some_and(|m| m.crashed()) {
                    run.log.push(format!("crashed in sync of txg {txg}: {e}"));
                    return Ok(run);
                }
                return Err(format!("sync of txg {txg} failed without a crash: {e}"));
            }
        }
    }
    Ok(run)
}

fn check_import(dir: &Path, run: &Run, what: &str) -> Result<(u64, Model), String> {
    let (txg, got) = import_ro(dir)?;
    let newest = *run.states.keys().last().expect("one state");
    if txg < run.synced {
        return Err(format!("{what}: imported at txg {txg}, older than the last completed fsync (txg {})", run.synced));
    }
    let want = run.states.get(&txg).ok_or_else(|| format!("{what}: imported at txg {txg}, which no sync of the run wrote (synced {}, newest {newest})", run.synced))?;
    if *want != got {
        return Err(format!(
            "{what}: content at txg {txg} differs from the model: {}\n  model: {}\n  read:  {}",
            first_diff(want, &got),
            describe(want),
            describe(&got)
        ));
    }
    Ok((txg, got))
}

/// What one crash did, for the summary.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    cases: u64,
    mid_sync: u64,
    between_ops: u64,
    /// Imported at the txg whose sync the crash interrupted (its uberblock landed).
    at_inflight: u64,
    torn: u64,
    zdb: u64,
    zdb_export: u64,
    /// Intent-log commits acknowledged before crashes (each checked after replay).
    commits: u64,
}

/// Boot, open read-write, run a workload that may crash, cut the power with a random fault,
/// and check what imports. Returns the model of the imported txg.
fn crash_round(dir: &Path, paths: &[PathBuf], model: Model, rng: &mut SimRng, nops: usize, zdb: bool, tally: &mut Tally) -> Result<Model, String> {
    let mut model = model;
    let m = boot(paths, 512);
    let mut fs = Fs::open(dir).map_err(|e| format!("read-write import: {e}"))?;
    let run = workload(&mut fs, &mut model, Some(&m), rng, nops)?;
    drop(fs);
    let fault = [Fault::KeepAll, Fault::DropAll, Fault::DropSome, Fault::TearLast][rng.below(4) as usize];
    let mid_sync = m.crashed();
    let cut = m.power_cut(fault, rng).map_err(|e| e.to_string())?;
    let ctx = |e: String| format!("{e}\n  fault {fault:?}: {}\n  ops: {}", cut.join("; "), run.log.join(", "));
    if mid_sync {
        tally.mid_sync += 1;
    } else {
        tally.between_ops += 1;
    }
    tally.torn += (fault == Fault::TearLast) as u64;
    drop(m);
    if zdb {
        tally.zdb += 1;
        zdb_check(dir).map_err(|e| ctx(format!("zdb after the crash: {e}")))?;
    }
    let _m = boot(paths, 512);
    let (txg, _) = check_import(dir, &run, "after the crash").map_err(ctx)?;
    tally.at_inflight += (txg > run.synced) as u64;
    // A read-write import replays the intent log: every acknowledged fsync is back, and
    // nothing but a state the workload passed through after it.
    let got = check_replay(dir, &run).map_err(ctx)?;
    tally.commits += run.commits;
    Ok(got)
}

/// Import read-write (which replays the log and syncs), then read what it left: the model at
/// the last acknowledged fsync or at one of the operations after it.
fn check_replay(dir: &Path, run: &Run) -> Result<Model, String> {
    drop(Fs::open(dir).map_err(|e| format!("read-write import (replay): {e}"))?);
    let (txg, got) = import_ro(dir)?;
    let d = digest(&got);
    if !run.since_ack.contains(&d) {
        return Err(format!(
            "after replay (txg {txg}): content is not the last acknowledged fsync's nor a later one ({} states after it): {}\n  acked: {}\n  read:  {}",
            run.since_ack.len() - 1,
            first_diff(&run.acked, &got),
            describe(&run.acked),
            describe(&got)
        ));
    }
    Ok(got)
}

/// One case: create a pool, crash it twice at random points (the second time in the life it
/// had after the first crash), then do clean work, export, and check everything again.
/// `zdb`: 0 none, 1 after the first crash, 2 also after the final export, 3 only there.
fn case(l: &Layout, seed: u64, zdb: u8, dir: &Path, tally: &mut Tally) -> Result<(), String> {
    let mut rng = SimRng::new(seed ^ (l.ndev as u64) << 56 ^ (l.ashift as u64) << 48);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let paths: Vec<PathBuf> = (0..l.ndev).map(|i| dir.join(format!("d{i}"))).collect();
    for p in &paths {
        std::fs::File::create(p).and_then(|f| f.set_len(DEV_SIZE)).map_err(|e| e.to_string())?;
    }
    let m0 = boot(&paths, 512);
    let spec = CreateSpec {
        fs_init: Some(oxzfs::zplw::init_fs),
        name: POOL.into(),
        vdevs: vec![(
            VdevClass::Normal,
            match l.kind {
                "single" => VdevSpec::File(paths[0].clone()),
                "mirror" => VdevSpec::Mirror(paths.clone()),
                "raidz1" => VdevSpec::Raidz(1, paths.clone()),
                _ => VdevSpec::Raidz(2, paths.clone()),
            },
        )],
        ashift: Some(l.ashift),
        hostname: "oxzfs-crash".into(),
        // Every fourth seed deduplicates (uncompressed, so that the zero and repeated-byte
        // blocks share copies through the DDT instead of becoming holes and embedded bps).
        fs_props: if seed % 4 == 3 { vec![("dedup".into(), "on".into()), ("compression".into(), "off".into())] } else { Vec::new() },
        ..Default::default()
    };
    drop(PoolW::create(&spec, 32 << 20).map_err(|e| format!("create: {e}"))?);
    drop(m0);
    tally.cases += 1;
    let mut model = Model::new();
    model.insert(String::new(), Node { dir: true, data: Vec::new(), xattrs: BTreeMap::new() });
    let nops = 10 + rng.below(70) as usize;
    let model = crash_round(dir, &paths, model, &mut rng, nops, zdb == 1 || zdb == 2, tally).map_err(|e| format!("first crash: {e}"))?;
    let nops = 5 + rng.below(30) as usize;
    let mut model = crash_round(dir, &paths, model, &mut rng, nops, false, tally).map_err(|e| format!("second crash: {e}"))?;
    // Life goes on: import read-write, more work, export, and the same checks.
    let m = boot(&paths, 512);
    let mut fs = Fs::open(dir).map_err(|e| format!("read-write import after the crashes: {e}"))?;
    let nops = 5 + rng.below(20) as usize;
    let mut run = workload(&mut fs, &mut model, None, &mut rng, nops)?;
    // Export syncs one to three more txgs (until $MOS is charged its last change), with the
    // content unchanged.
    let first = fs.pw.txg;
    fs.pw.export().map_err(|e| format!("export: {e}"))?;
    let last = fs.pw.synced_txg;
    for txg in first..=last {
        run.states.insert(txg, model.clone());
    }
    run.synced = last;
    drop(fs);
    drop(m);
    let _m = boot(&paths, 512);
    check_import(dir, &run, "after more work and export").map_err(|e| format!("{e}\n  ops: {}", run.log.join(", ")))?;
    if zdb >= 2 {
        tally.zdb_export += 1;
        zdb_check(dir).map_err(|e| format!("zdb after more work and export: {e}\n  ops: {}", run.log.join(", ")))?;
    }
    Ok(())
}

/// A power cut at each flush of a txg sync in turn (the data's, the uberblock's, the labels'):
/// a sync that returned is on disk — every write it made is gone that was not flushed, and the
/// import still opens its txg with its content; a sync that failed leaves the txg before it.
/// The flush after the uberblocks once failed silently here: the sync returned, the fsync
/// that waited for it was acknowledged, and the import opened the txg before.
#[test]
fn a_sync_that_returns_survives_a_power_cut_at_any_of_its_flushes() {
    let base = std::env::temp_dir().join(format!("oxzfs-crash-flush-{}", std::process::id()));
    for k in 1..=5u64 {
        let dir = base.join(format!("k{k}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let paths = vec![dir.join("d0")];
        std::fs::File::create(&paths[0]).and_then(|f| f.set_len(DEV_SIZE)).unwrap();
        let m0 = boot(&paths, 512);
        let spec = CreateSpec { fs_init: Some(oxzfs::zplw::init_fs), name: POOL.into(), vdevs: vec![(VdevClass::Normal, VdevSpec::File(paths[0].clone()))], ashift: Some(9), hostname: "oxzfs-crash".into(), ..Default::default() };
        drop(PoolW::create(&spec, 32 << 20).unwrap());
        drop(m0);
        let m = boot(&paths, 512);
        let mut fs = Fs::open(&dir).unwrap();
        let root = fs.info.root;
        let os = fs.os().unwrap();
        let f = zplw::create(os, root, b"f", S_IFREG | 0o644, 0, 0, 0, None, 5).unwrap();
        zplw::write(os, f, 0, &[7u8; 5000], 128 << 10).unwrap();
        let txg = fs.pw.txg;
        m.arm_crash_at_flush(k);
        let synced = fs.pw.sync().is_ok();
        drop(fs);
        m.power_cut(Fault::DropAll, &mut SimRng::new(k)).unwrap();
        drop(m);
        let _m = boot(&paths, 512);
        let (got_txg, model) = import_ro(&dir).unwrap_or_else(|e| panic!("flush {k}: {e}"));
        if synced {
            assert!(got_txg >= txg, "flush {k}: the sync of txg {txg} returned, the import opened txg {got_txg}");
            assert_eq!(model.get("f").map(|n| n.data.len()), Some(5000), "flush {k}: the file the sync wrote");
        } else {
            assert!(got_txg < txg && !model.contains_key("f"), "flush {k}: the sync of txg {txg} failed, the import opened txg {got_txg}");
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

#[test]
fn crash_at_random_points_imports_the_last_synced_txg() {
    assert!(Path::new(ZDB).exists(), "OpenZFS zdb not found at {ZDB}: run scripts/install-deps.sh");
    let seeds: Vec<u64> = match env_u64("OXZFS_CRASH_SEED") {
        Some(s) => vec![s],
        None => match std::env::var("OXZFS_CRASH_SEEDS").ok().as_deref().and_then(|v| v.split_once("..")) {
            Some((a, b)) => (a.parse().expect("OXZFS_CRASH_SEEDS=A..B")..b.parse().expect("OXZFS_CRASH_SEEDS=A..B")).collect(),
            None => (1..=env_u64("OXZFS_CRASH_SEEDS").unwrap_or(8)).collect(),
        },
    };
    let only = std::env::var("OXZFS_CRASH_LAYOUT").ok();
    let zdb_every = env_u64("OXZFS_CRASH_ZDB").unwrap_or(8).max(1);
    let keep = std::env::var("OXZFS_CRASH_KEEP").is_ok();
    let base = std::env::temp_dir().join(format!("oxzfs-crash-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut n = 0u64;
    let mut tally = Tally::default();
    for (li, l) in LAYOUTS.iter().enumerate().filter(|(_, l)| only.as_deref().map_or(true, |o| o == l.name)) {
        for &seed in &seeds {
            let dir = base.join(format!("{}-{seed}", l.name));
            // zdb (6 s a run) on a sample that moves across seeds and layouts: after the first
            // crash on every K-th case, after the final export on about every 2K-th.
            let k = (seed + li as u64) % zdb_every;
            let zdb = if zdb_every == 1 {
                2
            } else if k == 0 {
                1
            } else if k == zdb_every / 2 && seed % 2 == 0 {
                3
            } else {
                0
            };
            n += 1;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(l, seed, zdb, &dir, &mut tally))).unwrap_or_else(|p| {
                let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                Err(format!("panicked: {msg}"))
            });
            for i in 0..l.ndev {
                unregister_device(&dir.join(format!("d{i}")));
            }
            match r {
                Ok(()) => {
                    if !keep {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                }
                Err(e) => {
                    if !keep {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    eprintln!("FAIL {} seed {seed} (OXZFS_CRASH_LAYOUT={} OXZFS_CRASH_SEED={seed}): {e}\n", l.name, l.name);
                    failures.push(format!("{} seed {seed}", l.name));
                }
            }
        }
    }
    let _ = std::fs::remove_dir(&base);
    eprintln!("crash cases: {tally:?}");
    assert!(failures.is_empty(), "{} of {n} crash cases failed: {}", failures.len(), failures.join(", "));
}
