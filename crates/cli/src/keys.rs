//! `zfs load-key` and `zfs unload-key`: the wrapping keys of encrypted datasets, with
//! OpenZFS's usage, messages and key locations (libzfs_crypto.c).
//!
//! The daemon picks the encryption roots to load; the key material is then read, with the
//! daemon's state let go, from where each root's `keylocation` (or `-L`) says: `prompt` is the
//! caller's terminal (echo off, "Enter passphrase for 'pool/fs':") or, when standard input is
//! not a terminal, one line of it (32 bytes for a raw key); `file:///path` a file. The
//! caller's standard input, output and error come with the request (SCM_RIGHTS), as for
//! `zfs receive`.

use crate::opts::{parse, verb_opts};
use crate::verb::strerror;
use crate::verb::{usage, Out, State};
use oxzfs::dsl::DatasetKind;
use oxzfs_format::crypt::KeyFormat;
use std::io::{BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

pub const LOAD_KEY_USAGE: &str = "usage:\n\tload-key [-rn] [-L <keylocation>] <-a | filesystem|volume>";
pub const UNLOAD_KEY_USAGE: &str = "usage:\n\tunload-key [-r] <-a | filesystem|volume>";

verb_opts!(
    /// `zfs load-key`'s options.
    LoadKeyOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'n')]
    noop: bool,
    #[arg(short = 'a')]
    all: bool,
    #[arg(short = 'L')]
    location: Option<String>,
});

verb_opts!(
    /// `zfs unload-key`'s options.
    UnloadKeyOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'a')]
    all: bool,
});

/// An encryption root to load or unload: its pool, name, key format and key location.
struct Root {
    pool: String,
    name: String,
    format: Option<KeyFormat>,
    /// pbkdf2salt and pbkdf2iters of the root's key object.
    salt: u64,
    iters: u64,
    /// Whether it is an encryption root (a dataset named that is not is refused by
    /// load_wrapping_key with OpenZFS's message, before any key is read).
    is_root: bool,
    location: String,
    loaded: bool,
}

impl Root {
    /// Root `name` of pool `pname` with its key object `key` (None: not encrypted), its
    /// keylocation as the pool says it.
    fn new(pname: &str, imp: &crate::verb::Imported, name: &str, key: Option<&oxzfs::dsl_crypt::CryptoKey>, loaded: bool) -> Root {
        Root {
            pool: pname.to_string(),
            name: name.to_string(),
            format: key.and_then(|k| KeyFormat::from_u64(k.keyformat)),
            salt: key.map_or(0, |k| k.salt),
            iters: key.map_or(0, |k| k.iters),
            is_root: key.is_some_and(|k| imp.pool.datasets().ok().and_then(|l| l.into_iter().find(|d| d.name == name)).is_some_and(|d| d.dir_obj == k.root_dir)),
            location: imp.pool.prop(name, "keylocation").map(|p| p.value).unwrap_or_else(|_| "none".into()),
            loaded,
        }
    }
}

/// The most key material read from standard input or a file: far more than any key.
const MATERIAL_MAX: u64 = 1 << 20;

/// The encryption roots the operands name: every one of the imported pools (-a), the named
/// dataset and the roots below it (-r), or the named dataset whatever it is (checked when
/// loaded, for OpenZFS's message).
fn roots(st: &State, operands: &[String], all: bool, recursive: bool) -> Result<Vec<Root>, String> {
    let mut out = Vec::new();
    let within = |n: &str, top: &str| n == top || n.strip_prefix(top).is_some_and(|r| r.starts_with('/'));
    for (pname, imp) in &st.pools {
        if !all && !operands.iter().any(|o| o.split('/').next() == Some(pname.as_str())) {
            continue;
        }
        let spa = &imp.pool.spa;
        let list = imp.pool.datasets().map_err(|e| format!("cannot open '{pname}': {e}\n"))?;
        for d in list.iter().filter(|d| d.kind != DatasetKind::Snapshot) {
            let explicit = operands.iter().any(|o| o == &d.name);
            let below = all || (recursive && operands.iter().any(|o| within(&d.name, o)));
            if !explicit && !below {
                continue;
            }
            let key = oxzfs::dsl_crypt::key_of(spa, d).map_err(|e| format!("cannot open '{}': {e}\n", d.name))?;
            let is_root = key.as_ref().is_some_and(|k| k.root_dir == d.dir_obj);
            if !is_root && !explicit {
                continue;
            }
            if !is_root && (all || recursive) {
                continue;
            }
            out.push(Root::new(pname, imp, &d.name, key.as_ref(), oxzfs::dsl_crypt::key_loaded(spa, d)));
        }
    }
    for o in operands {
        if !out.iter().any(|r| &r.name == o) && !(recursive && out.iter().any(|r| within(&r.name, o))) {
            let pool = o.split('/').next().unwrap_or(o);
            let exists = st.pools.get(pool).is_some_and(|i| i.pool.datasets().is_ok_and(|l| l.iter().any(|d| &d.name == o)));
            if !exists {
                return Err(format!("cannot open '{o}': dataset does not exist\n"));
            }
        }
    }
    Ok(out)
}

