//! A client entry's own exceptions to its pool, checked: `cmdline` (after the pool's),
//! `image` (another of `images`) and `revision` (a revision id of that image, a canary).
//! Whether the revision is on disk is `image::serve::missing_files`'s answer, as for every
//! file a boot needs: `check` and `start` refuse a revision not imported yet.

use super::check::Checker;
use super::cmdline;
use super::error::ConfigError;
use super::locate::Step;
use super::model::Image;
use super::names;
use super::raw;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What an entry says instead of its pool: its `cmdline`, `image` and `revision`.
pub(super) type Overrides = (Option<String>, Option<Arc<Image>>, Option<String>);

impl Checker<'_> {
    /// Entry `c` (at `entry`)'s overrides; `template` is its pool's `cmdline_template`,
    /// which must place a `cmdline` given here.
    pub(super) fn check_overrides(
        &self,
        entry: &[Step],
        c: &raw::Client,
        images: &BTreeMap<String, Arc<Image>>,
        template: Option<&cmdline::Template>,
    ) -> Result<Overrides, ConfigError> {
        let at = |key| {
            let mut path = entry.to_vec();
            path.push(Step::Key(key));
            path
        };
        let line = match c.cmdline.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(line) => {
                if template.is_some_and(|t| !t.uses(cmdline::Field::Cmdline)) {
                    return Err(self.err(
                        &at("cmdline"),
                        "is not used: the pool's cmdline_template does not say {cmdline}",
                    ));
                }
                if line.contains(['\n', '\r']) {
                    return Err(self.err(&at("cmdline"), "holds a line break: give one line"));
                }
                Some(line.to_string())
            }
        };
        let image = match &c.image {
            None => None,
            Some(name) => Some(images.get(name).cloned().ok_or_else(|| {
                let known: Vec<&str> = images.keys().map(String::as_str).collect();
                self.err(
                    &at("image"),
                    format!("no image `{name}` (images: {})", known.join(", ")),
                )
            })?),
        };
        let revision = match &c.revision {
            None => None,
            Some(id) if names::is_id(id) => Some(id.clone()),
            Some(id) => {
                return Err(self.err(
                    &at("revision"),
                    format!(
                        "`{id}` is not a revision id (12 lowercase hex digits, as `bootpool \
                         image list` shows them)"
                    ),
                ));
            }
        };
        Ok((line, image, revision))
    }
}
