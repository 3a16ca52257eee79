//! Names and labels the controller gives the InferenceReplicas it manages: deterministic (the
//! same pool and pod always give the same name, so a restarted or new leader finds its own
//! objects), valid DNS subdomains of at most 253 characters, and free of collisions between
//! pools whose names run into each other (`a` + `b-c` vs `a-b` + `c`).

use xxhash_rust::xxh3::xxh3_64;

/// Label carrying the pool's name (hashed when it is not a valid label value).
pub const POOL_LABEL: &str = "warmpath.dev/pool";
/// Label marking replicas this controller manages; hand-written replicas lack it and are never
/// deleted or rewritten.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`] on managed replicas.
pub const MANAGED_BY: &str = "warmpath-controller";
/// Field manager of the controller's server-side applies and patches.
pub const FIELD_MANAGER: &str = "warmpath-controller";

const MAX_NAME: usize = 253;
const MAX_LABEL_VALUE: usize = 63;

fn short_hash(parts: &[&str]) -> String {
    // A separator that cannot occur in Kubernetes names keeps ("a","b-c") apart from ("a-b","c").
    let joined = parts.join("/");
    format!("{:08x}", xxh3_64(joined.as_bytes()) as u32)
}

/// Cuts `s` to at most `max` bytes and trims what a DNS name may not end with.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].trim_end_matches(['-', '.'])
}

/// The InferenceReplica name for `pod` of `pool`: `<pool>-<pod>-<hash>`, with the readable part
/// shortened when the whole would exceed 253 characters.
pub fn replica_name(pool: &str, pod: &str) -> String {
    let hash = short_hash(&[pool, pod]);
    let readable = format!("{pool}-{pod}");
    let room = MAX_NAME - hash.len() - 1;
    format!("{}-{hash}", cut(&readable, room))
}

/// The value of [`POOL_LABEL`] for a pool: its name when that is a valid label value (at most
/// 63 characters), else a shortened name with a hash (spec.pool always has the full name).
pub fn pool_label_value(pool: &str) -> String {
    if pool.len() <= MAX_LABEL_VALUE && !pool.is_empty() {
        return pool.to_owned();
    }
    let hash = short_hash(&[pool]);
    let room = MAX_LABEL_VALUE - hash.len() - 1;
    format!("{}-{hash}", cut(pool, room))
}

/// Whether `name` is a DNS subdomain (RFC 1123) as Kubernetes object names must be.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `value` is a valid label value.
pub fn is_label_value(value: &str) -> bool {
    value.len() <= MAX_LABEL_VALUE
        && (value.is_empty()
            || (value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                && value.as_bytes()[0].is_ascii_alphanumeric()
                && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_readable_and_distinct() {
        let a = replica_name("llama", "vllm-0");
        assert_eq!(a, replica_name("llama", "vllm-0"));
        assert!(a.starts_with("llama-vllm-0-"), "{a}");
        assert!(is_dns_subdomain(&a), "{a}");
        // Concatenations that read the same still differ.
        assert_ne!(replica_name("a", "b-c"), replica_name("a-b", "c"));
        assert_ne!(
            replica_name("llama", "vllm-0"),
            replica_name("llama", "vllm-1")
        );
    }

    #[test]
    fn long_names_are_shortened_and_stay_valid() {
        let pool = format!("{}.pool", "p".repeat(200));
        let pod = format!("{}-x", "q".repeat(250));
        let a = replica_name(&pool, &pod);
        assert!(a.len() <= 253, "{}", a.len());
        assert!(is_dns_subdomain(&a), "{a}");
        // Names that differ only beyond the cut still differ.
        let b = replica_name(&pool, &format!("{}-y", "q".repeat(250)));
        assert_ne!(a, b);
        // A cut that lands on a '.' or '-' is trimmed.
        let dotted = replica_name(&format!("{}b", "a.".repeat(125)), "pod");
        assert!(is_dns_subdomain(&dotted), "{dotted}");
    }

    #[test]
    fn pool_label_values_are_valid() {
        assert_eq!(pool_label_value("llama"), "llama");
        let long = "l".repeat(100);
        let v = pool_label_value(&long);
        assert!(is_label_value(&v), "{v}");
        assert_ne!(v, pool_label_value(&"l".repeat(101)));
        assert!(is_label_value(&pool_label_value("a.b-c")));
    }

    #[test]
    fn dns_and_label_checks() {
        assert!(is_dns_subdomain("a-b.c"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(""));
        assert!(is_label_value(""));
        assert!(is_label_value("a_b.C-1"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"x".repeat(64)));
    }
}
