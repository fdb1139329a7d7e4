//! `zfs project`: the project id and project-inherit flag of files and directories, listed,
//! checked, cleared or set, as zfs_project.c does it (zfs_do_project reads the options).
//!
//! It runs in the zfs command itself, never in the daemon: the paths are the caller's, opened
//! with the caller's credentials, and each file's id and flag are read and written with the
//! FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR ioctls on a descriptor of it, which an oxzfs FUSE mount
//! answers as OpenZFS's kernel module does (and ext4 or xfs do on theirs).
//!
//! Like zfs_project.c, a target must be a regular file or a directory, but a directory's
//! entries are opened as they are named: a symbolic link is followed (its target is listed or
//! changed under the link's name), a special file is handled as far as its open and ioctls go,
//! and a dangling link is passed over as an entry removed meanwhile, which leaves ENOENT behind
//! for the end of the directory to report as a failed readdir, as zfs_project.c's loop does.
//! Only entries the directory reports as directories are descended into, so a link to a
//! directory is never walked. Directories are walked breadth first. The one departure is that
//! entries are opened non-blocking: a FIFO in a tree would otherwise hold the walk until
//! something wrote to it.

use crate::opts::{parse_matches, verb_opts};
use crate::verb::strerror;
use clap::ArgMatches;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::io::{Error, Write};
use std::os::unix::ffi::OsStrExt;

pub const PROJECT_USAGE: &str = "usage:\n\tproject [-d|-r] <directory|file ...>\n\tproject -c [-0] [-d|-r] [-p id] <directory|file ...>\n\tproject -C [-k] [-r] <directory ...>\n\tproject [-p id] [-r] [-s] <directory ...>\n";

/// The ioctls that read and write a file's extended flags and project id, and the flag new
/// files in a directory take its project id by.
use oxzfs::zfs_pflags::{FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_XFLAG_PROJINHERIT};
/// ZFS_DEFAULT_PROJID: the id a file has when none was set.
const DEFAULT_PROJID: u32 = 0;
/// Linux's PATH_MAX: a directory entry whose full name would reach it is not opened.
const PATH_MAX: usize = 4096;

/// struct fsxattr of <linux/fs.h>, as the two ioctls pass it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<FsXattr>() == 28);

verb_opts!(
    /// `zfs project`'s options. Their order matters (-d and -r undo each other; -C, -c and -s
    /// refuse each other, and each refuses itself given twice), so each flag keeps every
    /// occurrence (a value-less append) and they are read again in the order given (`events`).
    ProjectOpts {
    #[arg(short = '0', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    nul: Vec<bool>,
    #[arg(short = 'C', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    clear: Vec<bool>,
    #[arg(short = 'c', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    check: Vec<bool>,
    #[arg(short = 'd', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    dironly: Vec<bool>,
    #[arg(short = 'k', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    keep: Vec<bool>,
    #[arg(short = 'p')]
    projid: Vec<String>,
    #[arg(short = 'r', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    recursive: Vec<bool>,
    #[arg(short = 's', action = clap::ArgAction::Append, num_args = 0, default_missing_value = "true")]
    set: Vec<bool>,
});

/// The option letters, by the field that holds each.
const LETTERS: [(&str, char); 8] = [("nul", '0'), ("clear", 'C'), ("check", 'c'), ("dironly", 'd'), ("keep", 'k'), ("projid", 'p'), ("recursive", 'r'), ("set", 's')];

/// What the command does to each file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Print the id and the flag.
    List,
    /// Report the files whose id is not the expected one or that lack the flag.
    Check,
    /// Take the flag off, and the id back to 0 unless kept.
    Clear,
    /// Give the expected id, and the flag when asked.
    Set,
}

