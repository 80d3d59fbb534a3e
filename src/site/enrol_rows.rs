//! The rows of `site_enrolments` as plain data, pure: one row per entry of the enrolments
//! file (`config::enrolments::Entry`, by its MAC), and what a member's file changed since the
//! rows it last agreed with the site (`diff`), as the changes its writer sends.

use crate::config::enrolments::Entry;
use std::collections::BTreeMap;

/// The enrolments by key (`Entry::key`): a file's, the site's, or the last agreed.
pub type Rows = BTreeMap<String, Entry>;

/// A change to send: an entry written (inserted or replaced) or deleted, by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put(Entry),
    Delete(String),
}

/// `entries` by key; of two entries with one key (a hand edit), the last.
pub fn rows(entries: &[Entry]) -> Rows {
    entries.iter().map(|e| (e.key(), e.clone())).collect()
}

/// The entries of `rows` in key order, as the file is written from the site's rows.
pub fn entries(rows: &Rows) -> Vec<Entry> {
    rows.values().cloned().collect()
}

/// What `file` changed since `agreed` (the rows this member and the site last had alike):
/// an entry added or changed is a put, one gone a delete. What the site changed since is not
/// here: a member sends only its own changes, so it never undoes another member's.
pub fn diff(agreed: &Rows, file: &Rows) -> Vec<Change> {
    let deletes = agreed
        .keys()
        .filter(|k| !file.contains_key(*k))
        .map(|k| Change::Delete(k.clone()));
    let puts = file
        .iter()
        .filter(|(k, e)| agreed.get(*k) != Some(e))
        .map(|(_, e)| Change::Put(e.clone()));
    deletes.chain(puts).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mac: &str, pool: &str, name: Option<&str>) -> Entry {
        Entry {
            pool: pool.into(),
            mac: Some(mac.into()),
            macs: None,
            name: name.map(String::from),
            ip: None,
        }
    }

    #[test]
    fn a_member_sends_only_what_its_file_changed_since_it_last_agreed_with_the_site() {
        let (one, two, three) = (
            entry("52:54:00:7a:00:01", "room", Some("pc1")),
            entry("52:54:00:7A:00:02", "room", None),
            entry("52:54:00:7a:00:03", "lab", None),
        );
        let agreed = rows(&[one.clone(), two.clone()]);
        // Keys are MACs as bootpool writes them, whatever the case in the file.
        assert!(agreed.contains_key("52:54:00:7a:00:02"));
        // Nothing changed: nothing sent.
        assert_eq!(diff(&agreed, &agreed), []);
        // Added, renamed, removed.
        let renamed = entry("52:54:00:7a:00:01", "room", Some("pc9"));
        let file = rows(&[renamed.clone(), three.clone()]);
        assert_eq!(
            diff(&agreed, &file),
            [
                Change::Delete("52:54:00:7a:00:02".into()),
                Change::Put(renamed),
                Change::Put(three.clone()),
            ]
        );
        // A first member of a site (nothing agreed yet) sends its whole file.
        assert_eq!(
            diff(&Rows::new(), &rows(std::slice::from_ref(&three))),
            [Change::Put(three.clone())]
        );
        // The file written from the site's rows: in key order, read back as the same rows.
        let site = rows(&[three.clone(), one.clone()]);
        assert_eq!(entries(&site), [one, three]);
        assert_eq!(rows(&entries(&site)), site);
    }
}
