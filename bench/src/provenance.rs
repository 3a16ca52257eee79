//! Where a result came from: the commit of the tree the benchmark ran in (and whether it had
//! uncommitted changes), the exact command line, the machine's core count and its load average
//! at the start and the end of the run.
//!
//! Everything is read at run time and everything may be missing (no git, not a repository, no
//! `/proc`): a result is still written, with the gaps left empty, and the report says so. The
//! commit is `git rev-parse HEAD` in the current directory, which is the repository root when
//! `bench/compare.sh` runs it; the report refuses to mix results of different commits, so a table
//! never sets today's router beside last week's.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The 1-, 5- and 15-minute load averages at the start and the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LoadAverage {
    pub start: Option<[f64; 3]>,
    pub end: Option<[f64; 3]>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Provenance {
    /// `git rev-parse HEAD`, when the run was started inside a git work tree.
    pub commit: Option<String>,
    /// Whether tracked files differed from that commit (untracked files do not count, nor do
    /// result folders: a run that rewrites `bench/results/` did not change the code).
    pub dirty: Option<bool>,
    /// The command line, program name first.
    pub argv: Vec<String>,
    pub host: Option<String>,
    /// Cores available to the process, to read the load average against.
    pub cpus: Option<usize>,
    pub load_average: LoadAverage,
}

impl Provenance {
    /// Everything but the end-of-run load average, read now in `dir`.
    pub fn at_start(dir: &Path, argv: Vec<String>) -> Self {
        let (commit, dirty) = match git_commit(dir) {
            Some((c, d)) => (Some(c), Some(d)),
            None => (None, None),
        };
        Self {
            commit,
            dirty,
            argv,
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty()),
            cpus: std::thread::available_parallelism().ok().map(usize::from),
            load_average: LoadAverage {
                start: load_average(),
                end: None,
            },
        }
    }

    /// Records the load average at the end of the run.
    pub fn finish(&mut self) {
        self.load_average.end = load_average();
    }

    /// The commit as the report prints it: short hash, `+dirty` when the tree had changes.
    pub fn short_commit(&self) -> Option<String> {
        let c = self.commit.as_ref()?;
        let short: String = c.chars().take(12).collect();
        Some(match self.dirty {
            Some(true) => format!("{short}+dirty"),
            _ => short,
        })
    }
}

/// HEAD's hash and whether tracked files differ from it, or `None` without git or a repository.
pub fn git_commit(dir: &Path) -> Option<(String, bool)> {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = run(&["rev-parse", "HEAD"]).filter(|h| is_hash(h))?;
    // --no-optional-locks: `status` must not refresh the index behind the back of whoever is
    // committing in the same tree (it would hold index.lock for a moment).
    // Results the benchmarks write (bench/results*/, committed for the record) are not the
    // code under test: rewriting them must not mark the run as made from changed code.
    let dirty = run(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude,glob)bench/results*/**",
    ])
    .map(|s| !s.is_empty())
    // A repository whose status cannot be read: say dirty rather than vouch for it.
    .unwrap_or(true);
    Some((head, dirty))
}

fn is_hash(s: &str) -> bool {
    (40..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The load averages from `/proc/loadavg` (Linux), or `None` elsewhere.
pub fn load_average() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// `0.52 0.58 0.59 1/467 12345` → `[0.52, 0.58, 0.59]`.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_average_parses_proc_format_and_rejects_garbage() {
        assert_eq!(
            parse_loadavg("0.52 1.58 2.59 1/467 12345\n"),
            Some([0.52, 1.58, 2.59])
        );
        assert_eq!(parse_loadavg("0.5 x 1"), None);
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn outside_a_repository_there_is_no_commit() {
        let dir = std::env::temp_dir().join(format!("warmpath-prov-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A bare temporary folder: git (if installed) finds no work tree above /tmp.
        assert_eq!(git_commit(&dir), None);
        let p = Provenance::at_start(&dir, vec!["x".into()]);
        assert_eq!((p.commit.as_deref(), p.dirty), (None, None));
        assert_eq!(p.short_commit(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn inside_this_repository_there_is_one() {
        // The crate's own folder is in the warmpath repository when git is available; skip
        // quietly where the sources were copied without it.
        let Some((head, _)) = git_commit(Path::new(env!("CARGO_MANIFEST_DIR"))) else {
            eprintln!("no git repository around the sources: skipped");
            return;
        };
        assert!(is_hash(&head), "{head}");
    }

    #[test]
    fn rewritten_results_do_not_make_a_tree_dirty_and_changed_code_does() {
        let dir = std::env::temp_dir().join(format!("warmpath-prov-git-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bench/results-x")).unwrap();
        let git = |args: &[&str]| {
            Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .current_dir(&dir)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !git(&["init", "-q"]) {
            eprintln!("no git: skipped");
            return;
        }
        std::fs::write(dir.join("code.rs"), "fn main() {}").unwrap();
        std::fs::write(dir.join("bench/results-x/run.json"), "{}").unwrap();
        assert!(git(&["add", "."]) && git(&["commit", "-qm", "x"]));
        assert_eq!(git_commit(&dir).map(|c| c.1), Some(false));
        std::fs::remove_file(dir.join("bench/results-x/run.json")).unwrap();
        assert_eq!(git_commit(&dir).map(|c| c.1), Some(false), "results only");
        std::fs::write(dir.join("code.rs"), "fn main() { loop {} }").unwrap();
        assert_eq!(git_commit(&dir).map(|c| c.1), Some(true), "code changed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn short_commit_marks_dirty_trees() {
        let p = Provenance {
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            dirty: Some(true),
            ..Default::default()
        };
        assert_eq!(p.short_commit().as_deref(), Some("0123456789ab+dirty"));
    }
}
