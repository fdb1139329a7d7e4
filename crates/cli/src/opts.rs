//! Option parsing for the zpool and zfs verbs in the syntax of getopt(3) as OpenZFS's commands
//! use it: short flags that combine (`-Hp`, `-rf`), values attached or in the next word (`-ofoo`,
//! `-o foo`), repeated options (`-o a=1 -o b=2`, `-d DIR -d DIR`), `--` ending the options, and
//! options after operands (GNU order), so trailing vdev specs and dataset names are operands
//! wherever the flags fall. clap does the parsing; its errors are turned into OpenZFS's wording
//! ("invalid option 'x'", "missing argument for 'o' option") and never printed as clap's own.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, Command};

/// Parsed short options: flags in order (with their value, for options taking one) and operands.
#[derive(Debug)]
pub struct Opts {
    pub flags: Vec<(char, Option<String>)>,
    pub operands: Vec<String>,
}

const OPERANDS: &str = "operands";

/// The clap command for one verb: `with_value` lists the options taking a value, `plain` the
/// others; everything else is an operand.
fn command(with_value: &str, plain: &str) -> Command {
    let mut cmd = Command::new("verb")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .arg(Arg::new(OPERANDS).num_args(0..).action(ArgAction::Append));
    // A letter listed twice (or in both lists) is the first's, as getopt reads its optstring.
    let mut seen = String::new();
    for c in with_value.chars().filter(|&c| first_time(&mut seen, c)) {
        cmd = cmd.arg(Arg::new(c.to_string()).short(c).num_args(1).action(ArgAction::Append).allow_hyphen_values(true));
    }
    for c in plain.chars().filter(|&c| first_time(&mut seen, c)) {
        cmd = cmd.arg(Arg::new(c.to_string()).short(c).action(ArgAction::Count));
    }
    cmd
}

fn first_time(seen: &mut String, c: char) -> bool {
    let new = !seen.contains(c);
    seen.push(c);
    new
}

/// Parse `args` (the words after the verb). See the module comment for the syntax.
pub fn getopt(args: &[String], with_value: &str, plain: &str) -> Result<Opts, String> {
    let m = command(with_value, plain).try_get_matches_from(args).map_err(|e| openzfs_message(&e, with_value))?;
    // Flags in the order given (`zfs list -s a -S b` sorts by a, then b).
    let mut flags: Vec<(usize, char, Option<String>)> = Vec::new();
    let mut seen = String::new();
    let with_value: Vec<char> = with_value.chars().filter(|&c| first_time(&mut seen, c)).collect();
    let plain: Vec<char> = plain.chars().filter(|&c| first_time(&mut seen, c)).collect();
    for &c in &with_value {
        let id = c.to_string();
        if let (Some(idx), Some(vals)) = (m.indices_of(&id), m.get_many::<String>(&id)) {
            flags.extend(idx.zip(vals).map(|(i, v)| (i, c, Some(v.clone()))));
        }
    }
    for &c in &plain {
        flags.extend(flag_indices(&m, c).into_iter().map(|i| (i, c, None)));
    }
    flags.sort_by_key(|&(i, _, _)| i);
    let operands = m.get_many::<String>(OPERANDS).map(|v| v.cloned().collect()).unwrap_or_default();
    Ok(Opts { flags: flags.into_iter().map(|(_, c, v)| (c, v)).collect(), operands })
}

/// Where a plain flag was given: one index per use (`-v -v` counts twice).
fn flag_indices(m: &ArgMatches, c: char) -> Vec<usize> {
    let id = c.to_string();
    let n = m.get_count(&id) as usize;
    let mut idx: Vec<usize> = m.indices_of(&id).map(|i| i.collect()).unwrap_or_default();
    while idx.len() < n {
        idx.push(idx.last().copied().unwrap_or(0));
    }
    idx.truncate(n);
    idx
}

/// clap's error as OpenZFS's commands word it.
fn openzfs_message(e: &clap::Error, with_value: &str) -> String {
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    match e.kind() {
        ErrorKind::UnknownArgument => match arg.strip_prefix('-') {
            Some(rest) if !rest.starts_with('-') => format!("invalid option '{}'", rest.chars().next().unwrap_or('?')),
            _ => format!("invalid option '{arg}'"),
        },
        ErrorKind::InvalidValue | ErrorKind::NoEquals | ErrorKind::WrongNumberOfValues | ErrorKind::TooFewValues => {
            let c = arg.trim_start_matches('-').chars().next().filter(|c| with_value.contains(*c)).unwrap_or('?');
            format!("missing argument for '{c}' option")
        }
        _ => format!("invalid option '{}'", arg.trim_start_matches('-')),
    }
}

