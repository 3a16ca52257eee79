//! The README's benchmark block, regenerated from committed results: between a begin marker that
//! names its result folders (`<!-- warmpath-bench headline --results DIR --results DIR2 -->`, folders
//! relative to the README) and the end marker, `warmpath-bench headline --readme README.md`
//! writes warmpath's default against each peer ([`super::versus`]) for every folder, with the
//! commit its results came from; `--check` only compares, and fails when the README says
//! anything else (a test runs it on the repository's README).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{commits, load_results, points, suite_rank, versus, ReportError};

/// Starts the begin marker; the result folders follow, then ` -->`.
pub const BEGIN: &str = "<!-- warmpath-bench headline";
pub const END: &str = "<!-- end of warmpath-bench headline -->";

#[derive(Debug, thiserror::Error)]
pub enum HeadlineError {
    #[error("{0} has no `{BEGIN} --results DIR ... -->` … `{END}` block")]
    NoBlock(PathBuf),
    #[error("{path}: the headline block's marker names no `--results DIR`: {marker}")]
    NoFolders { path: PathBuf, marker: String },
    #[error(
        "{0}'s benchmark block differs from what its committed results say; regenerate it with \
         `warmpath-bench headline --readme {0}` (and commit the results it names)"
    )]
    Diverged(PathBuf),
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// The block for the result folders `dirs` (relative to `base`).
pub fn render(base: &Path, dirs: &[String]) -> Result<String, HeadlineError> {
    let mut md = String::new();
    for dir in dirs {
        let results = load_results(&base.join(dir))?;
        commits::check(&results, false)?;
        let commit = results
            .iter()
            .find_map(|r| r.result.provenance.short_commit())
            .unwrap_or_else(|| "not recorded".to_owned());
        let dirty = results
            .iter()
            .filter(|r| r.result.provenance.dirty == Some(true))
            .count();
        let sections = points::sections(&results, suite_rank);
        let _ = write!(
            md,
            "From [`{dir}`]({dir}) ({} result files, commit `{commit}`",
            results.len()
        );
        if dirty > 0 {
            let _ = write!(
                md,
                ", **{dirty} of them run in a tree with uncommitted changes**"
            );
        }
        md.push_str("):\n\n");
        let table = versus::table(&sections);
        if table.is_empty() {
            md.push_str("(no section runs warmpath's default beside a peer)\n\n");
        } else {
            md.push_str(&table);
            md.push('\n');
        }
    }
    md.push_str(versus::LEGEND);
    md.push('\n');
    Ok(md)
}

/// Regenerates the block of `readme` (or, with `check`, only compares it). Returns whether the
/// file changed.
pub fn update(readme: &Path, check: bool) -> Result<bool, HeadlineError> {
    let text = std::fs::read_to_string(readme).map_err(|source| ReportError::Read {
        path: readme.to_owned(),
        source,
    })?;
    let no_block = || HeadlineError::NoBlock(readme.to_owned());
    let begin = text.find(BEGIN).ok_or_else(no_block)?;
    let marker_end = begin + text[begin..].find("-->").ok_or_else(no_block)? + "-->".len();
    let body_start = marker_end + usize::from(text[marker_end..].starts_with('\n'));
    let end = body_start + text[body_start..].find(END).ok_or_else(no_block)?;
    let marker = &text[begin..marker_end];
    let words: Vec<&str> = marker[BEGIN.len()..marker.len() - 3]
        .split_whitespace()
        .collect();
    let dirs: Vec<String> = words
        .windows(2)
        .filter(|w| w[0] == "--results")
        .map(|w| w[1].to_owned())
        .collect();
    if dirs.is_empty() {
        return Err(HeadlineError::NoFolders {
            path: readme.to_owned(),
            marker: marker.to_owned(),
        });
    }
    let base = readme
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let block = render(base, &dirs)?;
    if text[body_start..end] == block {
        return Ok(false);
    }
    if check {
        return Err(HeadlineError::Diverged(readme.to_owned()));
    }
    let updated = format!("{}{block}{}", &text[..body_start], &text[end..]);
    std::fs::write(readme, updated).map_err(|source| ReportError::Write {
        path: readme.to_owned(),
        source,
    })?;
    Ok(true)
}
