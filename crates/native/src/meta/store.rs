//! The server-wide metadata store: properties keyed by subject UUID and key, and port
//! aliases, each held to limits so that no client can make the server hold more than
//! a bounded amount (docs/jack/metadata.md).

use quaver_protocol::message::{
    MAX_ALIASES, MAX_PROPERTIES, MAX_PROPERTIES_PER_SUBJECT, MAX_PROPERTY_BYTES, PortAliases,
    PortLatency, Property, PropertyChange, PropertyValue,
};
use std::collections::BTreeMap;
use std::fmt;

/// Why the store refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetaError {
    /// No node or port has this UUID.
    NoSuchSubject(u64),
    /// No port has this id.
    NoSuchPort(u32),
    /// A limit was reached.
    TooMany(String),
    /// The port already has two aliases.
    AliasesFull(u32),
    /// The port has no such alias.
    NoSuchAlias(u32, String),
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::NoSuchSubject(u) => write!(f, "no client or port has UUID {u}"),
            MetaError::NoSuchPort(p) => write!(f, "no port {p}"),
            MetaError::TooMany(why) => f.write_str(why),
            MetaError::AliasesFull(p) => {
                write!(f, "port {p} already has {MAX_ALIASES} aliases")
            }
            MetaError::NoSuchAlias(p, a) => write!(f, "port {p} has no alias '{a}'"),
        }
    }
}

/// One stored value and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Vec<u8>,
    value_type: Option<String>,
}

impl Entry {
    fn bytes(&self, key: &str) -> usize {
        key.len() + self.value.len() + self.value_type.as_ref().map_or(0, String::len)
    }
}

/// Properties and aliases. Subjects are checked by the caller (the store does not know
/// the graph); [`MetaStore::retain`] drops those that went away.
#[derive(Debug, Default)]
pub(crate) struct MetaStore {
    props: BTreeMap<u64, BTreeMap<String, Entry>>,
    count: usize,
    bytes: usize,
    aliases: BTreeMap<u32, Vec<String>>,
    /// Latencies published by the ports' owners; one entry per existing port at most,
    /// so bounded by the graph's own port limit.
    latencies: BTreeMap<u32, PortLatency>,
}

impl MetaStore {
    /// Sets `key` of `subject`; says whether it was created or changed.
    pub(crate) fn set(
        &mut self,
        subject: u64,
        key: &str,
        value: &[u8],
        value_type: Option<&str>,
    ) -> Result<PropertyChange, MetaError> {
        let entry = Entry {
            value: value.to_vec(),
            value_type: value_type.filter(|t| !t.is_empty()).map(str::to_string),
        };
        let keys = self.props.get(&subject);
        let old = keys.and_then(|k| k.get(key)).map_or(0, |e| e.bytes(key));
        let is_new = old == 0 && keys.is_none_or(|k| !k.contains_key(key));
        if is_new {
            if keys.map_or(0, BTreeMap::len) >= MAX_PROPERTIES_PER_SUBJECT {
                return Err(MetaError::TooMany(format!(
                    "subject {subject} already has {MAX_PROPERTIES_PER_SUBJECT} properties"
                )));
            }
            if self.count >= MAX_PROPERTIES {
                return Err(MetaError::TooMany(format!(
                    "the server already holds {MAX_PROPERTIES} properties"
                )));
            }
        }
        let bytes = self.bytes - old + entry.bytes(key);
        if bytes > MAX_PROPERTY_BYTES {
            return Err(MetaError::TooMany(format!(
                "properties would take {bytes} bytes, more than the server's {MAX_PROPERTY_BYTES}"
            )));
        }
        self.bytes = bytes;
        self.count += is_new as usize;
        self.props
            .entry(subject)
            .or_default()
            .insert(key.to_string(), entry);
        Ok(if is_new {
            PropertyChange::Created
        } else {
            PropertyChange::Changed
        })
    }