impl Opts {
    pub fn has(&self, c: char) -> bool {
        self.flags.iter().any(|(f, _)| *f == c)
    }
    pub fn values(&self, c: char) -> Vec<String> {
        self.flags.iter().filter(|(f, _)| *f == c).filter_map(|(_, v)| v.clone()).collect()
    }
    /// Values of a repeatable comma-list option, split.
    pub fn list(&self, c: char) -> Vec<String> {
        self.values(c).iter().flat_map(|v| v.split(',').map(|s| s.to_string()).collect::<Vec<_>>()).filter(|s| !s.is_empty()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn getopt_like_zpool() {
        let o = getopt(&v(&["-Hp", "-o", "name,size", "tank", "-v"]), "o", "Hpv").unwrap();
        assert!(o.has('H') && o.has('p') && o.has('v'));
        assert_eq!(o.values('o'), vec!["name,size"]);
        assert_eq!(o.operands, vec!["tank"]);
        let o = getopt(&v(&["-oname", "-d", "/a", "-d/b", "--", "-x"]), "od", "").unwrap();
        assert_eq!(o.values('d'), vec!["/a", "/b"]);
        assert_eq!(o.list('o'), vec!["name"]);
        assert_eq!(o.operands, vec!["-x"]);
        assert_eq!(getopt(&v(&["-Hz"]), "", "H").unwrap_err(), "invalid option 'z'");
        assert_eq!(getopt(&v(&["-d"]), "d", "").unwrap_err(), "missing argument for 'd' option");
        // A lone "-" is an operand.
        assert_eq!(getopt(&v(&["-"]), "", "").unwrap().operands, vec!["-"]);
    }

    #[test]
    fn trailing_vdev_spec_and_repeated_options() {
        use crate::vdevspec::{self, Group};
        // `zpool create -f -o ashift=12 tank mirror /a /b special mirror /c /d log /e cache /f -O compression=lz4 -o comment=x`
        let args = v(&["-f", "-o", "ashift=12", "tank", "mirror", "/a", "/b", "special", "mirror", "/c", "/d", "log", "/e", "cache", "/f", "-O", "compression=lz4", "-o", "comment=x"]);
        let o = getopt(&args, "oOmR", "fnd").unwrap();
        assert!(o.has('f') && !o.has('n'));
        assert_eq!(o.values('o'), vec!["ashift=12", "comment=x"]);
        assert_eq!(o.values('O'), vec!["compression=lz4"]);
        assert_eq!(o.operands, v(&["tank", "mirror", "/a", "/b", "special", "mirror", "/c", "/d", "log", "/e", "cache", "/f"]));
        // The operands after the pool name are the vdev grammar's.
        let spec = vdevspec::parse(&o.operands[1..], std::path::Path::new("/"), false).unwrap();
        assert_eq!(spec.data, vec![Group::Mirror(vec!["/a".into(), "/b".into()])]);
        assert_eq!(spec.special, vec![Group::Mirror(vec!["/c".into(), "/d".into()])]);
        assert_eq!(spec.log, vec![Group::Disk("/e".into())]);
        assert_eq!(spec.cache, vec![std::path::PathBuf::from("/f")]);
        // `-o` without its value at the end is getopt's missing argument.
        assert_eq!(getopt(&v(&["tank", "-o"]), "o", "f").unwrap_err(), "missing argument for 'o' option");
    }

    #[test]
    fn comma_lists_order_and_counts() {
        let o = getopt(&v(&["-Hp", "-o", "name,used", "-s", "used", "-t", "snap,fs", "-S", "name", "-r", "tank", "-d", "2"]), "ostSd", "Hpr").unwrap();
        assert_eq!(o.list('o'), vec!["name", "used"]);
        assert_eq!(o.list('t'), vec!["snap", "fs"]);
        let sorts: Vec<_> = o.flags.iter().filter(|(c, _)| matches!(c, 's' | 'S')).map(|(c, v)| (*c, v.clone().unwrap())).collect();
        assert_eq!(sorts, vec![('s', "used".to_string()), ('S', "name".to_string())]);
        assert_eq!(o.values('d'), vec!["2"]);
        assert_eq!(o.flags.iter().filter(|(c, _)| *c == 'v').count(), 0);
        let o = getopt(&v(&["-vv", "tank", "-v"]), "", "v").unwrap();
        assert_eq!(o.flags.iter().filter(|(c, _)| *c == 'v').count(), 3);
        // A value may start with '-'; a long option is named whole, as glibc's getopt does.
        assert_eq!(getopt(&v(&["-o", "-x"]), "o", "").unwrap().values('o'), vec!["-x"]);
        assert_eq!(getopt(&v(&["--bogus"]), "", "H").unwrap_err(), "invalid option '--bogus'");
        assert_eq!(getopt(&v(&["tank", "-rZ"]), "", "r").unwrap_err(), "invalid option 'Z'");
        assert_eq!(getopt(&v(&["-h"]), "o", "H").unwrap_err(), "invalid option 'h'");
    }
}
