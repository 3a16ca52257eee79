//! `warmpath-crdgen`: writes the CRDs generated from the Rust types into `crds/` (one file per
//! CRD), or checks that the files there are current with `--check`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../crds"));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--out" => match args.next() {
                Some(d) => dir = PathBuf::from(d),
                None => {
                    eprintln!("warmpath-crdgen: --out needs a folder");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("usage: warmpath-crdgen [--check] [--out DIR]   (default DIR: the repository's crds/)");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("warmpath-crdgen: unknown argument {other:?} (try --help)");
                return ExitCode::from(2);
            }
        }
    }
    let files = match warmpath_api::crds::files() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("warmpath-crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    if check {
        let stale = warmpath_api::crds::stale_files(&dir, &files);
        if stale.is_empty() {
            return ExitCode::SUCCESS;
        }
        for s in stale {
            eprintln!("warmpath-crdgen: {s}");
        }
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("warmpath-crdgen: creating {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for file in &files {
        let path = dir.join(&file.name);
        if let Err(e) = std::fs::write(&path, &file.yaml) {
            eprintln!("warmpath-crdgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