/// `<-a | filesystem>`: exactly one of them, else the verb's usage with what is wrong.
fn one_target(all: bool, operands: &[String], verb_usage: &str) -> Option<Out> {
    if all == !operands.is_empty() || operands.len() > 1 {
        let why = if operands.is_empty() { "missing dataset argument" } else { "too many arguments" };
        return Some(usage(format!("{why}\n{verb_usage}")));
    }
    None
}

/// `zfs load-key [-rn] [-L keylocation] <-a | filesystem>`
pub fn load_key(st: &mut State, args: &[String]) -> Out {
    let o: LoadKeyOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{LOAD_KEY_USAGE}")),
    };
    if let Some(out) = one_target(o.all, &o.operands, LOAD_KEY_USAGE) {
        return out;
    }
    if let Some(l) = &o.location {
        if (o.all || o.recursive) && l != "prompt" {
            return usage(format!("alternate keylocation may only be 'prompt' with -r or -a\n{LOAD_KEY_USAGE}"));
        }
    }
    let bulk = o.all || o.recursive;
    let list = match roots(st, &o.operands, o.all, o.recursive) {
        Ok(l) => l,
        Err(e) => return (String::new(), e, 1),
    };
    // With -r or -a only the roots whose keys are not loaded are tried.
    let todo: Vec<Root> = list.into_iter().filter(|r| !bulk || !r.loaded || o.noop).collect();
    let noop = o.noop;
    let location = o.location.clone();
    let mut io = KeyIo::take(st);
    st.streams.push(Box::new(move |res: &mut Out, state: &Arc<Mutex<State>>| {
        let (ok, tried) = load_roots(&todo, location.as_deref(), noop, &mut io, state, res);
        if bulk || noop {
            res.0.push_str(&format!("{ok} / {tried} key(s) successfully {}\n", if noop { "verified" } else { "loaded" }));
            if ok < tried {
                res.2 = 1;
            }
        }
    }));
    (String::new(), String::new(), 0)
}

/// Where key material is read from: the caller's standard input (its descriptor kept to ask
/// whether it is a terminal) and output (for the prompt), as the request passed them.
pub struct KeyIo {
    input: Option<(i32, std::io::BufReader<std::fs::File>)>,
    output: Option<std::fs::File>,
}

impl KeyIo {
    /// The descriptors of the request (standard input, output, error).
    pub fn take(st: &mut State) -> KeyIo {
        let mut fds = std::mem::take(&mut st.fds).into_iter();
        let (input, output) = (fds.next(), fds.next());
        KeyIo { input: input.map(|fd| (fd.as_raw_fd(), std::io::BufReader::new(std::fs::File::from(fd)))), output: output.map(std::fs::File::from) }
    }
}

/// Load the keys of `todo`'s roots, each from `location` or its own keylocation; failures are
/// said on the request's standard error. Returns (loaded, tried).
fn load_roots(todo: &[Root], location: Option<&str>, noop: bool, io: &mut KeyIo, state: &Arc<Mutex<State>>, res: &mut Out) -> (usize, usize) {
    let mut ok = 0;
    for r in todo {
        let loc = location.map(str::to_string).unwrap_or_else(|| r.location.clone());
        let material = match r.format {
            // Not a root: refused below as OpenZFS refuses it, with no key asked for.
            Some(_) if !r.is_root => Ok(Vec::new()),
            Some(f) => material(&loc, f, &r.name, io.input.as_mut(), io.output.as_mut()),
            None => Err(format!("'{}' is not encrypted.", r.name)),
        };
        // The wrapping key is derived (PBKDF2 runs as many rounds as the pool says) before the
        // daemon's state is taken.
        let wkey = material.and_then(|m| match r.format {
            Some(_) if !r.is_root => Ok([0u8; oxzfs_format::crypt::WRAPPING_KEY_LEN]),
            Some(f) => oxzfs_format::crypt::wrapping_key(f, &m, r.salt, r.iters),
            None => Err(format!("'{}' is not encrypted.", r.name)),
        });
        let outcome = wkey.and_then(|w| {
            let st = state.lock().unwrap_or_else(|p| p.into_inner());
            let imp = st.pools.get(&r.pool).ok_or_else(|| format!("pool '{}' is no longer imported", r.pool))?;
            oxzfs::dsl_crypt::load_wrapping_key(&imp.pool.spa, &r.name, &w, noop).map_err(|e| e.to_string().trim_start_matches("Key load error: ").to_string())
        });
        match outcome {
            Ok(_) => ok += 1,
            Err(e) => {
                res.1.push_str(&format!("Key load error: {e}\n"));
                res.2 = 1;
            }
        }
    }
    (ok, todo.len())
}

