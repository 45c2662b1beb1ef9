//! Pipeline settings read by more than one stage (and recorded in the manifest).

use serde::Deserialize;

/// What happens to a row longer than `max_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthPolicy {
    /// Drop rows longer than `max_tokens`.
    #[default]
    Drop,
    /// Cut at the end of the last assistant turn that fits; drop if none fits.
    Truncate,
}
