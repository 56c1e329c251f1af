//! Writes a target's seed corpus into a directory, for libFuzzer:
//! `cargo run -p inagg-fuzz --bin seeds -- TARGET DIR` (`fuzz/run` does).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [target, dir] = args.as_slice() else {
        eprintln!("usage: seeds TARGET DIR (targets: {})", names());
        return ExitCode::from(2);
    };
    if inagg_fuzz::target(target).is_none() {
        eprintln!("seeds: no target {target:?}; the targets are {}", names());
        return ExitCode::from(2);
    }
    let seeds = inagg_fuzz::seeds::of(target);
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        seeds.iter().enumerate().try_for_each(|(i, seed)| {
            std::fs::write(std::path::Path::new(dir).join(format!("seed-{i:03}")), seed)
        })
    });
    match written {
        Ok(()) => {
            println!("{} seeds for {target} in {dir}", seeds.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("seeds: {dir}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn names() -> String {
    inagg_fuzz::TARGETS.map(|(n, _)| n).join(", ")
}
