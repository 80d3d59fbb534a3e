//! The export-name grammar: the names a boot is handed for an image's revision and its root's
//! wire copy, made and read back here alone. A revision `ID` (12 lowercase hex digits) names
//! its boot files `IMAGE/revs/ID/FILE`, its NFS export `EXPORT@ID` and its NBD export
//! `NAME@ID`; a squashfs root's zstd copy is exported as `NAME~zstd` (`NAME@ID~zstd` for a
//! revision's). `@` and `~` are in no configured name, so a name says which it is.

use super::Image;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The folder of an image's revisions, `revs/ID/`, on disk and in its boot files' names.
pub const REVS: &str = "revs";
/// What an NBD export name ends with when it names the root's wire copy.
pub const ROOT_SUFFIX: &str = "~zstd";

/// Whether `s` is a revision's id: 12 lowercase hex digits.
pub fn is_id(s: &str) -> bool {
    s.len() == 12
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A revision's id, checked (`is_id`); written as the id itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Rev(String);

impl Rev {
    /// `id` as a revision's id, if it is one.
    pub fn new(id: &str) -> Option<Rev> {
        is_id(id).then(|| Rev(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Rev> for String {
    fn from(r: Rev) -> String {
        r.0
    }
}

/// A root export's name as a client asked for it (an NFS MOUNT path, an NBD export name),
/// read once where it arrives: the revision it carries comes with it, typed. Stored and
/// sent as the name itself, so records written before read the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct ExportName {
    name: String,
    rev: Option<Rev>,
}

impl ExportName {
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The revision the name carries (`EXPORT@ID`, `NAME@ID~zstd`), if any.
    pub fn rev(&self) -> Option<&Rev> {
        self.rev.as_ref()
    }
}

impl From<String> for ExportName {
    fn from(name: String) -> ExportName {
        let rev = revision_of(&name).and_then(Rev::new);
        ExportName { name, rev }
    }
}

impl From<&str> for ExportName {
    fn from(name: &str) -> ExportName {
        ExportName::from(name.to_string())
    }
}

impl From<ExportName> for String {
    fn from(e: ExportName) -> String {
        e.name
    }
}

impl fmt::Display for ExportName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// `name` (an image, an export) as its revision `id`: `NAME@ID`.
pub fn at_revision(name: &str, id: &str) -> String {
    format!("{name}@{id}")
}

/// An NBD export name `NAME@ID` as `(NAME, ID)`, if it names a revision.
pub fn split_nbd(name: &str) -> Option<(&str, &str)> {
    let (export, id) = name.rsplit_once('@')?;
    is_id(id).then_some((export, id))
}

/// A MOUNT path `EXPORT@ID[/PATH]` as `(EXPORT, ID)`, if it names a revision.
pub fn split_nfs(path: &str) -> Option<(&str, &str)> {
    let (export, rest) = path.rsplit_once('@')?;
    let id = rest.split('/').next()?;
    is_id(id).then_some((export, id))
}

/// `image` as its revision `id`: every file inside `revs/ID/`, every export name `...@ID`.
/// Its name stays the image's (the root access rule and the URLs' `IMAGE/` go by it).
pub fn revision(image: &Image, id: &str) -> Image {
    let mut r = image.clone();
    let inside = |name: &str| format!("{REVS}/{id}/{name}");
    r.kernel_name = inside(&image.kernel_name);
    r.initrd_name = inside(&image.initrd_name);
    r.root_tree_name = inside(&image.root_tree_name);
    r.root_image_name = inside(&image.root_image_name);
    r.nfs_export = at_revision(&image.nfs_export, id);
    r.nbd_export = at_revision(&image.nbd_export, id);
    r
}

/// The NBD export name of `export`'s root wire copy.
pub fn wire_copy(export: &str) -> String {
    format!("{export}{ROOT_SUFFIX}")
}

/// The revision an export name (NFS path or NBD name) or boot-file name carries, if any.
pub fn revision_of(name: &str) -> Option<&str> {
    let name = name.strip_suffix(ROOT_SUFFIX).unwrap_or(name);
    if let Some((_, rest)) = name.split_once(&format!("{REVS}/")) {
        let id = rest.split('/').next()?;
        return is_id(id).then_some(id);
    }
    let (_, tail) = name.rsplit_once('@')?;
    let id = tail.split('/').next()?;
    is_id(id).then_some(id)
}

/// The image a name of the NFS tree stands for: `demo@ID` is image `demo`.
pub fn base(name: &str) -> &str {
    match name.rsplit_once('@') {
        Some((b, id)) if is_id(id) => b,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_revision() {
        assert_eq!(revision_of("/demo@0123456789ab"), Some("0123456789ab"));
        assert_eq!(revision_of("demo@0123456789ab"), Some("0123456789ab"));
        assert_eq!(
            revision_of("revs/0123456789ab/vmlinuz"),
            Some("0123456789ab")
        );
        assert_eq!(
            revision_of("demo/revs/0123456789ab/initrd.img"),
            Some("0123456789ab")
        );
        assert_eq!(revision_of("/demo"), None);
        assert_eq!(revision_of("/a@b"), None);
        assert_eq!(base("demo@0123456789ab"), "demo");
        assert_eq!(base("demo"), "demo");
        assert_eq!(revision_of("demo@0123456789ab~zstd"), Some("0123456789ab"));
        assert_eq!(wire_copy("demo@0123456789ab"), "demo@0123456789ab~zstd");
        assert_eq!(at_revision("demo", "0123456789ab"), "demo@0123456789ab");
        assert_eq!(
            split_nbd("demo@0123456789ab"),
            Some(("demo", "0123456789ab"))
        );
        assert_eq!(split_nbd("demo@0123456789ab~zstd"), None);
        assert_eq!(
            split_nfs("/srv/demo@0123456789ab/etc"),
            Some(("/srv/demo", "0123456789ab"))
        );
        assert_eq!(split_nfs("/srv/demo@x/etc"), None);
    }

    #[test]
    fn an_export_name_carries_its_revision_typed_and_is_stored_as_the_name() {
        let e = ExportName::from("/demo@0123456789ab");
        assert_eq!(e.rev().map(Rev::as_str), Some("0123456789ab"));
        assert_eq!(ExportName::from("demo").rev(), None);
        assert_eq!(Rev::new("0123456789AB"), None);
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, "\"/demo@0123456789ab\"");
        assert_eq!(serde_json::from_str::<ExportName>(&json).unwrap(), e);
    }
}
