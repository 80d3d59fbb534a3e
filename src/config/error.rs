//! A configuration error, located in its file: what every check of `config` returns.

use std::fmt;
use std::path::PathBuf;

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The YAML path of the offending key, e.g. `pools.room-101.image`.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.path.is_empty() {
            write!(f, ": {}", self.reason)
        } else {
            write!(f, ": {}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}