    /// The properties of `subject`, or of every subject.
    pub(crate) fn get(&self, subject: Option<u64>) -> Vec<Property> {
        let mut out = Vec::new();
        for (&s, keys) in &self.props {
            if subject.is_some_and(|want| want != s) {
                continue;
            }
            for (k, e) in keys {
                out.push(Property {
                    subject: s,
                    key: k.clone(),
                    value: PropertyValue(e.value.clone()),
                    value_type: e.value_type.clone(),
                });
            }
        }
        out
    }

    /// Removes `key` of `subject` (every key for `None`); how many went.
    pub(crate) fn remove(&mut self, subject: u64, key: Option<&str>) -> u32 {
        let Some(keys) = self.props.get_mut(&subject) else {
            return 0;
        };
        let gone: Vec<(String, Entry)> = match key {
            Some(k) => keys.remove_entry(k).into_iter().collect(),
            None => std::mem::take(keys).into_iter().collect(),
        };
        if keys.is_empty() {
            self.props.remove(&subject);
        }
        for (k, e) in &gone {
            self.bytes -= e.bytes(k);
        }
        self.count -= gone.len();
        gone.len() as u32
    }

    /// Removes every property; how many went.
    pub(crate) fn remove_all(&mut self) -> u32 {
        let n = self.count as u32;
        self.props.clear();
        self.count = 0;
        self.bytes = 0;
        n
    }

    /// Forgets the properties of subjects and the aliases of ports for which `exists`
    /// says no; returns the subjects whose properties went.
    pub(crate) fn retain(
        &mut self,
        subject_exists: impl Fn(u64) -> bool,
        port_exists: impl Fn(u32) -> bool,
    ) -> Vec<u64> {
        let gone: Vec<u64> = self
            .props
            .keys()
            .copied()
            .filter(|&s| !subject_exists(s))
            .collect();
        for &s in &gone {
            self.remove(s, None);
        }
        self.aliases.retain(|&p, _| port_exists(p));
        self.latencies.retain(|&p, _| port_exists(p));
        gone
    }

    /// Gives `port` the alias `alias` (twice the same is allowed, as in jackd2).
    pub(crate) fn set_alias(&mut self, port: u32, alias: &str) -> Result<(), MetaError> {
        let list = self.aliases.entry(port).or_default();
        if list.len() >= MAX_ALIASES {
            return Err(MetaError::AliasesFull(port));
        }
        list.push(alias.to_string());
        Ok(())
    }

    /// Takes one `alias` away from `port`.
    pub(crate) fn unset_alias(&mut self, port: u32, alias: &str) -> Result<(), MetaError> {
        let list = self.aliases.entry(port).or_default();
        let found = match list.iter().position(|a| a == alias) {
            Some(i) => {
                list.remove(i);
                true
            }
            None => false,
        };
        if list.is_empty() {
            self.aliases.remove(&port);
        }
        if found {
            Ok(())
        } else {
            Err(MetaError::NoSuchAlias(port, alias.into()))
        }
    }

    /// Records what `l.port`'s owner published; false if it had published the same.
    pub(crate) fn set_latency(&mut self, l: PortLatency) -> bool {
        self.latencies.insert(l.port, l) != Some(l)
    }

    /// Every published port latency.
    pub(crate) fn latencies(&self) -> Vec<PortLatency> {
        self.latencies.values().copied().collect()
    }

