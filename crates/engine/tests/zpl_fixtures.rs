//! The ZPL against the fixture pools: every dataset and snapshot with a manifest is walked
//! through `Zfs` (readdir, lookup, getattr, read, readlink) and compared entry by entry with
//! the manifest the writer (zfs-fuse) produced: type, mode, uid, gid, size, nlink, sha256 of
//! the content, symlink target, and the exact set of paths.
//!
//! The fixtures live outside the repository (`../shared/fixtures`, or `$OXZFS_SHARED_FIXTURES`),
//! so these tests are ignored by default: `cargo test -p oxzfs --test zpl_fixtures -- --ignored`.
//! They need `zstd` (to decompress the vdev files) and `sha256sum`.

use oxzfs::pool::{ImportOptions, Pool};
use oxzfs::zpl::{Zfs, ZplRead};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::fixtures_root;

fn unpack(fixture: &Path) -> PathBuf {
    common::unpack(fixture, "zpl", "")
}

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// A flat JSON object of strings and integers (the manifest's lines).
fn parse_line(line: &str) -> BTreeMap<String, String> {
    let b: Vec<char> = line.trim().chars().collect();
    let mut i = 0;
    let mut out = BTreeMap::new();
    let ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_whitespace() {
            *i += 1
        }
    };
    let string = |i: &mut usize| -> String {
        assert_eq!(b[*i], '"', "string expected in {line}");
        *i += 1;
        let mut s = String::new();
        while b[*i] != '"' {
            if b[*i] == '\\' {
                *i += 1;
                match b[*i] {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'u' => {
                        let hex: String = b[*i + 1..*i + 5].iter().collect();
                        let mut c = u32::from_str_radix(&hex, 16).unwrap();
                        *i += 4;
                        if (0xd800..0xdc00).contains(&c) {
                            let lo: String = b[*i + 3..*i + 7].iter().collect();
                            c = 0x10000 + ((c - 0xd800) << 10) + (u32::from_str_radix(&lo, 16).unwrap() - 0xdc00);
                            *i += 6;
                        }
                        s.push(char::from_u32(c).unwrap());
                    }
                    c => s.push(c),
                }
            } else {
                s.push(b[*i]);
            }
            *i += 1;
        }
        *i += 1;
        s
    };
    assert_eq!(b[i], '{');
    i += 1;
    loop {
        ws(&mut i);
        if b[i] == '}' {
            break;
        }
        let k = string(&mut i);
        ws(&mut i);
        assert_eq!(b[i], ':');
        i += 1;
        ws(&mut i);
        let v = if b[i] == '"' {
            string(&mut i)
        } else {
            let s = i;
            while b[i] != ',' && b[i] != '}' && !b[i].is_whitespace() {
                i += 1;
            }
            b[s..i].iter().collect()
        };
        out.insert(k, v);
        ws(&mut i);
        if b[i] == ',' {
            i += 1;
        }
    }
    out
}

