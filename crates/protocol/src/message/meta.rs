//! Names and metadata: JACK-style UUIDs of nodes (clients) and ports, metadata
//! properties keyed by those UUIDs, the limits the server holds them to, and the
//! property-change events sent to watching connections (docs/protocol/metadata.md).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The UUID type of a port (JACK's `JACK_UUID_TYPE_PORT`), in the top 32 bits.
pub const UUID_TYPE_PORT: u64 = 1;
/// The UUID type of a client (JACK's `JACK_UUID_TYPE_CLIENT`), in the top 32 bits.
pub const UUID_TYPE_CLIENT: u64 = 2;

/// Longest property key (a URI), bytes.
pub const MAX_PROPERTY_KEY_BYTES: usize = 512;
/// Longest property value, bytes (enough for JACK's base64 PNG icons).
pub const MAX_PROPERTY_VALUE_BYTES: usize = 32 * 1024;
/// Longest property type (a MIME type or URI), bytes.
pub const MAX_PROPERTY_TYPE_BYTES: usize = 256;
/// Most properties one subject may carry.
pub const MAX_PROPERTIES_PER_SUBJECT: usize = 64;
/// Most properties the server holds in all.
pub const MAX_PROPERTIES: usize = 1024;
/// Most bytes (keys, values, types) the server holds in all: small enough that every
/// property, JSON-escaped, fits in one reply frame.
pub const MAX_PROPERTY_BYTES: usize = 128 * 1024;
/// Aliases a port may have, as in JACK.
pub const MAX_ALIASES: usize = 2;
/// Longest alias, bytes (JACK's port name size without the NUL).
pub const MAX_ALIAS_BYTES: usize = 255;

/// The UUID of node (JACK client) `id`: stable for the node's life, never reused
/// (node ids are not).
pub fn node_uuid(id: u32) -> u64 {
    (UUID_TYPE_CLIENT << 32) | id as u64
}

/// The UUID of port `id` (port ids are never reused either).
pub fn port_uuid(id: u32) -> u64 {
    (UUID_TYPE_PORT << 32) | id as u64
}

/// What a UUID names, if it is one of ours: a node or a port, and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UuidSubject {
    /// A node (JACK client).
    Node(u32),
    /// A port.
    Port(u32),
}

/// Splits `uuid` into its type and id; `None` for a type quaver does not give out.
pub fn parse_uuid(uuid: u64) -> Option<UuidSubject> {
    let id = (uuid & 0xffff_ffff) as u32;
    match uuid >> 32 {
        UUID_TYPE_CLIENT => Some(UuidSubject::Node(id)),
        UUID_TYPE_PORT => Some(UuidSubject::Port(id)),
        _ => None,
    }
}

/// A property value: bytes, as JACK's C strings are. On the wire a JSON string when
/// the bytes are UTF-8, else an array of byte values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PropertyValue(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ValueWire {
    Text(String),
    Bytes(Vec<u8>),
}

impl Serialize for PropertyValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(t) => s.serialize_str(t),
            Err(_) => self.0.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for PropertyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(PropertyValue(match ValueWire::deserialize(d)? {
            ValueWire::Text(t) => t.into_bytes(),
            ValueWire::Bytes(b) => b,
        }))
    }
}

/// One property, as `get_properties` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Property {
    /// The UUID of the node or port it describes.
    pub subject: u64,
    /// Its key (a URI by convention).
    pub key: String,
    /// Its value.
    pub value: PropertyValue,
    /// Its type (a MIME type or URI); absent means text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_type: Option<String>,
}

/// The aliases of one port, in an `Aliases` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAliases {
    /// The port id.
    pub port: u32,
    /// Its aliases, oldest first (at most [`MAX_ALIASES`]).
    pub aliases: Vec<String>,
}

/// What happened to a property, in a `property` event (JACK's
/// `jack_property_change_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PropertyChange {
    /// A new key on the subject.
    Created,
    /// A new value for an existing key.
    Changed,
    /// Removed: one key, every key of the subject (no key), or every property of every
    /// subject (subject 0, no key).
    Deleted,
}

/// The property part of a `property` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PropertyEvent {
    /// The subject (0 when every property went).
    pub subject: u64,
    /// The key, absent when every key of the subject went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What happened.
    pub change: PropertyChange,
}

