//! Option parsing for the zpool and zfs verbs. Each verb declares its options as a struct with
//! clap's derive (`#[derive(Parser)]`, one field per option letter, `operands` for the rest);
//! `parse` reads the words after the verb into it in the syntax of getopt(3) as OpenZFS's
//! commands use it: short flags that combine (`-Hp`, `-rf`), values attached or in the next word
//! (`-ofoo`, `-o foo`, `-o -x`), repeated options (`-o a=1 -o b=2`, `-d DIR -d DIR`, `-vv`), `--`
//! ending the options, and options after operands (GNU order), so trailing vdev specs and
//! dataset names are operands wherever the flags fall. clap's errors are turned into OpenZFS's
//! wording ("invalid option 'x'", "missing argument for 'o' option") and never printed as
//! clap's own; `-h`, `--help` and `--version` are not clap's either (the verb's usage is printed
//! by the caller, as OpenZFS's commands do).

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

/// A verb's argument struct: its options, and the operands left after them.
pub trait VerbArgs: CommandFactory + FromArgMatches {
    fn operands(&self) -> &[String];
}

/// Declare the argument struct of a verb: `verb_opts!(Name { fields })` derives clap's parser
/// for it with a trailing `operands: Vec<String>` and implements `VerbArgs`.
macro_rules! verb_opts {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(clap::Parser, Debug, Default)]
        pub struct $name {
            $($(#[$fm])* pub $field: $ty,)*
            /// Everything that is not an option, in order.
            pub operands: Vec<String>,
        }
        impl $crate::opts::VerbArgs for $name {
            fn operands(&self) -> &[String] {
                &self.operands
            }
        }
    };
}
pub(crate) use verb_opts;

/// Whether option `a` takes a value (an appending flag of no values, counted per occurrence,
/// does not).
fn takes_value(a: &clap::Arg) -> bool {
    a.get_action().takes_values() && a.get_num_args().map_or(true, |r| r.max_values() > 0)
}

/// The clap command of `T` with getopt's rules (see the module comment).
fn command<T: CommandFactory>() -> Command {
    T::command()
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .args_override_self(true)
        .mut_args(|a| if takes_value(&a) && a.get_short().is_some() { a.allow_hyphen_values(true) } else { a })
}

/// Parse `args` (the words after the verb) into `T`.
pub fn parse<T: VerbArgs>(args: &[String]) -> Result<T, String> {
    parse_matches::<T>(args).map(|(t, _)| t)
}

/// `parse`, with clap's matches kept for the order in which options were given.
pub fn parse_matches<T: VerbArgs>(args: &[String]) -> Result<(T, ArgMatches), String> {
    let cmd = command::<T>();
    let with_value: String = cmd.get_arguments().filter(|a| takes_value(a)).filter_map(|a| a.get_short()).collect();
    let m = cmd.try_get_matches_from(args).map_err(|e| openzfs_message(&e, &with_value))?;
    let t = T::from_arg_matches(&m).map_err(|e| openzfs_message(&e, &with_value))?;
    Ok((t, m))
}

/// The values of the options `ids` (field names) in the order they were given, each with the
/// id of its option (`zfs list -s a -S b` sorts by a, then b).
pub fn in_order<'a>(m: &ArgMatches, ids: &[&'a str]) -> Vec<(&'a str, String)> {
    let mut all: Vec<(usize, &'a str, String)> = Vec::new();
    for &id in ids {
        if let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
            all.extend(idx.zip(vals).map(|(i, v)| (i, id, v.clone())));
        }
    }
    all.sort_by_key(|&(i, _, _)| i);
    all.into_iter().map(|(_, id, v)| (id, v)).collect()
}

