//! Crash consistency: the real engine over seeded simulated disks (`vdev::sim`), crashed at
//! random points of random ZPL workloads, must always import at the last txg whose uberblock
//! landed, with exactly the content the model had at that txg, never older than the last
//! completed fsync, and OpenZFS's zdb must find the crashed pool clean.
//!
//! One case is (layout, ashift, seed); every fourth seed's file system has dedup=on (and
//! compression off). Two layouts have a separate log device (a `VdevClass::Log` disk or
//! mirror), which then takes every intent-log block (checked by the zil kstat's
//! zil_itx_metaslab_slog/normal counts); on them every fourth other seed has
//! logbias=throughput. The seed drives everything random: the workload (with bursts of 32K to
//! 64K writes into one 128K record, mostly committed at once), where the power goes out (the
//! n-th device I/O of a chosen txg sync, or of a chosen intent-log commit, or between operations
//! like a kill -9), and which unflushed writes survive ([`Fault`]). After the cut the stable
//! images are imported read-only through the normal path and walked, then read-write (the log
//! replayed): everything the last acknowledged fsync or commit had is there. Then the pool lives
//! on from there: more work, a second crash checked the same way, and finally clean work, an
//! export and the same checks.
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
    /// The data vdev: "single", "mirror" (of two), or "raidz1"/"raidz2" (parity + 2 disks).
    kind: &'static str,
    /// Devices in all, the log devices (the last `log`) included.
    ndev: usize,
    ashift: u8,
    /// A separate log vdev (VdevClass::Log) after the data vdev: 0 none, 1 one disk, 2 a mirror.
    /// With one, every intent-log block goes to it (and writes are copied into the log,
    /// never indirect).
    log: usize,
}