/// `zfs mount -l`: the keys of the encryption roots of what is to be mounted (every file
/// system with -a, else the named ones) that are not loaded yet are loaded first, from their
/// keylocations; then `then` mounts, with the state taken again.
/// `pools`: only those pools' (`zpool import -l`).
pub fn load_then(st: &mut State, names: &[String], all: bool, pools: Option<&[String]>, then: impl FnOnce(&mut State) -> Out + Send + 'static) -> Out {
    let mut todo: Vec<Root> = Vec::new();
    for (pname, imp) in &st.pools {
        if pools.is_some_and(|p| !p.contains(pname)) {
            continue;
        }
        let Ok(list) = imp.pool.datasets() else { continue };
        for d in list.iter().filter(|d| d.kind == DatasetKind::Filesystem && (all || names.contains(&d.name))) {
            let Ok(Some((root, key))) = oxzfs::dsl_crypt::encryption_root(&imp.pool.spa, &d.name) else { continue };
            if oxzfs::dsl_crypt::key_loaded(&imp.pool.spa, d) || todo.iter().any(|r| r.name == root) {
                continue;
            }
            todo.push(Root::new(pname, imp, &root, Some(&key), false));
        }
    }
    let mut io = KeyIo::take(st);
    st.streams.push(Box::new(move |res: &mut Out, state: &Arc<Mutex<State>>| {
        load_roots(&todo, None, false, &mut io, state, res);
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let (o, e, code) = then(&mut st);
        res.0.push_str(&o);
        res.1.push_str(&e);
        res.2 = res.2.max(code);
    }));
    (String::new(), String::new(), 0)
}

/// The key material of `name` from `location` in `format` (libzfs's get_key_material).
fn material(location: &str, format: KeyFormat, name: &str, stdin: Option<&mut (i32, std::io::BufReader<std::fs::File>)>, out: Option<&mut std::fs::File>) -> Result<Vec<u8>, String> {
    if location == "prompt" {
        let Some((fd, reader)) = stdin else { return Err("no standard input came with the request (run `zfs load-key` through the oxzfs command)".into()) };
        if unsafe { libc::isatty(*fd) } == 1 {
            if format == KeyFormat::Raw {
                return Err("Cannot enter raw keys on the terminal".into());
            }
            return read_on_terminal(*fd, reader, format, name, out);
        }
        let mut buf = Vec::new();
        if format == KeyFormat::Raw {
            // One byte more than a key, as libzfs reads it: a longer input is a key too long.
            let _ = reader.by_ref().take(oxzfs_format::crypt::WRAPPING_KEY_LEN as u64 + 1).read_to_end(&mut buf);
        } else {
            let _ = reader.by_ref().take(MATERIAL_MAX).read_until(b'\n', &mut buf);
        }
        return Ok(buf);
    }
    if let Some(path) = location.strip_prefix("file://") {
        let f = std::fs::File::open(path).map_err(|e| format!("Failed to open key material file: {}", strerror(&e)))?;
        let mut buf = Vec::new();
        f.take(if format == KeyFormat::Raw { oxzfs_format::crypt::WRAPPING_KEY_LEN as u64 + 1 } else { MATERIAL_MAX }).read_to_end(&mut buf).map_err(|e| format!("Failed to open key material file: {}", strerror(&e)))?;
        return Ok(buf);
    }
    if location.starts_with("https://") || location.starts_with("http://") {
        return Err("URI scheme is not supported".into());
    }
    Err("Invalid keylocation".into())
}

