//! The commits behind the results: the report refuses to mix them unless told to, says on top
//! which commit it describes, and lists at the end every result file with its commit, seed and
//! the machine's load average at the start and end of its run (a run on a loaded machine is
//! visible as such).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Loaded, ReportError};

/// How a commit is printed: the short hash with `+dirty`, or why there is none.
fn commit_text(r: &Loaded) -> String {
    r.result
        .provenance
        .short_commit()
        .unwrap_or_else(|| "not recorded".to_owned())
}

/// Files by commit (`None`: not recorded), in name order.
fn by_commit(results: &[Loaded]) -> BTreeMap<Option<&str>, Vec<&Loaded>> {
    let mut m: BTreeMap<Option<&str>, Vec<&Loaded>> = BTreeMap::new();
    for r in results {
        m.entry(r.commit()).or_default().push(r);
    }
    m
}

/// Refuses results of more than one commit (a missing commit counts as one of its own) unless
/// `allow_mixed`.
pub(crate) fn check(results: &[Loaded], allow_mixed: bool) -> Result<(), ReportError> {
    let groups = by_commit(results);
    if groups.len() <= 1 || allow_mixed {
        return Ok(());
    }
    let mut listing = String::new();
    for (commit, files) in &groups {
        let names: Vec<&str> = files.iter().take(4).map(|r| r.file.as_str()).collect();
        let more = files.len().saturating_sub(names.len());
        let _ = writeln!(
            listing,
            "  {}: {} file{} ({}{})",
            commit.unwrap_or("commit not recorded (schema 1, or run outside a git work tree)"),
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            names.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    Err(ReportError::MixedCommits(listing.trim_end().to_owned()))
}

/// The paragraph under the title: which commit the report describes.
pub(crate) fn summary(results: &[Loaded]) -> String {
    let groups = by_commit(results);
    let dirty = results
        .iter()
        .filter(|r| r.result.provenance.dirty == Some(true))
        .count();
    let mut md = String::new();
    match groups.keys().collect::<Vec<_>>().as_slice() {
        [Some(c)] => {
            let _ = write!(
                md,
                "All {} run results come from commit `{c}`",
                results.len()
            );
        }
        [None] => {
            let _ = write!(
                md,
                "The {} run results do not record their commit (written before result schema 2)",
                results.len()
            );
        }
        _ => {
            let list: Vec<String> = groups
                .iter()
                .map(|(c, f)| format!("`{}` ({} files)", c.unwrap_or("not recorded"), f.len()))
                .collect();
            let _ = write!(
                md,
                "**The run results come from {} commits**: {} (reported with \
                 `--allow-mixed-commits`; runs of different commits are in separate sections)",
                groups.len(),
                list.join(", ")
            );
        }
    }
    if dirty > 0 {
        let _ = write!(
            md,
            "; {dirty} of them were run in a tree with uncommitted changes to tracked files"
        );
    }
    md.push_str(". The Provenance section lists every file with its commit, seed and the machine's load.\n\n");
    md
}

fn load_text(l: Option<[f64; 3]>) -> String {
    l.map_or("–".to_owned(), |l| format!("{:.2}", l[0]))
}

/// Every result file with its commit, seed and load average.
pub(crate) fn section(results: &[Loaded]) -> String {
    let mut md = String::from(
        "## Provenance\n\n\
         Every run result, with the commit it ran on (`+dirty`: tracked files had uncommitted \
         changes), its seed, and the 1-minute load average at the start and the end of the run \
         against the cores the load generator saw (load generator, router and simulated \
         replicas share them, so a load well above the core count means the figures include \
         waiting for a core).\n\n\
         | file | run | seed | commit | load at start → end | cores |\n|---|---|---:|---|---|---:|\n",
    );
    for r in results {
        let p = &r.result.provenance;
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | `{}` | {} → {} | {} |",
            r.file,
            r.label(),
            r.result.config.seed,
            commit_text(r),
            load_text(p.load_average.start),
            load_text(p.load_average.end),
            p.cpus.map_or("–".to_owned(), |c| c.to_string()),
        );
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::super::points::tests::run;
    use super::*;

    fn on(commit: Option<&str>, dirty: bool, file: &str) -> Loaded {
        let mut r = run("x", 1, None);
        r.file = file.to_owned();
        r.result.provenance.commit = commit.map(str::to_owned);
        r.result.provenance.dirty = commit.map(|_| dirty);
        r.result.provenance.load_average.start = Some([1.5, 1.0, 0.5]);
        r.result.provenance.cpus = Some(2);
        r
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn one_commit_passes_and_is_named() {
        let rs = vec![on(Some(A), false, "a.json"), on(Some(A), true, "b.json")];
        assert!(check(&rs, false).is_ok());
        let s = summary(&rs);
        assert!(
            s.contains(&format!("All 2 run results come from commit `{A}`")),
            "{s}"
        );
        assert!(
            s.contains("1 of them were run in a tree with uncommitted changes"),
            "{s}"
        );
        let table = section(&rs);
        assert!(
            table.contains("| `b.json` | x | 1 | `aaaaaaaaaaaa+dirty` | 1.50 → – | 2 |"),
            "{table}"
        );
    }

    #[test]
    fn mixed_commits_are_refused_naming_the_files_unless_allowed() {
        let rs = vec![
            on(Some(A), false, "a.json"),
            on(Some(B), false, "b.json"),
            on(None, false, "old.json"),
        ];
        let err = check(&rs, false).unwrap_err().to_string();
        assert!(err.contains(&format!("{A}: 1 file (a.json)")), "{err}");
        assert!(err.contains(&format!("{B}: 1 file (b.json)")), "{err}");
        assert!(err.contains("commit not recorded"), "{err}");
        assert!(err.contains("old.json"), "{err}");
        assert!(err.contains("--allow-mixed-commits"), "{err}");
        assert!(check(&rs, true).is_ok());
        assert!(summary(&rs).contains("come from 3 commits"));
    }

    #[test]
    fn results_without_a_commit_are_one_group() {
        let rs = vec![on(None, false, "a.json"), on(None, false, "b.json")];
        assert!(check(&rs, false).is_ok());
        assert!(summary(&rs).contains("do not record their commit"));
    }
}