    /// Every port's aliases.
    pub(crate) fn aliases(&self) -> Vec<PortAliases> {
        self.aliases
            .iter()
            .map(|(&port, a)| PortAliases {
                port,
                aliases: a.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_change_and_remove() {
        let mut s = MetaStore::default();
        assert_eq!(s.set(7, "k", b"v", None), Ok(PropertyChange::Created));
        assert_eq!(
            s.set(7, "k", b"w", Some("text/plain")),
            Ok(PropertyChange::Changed)
        );
        assert_eq!(s.set(7, "k2", b"x", Some("")), Ok(PropertyChange::Created));
        assert_eq!(s.set(8, "k", b"y", None), Ok(PropertyChange::Created));
        let p = s.get(Some(7));
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].value.0, b"w");
        assert_eq!(p[0].value_type.as_deref(), Some("text/plain"));
        assert_eq!(p[1].value_type, None, "an empty type is no type");
        assert_eq!(s.get(None).len(), 3);
        assert!(s.get(Some(9)).is_empty());
        assert_eq!(s.remove(7, Some("nope")), 0);
        assert_eq!(s.remove(7, Some("k")), 1);
        assert_eq!(s.remove(7, None), 1);
        assert_eq!(s.remove(7, None), 0);
        assert_eq!(s.remove_all(), 1);
        assert_eq!((s.count, s.bytes), (0, 0));
    }

    #[test]
    fn limits_hold_and_free_up_again() {
        let mut s = MetaStore::default();
        for i in 0..MAX_PROPERTIES_PER_SUBJECT {
            s.set(1, &format!("k{i}"), b"v", None).unwrap();
        }
        let e = s.set(1, "one-more", b"v", None).unwrap_err();
        assert!(matches!(e, MetaError::TooMany(_)), "{e}");
        // Changing an existing key is not a new property.
        assert_eq!(s.set(1, "k0", b"w", None), Ok(PropertyChange::Changed));
        s.remove_all();
        let mut subject = 0;
        while s.count < MAX_PROPERTIES {
            subject += 1;
            s.set(subject, "k", b"", None).unwrap();
        }
        let e = s.set(subject + 1, "k", b"", None).unwrap_err();
        assert!(e.to_string().contains("1024"), "{e}");
        s.remove_all();
        let big = vec![b'a'; 30 * 1024];
        for subject in 0..4 {
            s.set(subject, "k", &big, None).unwrap();
        }
        let e = s.set(9, "k", &big, None).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        // A smaller value for an existing key fits again.
        s.set(0, "k", b"small", None).unwrap();
        s.set(9, "k", &big, None).unwrap();
        assert_eq!(s.count, 5);
    }

    #[test]
    fn subjects_that_went_lose_their_properties_and_aliases() {
        let mut s = MetaStore::default();
        s.set(1, "k", b"v", None).unwrap();
        s.set(2, "k", b"v", None).unwrap();
        s.set_alias(5, "a:one").unwrap();
        s.set_alias(6, "b:one").unwrap();
        assert_eq!(s.retain(|u| u == 2, |p| p == 6), vec![1]);
        assert_eq!(s.get(None).len(), 1);
        assert_eq!(s.aliases().len(), 1);
        assert_eq!(s.aliases()[0].port, 6);
        assert_eq!((s.count, s.bytes), (1, 2));
    }

    #[test]
    fn two_aliases_per_port() {
        let mut s = MetaStore::default();
        s.set_alias(3, "a:one").unwrap();
        s.set_alias(3, "a:one").unwrap();
        s.unset_alias(3, "a:one").unwrap();
        assert_eq!(s.aliases()[0].aliases, vec!["a:one"], "one at a time");
        s.set_alias(3, "a:two").unwrap();
        assert_eq!(s.set_alias(3, "a:three"), Err(MetaError::AliasesFull(3)));
        assert!(matches!(
            s.unset_alias(3, "a:nope"),
            Err(MetaError::NoSuchAlias(..))
        ));
        s.unset_alias(3, "a:one").unwrap();
        s.set_alias(3, "a:three").unwrap();
        assert_eq!(s.aliases()[0].aliases, vec!["a:two", "a:three"]);
        s.unset_alias(3, "a:two").unwrap();
        s.unset_alias(3, "a:three").unwrap();
        assert!(s.aliases().is_empty());
        assert!(s.unset_alias(4, "x").is_err());
        assert!(
            s.aliases().is_empty(),
            "a failed unset leaves nothing behind"
        );
    }
}
