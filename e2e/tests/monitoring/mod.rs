//! What the chart's Grafana dashboards and Prometheus alerts ask Prometheus for, and what the
//! exporters serve: the metric selectors of a PromQL expression, the queries of a dashboard,
//! the rules of a rule file, and the sample names of a text exposition.
//!
//! The PromQL scan is not a parser: it finds the names of vector selectors (what is neither a
//! function, an aggregation, a keyword, a label list nor inside a string, a range or a
//! selector's braces), which is what a name check needs. Its own tests pin the cases the
//! chart's files use.

use std::collections::BTreeSet;

/// One vector selector: the metric's name and what its braces hold (empty without braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub matchers: String,
}

/// Words followed by a parenthesised list of label names, not an expression.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Words that are no metric whatever follows them: operators, literals, and aggregations
/// (which may be followed by `by (…)` rather than their arguments).
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The vector selectors of `expr`, in order. Grafana's variables (`$namespace`,
/// `${datasource}`, `$__rate_interval`) are skipped like literals.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => i = after_string(b, i),
            // A range or a subquery's: durations and Grafana's interval variables only.
            b'[' => i = after_closing(b, i, b']'),
            b'{' => {
                // `{__name__="…"}` would name a metric no check sees: the files must not.
                panic!("a selector without a metric name in {expr:?}")
            }
            b'$' => {
                i += 1;
                if b.get(i) == Some(&b'{') {
                    i = after_closing(b, i, b'}');
                } else {
                    while i < b.len() && is_word(b[i]) {
                        i += 1;
                    }
                }
            }
            // Numbers and durations (0.99, 5m, 1e3).
            c if c.is_ascii_digit() || c == b'.' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && is_word(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let next = skip_space(b, i);
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if b.get(next) == Some(&b'(') {
                        i = after_closing(b, next, b')');
                    }
                } else if b.get(next) == Some(&b'(') || KEYWORDS.contains(&lower.as_str()) {
                    // A function or an aggregation (its arguments are scanned next), or an
                    // operator.
                } else {
                    let mut matchers = String::new();
                    if b.get(next) == Some(&b'{') {
                        let end = after_braces(b, next);
                        matchers = expr[next + 1..end - 1].to_owned();
                        i = end;
                    }
                    out.push(Selector {
                        name: word.to_owned(),
                        matchers,
                    });
                }
            }
            _ => i += 1,
        }
    }
    out
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The index after the string literal that starts at `i`.
fn after_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        // Backquoted strings have no escapes.
        j += if b[j] == b'\\' && quote != b'`' { 2 } else { 1 };
    }
    j + 1
}

/// The index after the first `close` from `i` on (label lists and ranges hold no nesting).
fn after_closing(b: &[u8], i: usize, close: u8) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == close)
        .map_or(b.len(), |p| i + p + 1)
}

/// The index after the `}` closing the selector braces at `i`; strings in them may hold `}`.
fn after_braces(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => j = after_string(b, j),
            b'}' => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// Sample names a Prometheus text exposition (classic or OpenMetrics) serves, from its
/// `# TYPE` lines: families without a series yet print those too, so every registered family
/// counts whether or not anything has touched it. Counters are sampled as `_total` (OpenMetrics
/// types the family without it, Python's client with it); histograms as `_bucket`, `_sum` and
/// `_count`.
pub fn exposed_samples(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            panic!("a # TYPE line without a name and a type: {line:?}");
        };
        match kind {
            "counter" if name.ends_with("_total") => {
                out.insert(name.to_owned());
            }
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" | "gaugehistogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{suffix}"));
                }
            }
            "summary" => {
                for suffix in ["", "_sum", "_count"] {
                    out.insert(format!("{name}{suffix}"));
                }
            }
            "info" => {
                out.insert(format!("{name}_info"));
            }
            _ => {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

/// One PromQL expression of a dashboard: where it is and what it says.
#[derive(Debug)]
pub struct Query {
    /// `panel "<title>"` or `variable "<name>"`.
    pub place: String,
    pub expr: String,
    /// Panel queries must be scoped to the dashboard's `$namespace`; variable queries list
    /// the namespaces, or values within one.
    pub panel: bool,
}

/// Every PromQL expression of a Grafana dashboard: panel targets (rows' nested panels too)
/// and query variables (`label_values(<selector>, <label>)`, `query_result(<expr>)`).
pub fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        let targets = panel["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title:?} has no targets"));
        assert!(!targets.is_empty(), "panel {title:?} has no targets");
        for target in targets {
            out.push(Query {
                place: format!("panel {title:?}"),
                expr: target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"))
                    .to_owned(),
                panel: true,
            });
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
    {
        if var["type"] != "query" {
            continue;
        }
        let name = var["name"].as_str().expect("variable name");
        let query = var["query"]
            .as_str()
            .or_else(|| var["query"]["query"].as_str())
            .unwrap_or_else(|| panic!("variable {name}: no query"));
        let expr = if let Some(args) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        {
            // `label_values(<label>)` alone names no metric.
            args.rsplit_once(',')
                .map_or("", |(selector, _label)| selector)
        } else if let Some(expr) = query
            .strip_prefix("query_result(")
            .and_then(|q| q.strip_suffix(')'))
        {
            expr
        } else {
            panic!("variable {name}: {query:?} is neither label_values nor query_result")
        };
        out.push(Query {
            place: format!("variable {name:?}"),
            expr: expr.to_owned(),
            panel: false,
        });
    }
    out
}

