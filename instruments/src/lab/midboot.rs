//! What the lab does to a room while it boots, on the record's word rather than after a fixed
//! delay: `--kill-member-at-root` (member a dies once every client's root is served by it and
//! none has booted) and `--kill-client-at-root NAME` (one client switched off once its root is
//! attached and it has not booted). Both read the boots the daemons' APIs give (a root attach
//! is an NFS mount, an NBD attach or an agent's fetch of the root's manifest, docs/api.md) and
//! the clients' consoles (the lab's `booted`); this file only judges what those say.

use bootpool::record::view::BootView;

/// Whether the record's boot `b` is still running with its root attached: served by `member`
/// first, when one is named (the boot's `served`, as a site's member gives it), else by
/// anyone (its `root`, set at the attach).
pub(super) fn rooted(b: &BootView, member: Option<&str>) -> bool {
    if b.result != "running" {
        return false;
    }
    match member {
        None => b.root.is_some(),
        Some(m) => b
            .served
            .iter()
            .any(|p| p.phase == "root" && p.by.first().is_some_and(|t| t.member == m)),
    }
}

/// `--kill-member-at-root`'s moment: every client has a boot in the record (`last`, one per
/// client, `None` before its first DHCP) whose root `member` served first, and none has
/// booted by its console (`booted`, one per client). `Err` names a client that booted or
/// failed before the moment came: a death then would not be mid-boot for it.
pub(super) fn all_rooted_on(
    last: &[Option<&BootView>],
    booted: &[(String, bool)],
    member: &str,
) -> Result<bool, String> {
    if let Some((name, _)) = booted.iter().find(|(_, done)| *done) {
        return Err(format!(
            "{name} ended its boot before every client's root was served by member {member}: \
             its server would not die mid-boot"
        ));
    }
    Ok(last.len() == booted.len()
        && last
            .iter()
            .all(|b| b.is_some_and(|b| rooted(b, Some(member)))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot(result: &str, root: Option<&str>, served_root: Option<&str>) -> BootView {
        let served: Vec<serde_json::Value> = served_root
            .map(|m| serde_json::json!({"phase": "root", "by": [{"member": m, "at": 1010.0}]}))
            .into_iter()
            .chain([serde_json::json!({"phase": "dhcp", "by": [{"member": "a", "at": 1000.0}]})])
            .collect();
        serde_json::from_value(serde_json::json!({
            "id": 1, "mac": "52:54:00:77:00:01", "start": 1000.0, "result": result,
            "root": root, "console_lines": 0, "phases": [], "current_phase": "root",
            "last_event": 1030.0, "bytes": {}, "served": served
        }))
        .unwrap()
    }

    #[test]
    fn a_boot_is_rooted_once_its_root_is_attached_and_while_it_runs() {
        assert!(rooted(&boot("running", Some("nbd"), None), None));
        assert!(!rooted(&boot("running", None, None), None));
        assert!(!rooted(&boot("booted", Some("nbd"), None), None));
        // In a site: the member that served the root first.
        assert!(rooted(&boot("running", Some("nfs"), Some("a")), Some("a")));
        assert!(!rooted(&boot("running", Some("nfs"), Some("b")), Some("a")));
        assert!(!rooted(&boot("running", Some("nfs"), None), Some("a")));
    }

    #[test]
    fn the_member_dies_once_every_root_is_its_and_never_after_a_client_booted() {
        let (on_a, not_yet) = (
            boot("running", Some("nfs"), Some("a")),
            boot("running", None, None),
        );
        let running = |n: usize| -> Vec<(String, bool)> {
            (1..=n).map(|i| (format!("pc{i:02}"), false)).collect()
        };
        assert_eq!(
            all_rooted_on(&[Some(&on_a), Some(&on_a)], &running(2), "a"),
            Ok(true)
        );
        assert_eq!(
            all_rooted_on(&[Some(&on_a), Some(&not_yet)], &running(2), "a"),
            Ok(false)
        );
        assert_eq!(
            all_rooted_on(&[Some(&on_a), None], &running(2), "a"),
            Ok(false)
        );
        assert_eq!(all_rooted_on(&[Some(&on_a)], &running(2), "a"), Ok(false));
        let one_up = vec![("pc01".to_string(), false), ("pc02".to_string(), true)];
        let said = all_rooted_on(&[Some(&on_a), Some(&on_a)], &one_up, "a").unwrap_err();
        assert!(said.starts_with("pc02 ended its boot"), "{said}");
    }
}