const LAYOUTS: &[Layout] = &[
    Layout { name: "single-a9", kind: "single", ndev: 1, ashift: 9, log: 0 },
    Layout { name: "single-a12", kind: "single", ndev: 1, ashift: 12, log: 0 },
    Layout { name: "mirror-a9", kind: "mirror", ndev: 2, ashift: 9, log: 0 },
    Layout { name: "mirror-a12", kind: "mirror", ndev: 2, ashift: 12, log: 0 },
    Layout { name: "raidz1-a9", kind: "raidz1", ndev: 3, ashift: 9, log: 0 },
    Layout { name: "raidz1-a12", kind: "raidz1", ndev: 3, ashift: 12, log: 0 },
    Layout { name: "raidz2-a9", kind: "raidz2", ndev: 4, ashift: 9, log: 0 },
    Layout { name: "raidz2-a12", kind: "raidz2", ndev: 4, ashift: 12, log: 0 },
    Layout { name: "mirror-log-a9", kind: "mirror", ndev: 3, ashift: 9, log: 1 },
    Layout { name: "single-logmirror-a12", kind: "single", ndev: 3, ashift: 12, log: 2 },
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

/// A change of the file system, as the model applies it (`apply`); a workload keeps those since
/// the last acknowledged fsync, to rebuild what a replay of part of a commit leaves.
#[derive(Clone, Debug)]
enum Op {
    Create { p: String, dir: bool },
    Write { p: String, obj: u64, off: usize, data: Vec<u8> },
    Truncate { p: String, size: usize },
    /// A rename, over `q` if it exists (whose object is then freed).
    Rename { p: String, q: String },
    /// An unlink or rmdir; `held`: the content of a file still open (it lives on unlinked).
    Remove { p: String, obj: u64, held: Option<Vec<u8>> },
    /// The last close of a file unlinked while open: its object is freed.
    Close { obj: u64 },
    Xattr { p: String, name: String, value: Vec<u8> },
    /// A pool property: nothing of the file system.
    Pool,
}

fn apply_write(model: &mut Model, p: &str, off: usize, data: &[u8]) {
    let n = model.get_mut(p).expect("listed");
    if n.data.len() < off + data.len() {
        n.data.resize(off + data.len(), 0);
    }
    n.data[off..off + data.len()].copy_from_slice(data);
}

fn apply(model: &mut Model, op: &Op) {
    let empty = |dir| Node { dir, data: Vec::new(), xattrs: BTreeMap::new() };
    match op {
        Op::Create { p, dir } => drop(model.insert(p.clone(), empty(*dir))),
        Op::Write { p, off, data, .. } => apply_write(model, p, *off, data),
        Op::Truncate { p, size } => model.get_mut(p).expect("listed").data.resize(*size, 0),
        Op::Rename { p, q } => {
            let n = model.remove(p).expect("listed");
            model.insert(q.clone(), n);
        }
        Op::Remove { p, .. } => drop(model.remove(p)),
        Op::Xattr { p, name, value } => drop(model.get_mut(p).expect("listed").xattrs.insert(name.clone(), value.clone())),
        Op::Close { .. } | Op::Pool => {}
    }
}

/// What `step` did.
enum Did {
    Nothing,
    Fsync,
    Op(String, Op),
}

/// One random operation on the engine; the caller applies it to the model. Operations the
/// model predicts to fail are not issued.
fn step(fs: &mut Fs, model: &Model, rng: &mut SimRng) -> Result<Did, String> {
    let dirs: Vec<String> = model.iter().filter(|(_, n)| n.dir).map(|(k, _)| k.clone()).collect();
    let files: Vec<String> = model.iter().filter(|(_, n)| !n.dir).map(|(k, _)| k.clone()).collect();
    let txg = fs.pw.txg;
    let join = |d: &str, n: String| if d.is_empty() { n } else { format!("{d}/{n}") };
    match rng.below(20) {
        0..=3 => {
            let d = pick(rng, &dirs).expect("root").clone();
            let p = join(&d, format!("f{}", rng.below(8)));
            if model.contains_key(&p) {
                return Ok(Did::Nothing);
            }
            let dobj = fs.ids[&d];
            let obj = zplw::create(fs.os()?, dobj, leaf_of(&p).as_bytes(), S_IFREG | 0o644, 0, 0, 0, None, txg).map_err(e2s)?;
            fs.ids.insert(p.clone(), obj);
            Ok(Did::Op(format!("create {p}"), Op::Create { p, dir: false }))
        }
        4..=8 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(Did::Nothing) };
            let off = rng.below(model[&p].data.len() as u64 + 200_000) as usize;
            let len = if rng.chance(1, 3) { 1 + rng.below(300_000) } else { 1 + rng.below(16_384) } as usize;
            let data = gen_data(rng, len);
            let obj = fs.ids[&p];
            let os = fs.os()?;
            let rs = os.props.recordsize;
            zplw::write(os, obj, off as u64, &data, rs).map_err(e2s)?;
            Ok(Did::Op(format!("write {p} {off}+{len}"), Op::Write { p, obj, off, data }))
        }
        9 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(Did::Nothing) };
            let size = rng.below(model[&p].data.len() as u64 + 100_000);
            let obj = fs.ids[&p];
            let os = fs.os()?;
            let rs = os.props.recordsize;
            zplw::setattr(os, obj, &SetAttr { size: Some(size), ..Default::default() }, rs).map_err(e2s)?;
            Ok(Did::Op(format!("truncate {p} {size}"), Op::Truncate { p, size: size as usize }))
        }
        10 | 11 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(Did::Nothing) };
            let d = pick(rng, &dirs).expect("root").clone();
            let q = join(&d, format!("f{}", rng.below(8)));
            if q == p || model.get(&q).is_some_and(|n| n.dir) {
                return Ok(Did::Nothing);
            }
            let info = fs.info.clone();
            let (sd, dd) = (fs.ids[parent_of(&p)], fs.ids[&d]);
            zplw::rename(fs.os()?, &info, sd, leaf_of(&p).as_bytes(), dd, leaf_of(&q).as_bytes(), 0, &|_| false).map_err(e2s)?;
            let obj = fs.ids.remove(&p).expect("known");
            fs.ids.insert(q.clone(), obj);
            Ok(Did::Op(format!("rename {p} {q}"), Op::Rename { p, q }))
        }
        12 | 13 => {
            let Some(p) = pick(rng, &files).cloned() else { return Ok(Did::Nothing) };
            let info = fs.info.clone();
            let dobj = fs.ids[parent_of(&p)];
            // Sometimes the file is still open: it waits in the delete queue until closed
            // (or, after a crash, until the next mount drains the queue).
            let open = rng.chance(1, 3);
            zplw::unlink(fs.os()?, &info, dobj, leaf_of(&p).as_bytes(), &|_| open).map_err(e2s)?;
            let obj = fs.ids.remove(&p).expect("known");
            if open {
                fs.held.push(obj);
            }
            let held = open.then(|| model[&p].data.clone());
            Ok(Did::Op(format!("unlink {p}{}", if open { " (open)" } else { "" }), Op::Remove { p, obj, held }))
        }
        17 if !fs.held.is_empty() => {
            let obj = fs.held.remove(rng.below(fs.held.len() as u64) as usize);
            let info = fs.info.clone();
            zplw::release(fs.os()?, &info, obj).map_err(e2s)?;
            Ok(Did::Op(format!("close unlinked object {obj}"), Op::Close { obj }))
        }
        14 => {
            let p = format!("d{}", rng.below(4));
            if model.contains_key(&p) {
                // An empty directory goes instead.
                if model.keys().any(|k| parent_of(k) == p) {
                    return Ok(Did::Nothing);
                }
                let info = fs.info.clone();
                let root = fs.ids[""];
                zplw::rmdir(fs.os()?, &info, root, p.as_bytes()).map_err(e2s)?;
                let obj = fs.ids.remove(&p).expect("known");
                return Ok(Did::Op(format!("rmdir {p}"), Op::Remove { p, obj, held: None }));
            }
            let root = fs.ids[""];
            let obj = zplw::create(fs.os()?, root, p.as_bytes(), S_IFDIR | 0o755, 0, 0, 0, None, txg).map_err(e2s)?;
            fs.ids.insert(p.clone(), obj);
            Ok(Did::Op(format!("mkdir {p}"), Op::Create { p, dir: true }))
        }
        15 | 16 => {
            let all: Vec<String> = model.keys().filter(|k| !k.is_empty()).cloned().collect();
            let Some(p) = pick(rng, &all).cloned() else { return Ok(Did::Nothing) };
            let name = format!("user.x{}", rng.below(3));
            let len = if rng.chance(1, 4) { rng.below(20_000) } else { rng.below(200) } as usize;
            let value = gen_data(rng, len);
            let obj = fs.ids[&p];
            zplw::setxattr(fs.os()?, obj, name.as_bytes(), &value, 0, txg).map_err(e2s)?;
            Ok(Did::Op(format!("setxattr {p} {name} {len}"), Op::Xattr { p, name, value }))
        }
        18 => {
            // A config change: the next sync rewrites every label around its uberblocks.
            let c = format!("c{}", rng.below(1000));
            fs.pw.set_pool_prop("comment", &c).map_err(e2s)?;
            Ok(Did::Op(format!("zpool set comment={c}"), Op::Pool))
        }
        _ => Ok(Did::Fsync),
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
    /// The crash came inside a zil_commit (its log writes, or the txg sync it fell back to),
    /// and in the first case, `in_log_write`.
    in_commit: bool,
    in_log_write: bool,
    /// Write bursts into one record (see [`burst`]).
    bursts: u64,
    /// The operations since the last acknowledged fsync (each made the state after it in
    /// `since_ack`).
    ops: Vec<Op>,
    /// After a crash inside a commit: the content then of each object those operations wrote
    /// to, the bytes the commit logged for them (none for an object freed by then, whose writes
    /// it did not log).
    at_commit: BTreeMap<u64, Vec<u8>>,
}