/// zfs_project_control_t: what the options asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub op: Op,
    /// The id to set or to check against: -p's, or else read from the first target (and then
    /// kept for the targets after it, as zfs_project.c keeps it).
    pub expected: Option<u32>,
    /// -d: the directory itself, not its entries.
    pub dironly: bool,
    /// -k: -C leaves the id as it is.
    pub keep: bool,
    /// Not -0: check reports are sentences, one a line, rather than NUL-terminated paths.
    pub newline: bool,
    /// -r: into subdirectories.
    pub recursive: bool,
    /// -s: set the inherit flag too.
    pub set_flag: bool,
}

/// The options in the order given: (position among the words, letter, -p's value).
fn events(m: &ArgMatches) -> Vec<(usize, char, Option<String>)> {
    let mut all = Vec::new();
    for (id, letter) in LETTERS {
        let Some(idx) = m.indices_of(id) else { continue };
        if letter == 'p' {
            let vals = m.get_many::<String>(id).into_iter().flatten();
            all.extend(idx.zip(vals).map(|(i, v)| (i, letter, Some(v.clone()))));
        } else {
            all.extend(idx.map(|i| (i, letter, None)));
        }
    }
    all.sort_by_key(|&(i, _, _)| i);
    all
}

/// strtoull(s, &end, 0) accepting only a whole-string number: leading white space, a sign
/// (a minus wraps the value round, as strtoull's does), and 0x/0 prefixes for hex and octal.
/// None when the number overflows (ERANGE) or is followed by anything; an empty string is 0.
fn strtoull(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let mut i = b.iter().take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')).count();
    let negative = b.get(i) == Some(&b'-');
    if matches!(b.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let mut radix = 10;
    if b.get(i) == Some(&b'0') {
        if matches!(b.get(i + 1), Some(b'x' | b'X')) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit) {
            radix = 16;
            i += 2;
        } else {
            radix = 8;
        }
    }
    let start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        match v.checked_mul(radix as u64).and_then(|x| x.checked_add(d as u64)) {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    // No digits: strtoull gives 0 with the end at the very start.
    let end = if i == start { 0 } else { i };
    if overflow || end != b.len() {
        return None;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// The options read in the order given, with the refusals getopt's loop makes as it goes.
fn replay(events: &[(usize, char, Option<String>)]) -> Result<Control, String> {
    let mut op = None;
    let mut c = Control { op: Op::List, expected: None, dironly: false, keep: false, newline: true, recursive: false, set_flag: false };
    for (_, letter, value) in events {
        match letter {
            '0' => c.newline = false,
            'C' | 'c' | 's' => {
                if op.is_some() {
                    return Err("cannot specify '-C' '-c' '-s' together".into());
                }
                op = Some(match letter {
                    'C' => Op::Clear,
                    'c' => Op::Check,
                    _ => {
                        c.set_flag = true;
                        Op::Set
                    }
                });
            }
            'd' => {
                c.dironly = true;
                c.recursive = false;
            }
            'k' => c.keep = true,
            'p' => {
                // The two messages are the way round zfs_do_project has them.
                let Some(id) = strtoull(value.as_deref().unwrap_or("")) else {
                    return Err(format!("project ID must be less than {}", u32::MAX));
                };
                if id >= u32::MAX as u64 {
                    return Err("invalid project ID".into());
                }
                c.expected = Some(id as u32);
            }
            'r' => {
                c.recursive = true;
                c.dironly = false;
            }
            _ => {}
        }
    }
    c.op = op.unwrap_or(if c.expected.is_some() { Op::Set } else { Op::List });
    Ok(c)
}

/// The combinations zfs_do_project refuses once every option is read.
fn refused(c: &Control) -> Option<&'static str> {
    const K: &str = "'-k' is only valid together with '-C'";
    const NUL: &str = "'-0' is only valid together with '-c'";
    match c.op {
        Op::List if c.keep => Some(K),
        Op::List if !c.newline => Some(NUL),
        Op::Check if c.keep => Some(K),
        Op::Clear if c.dironly => Some("'-d' is useless together with '-C'"),
        Op::Clear if !c.newline => Some(NUL),
        Op::Clear if c.expected.is_some() => Some("'-p' is useless together with '-C'"),
        Op::Set if c.dironly => Some("'-d' is useless for set project ID and/or inherit flag"),
        Op::Set if c.keep => Some(K),
        Op::Set if !c.newline => Some(NUL),
        _ => None,
    }
}

/// clap's refusal of a word as getopt words it here: zfs_do_project names the letter of a
/// missing argument as an invalid option too, and getopt(3), which knows no long options,
/// takes "--name" for the letter '-'.
fn getopt_wording(e: String) -> String {
    if e.starts_with("invalid option '--") {
        return "invalid option '-'".into();
    }
    match e.strip_prefix("missing argument for '").and_then(|r| r.strip_suffix("' option")) {
        Some(letter) => format!("invalid option '{letter}'"),
        None => e,
    }
}

/// When clap refuses a word, getopt would first have acted on the options before the bad
/// one, and a refusal among them is the one it reports. The words are read again cut short
/// before each option letter in turn (a cluster such as "-cCx" cut after "-c" and after
/// "-cC"), never inside a value; the first cut whose options are refused gives the message.
fn earlier_refusal(args: &[String]) -> Option<String> {
    let mut value_next = false;
    let mut ended = false;
    for (i, w) in args.iter().enumerate() {
        let mut cuts = Vec::new();
        if !value_next && !ended && w.len() > 2 && w.starts_with('-') && !w.starts_with("--") {
            for (k, ch) in w.char_indices().skip(1) {
                let cut = k + ch.len_utf8();
                cuts.push(cut);
                if ch == 'p' {
                    break;
                }
            }
        }
        if cuts.last() != Some(&w.len()) {
            cuts.push(w.len());
        }
        for &cut in &cuts {
            let mut words = args[..i].to_vec();
            words.push(w[..cut].to_string());
            match parse_matches::<ProjectOpts>(&words) {
                Ok((_, m)) => {
                    if let Err(msg) = replay(&events(&m)) {
                        return Some(msg);
                    }
                    value_next = false;
                }
                Err(e) if e.starts_with("missing argument") => value_next = true,
                Err(_) => return None,
            }
        }
        if !value_next && w == "--" {
            ended = true;
        }
    }
    None
}

/// The words after `zfs project` read as zfs_do_project reads them: the control and the
/// targets, or the message to print before the usage (empty for the usage alone).
pub fn parse_args(args: &[String]) -> Result<(Control, Vec<String>), String> {
    if args.is_empty() {
        return Err(String::new());
    }
    let (o, m) = match parse_matches::<ProjectOpts>(args) {
        Ok(x) => x,
        Err(e) => return Err(earlier_refusal(args).unwrap_or_else(|| getopt_wording(e))),
    };
    let c = replay(&events(&m))?;
    if let Some(msg) = refused(&c) {
        return Err(msg.into());
    }
    if o.operands.is_empty() {
        return Err("missing file or directory target(s)".into());
    }
    Ok((c, o.operands))
}

/// `zfs project`'s line for a file: "%5u %c %s".
fn list_line(fsx: &FsXattr, name: &[u8]) -> Vec<u8> {
    let flag = if fsx.xflags & FS_XFLAG_PROJINHERIT != 0 { 'P' } else { '-' };
    let mut l = format!("{:5} {flag} ", fsx.projid).into_bytes();
    l.extend_from_slice(name);
    l.push(b'\n');
    l
}

/// `zfs project -c`'s report on a file: nothing when its id is `expected` and it has the
/// inherit flag; else its path NUL-terminated (-0), or a line for each thing wrong.
fn check_report(fsx: &FsXattr, expected: u32, newline: bool, name: &[u8]) -> Vec<u8> {
    let inherit = fsx.xflags & FS_XFLAG_PROJINHERIT != 0;
    let mut r = Vec::new();
    if fsx.projid == expected && inherit {
        return r;
    }
    if !newline {
        r.extend_from_slice(name);
        r.push(0);
        return r;
    }
    if fsx.projid != expected {
        r.extend_from_slice(name);
        r.extend_from_slice(format!(" - project ID is not set properly ({}/{expected})\n", fsx.projid).as_bytes());
    }
    if !inherit {
        r.extend_from_slice(name);
        r.extend_from_slice(b" - project inherit flag is not set\n");
    }
    r
}

/// What `zfs project -C` writes back, or None when the file is already clear.
fn cleared(fsx: &FsXattr, keep: bool) -> Option<FsXattr> {
    if fsx.xflags & FS_XFLAG_PROJINHERIT == 0 && (keep || fsx.projid == DEFAULT_PROJID) {
        return None;
    }
    let mut n = *fsx;
    n.xflags &= !FS_XFLAG_PROJINHERIT;
    if !keep {
        n.projid = DEFAULT_PROJID;
    }
    Some(n)
}

/// What setting `id` (and the inherit flag with `flag`) writes back, or None when the file
/// already has them.
fn set_to(fsx: &FsXattr, id: u32, flag: bool) -> Option<FsXattr> {
    if fsx.projid == id && (!flag || fsx.xflags & FS_XFLAG_PROJINHERIT != 0) {
        return None;
    }
    let mut n = *fsx;
    n.projid = id;
    if flag {
        n.xflags |= FS_XFLAG_PROJINHERIT;
    }
    Some(n)
}

fn errno() -> i32 {
    Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(v: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = v };
}

fn describe(e: i32) -> String {
    strerror(&Error::from_raw_os_error(e))
}

/// An open descriptor, closed when dropped.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and open.
        unsafe { libc::close(self.0) };
    }
}