fn sha256_of(fs: &Zfs, ino: u64, size: u64) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    {
        let mut stdin = child.stdin.take().unwrap();
        let mut off = 0;
        while off < size {
            let chunk = fs.read(ino, off, 8 << 20).unwrap_or_else(|e| panic!("read object {ino} at {off}: {e}"));
            assert!(!chunk.is_empty(), "object {ino}: short read at {off} of {size}");
            stdin.write_all(&chunk).unwrap();
            off += chunk.len() as u64;
        }
        assert!(fs.read(ino, size, 4096).unwrap().is_empty(), "reads past the end are empty");
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

/// Walk `fs` from its root and compare with the manifest; returns the number of entries checked.
/// `mountpoints`: paths of child datasets' mountpoints, empty directories the manifest leaves out.
fn check_dataset(fs: &Zfs, manifest: &Path, mountpoints: &BTreeSet<String>) -> (usize, usize) {
    let want: BTreeMap<String, BTreeMap<String, String>> = std::fs::read_to_string(manifest)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let m = parse_line(l);
            (m["path"].clone(), m)
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut stack = vec![(".".to_string(), fs.root_ino())];
    let mut problems = Vec::new();
    let mut fat_dirs = 0;
    while let Some((path, ino)) = stack.pop() {
        seen.insert(path.clone());
        let a = fs.getattr(ino).unwrap_or_else(|e| panic!("{path}: getattr: {e}"));
        let Some(m) = want.get(&path) else {
            if mountpoints.contains(&path) && a.mode & S_IFMT == S_IFDIR && fs.readdir(ino).unwrap().is_empty() {
                continue;
            }
            problems.push(format!("{path}: not in the manifest"));
            continue;
        };
        let kind = match a.mode & S_IFMT {
            S_IFDIR => "dir",
            S_IFREG => "file",
            S_IFLNK => "symlink",
            _ => "other",
        };
        let mut check = |what: &str, got: String| {
            if let Some(w) = m.get(what) {
                if *w != got {
                    problems.push(format!("{path}: {what} is {got}, manifest says {w}"));
                }
            }
        };
        check("type", kind.to_string());
        check("mode", format!("0o{:o}", a.mode & 0o7777));
        check("uid", a.uid.to_string());
        check("gid", a.gid.to_string());
        match kind {
            "file" => {
                check("size", a.size.to_string());
                check("nlink", a.nlink.to_string());
                check("sha256", sha256_of(fs, ino, a.size));
            }
            "symlink" => check("target", String::from_utf8_lossy(&fs.readlink(ino).unwrap()).into_owned()),
            "dir" => {
                if !oxzfs::zap::Zap::open(fs.objset(), ino).unwrap().is_micro() {
                    fat_dirs += 1;
                }
                let ents = fs.readdir(ino).unwrap_or_else(|e| panic!("{path}: readdir: {e}"));
                assert!(ents.windows(2).all(|w| w[0].name < w[1].name), "{path}: readdir sorted, no duplicates");
                assert_eq!(fs.lookup(ino, b".").unwrap().ino, ino);
                assert_eq!(fs.lookup(ino, b"..").unwrap().ino, fs.parent(ino).unwrap());
                let missing = fs.lookup(ino, b"no such name \xff").unwrap_err();
                assert_eq!(missing.errno(), libc::ENOENT, "{path}: missing name: {missing}");
                for e in ents {
                    let name = String::from_utf8(e.name.clone()).expect("fixture names are UTF-8");
                    let child = if path == "." { name } else { format!("{path}/{name}") };
                    let la = fs.lookup(ino, &e.name).unwrap_or_else(|err| panic!("{child}: lookup: {err}"));
                    assert_eq!(la.ino, e.ino, "{child}: lookup and readdir agree");
                    // The ZAP's own lookup (by hash on fat directories) finds it too.
                    let v = oxzfs::zap::zap_lookup(fs.objset(), ino, &e.name).unwrap().and_then(|z| z.value_u64());
                    assert_eq!(v.map(|v| v & ((1 << 48) - 1)), Some(e.ino), "{child}: ZAP lookup");
                    assert_eq!(la.mode & S_IFMT, e.mode, "{child}: directory entry type");
                    if e.mode == S_IFDIR {
                        assert_eq!(fs.parent(e.ino).unwrap(), ino, "{child}: parent pointer");
                    } else {
                        let err = fs.readdir(e.ino).unwrap_err();
                        assert_eq!(err.errno(), libc::ENOTDIR, "{child}: readdir of a non-directory");
                    }
                    stack.push((child, e.ino));
                }
            }
            _ => problems.push(format!("{path}: unexpected type {:o}", a.mode)),
        }
    }
    for p in want.keys() {
        if !seen.contains(p) {
            problems.push(format!("{p}: in the manifest, not found by the walk"));
        }
    }
    assert!(problems.is_empty(), "{}: {} problems:\n{}", manifest.display(), problems.len(), problems.join("\n"));
    (seen.len(), fat_dirs)
}

fn check_fixture(name: &str) {
    let fixture = fixtures_root().join(name);
    assert!(
        fixture.is_dir(),
        "fixture {} not found: set OXZFS_SHARED_FIXTURES to the shared fixtures directory",
        fixture.display()
    );
    let dir = unpack(&fixture);
    let scan = oxzfs::spa::scan(&[dir.clone()]);
    assert_eq!(scan.pools.len(), 1, "{name}: one pool in the fixture ({:?})", scan.problems);
    let pool_name = scan.pools[0].name.clone();
    let pool = Pool::import(&[dir.clone()], &pool_name, &ImportOptions { readonly: true, ..Default::default() })
        .unwrap_or_else(|e| panic!("{name}: import: {e}"));
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&fixture)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".manifest.jsonl"))
        .collect();
    manifests.sort();
    assert!(!manifests.is_empty());
    let ds_of = |m: &Path| m.file_name().unwrap().to_string_lossy().trim_end_matches(".manifest.jsonl").replace('_', "/");
    let all: Vec<String> = manifests.iter().map(|m| ds_of(m)).collect();
    for m in &manifests {
        let ds = ds_of(m);
        let prefix = format!("{}/", ds);
        let mountpoints: BTreeSet<String> =
            all.iter().filter(|d| !d.contains('@')).filter_map(|d| d.strip_prefix(&prefix)).map(str::to_string).collect();
        let fs = pool.open_fs(&ds).unwrap_or_else(|e| panic!("{name}: open {ds}: {e}"));
        let (n, fat) = check_dataset(&fs, m, &mountpoints);
        eprintln!("{name}: {ds}: {n} entries match the manifest ({fat} fat ZAP directories, ZPL version {})", fs.version);
        if ds.ends_with("/lz") && !ds.contains('@') {
            assert!(fat > 0, "the 3000-entry directory is a fat ZAP");
        }
        let st = fs.statfs().unwrap();
        assert!(st.files >= n as u64 && st.namelen == 255 && st.bsize > 0);
    }
    pool.close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the shared fixture pools (../shared/fixtures or $OXZFS_SHARED_FIXTURES) and zstd"]
fn zpl_basic_matches_manifest() {
    check_fixture("basic");
}

#[test]
#[ignore = "needs the shared fixture pools (../shared/fixtures or $OXZFS_SHARED_FIXTURES) and zstd"]
fn zpl_mirror_gzip_matches_manifest() {
    check_fixture("mirror-gzip");
}

#[test]
#[ignore = "needs the shared fixture pools (../shared/fixtures or $OXZFS_SHARED_FIXTURES) and zstd"]
fn zpl_raidz1_matches_manifest() {
    check_fixture("raidz1");
}

#[test]
#[ignore = "needs the shared fixture pools (../shared/fixtures or $OXZFS_SHARED_FIXTURES) and zstd"]
fn zpl_raidz2_dedup_matches_manifest() {
    check_fixture("raidz2-dedup");
}

#[test]
#[ignore = "needs the shared fixture pools (../shared/fixtures or $OXZFS_SHARED_FIXTURES) and zstd"]
fn zpl_raidz3_big_matches_manifest() {
    check_fixture("raidz3-big");
}

#[test]
fn manifest_lines_parse() {
    let m = parse_line(r#"{"gid": 0, "mode": "0o644", "path": "a\"b\u00e9\ud83d\ude00", "size": 5}"#);
    assert_eq!(m["path"], "a\"bé😀");
    assert_eq!(m["size"], "5");
    assert_eq!(m["mode"], "0o644");
}
