//! The export-name grammar: the names a boot is handed for an image's revision and its root's
//! wire copy, made and read back here alone. A revision `ID` (12 lowercase hex digits) names
//! its boot files `IMAGE/revs/ID/FILE`, its NFS export `EXPORT@ID` and its NBD export
//! `NAME@ID`; a squashfs root's zstd copy is exported as `NAME~zstd` (`NAME@ID~zstd` for a
//! revision's). `@` and `~` are in no configured name, so a name says which it is.

use super::Image;

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

/// `image` as its revision `id`: every file inside `revs/ID/`, every export name `...@ID`.
/// Its name stays the image's (the root access rule and the URLs' `IMAGE/` go by it).
pub fn revision(image: &Image, id: &str) -> Image {
    let mut r = image.clone();
    let inside = |name: &str| format!("{REVS}/{id}/{name}");
    r.kernel_name = inside(&image.kernel_name);
    r.initrd_name = inside(&image.initrd_name);
    r.root_tree_name = inside(&image.root_tree_name);
    r.root_image_name = inside(&image.root_image_name);
    r.nfs_export = format!("{}@{id}", image.nfs_export);
    r.nbd_export = format!("{}@{id}", image.nbd_export);
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
    }
}