impl Fd {
    /// open(name, O_RDONLY | O_NOCTTY), non-blocking so that a FIFO does not wait for a writer.
    fn open(name: &[u8]) -> Result<Fd, i32> {
        let path = CString::new(name).map_err(|_| libc::EINVAL)?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(Fd(fd))
        }
    }

    fn get(&self) -> Result<FsXattr, i32> {
        let mut fsx = FsXattr::default();
        // SAFETY: FS_IOC_FSGETXATTR fills a struct fsxattr.
        let r = unsafe { libc::ioctl(self.0, FS_IOC_FSGETXATTR as _, &mut fsx as *mut FsXattr) };
        if r != 0 {
            Err(errno())
        } else {
            Ok(fsx)
        }
    }

    fn set(&self, fsx: &FsXattr) -> Result<(), i32> {
        // SAFETY: FS_IOC_FSSETXATTR reads a struct fsxattr.
        let r = unsafe { libc::ioctl(self.0, FS_IOC_FSSETXATTR as _, fsx as *const FsXattr) };
        if r != 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }
}

/// An open directory stream, closed when dropped.
struct Dir(*mut libc::DIR);

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream is ours and open.
        unsafe { libc::closedir(self.0) };
    }
}

/// One run over the targets, writing what it finds to `out` and its complaints to `err`.
/// The functions answer as zfs_project.c's do: 0, or -1 (or minus an errno) on failure.
pub struct Walk<'a> {
    c: Control,
    /// Entries below a target that vanish (ENOENT) are passed over: removed or renamed meanwhile.
    ignore_noent: bool,
    /// The last open passed over a vanished entry, which leaves ENOENT as errno in
    /// zfs_project.c's readdir loop: the directory then ends as a failed readdir.
    noent_passed: bool,
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
}