/// Checks a property key, value and type against the limits and JACK's C-string
/// rules (no NUL byte).
pub(super) fn check_property(
    key: &str,
    value: &PropertyValue,
    value_type: Option<&str>,
) -> Result<(), String> {
    check_key(key)?;
    if value.0.len() > MAX_PROPERTY_VALUE_BYTES {
        return Err(format!(
            "property value is {} bytes, longer than {MAX_PROPERTY_VALUE_BYTES}",
            value.0.len()
        ));
    }
    if value.0.contains(&0) {
        return Err("property value contains a NUL byte".into());
    }
    if let Some(t) = value_type {
        if t.len() > MAX_PROPERTY_TYPE_BYTES {
            return Err(format!(
                "property type is {} bytes, longer than {MAX_PROPERTY_TYPE_BYTES}",
                t.len()
            ));
        }
        if t.contains('\0') {
            return Err("property type contains a NUL byte".into());
        }
    }
    Ok(())
}

/// Checks a property key.
pub(super) fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("property key must not be empty".into());
    }
    if key.len() > MAX_PROPERTY_KEY_BYTES {
        return Err(format!(
            "property key is {} bytes, longer than {MAX_PROPERTY_KEY_BYTES}",
            key.len()
        ));
    }
    if key.contains('\0') {
        return Err("property key contains a NUL byte".into());
    }
    Ok(())
}

/// Checks an alias: a non-empty port name without control characters.
pub(super) fn check_alias(alias: &str) -> Result<(), String> {
    if alias.is_empty() {
        return Err("alias must not be empty".into());
    }
    if alias.len() > MAX_ALIAS_BYTES {
        return Err(format!(
            "alias is {} bytes, longer than {MAX_ALIAS_BYTES}",
            alias.len()
        ));
    }
    if alias.chars().any(char::is_control) {
        return Err("alias contains control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_split_back_into_what_they_name() {
        assert_eq!(node_uuid(3), 8_589_934_595, "jackd2's numbering");
        assert_eq!(parse_uuid(node_uuid(3)), Some(UuidSubject::Node(3)));
        assert_eq!(parse_uuid(port_uuid(7)), Some(UuidSubject::Port(7)));
        assert_eq!(parse_uuid(7), None);
        assert_eq!(parse_uuid(3 << 32), None);
    }

    #[test]
    fn values_are_text_when_utf8_and_bytes_otherwise() {
        let t = PropertyValue(b"Left".to_vec());
        assert_eq!(serde_json::to_string(&t).unwrap(), r#""Left""#);
        let b = PropertyValue(vec![0xff, 1]);
        assert_eq!(serde_json::to_string(&b).unwrap(), "[255,1]");
        for v in [t, b] {
            let s = serde_json::to_string(&v).unwrap();
            assert_eq!(serde_json::from_str::<PropertyValue>(&s).unwrap(), v);
        }
        assert!(serde_json::from_str::<PropertyValue>("[256]").is_err());
        assert!(serde_json::from_str::<PropertyValue>("3").is_err());
    }

    #[test]
    fn limits_and_nul_bytes_are_refused() {
        let v = PropertyValue(b"x".to_vec());
        assert!(check_property("urn:k", &v, Some("text/plain")).is_ok());
        assert!(check_property("", &v, None).unwrap_err().contains("empty"));
        let long_key = "k".repeat(MAX_PROPERTY_KEY_BYTES + 1);
        assert!(
            check_property(&long_key, &v, None)
                .unwrap_err()
                .contains("key")
        );
        let big = PropertyValue(vec![b'a'; MAX_PROPERTY_VALUE_BYTES + 1]);
        assert!(
            check_property("k", &big, None)
                .unwrap_err()
                .contains("value")
        );
        let nul = PropertyValue(b"a\0b".to_vec());
        assert!(check_property("k", &nul, None).unwrap_err().contains("NUL"));
        let long_type = "t".repeat(MAX_PROPERTY_TYPE_BYTES + 1);
        assert!(
            check_property("k", &v, Some(&long_type))
                .unwrap_err()
                .contains("type")
        );
        assert!(check_alias("alias:one").is_ok());
        assert!(check_alias("").is_err());
        assert!(check_alias("a\nb").is_err());
        assert!(check_alias(&"a".repeat(256)).is_err());
    }
}
