//! `docs/configuration.md` kept in step with the configuration types, in both directions.
//!
//! 1. The reference's complete example (its one ```` ```yaml reference ```` block) is a valid
//!    configuration: `Config::parse`, the router's own loader, accepts it. Every struct of the
//!    configuration refuses unknown fields, so a field the reference sets that the types do not
//!    have fails here, as does a value the router would refuse.
//! 2. Every field the types accept is set by the example and has a row in the reference's
//!    `field` tables, every row names a field that exists, and every variant of an enum field is
//!    named in its row. The list of fields comes from the types themselves: serde's derived
//!    `Deserialize` passes `deserialize_struct` the complete list of the struct's field names
//!    (and `deserialize_enum` every variant), whatever the input sets. The example is fed to
//!    `Config`'s `Deserialize` through [`Recorder`], a deserializer over the parsed YAML that
//!    writes those lists down with the path they were met at. Since the example must set every
//!    field, every nested struct and enum is reached, and a field added anywhere, at any depth,
//!    shows up.
//!
//! A struct type met at several paths (a tenant policy is `tenants.default` and
//! `tenants.policies[]`; weights are `scheduling.weights` and `pools[].weights`) is documented
//! once: each of its fields needs a row at one of those paths and a value at one of them.

use serde::de::value::Error as DeError;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_yaml::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use warmpath_router::config::Config;

const REFERENCE: &str = include_str!("../../docs/configuration.md");
const EXAMPLE_FENCE: &str = "```yaml reference\n";

/// The reference's complete example, as written.
fn example_text() -> &'static str {
    let mut blocks = REFERENCE.split(EXAMPLE_FENCE).skip(1);
    let block = blocks
        .next()
        .expect("docs/configuration.md has a ```yaml reference block");
    assert!(
        blocks.next().is_none(),
        "docs/configuration.md has more than one ```yaml reference block"
    );
    let end = block
        .find("\n```")
        .expect("the ```yaml reference block is closed");
    &block[..=end]
}

/// Fields whose files are read (or must exist) when the configuration is loaded.
const FILE_FIELDS: [&str; 3] = ["tokenizer", "chat_template", "api_keys_file"];

/// A temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The example with the files it names replaced by temporary ones (in the returned folder), as
/// text `Config::parse` reads. The values are otherwise the example's own.
fn example_with_files() -> (Value, String, TempDir) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut value: Value =
        serde_yaml::from_str(example_text()).expect("the reference example is YAML");
    let dir = std::env::temp_dir().join(format!(
        "warmpath-config-reference-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let files: BTreeMap<&str, (PathBuf, &str)> = [
        ("tokenizer", "tokenizer.json", "{}\n"),
        ("chat_template", "template.jinja", "{{ messages }}\n"),
        (
            "api_keys_file",
            "tenant.keys",
            "# one key per line\nsk-from-the-key-file-0001\n",
        ),
    ]
    .into_iter()
    .map(|(field, name, text)| (field, (dir.join(name), text)))
    .collect();
    for (path, text) in files.values() {
        std::fs::write(path, text).expect("a temporary file");
    }
    replace_files(&mut value, &files);
    let text = serde_yaml::to_string(&value).expect("YAML out");
    (value, text, TempDir(dir))
}