impl<'a> Walk<'a> {
    pub fn new(c: Control, out: &'a mut dyn Write, err: &'a mut dyn Write) -> Self {
        Walk { c, ignore_noent: false, noent_passed: false, out, err }
    }

    fn complain(&mut self, what: &str, name: &[u8], e: i32) {
        let _ = self.err.write_all(format!("failed to {what} {}: {}\n", String::from_utf8_lossy(name), describe(e)).as_bytes());
    }

    /// zfs_project_handle: one target, and with -r (or to list or check a directory) what is
    /// under it.
    pub fn handle(&mut self, name: &[u8]) -> i32 {
        let st = match std::fs::metadata(OsStr::from_bytes(name)) {
            Ok(st) => st,
            Err(e) => {
                self.complain("stat", name, e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
        };
        if !st.is_file() && !st.is_dir() {
            let _ = self.err.write_all(b"only support project quota on regular file or directory\n");
            return -1;
        }
        if !st.is_dir() {
            for (on, letter) in [(self.c.dironly, 'd'), (self.c.recursive, 'r')] {
                if on {
                    let _ = self.err.write_all(format!("'-{letter}' option on non-dir target {}\n", String::from_utf8_lossy(name)).as_bytes());
                    return -1;
                }
            }
        }
        if matches!(self.c.op, Op::Set | Op::Check) && self.c.expected.is_none() {
            let r = self.load_projid(name);
            if r != 0 {
                return r;
            }
        }
        self.ignore_noent = false;
        let mut ret = self.handle_one(name);
        if ret != 0 || !st.is_dir() || self.c.dironly || (!self.c.recursive && !matches!(self.c.op, Op::List | Op::Check)) {
            return ret;
        }
        let mut queue = VecDeque::from([name.to_vec()]);
        while let Some(dir) = queue.pop_front() {
            if ret == 0 {
                ret = self.handle_dir(&dir, &mut queue);
            }
        }
        ret
    }

    /// The target's own id becomes the one to set or check against.
    fn load_projid(&mut self, name: &[u8]) -> i32 {
        let fd = match Fd::open(name) {
            Ok(fd) => fd,
            Err(e) => {
                self.complain("open", name, e);
                return -1;
            }
        };
        match fd.get() {
            Ok(fsx) => {
                self.c.expected = Some(fsx.projid);
                0
            }
            Err(e) => {
                self.complain("get xattr for", name, e);
                -1
            }
        }
    }

    /// zfs_project_handle_one: list, check, clear or set one file.
    fn handle_one(&mut self, name: &[u8]) -> i32 {
        self.noent_passed = false;
        let fd = match Fd::open(name) {
            Ok(fd) => fd,
            Err(e) if e == libc::ENOENT && self.ignore_noent => {
                self.noent_passed = true;
                return 0;
            }
            Err(e) => {
                self.complain("open", name, e);
                return -1;
            }
        };
        let fsx = match fd.get() {
            Ok(fsx) => fsx,
            Err(e) => {
                self.complain("get xattr for", name, e);
                return -1;
            }
        };
        let expected = self.c.expected.unwrap_or(DEFAULT_PROJID);
        let new = match self.c.op {
            Op::List => {
                let _ = self.out.write_all(&list_line(&fsx, name));
                return 0;
            }
            Op::Check => {
                let _ = self.out.write_all(&check_report(&fsx, expected, self.c.newline, name));
                return 0;
            }
            Op::Clear => cleared(&fsx, self.c.keep),
            Op::Set => set_to(&fsx, expected, self.c.set_flag),
        };
        let Some(new) = new else { return 0 };
        match fd.set(&new) {
            Ok(()) => 0,
            Err(e) => {
                self.complain("set xattr for", name, e);
                -1
            }
        }
    }

    /// zfs_project_handle_dir: every entry of a directory, the subdirectories queued with -r.
    fn handle_dir(&mut self, name: &[u8], queue: &mut VecDeque<Vec<u8>>) -> i32 {
        let Ok(path) = CString::new(name) else { return -libc::EINVAL };
        // SAFETY: a NUL-terminated path.
        let d = unsafe { libc::opendir(path.as_ptr()) };
        if d.is_null() {
            let e = errno();
            if e == libc::ENOENT && self.ignore_noent {
                return 0;
            }
            self.complain("opendir", name, e);
            return -e;
        }
        let dir = Dir(d);
        // Entries below a target may vanish while the walk goes.
        self.ignore_noent = true;
        let mut ret = 0;
        let mut err = 0;
        while ret == 0 {
            set_errno(0);
            // SAFETY: an open stream; the entry is read before the next readdir.
            let ent = unsafe { libc::readdir(dir.0) };
            if ent.is_null() {
                let e = errno();
                if e != 0 {
                    err = e;
                }
                break;
            }
            // SAFETY: readdir's entry, valid until the next call.
            let (entry, d_type) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()).to_bytes().to_vec(), (*ent).d_type) };
            if entry == b"." || entry == b".." {
                continue;
            }
            if entry.len() + name.len() + 1 >= PATH_MAX {
                err = libc::ENAMETOOLONG;
                break;
            }
            let mut full = name.to_vec();
            full.push(b'/');
            full.extend_from_slice(&entry);
            ret = self.handle_one(&full);
            if self.noent_passed {
                err = libc::ENOENT;
            }
            if ret == 0 && self.c.recursive && d_type == libc::DT_DIR {
                queue.push_back(full);
            }
        }
        if err != 0 && ret == 0 {
            ret = -err;
            self.complain("readdir", name, err);
        }
        ret
    }
}