impl Run {
    /// An operation done: into the log, the model, and the states a replay may recover.
    fn did(&mut self, model: &mut Model, what: String, op: Op) {
        apply(model, &op);
        self.log.push(what);
        self.since_ack.push(digest(model));
        self.ops.push(op);
    }

    /// An fsync acknowledged: the model now is what a replay must recover at least.
    fn acked(&mut self, model: &Model) {
        self.since_ack = vec![digest(model)];
        self.ops.clear();
        self.acked = model.clone();
    }

    /// The crash came inside a commit: keep what it read of the files it logged writes of.
    fn crashed_in_commit(&mut self, fs: &Fs, model: &Model) {
        self.in_commit = true;
        let path_of: BTreeMap<u64, &String> = fs.ids.iter().map(|(p, o)| (*o, p)).collect();
        for (i, op) in self.ops.iter().enumerate() {
            let Op::Write { obj, .. } = op else { continue };
            let content = match path_of.get(obj) {
                Some(p) => Some(model[*p].data.clone()),
                // Unlinked since: still there if it was open and not closed after.
                None => self.ops[i..].iter().rev().find_map(|o| match o {
                    Op::Close { obj: c } if c == obj => Some(None),
                    Op::Remove { obj: r, held, .. } if r == obj => Some(held.clone()),
                    _ => None,
                }).flatten(),
            };
            if let Some(c) = content {
                self.at_commit.insert(*obj, c);
            }
        }
    }
}

