//! pools.yaml's text read as YAML: first for map keys given twice anywhere in the file (serde
//! would keep the last silently: a repeated pool name drops a room), then into `raw`'s shapes;
//! serde_norway's errors become `ConfigError`s at their line and column.

use super::error::ConfigError;
use super::raw;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;
use std::path::Path;

/// The file's YAML in `raw`'s shapes, once no map in it repeats a key.
pub(super) fn read(file: &Path, text: &str) -> Result<raw::File, ConfigError> {
    read_as(file, text)
}

/// Any YAML text in the shape `T`, once no map in it repeats a key (the enrolments file).
pub(super) fn read_as<T: serde::de::DeserializeOwned>(
    file: &Path,
    text: &str,
) -> Result<T, ConfigError> {
    serde_norway::from_str::<Unrepeated>(text).map_err(|e| error(file, e))?;
    serde_norway::from_str(text).map_err(|e| error(file, e))
}

/// serde_norway's error at its line and column, its YAML path apart from its reason.
fn error(file: &Path, e: serde_norway::Error) -> ConfigError {
    let loc = e.location();
    // serde_norway puts the YAML path first: "pools.room-101: unknown field ...".
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    let (path, reason) = match msg.split_once(": ") {
        Some((p, r)) if !p.contains(' ') => (p.to_string(), r.to_string()),
        _ => (String::new(), msg.clone()),
    };
    ConfigError {
        file: file.to_path_buf(),
        line: loc.as_ref().map(|l| l.line()),
        column: loc.as_ref().map(|l| l.column()),
        path,
        reason,
    }
}

/// Any YAML document whose maps each name a key once. Its only use is the error: a key met
/// again fails while it is read, so serde_norway places the error at that second key.
struct Unrepeated;

impl<'de> de::Deserialize<'de> for Unrepeated {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValue)
    }
}

struct AnyValue;

impl<'de> Visitor<'de> for AnyValue {
    type Value = Unrepeated;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_none<E: de::Error>(self) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Unrepeated, D::Error> {
        d.deserialize_any(AnyValue)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Unrepeated, A::Error> {
        // A tagged value (`!tag x`): its value is checked like any other.
        use de::VariantAccess;
        let (_, variant) = data.variant::<de::IgnoredAny>()?;
        variant.newtype_variant::<Unrepeated>()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unrepeated, A::Error> {
        while seq.next_element::<Unrepeated>()?.is_some() {}
        Ok(Unrepeated)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unrepeated, A::Error> {
        let mut seen = HashSet::new();
        while map.next_key_seed(NewKey { seen: &mut seen })?.is_some() {
            map.next_value::<Unrepeated>()?;
        }
        Ok(Unrepeated)
    }
}

/// A map's key, refused when the map had it already (keys compared as written, so `1` and
/// `"1"` are one key to YAML's reader here as they are to serde's maps of strings).
struct NewKey<'s> {
    seen: &'s mut HashSet<String>,
}

impl<'de> DeserializeSeed<'de> for NewKey<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl NewKey<'_> {
    fn once<E: de::Error>(self, key: String) -> Result<(), E> {
        if self.seen.insert(key.clone()) {
            Ok(())
        } else {
            Err(E::custom(format_args!(
                "`{key}` is given twice in this map (YAML keeps only the last: remove or rename one)"
            )))
        }
    }
}

impl<'de> Visitor<'de> for NewKey<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.once(v.to_string())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.once(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.once(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.once(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.once(v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.once("~".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeated(text: &str) -> ConfigError {
        read(Path::new("/etc/bootpool/pools.yaml"), text).unwrap_err()
    }

    /// A pool named twice: serde's map would keep the second and drop the first room unsaid.
    #[test]
    fn a_pool_named_twice_is_an_error_at_its_second_key() {
        let e = repeated(
            "server: { address: 10.0.0.1 }\ndhcp: { subnet: 10.0.0.0/24 }\npools:\n  \
             room:\n    image: a\n  other:\n    image: b\n  room:\n    image: c\n",
        );
        assert_eq!((e.line, e.column), (Some(8), Some(3)), "{e}");
        assert_eq!(e.path, "pools", "{e}");
        assert!(e.reason.contains("`room` is given twice"), "{e}");
    }

    /// Anywhere: a key of a struct, inside a list item, inside a flow map.
    #[test]
    fn repeated_keys_are_found_at_any_depth() {
        let e = repeated("server:\n  address: 10.0.0.1\n  address: 10.0.0.2\n");
        assert_eq!((e.line, e.path.as_str()), (Some(3), "server"), "{e}");
        let e = repeated(
            "pools:\n  room:\n    clients:\n      - mac: a\n      - { mac: b, name: x, name: y }\n",
        );
        assert_eq!(e.line, Some(5), "{e}");
        assert_eq!(e.path, "pools.room.clients[1]", "{e}");
        assert!(e.reason.contains("`name` is given twice"), "{e}");
        // The same key in two maps is no repetition.
        assert!(
            read(Path::new("x.yaml"), "a:\n  name: x\nb:\n  name: x\n")
                .unwrap_err()
                .reason
                .contains("unknown field `a`")
        );
    }
}
