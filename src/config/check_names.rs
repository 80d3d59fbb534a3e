//! `pools.NAME.clients[].name` and `first`, checked: a name or pattern that fits its entry's
//! MACs, and no machine of the whole file named as another is (patterns expanded).

use super::check::Checker;
use super::client_names::{ClientName, Taken};
use super::error::ConfigError;
use super::locate::Step;
use super::values::MacRange;

impl Checker<'_> {
    /// The name (at `at`, with the entry's `first`) of the machines `macs`: one machine's
    /// name for one MAC, or a pattern with a name for each; none already another's.
    pub(super) fn check_client_name(
        &self,
        at: &[Step],
        text: &str,
        first: Option<u64>,
        macs: &MacRange,
        seen: &mut Taken,
    ) -> Result<ClientName, ConfigError> {
        let name = ClientName::parse(text, first).map_err(|e| self.err(at, e))?;
        if !name.is_pattern() && macs.len() != 1 {
            return Err(self.err(
                at,
                format!(
                    "names one machine, but `macs` lists {}: give a pattern (`pc{{n:02}}`, \
                     `pc[01-{}]`) or each machine its own entry with `mac` and `name`",
                    macs.len(),
                    macs.len()
                ),
            ));
        }
        name.fits(macs.len()).map_err(|e| self.err(at, e))?;
        let here = self.err(at, String::new());
        let place = match (here.line, here.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}: {}", here.file.display(), here.path),
            _ => format!("{}: {}", here.file.display(), here.path),
        };
        for i in 0..macs.len() {
            let one = name.nth(i);
            let mac = macs.nth(i).expect("i is below the range's length");
            if let Some(other) = seen.holder(&one) {
                return Err(self.err(
                    at,
                    format!("`{one}` ({mac}) is already the name of {other}"),
                ));
            }
            seen.take(&one, format!("{mac} at {place}"));
        }
        Ok(name)
    }
}