fn replace_files(value: &mut Value, files: &BTreeMap<&str, (PathBuf, &str)>) {
    match value {
        Value::Mapping(map) => {
            for (key, v) in map.iter_mut() {
                let file = key.as_str().and_then(|k| files.get(k));
                match file {
                    Some((path, _)) if v.is_string() => {
                        *v = Value::String(path.display().to_string());
                    }
                    _ => replace_files(v, files),
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(|v| replace_files(v, files)),
        _ => {}
    }
}

#[test]
fn the_reference_example_is_a_valid_configuration() {
    assert!(FILE_FIELDS.iter().all(|f| example_text().contains(f)));
    let (_, text, _files) = example_with_files();
    if let Err(e) = Config::parse(&text) {
        panic!(
            "the complete example of docs/configuration.md is refused by Config::parse: {e}\n\
             (a field the types do not have, or a value the router refuses)"
        );
    }
}

#[test]
fn every_field_is_documented_and_every_documented_field_exists() {
    let (value, _, _files) = example_with_files();
    let seen = RefCell::new(Seen::default());
    let recorder = Recorder {
        value: &value,
        path: String::new(),
        seen: &seen,
    };
    // serde stops at the first field it refuses, and what follows was not walked: nothing
    // else can be said until the example is fixed.
    if let Err(e) = Config::deserialize(recorder) {
        panic!(
            "the complete example of docs/configuration.md does not deserialize into Config: {e}"
        );
    }
    let mut problems = Vec::new();
    let seen = seen.into_inner();
    let rows = field_rows();
    problems.extend(
        rows.duplicates
            .iter()
            .map(|p| format!("`{p}` has two rows")),
    );

    // Every row names a field of a struct met at that path.
    let known: BTreeSet<String> = seen
        .structs
        .iter()
        .flat_map(|s| s.fields.iter().map(|f| join(&s.path, f)))
        .collect();
    for path in rows.rows.keys() {
        if !known.contains(path) {
            problems.push(format!(
                "`{path}` has a row in docs/configuration.md but is no configuration field"
            ));
        }
    }

    // Every field of every struct type: a row, and a value in the example.
    let mut by_type: BTreeMap<&str, Vec<&StructSeen>> = BTreeMap::new();
    for s in &seen.structs {
        by_type.entry(s.ty).or_default().push(s);
    }
    for (ty, instances) in &by_type {
        let fields: BTreeSet<&str> = instances
            .iter()
            .flat_map(|s| s.fields.iter().copied())
            .collect();
        for field in fields {
            let at: Vec<String> = instances.iter().map(|s| join(&s.path, field)).collect();
            if !at.iter().any(|p| rows.rows.contains_key(p)) {
                problems.push(format!(
                    "{ty}.{field} is not documented: add a row for `{}` to docs/configuration.md",
                    at[0]
                ));
            }
            if !instances.iter().any(|s| s.set.iter().any(|k| k == field)) {
                problems.push(format!(
                    "the complete example in docs/configuration.md does not set `{}` ({ty}.{field})",
                    at[0]
                ));
            }
        }
    }

    // Every variant of every enum field is named in its row.
    let mut enums: BTreeMap<&str, (Vec<&str>, BTreeSet<&str>)> = BTreeMap::new();
    for e in &seen.enums {
        let entry = enums.entry(e.ty).or_default();
        entry.0.push(&e.path);
        entry.1.extend(e.variants.iter().copied());
    }
    for (ty, (paths, variants)) in &enums {
        let text: String = paths
            .iter()
            .filter_map(|p| rows.rows.get(*p))
            .cloned()
            .collect();
        for v in variants {
            if !text.contains(&format!("`{v}`")) {
                problems.push(format!(
                    "`{v}` ({ty}) is not named in the row of `{}`",
                    paths[0]
                ));
            }
        }
    }

    // Not vacuous: the walk reached the whole file.
    for (path, at_least) in [("", 15), ("pools[]", 8), ("tenants.policies[]", 8)] {
        let n = seen
            .structs
            .iter()
            .find(|s| s.path == path)
            .map_or(0, |s| s.fields.len());
        assert!(n >= at_least, "the walk missed `{path}` ({n} fields)");
    }

    assert!(
        problems.is_empty(),
        "docs/configuration.md and the configuration types disagree:\n  {}",
        problems.join("\n  ")
    );
}

/// `a.b`, or `b` at the root.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The rows of the reference's `| field | … |` tables, by the path in their first cell.
struct Rows {
    rows: BTreeMap<String, String>,
    duplicates: Vec<String>,
}

fn field_rows() -> Rows {
    let mut rows = BTreeMap::new();
    let mut duplicates = Vec::new();
    let mut in_table = false;
    for line in REFERENCE.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or("").trim();
        if first == "field" {
            in_table = true;
            continue;
        }
        if !in_table || first.starts_with("---") {
            continue;
        }
        let path = first.trim_matches('`');
        assert!(
            first.starts_with('`') && first.ends_with('`') && !path.contains('`'),
            "a row of a field table must start with one `path`: {line}"
        );
        if rows.insert(path.to_owned(), line.to_owned()).is_some() {
            duplicates.push(path.to_owned());
        }
    }
    assert!(rows.len() > 50, "found only {} field rows", rows.len());
    Rows { rows, duplicates }
}

/// What the walk met: structs with their complete field lists and the fields the example set,
/// and enums with their variants.
#[derive(Default)]
struct Seen {
    structs: Vec<StructSeen>,
    enums: Vec<EnumSeen>,
}

struct StructSeen {
    ty: &'static str,
    path: String,
    fields: &'static [&'static str],
    set: Vec<String>,
}

struct EnumSeen {
    ty: &'static str,
    path: String,
    variants: &'static [&'static str],
}

/// A deserializer over a parsed YAML value that records every struct and enum a `Deserialize`
/// impl asks for. Paths are dotted, with `[]` for the elements of a list
/// (`pools[].replicas[].url`).
struct Recorder<'a, 'de> {
    value: &'de Value,
    path: String,
    seen: &'a RefCell<Seen>,
}

impl<'de> de::Deserializer<'de> for Recorder<'_, 'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Sequence(items) => visitor.visit_seq(Seq {
                items: items.iter(),
                path: format!("{}[]", self.path),
                seen: self.seen,
            }),
            Value::Mapping(map) => visitor.visit_map(Map {
                entries: map.iter(),
                next: None,
                path: self.path,
                seen: self.seen,
            }),
            Value::Tagged(_) => Err(de::Error::custom(format!(
                "{}: YAML tags are not part of the configuration",
                self.path
            ))),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let set = match self.value {
            Value::Mapping(map) => map
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        self.seen.borrow_mut().structs.push(StructSeen {
            ty: name,
            path: self.path.clone(),
            fields,
            set,
        });
        self.deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.seen.borrow_mut().enums.push(EnumSeen {
            ty: name,
            path: self.path.clone(),
            variants,
        });
        match self.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => Err(de::Error::custom(format!(
                "{}: an enum here is a plain string",
                self.path
            ))),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'a, 'de> {
    items: std::slice::Iter<'de, Value>,
    path: String,
    seen: &'a RefCell<Seen>,
}

impl<'de> SeqAccess<'de> for Seq<'_, 'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        self.items
            .next()
            .map(|value| {
                seed.deserialize(Recorder {
                    value,
                    path: self.path.clone(),
                    seen: self.seen,
                })
            })
            .transpose()
    }
}

struct Map<'a, 'de> {
    entries: serde_yaml::mapping::Iter<'de>,
    next: Option<(String, &'de Value)>,
    path: String,
    seen: &'a RefCell<Seen>,
}

impl<'de> MapAccess<'de> for Map<'_, 'de> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let key = key.as_str().ok_or_else(|| {
            de::Error::custom(format!("{}: a key that is not a string", self.path))
        })?;
        self.next = Some((join(&self.path, key), value));
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (path, value) = self
            .next
            .take()
            .ok_or_else(|| de::Error::custom("a value asked for before its key"))?;
        seed.deserialize(Recorder {
            value,
            path,
            seen: self.seen,
        })
    }
}