/// The panels of a dashboard that show something: rows left out, rows' nested panels in.
pub fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(panels: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for panel in panels.as_array().expect("panels") {
            if panel["type"] == "row" {
                if let Some(nested) = panel.get("panels") {
                    walk(nested, out);
                }
            } else {
                out.push(panel);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// One alerting rule of a Prometheus rule file (`groups[].rules[]`).
#[derive(Debug)]
pub struct Rule {
    pub group: String,
    pub alert: String,
    pub expr: String,
    pub rule: serde_yaml::Value,
}

pub fn alert_rules(file: &serde_yaml::Value) -> Vec<Rule> {
    let mut out = Vec::new();
    for group in file["groups"].as_sequence().expect("groups") {
        let name = group["name"].as_str().expect("group name");
        for rule in group["rules"].as_sequence().expect("rules") {
            let alert = rule["alert"]
                .as_str()
                .unwrap_or_else(|| panic!("group {name}: a rule that is not an alert: {rule:?}"));
            out.push(Rule {
                group: name.to_owned(),
                alert: alert.to_owned(),
                expr: rule["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{alert}: no expr"))
                    .to_owned(),
                rule: rule.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        selectors(expr).into_iter().map(|s| s.name).collect()
    }

    #[test]
    fn dashboard_promql_scan_finds_selectors_only() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (model, le) (rate(warmpath_x_bucket{namespace="$namespace",model=~"$model"}[$__rate_interval])))"#
            ),
            ["warmpath_x_bucket"]
        );
        assert_eq!(
            names(
                "group by (namespace, pod) (a{r!=\"\"}) * on (namespace, pod) group_left\n b == 0 unless on (m) c offset 1d > 0.5 and bool d"
            ),
            ["a", "b", "c", "d"]
        );
        assert_eq!(
            names("sum(rate(vllm:prefix_cache_hits_total[5m] offset 1d)) by (pod) / ignoring (tenant) group_left (x) sum(y)"),
            ["vllm:prefix_cache_hits_total", "y"]
        );
        // A brace or a metric-like word in a string is not a selector.
        let s = selectors(
            r#"label_replace(m{a=~"x{2}}", b="c"}, "dst", "not_a_metric", "src", "(.*)")"#,
        );
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].name, "m");
        assert_eq!(s[0].matchers, r#"a=~"x{2}}", b="c""#);
        assert_eq!(names("max(clamp_min(m, 0)) > Inf"), ["m"]);
    }

    #[test]
    fn dashboard_exposition_types_become_sample_names() {
        let text = "# HELP a_requests x\n# TYPE a_requests counter\n# TYPE v:hits_total counter\n# TYPE a_seconds histogram\n# TYPE a_ready gauge\na_ready 1\n# EOF\n";
        let got = exposed_samples(text);
        let want = [
            "a_ready",
            "a_requests_total",
            "a_seconds_bucket",
            "a_seconds_count",
            "a_seconds_sum",
            "v:hits_total",
        ];
        assert_eq!(got.iter().map(String::as_str).collect::<Vec<_>>(), want);
    }
}