/// Prompt on the caller's terminal with echo off, as libzfs_getpassphrase does.
fn read_on_terminal(fd: i32, reader: &mut std::io::BufReader<std::fs::File>, format: KeyFormat, name: &str, out: Option<&mut std::fs::File>) -> Result<Vec<u8>, String> {
    let what = match format {
        KeyFormat::Hex => "hex key",
        _ => "passphrase",
    };
    let mut out = out;
    if let Some(o) = out.as_deref_mut() {
        let _ = write!(o, "Enter {what} for '{name}':");
        let _ = o.flush();
    }
    let mut old: libc::termios = unsafe { std::mem::zeroed() };
    let have = unsafe { libc::tcgetattr(fd, &mut old) } == 0;
    if have {
        let mut t = old;
        t.c_lflag &= !(libc::ECHO | libc::ECHOE | libc::ECHOK | libc::ECHONL);
        unsafe { libc::tcsetattr(fd, libc::TCSAFLUSH, &t) };
    }
    let mut buf = Vec::new();
    let r = reader.by_ref().take(MATERIAL_MAX).read_until(b'\n', &mut buf);
    if have {
        unsafe { libc::tcsetattr(fd, libc::TCSAFLUSH, &old) };
    }
    if let Some(o) = out {
        let _ = writeln!(o);
    }
    r.map_err(|e| strerror(&e))?;
    Ok(buf)
}

/// `zfs unload-key [-r] <-a | filesystem>`
pub fn unload_key(st: &mut State, args: &[String]) -> Out {
    let o: UnloadKeyOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{UNLOAD_KEY_USAGE}")),
    };
    if let Some(out) = one_target(o.all, &o.operands, UNLOAD_KEY_USAGE) {
        return out;
    }
    let bulk = o.all || o.recursive;
    let list = match roots(st, &o.operands, o.all, o.recursive) {
        Ok(l) => l,
        Err(e) => return (String::new(), e, 1),
    };
    let todo: Vec<Root> = list.into_iter().filter(|r| !bulk || r.loaded).collect();
    let (mut ok, tried) = (0usize, todo.len());
    let mut err = String::new();
    for r in &todo {
        let Some(imp) = st.pools.get(&r.pool) else { continue };
        // The datasets that use this root's key: mounted ones make it busy.
        let users: Vec<String> = imp
            .pool
            .datasets()
            .unwrap_or_default()
            .into_iter()
            .filter(|d| oxzfs::dsl_crypt::encryption_root(&imp.pool.spa, &d.name).ok().flatten().is_some_and(|(root, _)| root == r.name))
            .map(|d| d.name)
            .collect();
        if imp.mounts.iter().any(|m| users.contains(&m.dataset)) {
            err.push_str(&format!("Key unload error: '{}' is busy.\n", r.name));
            continue;
        }
        match oxzfs::dsl_crypt::unload_key(&imp.pool.spa, &r.name) {
            Ok(()) => {
                for u in &users {
                    imp.pool.forget_fs(u);
                }
                ok += 1;
            }
            Err(e) => err.push_str(&format!("{e}\n")),
        }
    }
    let mut out = String::new();
    if bulk {
        out = format!("{ok} / {tried} key(s) successfully unloaded\n");
    }
    let code = (ok < tried) as i32;
    (out, err, code)
}

/// Whether a command may read key material from the caller (`zfs load-key`, `zfs mount -l`,
/// `zpool import -l`):
/// its standard input, output and error go with the request.
pub fn wants_fds(args: &[String]) -> bool {
    let flag = |c: char| args[2..].iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(c));
    args.first().map(|s| s.as_str()) == Some("zfs")
        && match args.get(1).map(|s| s.as_str()) {
            Some("load-key") => true,
            Some("mount") => flag('l'),
            _ => false,
        }
        || args.first().map(|s| s.as_str()) == Some("zpool") && args.get(1).map(|s| s.as_str()) == Some("import") && flag('l')
}

/// The caller's terminal as it was before the daemon turned echo off to read a passphrase.
static SAVED_TERMINAL: std::sync::OnceLock<libc::termios> = std::sync::OnceLock::new();

extern "C" fn restore_and_die(sig: libc::c_int) {
    if let Some(t) = SAVED_TERMINAL.get() {
        unsafe { libc::tcsetattr(0, libc::TCSAFLUSH, t) };
    }
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// In the command, before a request that may prompt on its terminal: the terminal's settings
/// are kept, and put back if the command is interrupted (libzfs catches SIGINT while it
/// prompts) or when it ends (`restore_terminal`).
pub fn guard_terminal() {
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::isatty(0) } == 1 && unsafe { libc::tcgetattr(0, &mut t) } == 0 {
        let _ = SAVED_TERMINAL.set(t);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            unsafe { libc::signal(sig, restore_and_die as extern "C" fn(libc::c_int) as libc::sighandler_t) };
        }
    }
}

pub fn restore_terminal() {
    if let Some(t) = SAVED_TERMINAL.get() {
        unsafe { libc::tcsetattr(0, libc::TCSAFLUSH, t) };
    }
}
