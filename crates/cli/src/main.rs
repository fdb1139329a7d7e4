fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(|s| s.as_str()) == Some("zdb") {
        std::process::exit(oxzfs::traverse::zdb_main(&args[2..]));
    }
}