/// Where a workload's power cut goes.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// After the last operation, before the final sync (a kill -9).
    Kill,
    /// Inside the n-th txg sync (from 0) or the final one.
    Sync(u64),
    /// Inside the n-th intent-log commit (from 0) that extends a chain, or a later one when that
    /// one issued fewer I/Os than the dice chose; a kill -9 at the end when none did.
    Commit(u64),
}

/// Two to four writes of 32K to 64K into one record of a file, each logged as an operation of
/// its own. Each is at least zfs_immediate_write_sz: without a log device the commit after them
/// writes the record's block once and logs each write as an indirect record naming it (with
/// one, their bytes are copied into the log). The replay once applied only the first of those
/// records: the others named a block the chain had claimed already.
fn burst(fs: &mut Fs, model: &mut Model, rng: &mut SimRng, run: &mut Run) -> Result<(), String> {
    let files: Vec<String> = model.iter().filter(|(_, n)| !n.dir).map(|(k, _)| k.clone()).collect();
    let Some(p) = pick(rng, &files).cloned() else { return Ok(()) };
    let obj = fs.ids[&p];
    let rs = fs.os()?.props.recordsize;
    let len = model[&p].data.len() as u64;
    let base = rng.below(len / rs + 2) * rs;
    let (k32, k64) = (32u64 << 10, 64u64 << 10);
    let pieces: Vec<(u64, u64)> = match rng.below(3) {
        // The two halves, in either order.
        0 if rng.chance(1, 2) => vec![(0, k64), (k64, k64)],
        0 => vec![(k64, k64), (0, k64)],
        // The four quarters, in a random order.
        1 => {
            let mut q: Vec<(u64, u64)> = (0..4).map(|j| (j * k32, k32)).collect();
            for j in (1..q.len()).rev() {
                q.swap(j, rng.below(j as u64 + 1) as usize);
            }
            q
        }
        // Anywhere in the record, overlapping or not.
        _ => (0..2 + rng.below(3))
            .map(|_| {
                let n = k32 + rng.below(k32 + 1);
                (rng.below(rs - n + 1), n)
            })
            .collect(),
    };
    for (o, n) in pieces {
        let off = (base + o) as usize;
        let data = if rng.chance(3, 4) { (0..n).map(|_| rng.next_u64() as u8).collect() } else { gen_data(rng, n as usize) };
        let os = fs.os()?;
        zplw::write(os, obj, off as u64, &data, rs).map_err(e2s)?;
        run.did(model, format!("write {p} {off}+{n} (burst into record {})", base / rs), Op::Write { p: p.clone(), obj, off, data });
    }
    run.bursts += 1;
    Ok(())
}

