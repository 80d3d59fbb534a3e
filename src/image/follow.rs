//! What a server of a site does about the revisions the others hold (pure; the I/O is
//! `service/site_revisions.rs`, docs/site.md): from the `site_revisions` rows (which server
//! holds which revision of which image, and which it has active since when) and what this
//! server holds, the revisions to pull and from whom, and the revision to activate. The site's
//! active revision of an image is the one activated last on any server; a server follows it
//! once it holds it, and a revision it pruned is not pulled again unless it is recorded anew
//! after this server started following or is the one the site has active.

use std::collections::{BTreeMap, BTreeSet};

/// One row of `site_revisions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub image: String,
    /// The revision's id (12 hex digits).
    pub rev: String,
    /// Its manifest's SHA-256.
    pub manifest: String,
    /// The server holding it: its HTTP base URL (`http://HOST:PORT`), which also names it.
    pub server: String,
    /// Whether that server has it active, and since when (Unix microseconds; 0: never).
    pub active: bool,
    pub activated_at: i64,
    /// When the first server recorded the revision (Unix microseconds).
    pub recorded_at: i64,
}

/// What this server holds of one image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Local {
    pub revs: BTreeSet<String>,
    pub active: Option<String>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pull `rev` of `image` from these servers (in this order: the one activating it
    /// first, then the others by name).
    Pull {
        image: String,
        rev: String,
        from: Vec<String>,
    },
    /// Make `rev` active here, as the site has it since `since`.
    Activate {
        image: String,
        rev: String,
        since: i64,
    },
}

/// The revision the site has active for `image`: the one activated last on any server
/// (ties by the revision's id, so every server reads the same), and since when.
pub fn site_active(rows: &[Row], image: &str) -> Option<(String, i64)> {
    rows.iter()
        .filter(|r| r.image == image && r.active)
        .max_by(|a, b| (a.activated_at, &a.rev).cmp(&(b.activated_at, &b.rev)))
        .map(|r| (r.rev.clone(), r.activated_at))
}

/// Since when this server's active revision of an image counts as activated, for its row:
/// the time it recorded before while it is the same (`published`), now when it changed since
/// (an admin activated it here), and 0 (not an activation: it follows) when this server
/// records the image for the first time and the others have one active already, so a server
/// joining, or back from a long stop, never takes the site back to what it held.
pub fn activated_at(
    active: Option<&str>,
    published: Option<(&str, i64)>,
    others_active: bool,
    now: i64,
) -> i64 {
    match (active, published) {
        (None, _) => 0,
        (Some(a), Some((p, at))) if a == p => at,
        (Some(_), Some(_)) => now,
        (Some(_), None) if others_active => 0,
        (Some(_), None) => now,
    }
}

/// The actions for server `me` holding `local` (by image), given every row; `since`: when
/// this server started following (revisions recorded before it and not the site's active
/// one are not pulled: this server may have pruned them).
pub fn plan(me: &str, local: &BTreeMap<String, Local>, rows: &[Row], since: i64) -> Vec<Action> {
    let mut out = Vec::new();
    for (image, held) in local {
        let active = site_active(rows, image);
        // Each revision others hold, with its holders and when it was first recorded.
        let mut others: BTreeMap<&str, (Vec<&Row>, i64)> = BTreeMap::new();
        for r in rows.iter().filter(|r| &r.image == image && r.server != me) {
            let e = others.entry(&r.rev).or_insert((Vec::new(), i64::MAX));
            e.0.push(r);
            e.1 = e.1.min(r.recorded_at);
        }
        for (rev, (mut holders, recorded)) in others {
            let wanted = active.as_ref().is_some_and(|(a, _)| a == rev) || recorded >= since;
            if held.revs.contains(rev) || !wanted {
                continue;
            }
            holders.sort_by(|a, b| (!a.active, &a.server).cmp(&(!b.active, &b.server)));
            out.push(Action::Pull {
                image: image.clone(),
                rev: rev.to_string(),
                from: holders.iter().map(|r| r.server.clone()).collect(),
            });
        }
        if let Some((rev, at)) = active
            && held.active.as_ref() != Some(&rev)
        {
            out.push(Action::Activate {
                image: image.clone(),
                rev,
                since: at,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, rev: &str, active: bool, at: i64) -> Row {
        Row {
            image: "demo".into(),
            rev: rev.into(),
            manifest: format!("m-{rev}"),
            server: server.into(),
            active,
            activated_at: at,
            recorded_at: 100,
        }
    }

    fn local(revs: &[&str], active: Option<&str>) -> BTreeMap<String, Local> {
        BTreeMap::from([(
            "demo".to_string(),
            Local {
                revs: revs.iter().map(|r| r.to_string()).collect(),
                active: active.map(str::to_string),
            },
        )])
    }

    #[test]
    fn a_revision_activated_elsewhere_is_pulled_then_followed() {
        let a = "http://a:80";
        let b = "http://b:80";
        let c = "http://c:80";
        let rows = vec![
            row(a, "r1", false, 10),
            row(a, "r2", true, 20),
            row(c, "r2", false, 0),
            row(b, "r1", true, 10),
        ];
        assert_eq!(site_active(&rows, "demo"), Some(("r2".into(), 20)));
        // b holds r1 only: it pulls r2, from a (which has it active) first, then follows.
        let plan_b = plan(b, &local(&["r1"], Some("r1")), &rows, 0);
        assert_eq!(
            plan_b,
            vec![
                Action::Pull {
                    image: "demo".into(),
                    rev: "r2".into(),
                    from: vec![a.into(), c.into()],
                },
                Action::Activate {
                    image: "demo".into(),
                    rev: "r2".into(),
                    since: 20,
                },
            ]
        );
        // Once it holds r2, only the activation is left; then nothing.
        let plan_b = plan(b, &local(&["r1", "r2"], Some("r1")), &rows, 0);
        assert_eq!(plan_b.len(), 1);
        assert!(plan(b, &local(&["r1", "r2"], Some("r2")), &rows, 0).is_empty());
    }

    #[test]
    fn a_server_joining_follows_and_an_activation_here_counts_from_now() {
        // Joining with r1 active while the site has one: not an activation.
        assert_eq!(activated_at(Some("r1"), None, true, 500), 0);
        // The first server of the site: its active revision is the site's, from now.
        assert_eq!(activated_at(Some("r1"), None, false, 500), 500);
        // Unchanged: the time recorded; changed here: now.
        assert_eq!(activated_at(Some("r1"), Some(("r1", 20)), true, 500), 20);
        assert_eq!(activated_at(Some("r2"), Some(("r1", 20)), true, 500), 500);
        assert_eq!(activated_at(None, Some(("r1", 20)), true, 500), 0);
    }

    #[test]
    fn a_pruned_revision_is_not_pulled_again_and_the_last_activation_wins() {
        let rows = vec![
            row("http://a:80", "r1", false, 10),
            row("http://a:80", "r3", true, 30),
            row("http://b:80", "r3", false, 0),
            row("http://b:80", "r4", true, 40),
        ];
        // b pruned r1 (recorded before it started following): not pulled again.
        let plan_b = plan("http://b:80", &local(&["r3", "r4"], Some("r4")), &rows, 200);
        assert!(plan_b.is_empty(), "{plan_b:?}");
        // a sees b's later activation: it pulls r4 and activates it.
        let plan_a = plan("http://a:80", &local(&["r1", "r3"], Some("r3")), &rows, 200);
        assert_eq!(plan_a.len(), 2, "{plan_a:?}");
        assert!(matches!(&plan_a[1], Action::Activate { rev, since: 40, .. } if rev == "r4"));
    }
}
