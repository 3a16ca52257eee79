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
         wrk `{}`, median of {} rounds, measured {} on `{}`. Numbers from `bench/results/datapath.json`.\n",
        v.get("wrk").map(|w| w.to_string().trim_matches('"').to_owned()).unwrap_or_default(),
        v.get("rounds").map(Value::to_string).unwrap_or_default(),
        v.get("date").and_then(Value::as_str).unwrap_or("?"),
        v.get("host").and_then(Value::as_str).unwrap_or("?"),
    );
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
    md
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
        assert!(section("nope").contains("not valid JSON"));
        assert!(section("{}").contains("no `results`"));
    }
}
