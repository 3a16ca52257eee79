//! The data-path suite's table, from the `datapath.json` that `bench/datapath.sh` writes
//! (proxy overhead with a static backend, measured with wrk): rendered as it is, whichever
//! targets it holds.

use std::fmt::Write;

use serde_json::Value;

fn num(v: &Value, key: &str, digits: usize) -> String {
    v.get(key)
        .and_then(Value::as_f64)
        .map_or("–".to_owned(), |x| format!("{x:.digits$}"))
}

/// The Markdown section, or a note when the file is not what the suite writes.
pub(crate) fn section(json: &str) -> String {
    let mut md = String::from("## Data path (bench/datapath.sh)\n\n");
    let Ok(v) = serde_json::from_str::<Value>(json) else {
        md.push_str("`datapath.json` is not valid JSON.\n\n");
        return md;
    };
    let Some(results) = v.get("results").and_then(Value::as_object) else {
        md.push_str("`datapath.json` has no `results`.\n\n");
        return md;
    };
    let _ = writeln!(
        md,
        "Proxy overhead against a static nginx backend (so the backend is never the bottleneck), \
         wrk {}, median of {} rounds, measured {} on {}. Numbers from `bench/results/datapath.json`.\n",
        wrk_said(v.get("wrk")),
        v.get("rounds").map(Value::to_string).unwrap_or_default(),
        v.get("date").and_then(Value::as_str).unwrap_or("?"),
        host_said(v.get("host")),
    );
    if let Some(peers) = v.get("peers").and_then(Value::as_object) {
        for (name, p) in peers {
            let _ = writeln!(
                md,
                "Peer `{name}` {}: `{}`.\n",
                p.get("version")
                    .and_then(Value::as_str)
                    .unwrap_or("(version unknown)"),
                p.get("flags").and_then(Value::as_str).unwrap_or("?"),
            );
        }
    }
    md.push_str("| target | req/s | p50 ms | p99 ms | p99 added ms | CPU µs/req | × nginx throughput | 1-conn p50 added µs | errors |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (name, r) in results {
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            num(r, "rps", 0),
            num(r, "p50_ms", 3),
            num(r, "p99_ms", 3),
            num(r, "p99_added_ms", 3),
            num(r, "cpu_us_per_req", 1),
            num(r, "throughput_vs_nginx", 2),
            num(r, "c1_p50_added_us", 0),
            num(r, "errors", 0),
        );
    }
    md.push('\n');
    if let Some(large) = v.get("large_prompt_400kb").and_then(Value::as_object) {
        md.push_str("400 KB prompts, same wrk settings otherwise:\n\n");
        md.push_str("| target | req/s | p50 ms | CPU µs/req |\n|---|---:|---:|---:|\n");
        for (name, r) in large {
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} |",
                num(r, "rps", 0),
                num(r, "p50_ms", 3),
                num(r, "cpu_us_per_req", 1),
            );
        }
        md.push('\n');
    }
    md
}

/// wrk's settings as its command line (in backticks) and the prompt size, from the object
/// `bench/datapath.sh` writes; older files held the command line itself as a string.
fn wrk_said(wrk: Option<&Value>) -> String {
    match wrk {
        Some(Value::String(s)) => format!("`{s}`"),
        Some(w @ Value::Object(_)) => {
            let field = |k: &str| {
                w.get(k).map_or("?".to_owned(), |x| {
                    x.to_string().trim_matches('"').to_owned()
                })
            };
            let mut said = format!(
                "`-t{} -c{} -d{}`",
                field("threads"),
                field("connections"),
                field("duration")
            );
            if w.get("prompt_bytes").is_some() {
                let _ = write!(said, " with {}-byte prompts", field("prompt_bytes"));
            }
            said
        }
        _ => "(settings unrecorded)".into(),
    }
}

/// The machine, from `host` (cores and load at the end) or an older file's host name.
fn host_said(host: Option<&Value>) -> String {
    match host {
        Some(Value::String(s)) => format!("`{s}`"),
        Some(h @ Value::Object(_)) => {
            let cores = h
                .get("cpus")
                .and_then(Value::as_u64)
                .map_or("?".into(), |c| c.to_string());
            match h
                .get("loadavg_at_end")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
                .and_then(Value::as_f64)
            {
                Some(load) => format!("{cores} cores (load average {load:.2} at the end)"),
                None => format!("{cores} cores"),
            }
        }
        _ => "an unrecorded machine".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_target_and_survives_bad_input() {
        let json = r#"{"date":"d","host":"h","wrk":"-t1 -c32","rounds":3,
            "results":{"nginx":{"rps":42750.9,"p50_ms":0.643,"throughput_vs_nginx":1.0},
                       "warmpath-1thread":{"rps":27094.4,"errors":0}}}"#;
        let md = section(json);
        assert!(md.contains("| nginx | 42751 | 0.643 |"), "{md}");
        assert!(md.contains("| warmpath-1thread | 27094 | – |"), "{md}");
        assert!(md.contains("wrk `-t1 -c32`"), "{md}");
        assert!(md.contains("on `h`"), "{md}");
        let now = r#"{"date":"d","host":{"cpus":2,"loadavg_at_end":[1.74,0.9,0.5]},
            "wrk":{"threads":1,"connections":32,"duration":"5s","prompt_bytes":2048},"rounds":3,
            "peers":{"smg":{"version":"1.13.0","flags":"smg launch --policy cache_aware"}},
            "results":{"nginx":{"rps":40929.0}},
            "large_prompt_400kb":{"nginx":{"rps":2615.7,"cpu_us_per_req":315.48,"p50_ms":1.414}}}"#;
        let md = section(now);
        assert!(
            md.contains("wrk `-t1 -c32 -d5s` with 2048-byte prompts"),
            "{md}"
        );
        assert!(
            md.contains("on 2 cores (load average 1.74 at the end)"),
            "{md}"
        );
        assert!(
            md.contains("Peer `smg` 1.13.0: `smg launch --policy cache_aware`"),
            "{md}"
        );
        assert!(md.contains("| nginx | 2616 | 1.414 | 315.5 |"), "{md}");
        assert!(section("nope").contains("not valid JSON"));
        assert!(section("{}").contains("no `results`"));
    }
}