/// The values of a repeatable comma-list option, split (`-o name,size -o used`).
pub fn comma_list(values: &[String]) -> Vec<String> {
    values.iter().flat_map(|v| v.split(',')).filter(|s| !s.is_empty()).map(str::to_string).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    verb_opts!(ListLike {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'v', action = clap::ArgAction::Count)]
        verbose: u8,
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'o')]
        fields: Vec<String>,
        #[arg(short = 'd')]
        dirs: Vec<String>,
        #[arg(short = 's')]
        sort: Vec<String>,
        #[arg(short = 'S')]
        sort_desc: Vec<String>,
        #[arg(short = 't')]
        types: Vec<String>,
    });

    verb_opts!(Plain {
        #[arg(short = 'H')]
        scripted: bool,
    });

    verb_opts!(CreateLike {
        #[arg(short = 'f')]
        force: bool,
        #[arg(short = 'n')]
        dry_run: bool,
        #[arg(short = 'o')]
        props: Vec<String>,
        #[arg(short = 'O')]
        fs_props: Vec<String>,
    });

    #[test]
    fn getopt_like_zpool() {
        let o: ListLike = parse(&v(&["-Hp", "-o", "name,size", "tank", "-v"])).unwrap();
        assert!(o.scripted && o.parsable && o.verbose == 1);
        assert_eq!(o.fields, vec!["name,size"]);
        assert_eq!(o.operands, vec!["tank"]);
        let o: ListLike = parse(&v(&["-oname", "-d", "/a", "-d/b", "--", "-x"])).unwrap();
        assert_eq!(o.dirs, vec!["/a", "/b"]);
        assert_eq!(comma_list(&o.fields), vec!["name"]);
        assert_eq!(o.operands, vec!["-x"]);
        assert_eq!(parse::<Plain>(&v(&["-Hz"])).unwrap_err(), "invalid option 'z'");
        assert_eq!(parse::<ListLike>(&v(&["-d"])).unwrap_err(), "missing argument for 'd' option");
        // A lone "-" is an operand; a flag given twice is no error.
        assert_eq!(parse::<Plain>(&v(&["-"])).unwrap().operands, vec!["-"]);
        assert!(parse::<Plain>(&v(&["-H", "-HH"])).unwrap().scripted);
    }

    #[test]
    fn trailing_vdev_spec_and_repeated_options() {
        use crate::vdevspec::{self, Group};
        // `zpool create -f -o ashift=12 tank mirror /a /b special mirror /c /d log /e cache /f -O compression=lz4 -o comment=x`
        let args = v(&["-f", "-o", "ashift=12", "tank", "mirror", "/a", "/b", "special", "mirror", "/c", "/d", "log", "/e", "cache", "/f", "-O", "compression=lz4", "-o", "comment=x"]);
        let o: CreateLike = parse(&args).unwrap();
        assert!(o.force && !o.dry_run);
        assert_eq!(o.props, vec!["ashift=12", "comment=x"]);
        assert_eq!(o.fs_props, vec!["compression=lz4"]);
        assert_eq!(o.operands, v(&["tank", "mirror", "/a", "/b", "special", "mirror", "/c", "/d", "log", "/e", "cache", "/f"]));
        // The operands after the pool name are the vdev grammar's.
        let spec = vdevspec::parse(&o.operands[1..], std::path::Path::new("/"), false).unwrap();
        assert_eq!(spec.data, vec![Group::Mirror(vec!["/a".into(), "/b".into()])]);
        assert_eq!(spec.special, vec![Group::Mirror(vec!["/c".into(), "/d".into()])]);
        assert_eq!(spec.log, vec![Group::Disk("/e".into())]);
        assert_eq!(spec.cache, vec![std::path::PathBuf::from("/f")]);
        // `-o` without its value at the end is getopt's missing argument.
        assert_eq!(parse::<CreateLike>(&v(&["tank", "-o"])).unwrap_err(), "missing argument for 'o' option");
    }

    #[test]
    fn comma_lists_order_and_counts() {
        let (o, m) = parse_matches::<ListLike>(&v(&["-Hp", "-o", "name,used", "-s", "used", "-t", "snap,fs", "-S", "name", "-s", "avail", "-r", "tank"])).unwrap();
        assert_eq!(comma_list(&o.fields), vec!["name", "used"]);
        assert_eq!(comma_list(&o.types), vec!["snap", "fs"]);
        assert_eq!(in_order(&m, &["sort", "sort_desc"]), vec![("sort", "used".to_string()), ("sort_desc", "name".to_string()), ("sort", "avail".to_string())]);
        assert_eq!(o.verbose, 0);
        assert_eq!(parse::<ListLike>(&v(&["-vv", "tank", "-v"])).unwrap().verbose, 3);
        // A value may start with '-'; a long option is named whole, as glibc's getopt does.
        assert_eq!(parse::<ListLike>(&v(&["-o", "-x"])).unwrap().fields, vec!["-x"]);
        assert_eq!(parse::<Plain>(&v(&["--bogus"])).unwrap_err(), "invalid option '--bogus'");
        assert_eq!(parse::<ListLike>(&v(&["tank", "-rZ"])).unwrap_err(), "invalid option 'Z'");
        assert_eq!(parse::<ListLike>(&v(&["-h"])).unwrap_err(), "invalid option 'h'");
    }
}
