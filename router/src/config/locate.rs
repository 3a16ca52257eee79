//! Field paths (`pools[1].replicas[0].url`) and finding the line where one appears in YAML text.
//!
//! serde_yaml keeps no positions in its `Value`, but it stamps the position of the current node
//! on any error a visitor raises. So to find a field's line we walk the document with a
//! deserializer seed that follows the path and fails on purpose at its end, then read the
//! error's location: the line of that node as the YAML parser saw it, whatever the style. A
//! path that ends at a map key fails on the key itself, so that a field whose value is a block
//! mapping (`weights:` with its entries below) is reported at the line of its name.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// A path from the document root to a field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    pub fn root() -> Self {
        Self::default()
    }
    pub fn key(&self, key: &str) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Key(key.to_owned()));
        next
    }
    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Index(index));
        next
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The 1-based line of the node at `path` in `text`, if it is there.
pub fn line_of(text: &str, path: &FieldPath) -> Option<usize> {
    let de = serde_yaml::Deserializer::from_str(text);
    match Probe::path(&path.0).deserialize(de) {
        Ok(()) => None,
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| l.line()),
        Err(_) => None,
    }
}

const FOUND: &str = "warmpath-locate-found";

#[derive(Clone, Copy)]
struct Probe<'p> {
    path: &'p [Segment],
    /// Set while reading a map key that is the path's last segment: found if the key is this
    /// string. Failing on the key rather than its value gives the line of the field's name,
    /// where a block mapping value would only start on the next line.
    last_key: Option<&'p str>,
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.last_key.is_some() {
            // A mapping used as a key: never the one sought.
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        if let (Segment::Key(want), []) = (first, rest) {
            let key = Probe {
                path: rest,
                last_key: Some(want),
            };
            while map.next_key_seed(key)?.is_some() {
                map.next_value::<IgnoredAny>()?;
            }
            return Ok(());
        }
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            match (first, key.as_str()) {
                (Segment::Key(want), Some(k)) if want == k => {
                    return map.next_value_seed(Probe::path(rest));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.last_key.is_some() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        let Some((first, rest)) = self.path.split_first() else {
            return Err(de::Error::custom(FOUND));
        };
        let mut i = 0;
        loop {
            if *first == Segment::Index(i) {
                return seq.next_element_seed(Probe::path(rest)).map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match self.last_key {
            Some(want) if want == s => Err(E::custom(FOUND)),
            Some(_) => Ok(()),
            None => self.scalar(),
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'p> Probe<'p> {
    fn path(path: &'p [Segment]) -> Self {
        Self {
            path,
            last_key: None,
        }
    }

    /// A scalar ends the walk: found if the path ends here, absent otherwise (a key other than
    /// a string is never the one sought).
    fn scalar<E: de::Error>(self) -> Result<(), E> {
        if self.path.is_empty() && self.last_key.is_none() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}