/// `zfs project ARGS`, run here: the exit status is zfs_do_project's return, the first
/// target's failure (-1, or minus an errno, which exit reports modulo 256).
pub fn main(args: &[String]) -> i32 {
    let (c, targets) = match parse_args(args) {
        Ok(x) => x,
        Err(msg) => {
            let sep = if msg.is_empty() { "" } else { "\n" };
            eprint!("{msg}{sep}{PROJECT_USAGE}");
            return 2;
        }
    };
    // Standard output is buffered as C's is: by line on a terminal, else in blocks (so on a
    // pipe shared with standard error the complaints come first, as they do from OpenZFS's).
    let stdout = std::io::stdout();
    // SAFETY: isatty only looks at the descriptor.
    let mut out: Box<dyn Write> = if unsafe { libc::isatty(1) } == 1 { Box::new(stdout.lock()) } else { Box::new(std::io::BufWriter::new(stdout.lock())) };
    let mut err = std::io::stderr();
    let mut walk = Walk::new(c, &mut *out, &mut err);
    let mut ret = 0;
    for t in &targets {
        let r = walk.handle(t.as_bytes());
        if r != 0 && ret == 0 {
            ret = r;
        }
    }
    let _ = out.flush();
    ret
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    fn parsed(s: &[&str]) -> Control {
        parse_args(&v(s)).unwrap().0
    }

    fn refusal(s: &[&str]) -> String {
        parse_args(&v(s)).unwrap_err()
    }

    #[test]
    fn operations_and_flags() {
        let c = parsed(&["dir"]);
        assert_eq!((c.op, c.expected, c.recursive, c.dironly, c.newline), (Op::List, None, false, false, true));
        let c = parsed(&["-rs", "dir"]);
        assert_eq!((c.op, c.set_flag, c.recursive), (Op::Set, true, true));
        // -p alone sets; its value attached, in the next word, in hex, octal or after a sign.
        assert_eq!(parsed(&["-p", "42", "f"]).op, Op::Set);
        assert_eq!(parsed(&["-p42", "f"]).expected, Some(42));
        assert_eq!(parsed(&["-rp", "0x10", "d"]).expected, Some(16));
        assert_eq!(parsed(&["-p", "010", "f"]).expected, Some(8));
        assert_eq!(parsed(&["-p", " +7", "f"]).expected, Some(7));
        assert_eq!(parsed(&["-p", "", "f"]).expected, Some(0));
        assert_eq!(parsed(&["-p", "4294967294", "f"]).expected, Some(u32::MAX - 1));
        let c = parsed(&["-c", "-0", "-p", "5", "-d", "dir"]);
        assert_eq!((c.op, c.newline, c.expected, c.dironly), (Op::Check, false, Some(5), true));
        let c = parsed(&["-Ck", "-r", "dir"]);
        assert_eq!((c.op, c.keep, c.recursive), (Op::Clear, true, true));
        // -d and -r undo each other, the last one given counting; options may follow operands.
        let c = parsed(&["-d", "-r", "dir"]);
        assert!(c.recursive && !c.dironly);
        let c = parsed(&["dir", "-r", "-d"]);
        assert!(!c.recursive && c.dironly);
        assert_eq!(parse_args(&v(&["a", "-c", "--", "-b"])).unwrap().1, v(&["a", "-b"]));
    }

    #[test]
    fn refusals_in_zfs_do_projects_words() {
        assert_eq!(refusal(&[]), "");
        assert_eq!(refusal(&["-r"]), "missing file or directory target(s)");
        assert_eq!(refusal(&["--"]), "missing file or directory target(s)");
        for args in [&["-c", "-C", "f"][..], &["-sc", "f"], &["-C", "-s", "f"], &["-cc", "f"], &["-s", "-s", "f"]] {
            assert_eq!(refusal(args), "cannot specify '-C' '-c' '-s' together", "{args:?}");
        }
        assert_eq!(refusal(&["-p", "x", "f"]), "project ID must be less than 4294967295");
        assert_eq!(refusal(&["-p", "08", "f"]), "project ID must be less than 4294967295");
        assert_eq!(refusal(&["-p", "99999999999999999999", "f"]), "project ID must be less than 4294967295");
        assert_eq!(refusal(&["-p", "4294967295", "f"]), "invalid project ID");
        assert_eq!(refusal(&["-p", "-1", "f"]), "invalid project ID");
        assert_eq!(refusal(&["-k", "f"]), "'-k' is only valid together with '-C'");
        assert_eq!(refusal(&["-ck", "f"]), "'-k' is only valid together with '-C'");
        assert_eq!(refusal(&["-sk", "f"]), "'-k' is only valid together with '-C'");
        assert_eq!(refusal(&["-0", "f"]), "'-0' is only valid together with '-c'");
        assert_eq!(refusal(&["-C0", "f"]), "'-0' is only valid together with '-c'");
        assert_eq!(refusal(&["-p1", "-0", "f"]), "'-0' is only valid together with '-c'");
        assert_eq!(refusal(&["-Cd", "f"]), "'-d' is useless together with '-C'");
        assert_eq!(refusal(&["-C", "-p", "3", "f"]), "'-p' is useless together with '-C'");
        assert_eq!(refusal(&["-sd", "f"]), "'-d' is useless for set project ID and/or inherit flag");
        assert_eq!(refusal(&["-p", "1", "-d", "f"]), "'-d' is useless for set project ID and/or inherit flag");
        // getopt's own: an unknown letter, and -p without its value, both "invalid option".
        assert_eq!(refusal(&["-x", "f"]), "invalid option 'x'");
        assert_eq!(refusal(&["f", "-p"]), "invalid option 'p'");
        assert_eq!(refusal(&["--bogus", "f"]), "invalid option '-'");
        // getopt stops at the first refusal, reading left to right.
        assert_eq!(refusal(&["-c", "-C", "-x", "f"]), "cannot specify '-C' '-c' '-s' together");
        assert_eq!(refusal(&["-cCx", "f"]), "cannot specify '-C' '-c' '-s' together");
        assert_eq!(refusal(&["-cxC", "f"]), "invalid option 'x'");
        assert_eq!(refusal(&["-p", "bad", "-c", "-C"]), "project ID must be less than 4294967295");
        assert_eq!(refusal(&["-c", "-C", "-p", "bad"]), "cannot specify '-C' '-c' '-s' together");
        assert_eq!(refusal(&["-p", "-c", "-x"]), "project ID must be less than 4294967295");
        assert_eq!(refusal(&["-rp-1", "-x"]), "invalid project ID");
    }

    fn fsx(projid: u32, xflags: u32) -> FsXattr {
        FsXattr { projid, xflags, ..Default::default() }
    }

    #[test]
    fn output_formats() {
        assert_eq!(list_line(&fsx(0, 0), b"a/b"), b"    0 - a/b\n");
        assert_eq!(list_line(&fsx(42, FS_XFLAG_PROJINHERIT | 0x8), b"d"), b"   42 P d\n");
        assert_eq!(list_line(&fsx(1234567, 0), b"x"), b"1234567 - x\n");
        assert_eq!(check_report(&fsx(5, FS_XFLAG_PROJINHERIT), 5, true, b"f"), b"");
        assert_eq!(check_report(&fsx(3, 0), 5, true, b"d/f"), b"d/f - project ID is not set properly (3/5)\nd/f - project inherit flag is not set\n");
        assert_eq!(check_report(&fsx(5, 0), 5, true, b"f"), b"f - project inherit flag is not set\n");
        assert_eq!(check_report(&fsx(3, FS_XFLAG_PROJINHERIT), 5, true, b"f"), b"f - project ID is not set properly (3/5)\n");
        assert_eq!(check_report(&fsx(3, 0), 5, false, b"d/f"), b"d/f\0");
    }

    #[test]
    fn what_clear_and_set_write() {
        let inh = FS_XFLAG_PROJINHERIT;
        assert_eq!(cleared(&fsx(0, 0), false), None);
        assert_eq!(cleared(&fsx(7, 0), true), None);
        assert_eq!(cleared(&fsx(7, 0), false), Some(fsx(0, 0)));
        assert_eq!(cleared(&fsx(7, inh | 0x8), true), Some(fsx(7, 0x8)));
        assert_eq!(cleared(&fsx(7, inh), false), Some(fsx(0, 0)));
        assert_eq!(set_to(&fsx(7, 0), 7, false), None);
        assert_eq!(set_to(&fsx(7, inh), 7, true), None);
        assert_eq!(set_to(&fsx(7, 0), 7, true), Some(fsx(7, inh)));
        // Without -s the flag is left as it is.
        assert_eq!(set_to(&fsx(1, inh), 9, false), Some(fsx(9, inh)));
        assert_eq!(set_to(&fsx(1, 0), 9, false), Some(fsx(9, 0)));
    }

    #[test]
    fn strtoull_as_glibc() {
        assert_eq!(strtoull("0x1f"), Some(31));
        assert_eq!(strtoull("0x"), None);
        assert_eq!(strtoull("0"), Some(0));
        assert_eq!(strtoull("-0"), Some(0));
        assert_eq!(strtoull("-2"), Some(u64::MAX - 1));
        assert_eq!(strtoull("18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull("18446744073709551616"), None);
        assert_eq!(strtoull("12 "), None);
        assert_eq!(strtoull(" "), None);
        assert_eq!(strtoull("+"), None);
    }

    /// A walk of a real tree (on whatever file system holds the temporary directory): the
    /// failures come out in zfs_project.c's words whether or not the ioctls are supported.
    #[test]
    fn walk_refuses_what_zfs_project_c_refuses() {
        let base = std::env::temp_dir().join(format!("oxzfs-project-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("f");
        std::fs::write(&file, b"").unwrap();
        let run = |args: &[&str], target: &std::path::Path| {
            let (c, _) = parse_args(&v(&[args, &["t"]].concat())).unwrap();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let r = Walk::new(c, &mut out, &mut err).handle(target.as_os_str().as_bytes());
            (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap(), r)
        };
        let f = file.display();
        assert_eq!(run(&["-r"], &file), (String::new(), format!("'-r' option on non-dir target {f}\n"), -1));
        assert_eq!(run(&["-d"], &file), (String::new(), format!("'-d' option on non-dir target {f}\n"), -1));
        let gone = base.join("gone");
        assert_eq!(run(&[], &gone), (String::new(), format!("failed to stat {}: No such file or directory\n", gone.display()), -1));
        assert_eq!(run(&[], Path::new("/dev/null")), (String::new(), "only support project quota on regular file or directory\n".into(), -1));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
