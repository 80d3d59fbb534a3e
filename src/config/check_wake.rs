//! `pools.NAME.wake` checked: `at` a 24-hour `HH:MM`, `days` the names of `wake::DAYS`,
//! `per_second` at least 1; each error names file, line and key.

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step;
use super::raw;
use super::wake::{DAYS, WakeSchedule};

impl Checker<'_> {
    /// A pool's `wake` section, if it has one.
    pub(super) fn check_wake(
        &self,
        pool: &str,
        given: Option<&raw::Wake>,
    ) -> Result<Option<WakeSchedule>, ConfigError> {
        let Some(w) = given else {
            return Ok(None);
        };
        let at = |key| {
            [
                Step::Key("pools"),
                Step::Key(pool),
                Step::Key("wake"),
                Step::Key(key),
            ]
        };
        let minute =
            w.at.split_once(':')
                .filter(|(h, m)| h.len() == 2 && m.len() == 2)
                .and_then(|(h, m)| Some((h.parse::<u16>().ok()?, m.parse::<u16>().ok()?)))
                .filter(|&(h, m)| h < 24 && m < 60)
                .map(|(h, m)| h * 60 + m)
                .ok_or_else(|| {
                    self.err(
                        &at("at"),
                        format!(
                            "`{}` is not a time of day like \"07:45\" (24-hour, local)",
                            w.at
                        ),
                    )
                })?;
        let days = match &w.days {
            None => [true; 7],
            Some(names) => {
                let mut days = [false; 7];
                for (i, name) in names.iter().enumerate() {
                    let Some(d) = DAYS.iter().position(|d| d == name) else {
                        let path = [
                            Step::Key("pools"),
                            Step::Key(pool),
                            Step::Key("wake"),
                            Step::Key("days"),
                            Step::Index(i),
                        ];
                        return Err(self.err(
                            &path,
                            format!("`{name}` is not a day: one of {}", DAYS.join(", ")),
                        ));
                    };
                    days[d] = true;
                }
                if !days.contains(&true) {
                    return Err(self.err(&at("days"), "names no day: leave `wake` out instead"));
                }
                days
            }
        };
        if w.per_second == Some(0) {
            return Err(self.err(&at("per_second"), "must be at least 1"));
        }
        Ok(Some(WakeSchedule {
            minute,
            days,
            per_second: w.per_second,
        }))
    }
}