/// Run `nops` random operations, syncing at each "fsync" and at the end. With a machine, the
/// dice choose where the power goes out: inside one of the syncs (at a random I/O of it, often
/// among its last ones, where the uberblocks are), inside one of the intent-log commits (at a
/// random I/O of it, often its last ones, the log blocks and their flush), or after the last
/// operation before the final sync (a kill -9: the open txg is lost). Stops at the first failed
/// I/O (the crash).
fn workload(fs: &mut Fs, model: &mut Model, m: Option<&SimMachine>, rng: &mut SimRng, nops: usize) -> Result<Run, String> {
    let mut run = Run { states: BTreeMap::new(), synced: fs.pw.txg - 1, log: Vec::new(), since_ack: vec![digest(model)], acked: model.clone(), commits: 0, in_commit: false, in_log_write: false, bursts: 0, ops: Vec::new(), at_commit: BTreeMap::new() };
    run.states.insert(fs.pw.txg - 1, model.clone());
    let mut last_sync_ops: u64 = 60;
    // I/Os of the last commit that wrote log blocks without syncing a txg (a guess at first).
    let mut last_commit_ops: u64 = 4;
    let target = match m {
        None => Target::Kill,
        Some(_) if rng.chance(1, 4) => Target::Kill,
        Some(_) if rng.chance(1, 3) => Target::Commit(rng.below(nops as u64 / 16 + 1)),
        Some(_) => Target::Sync(rng.below(nops as u64 / 6 + 1)),
    };
    let (mut nsync, mut ncommit) = (0, 0);
    let mut armed = false;
    for i in 0..=nops {
        // Now and then several writes into one record, mostly committed at once.
        let mut commit_now = false;
        if i < nops && rng.chance(1, 10) {
            burst(fs, model, rng, &mut run).map_err(|e| format!("op {i} (burst) failed before any crash: {e}"))?;
            commit_now = rng.chance(3, 4);
            if !commit_now {
                continue;
            }
        } else if i < nops {
            match step(fs, model, rng).map_err(|e| format!("op {i} failed before any crash: {e}"))? {
                Did::Nothing => continue,
                Did::Op(what, op) => {
                    run.did(model, what, op);
                    continue;
                }
                Did::Fsync => {}
            }
        }
        // Half the fsyncs before the last commit the intent log (zil_commit): only the log
        // blocks are written; the txg stays open. All do when the crash is to be in a commit.
        if i < nops && (commit_now || matches!(target, Target::Commit(_)) || rng.chance(1, 2)) {
            // Only a commit with a chain to extend writes log blocks (the first one creates it
            // and syncs the txg): those are the ones counted and aimed at.
            let chain = fs.os()?.zil.has_chain();
            let mut armed_here = false;
            if let (Some(m), Target::Commit(t), true) = (m, target, chain) {
                if !armed && ncommit >= t {
                    let est = last_commit_ops.max(1);
                    let into = if rng.chance(1, 3) { est.saturating_sub(1 + rng.below(2)) } else { rng.below(est + 1) };
                    m.arm_crash(m.ops() + into);
                    (armed, armed_here) = (true, true);
                    run.log.push(format!("armed crash at I/O {into} of the next commit (the last had {last_commit_ops})"));
                }
            }
            ncommit += chain as u64;
            // A commit may sync the open txg (the first of a chain, an xattr change with no
            // record, too much to log), and the next one: their content is the model's now.
            let txg = fs.pw.txg;
            for t in txg..txg + 2 {
                run.states.insert(t, model.clone());
            }
            let (before, synced_before, logged_before) = (m.map_or(0, |m| m.ops()), fs.pw.synced_txg, zil_class_counts());
            run.log.push(format!("zil_commit (txg {txg} open)"));
            match fs.pw.zil_commit(fs.dsobj) {
                Ok(()) => {
                    run.commits += 1;
                    run.acked(model);
                    // A commit that synced the txg (an xattr change has no record) acknowledged it.
                    if fs.pw.synced_txg > run.synced {
                        run.synced = fs.pw.synced_txg;
                        run.states.insert(fs.pw.synced_txg, model.clone());
                    }
                    if let Some(m) = m {
                        let n = m.ops() - before;
                        if n > 0 && fs.pw.synced_txg == synced_before {
                            last_commit_ops = n;
                        }
                        if armed_here {
                            // It issued fewer I/Os than that: the next commit is the target.
                            m.arm_crash(u64::MAX);
                            armed = false;
                            run.log.push(format!("no crash: the commit issued {n} I/Os"));
                        }
                    }
                }
                Err(e) => {
                    if m.is_some_and(|m| m.crashed()) {
                        // Records were packed into log blocks: it crashed writing them.
                        run.in_log_write = zil_class_counts() != logged_before;
                        run.log.push(format!("crashed in a zil_commit{}: {e}", if run.in_log_write { " (writing its log blocks)" } else { "" }));
                        run.crashed_in_commit(fs, model);
                        return Ok(run);
                    }
                    return Err(format!("zil_commit failed without a crash: {e}"));
                }
            }
            continue;
        }
        if i == nops && m.is_some() && matches!(target, Target::Kill | Target::Commit(_)) {
            run.log.push("killed before the final sync".into());
            return Ok(run);
        }
        if !fs.pw.dirty() {
            continue;
        }
        if let (Some(m), Target::Sync(t)) = (m, target) {
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
                run.acked(model);
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
    /// Crashes inside an intent-log commit, those among them while it wrote its log blocks,
    /// and those after which the replay stopped inside the commit (`replayed_prefix`).
    in_commit: u64,
    in_log_write: u64,
    partial_replays: u64,
    /// Write bursts into one record.
    bursts: u64,
    /// Log records written to log devices (zil_itx_metaslab_slog_count) and to the normal
    /// class, over the cases with a log device and those without.
    slog_records: u64,
    normal_records: u64,
    /// Write records pointing at the file's block (WR_INDIRECT) among them.
    indirect_records: u64,
}

/// zil_itx_metaslab_slog_count and zil_itx_metaslab_normal_count (the zil kstat; this file's
/// other test writes no log).
fn zil_class_counts() -> (u64, u64) {
    let rows = oxzfs::zil::ZIL_STATS.rows();
    let get = |k: &str| rows.iter().find(|r| r.0 == k).map(|r| r.1).expect("zil kstat row");
    (get("zil_itx_metaslab_slog_count"), get("zil_itx_metaslab_normal_count"))
}

fn zil_indirect_count() -> u64 {
    oxzfs::zil::ZIL_STATS.rows().into_iter().find(|r| r.0 == "zil_itx_indirect_count").map(|r| r.1).expect("zil kstat row")
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
    let (got, partial) = check_replay(dir, &run).map_err(ctx)?;
    tally.partial_replays += partial as u64;
    tally.commits += run.commits;
    tally.in_commit += run.in_commit as u64;
    tally.in_log_write += run.in_log_write as u64;
    tally.bursts += run.bursts;
    Ok(got)
}

/// Import read-write (which replays the log and syncs), then read what it left: the model at
/// the last acknowledged fsync or at one of the operations after it — or, after a crash inside
/// a commit, a state a replay of part of its records leaves (`replayed_prefix`). Returns
/// whether it was the latter only.
fn check_replay(dir: &Path, run: &Run) -> Result<(Model, bool), String> {
    drop(Fs::open(dir).map_err(|e| format!("read-write import (replay): {e}"))?);
    let (txg, got) = import_ro(dir)?;
    let d = digest(&got);
    if run.since_ack.contains(&d) {
        return Ok((got, false));
    }
    if run.in_commit && replayed_prefix(run, &got)? {
        return Ok((got, true));
    }
    Err(format!(
        "after replay (txg {txg}): content is not the last acknowledged fsync's nor a later one ({} states after it){}: {}\n  acked: {}\n  read:  {}",
        run.since_ack.len() - 1,
        if run.in_commit { ", nor one a replay of the crashed commit's records up to one of them leaves" } else { "" },
        first_diff(&run.acked, &got),
        describe(&run.acked),
        describe(&got)
    ))
}

/// Where the records of a write can end: a commit copies a write into the log in records of
/// at most ZIL_MAX_COPIED (32K) from its offset; without a log device a write of
/// zfs_immediate_write_sz or more is logged one record per block it touches (cut at the
/// recordsize), a block that cannot be pointed at copied in 32K records from the piece's start.
fn record_ends(off: usize, len: usize) -> Vec<usize> {
    const COPIED: usize = 32 << 10;
    const RS: usize = 128 << 10;
    let end = off + len;
    let mut starts = vec![off];
    starts.extend((off / RS + 1..).map(|k| k * RS).take_while(|&b| b < end));
    let mut v: Vec<usize> = starts.iter().flat_map(|&s| (1..).map(move |i| s + i * COPIED).take_while(move |&b| b < end)).chain(starts[1..].iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A log is replayed as far as its chain reads, record by record, each write with the bytes
/// its file had when the commit read them: after a crash inside a commit (never acknowledged)
/// the replay may stop anywhere in it, inside a write logged in several records too. Whether
/// `got` is such a state: the operations since the last acknowledged fsync applied in order
/// (writes with the bytes the commit read), the last of them a write perhaps only up to the
/// end of one of its records (`record_ends`).
fn replayed_prefix(run: &Run, got: &Model) -> Result<bool, String> {
    // The operations rebuild the model (with the bytes written when written).
    let mut m = run.acked.clone();
    for op in &run.ops {
        apply(&mut m, op);
    }
    if digest(&m) != *run.since_ack.last().expect("one") {
        return Err("the operations since the acknowledged fsync do not rebuild the model (harness bug)".into());
    }
    let mut m = run.acked.clone();
    for op in &run.ops {
        if let Op::Write { p, obj, off, data } = op {
            // Not logged when its file was freed before the commit.
            let Some(now) = run.at_commit.get(obj) else { continue };
            let bytes: Vec<u8> = (*off..off + data.len()).map(|i| now.get(i).copied().unwrap_or(0)).collect();
            let others = |a: &Model| a.iter().filter(|(k, _)| *k != p).map(|(k, n)| (k.clone(), n.clone())).collect::<Vec<_>>();
            if let Some(g) = got.get(p).filter(|g| !g.dir && g.xattrs == m[p].xattrs) {
                if got.len() == m.len() && others(got) == others(&m) {
                    for b in record_ends(*off, data.len()) {
                        let mut part = m.clone();
                        apply_write(&mut part, p, *off, &bytes[..b - off]);
                        if part[p].data == g.data {
                            return Ok(true);
                        }
                    }
                }
            }
            apply_write(&mut m, p, *off, &bytes);
        } else {
            apply(&mut m, op);
        }
        if m == *got {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One case: create a pool, crash it twice at random points (the second time in the life it
/// had after the first crash), then do clean work, export, and check everything again.
/// `zdb`: 0 none, 1 after the first crash, 2 also after the final export, 3 only there.
fn case(l: &Layout, seed: u64, zdb: u8, dir: &Path, tally: &mut Tally) -> Result<(), String> {
    let mut rng = SimRng::new(seed ^ (l.ndev as u64) << 56 ^ (l.ashift as u64) << 48 ^ (l.log as u64) << 40);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let paths: Vec<PathBuf> = (0..l.ndev).map(|i| dir.join(format!("d{i}"))).collect();
    for p in &paths {
        std::fs::File::create(p).and_then(|f| f.set_len(DEV_SIZE)).map_err(|e| e.to_string())?;
    }
    let m0 = boot(&paths, 512);
    let (data, log) = paths.split_at(l.ndev - l.log);
    let mut vdevs = vec![(
        VdevClass::Normal,
        match l.kind {
            "single" => VdevSpec::File(data[0].clone()),
            "mirror" => VdevSpec::Mirror(data.to_vec()),
            "raidz1" => VdevSpec::Raidz(1, data.to_vec()),
            _ => VdevSpec::Raidz(2, data.to_vec()),
        },
    )];
    match log.len() {
        0 => {}
        1 => vdevs.push((VdevClass::Log, VdevSpec::File(log[0].clone()))),
        _ => vdevs.push((VdevClass::Log, VdevSpec::Mirror(log.to_vec()))),
    }
    // Every fourth seed deduplicates (uncompressed, so that the zero and repeated-byte
    // blocks share copies through the DDT instead of becoming holes and embedded bps). With a
    // log device, every fourth other seed has logbias=throughput: the log blocks on the log
    // device name the writes' blocks in the pool (indirect records) instead of copying them.
    let mut fs_props: Vec<(String, String)> = if seed % 4 == 3 { vec![("dedup".into(), "on".into()), ("compression".into(), "off".into())] } else { Vec::new() };
    if l.log > 0 && seed % 4 == 1 {
        fs_props.push(("logbias".into(), "throughput".into()));
    }
    let spec = CreateSpec { fs_init: Some(oxzfs::zplw::init_fs), name: POOL.into(), vdevs, ashift: Some(l.ashift), hostname: "oxzfs-crash".into(), fs_props, ..Default::default() };
    drop(PoolW::create(&spec, 32 << 20).map_err(|e| format!("create: {e}"))?);
    drop(m0);
    tally.cases += 1;
    let (slog0, normal0) = zil_class_counts();
    let indirect0 = zil_indirect_count();
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
    tally.bursts += run.bursts;
    // The log blocks of every commit went to the log device when there is one, else to the
    // normal class.
    let (slog, normal) = zil_class_counts();
    let (slog, normal) = (slog - slog0, normal - normal0);
    tally.slog_records += slog;
    tally.normal_records += normal;
    tally.indirect_records += zil_indirect_count() - indirect0;
    if l.log > 0 && normal > 0 {
        return Err(format!("{normal} log records went to the normal class with a log device ({slog} to it)"));
    }
    if l.log == 0 && slog > 0 {
        return Err(format!("{slog} log records went to a log device the pool does not have"));
    }
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
    for (li, l) in LAYOUTS.iter().enumerate().filter(|(_, l)| only.as_deref().is_none_or(|o| o == l.name)) {
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
    if failures.is_empty() && LAYOUTS.iter().any(|l| l.log > 0 && only.as_deref().is_none_or(|o| o == l.name)) && seeds.len() >= 4 {
        assert!(tally.slog_records > 0, "no log record reached a log device in {n} cases");
    }
    assert!(failures.is_empty(), "{} of {n} crash cases failed: {}", failures.len(), failures.join(", "));
}
