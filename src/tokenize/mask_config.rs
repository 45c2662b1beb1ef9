//! The `mask:` section of a pipeline: which tokens of a supervised assistant turn get loss, how
//! a token that crosses the edge of a supervised span is decided, the dtype the shards store the
//! mask in, and presets that set all of it (and the render policy) to a peer tool's convention.

use crate::render::RenderPolicy;
use serde::{Deserialize, Serialize};

/// `mask:` as written in the pipeline YAML. Every field is optional; a `preset` fills in the
/// rest, and a field given next to a preset must agree with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    /// A peer tool's convention, as a whole: mask settings, dtype and render policy.
    #[serde(default)]
    pub preset: Option<Preset>,
    /// Supervise each assistant turn's `<|im_end|>` and the newline after it (default true).
    #[serde(default)]
    pub end_of_turn: Option<bool>,
    /// Supervise the text the template writes at the start of every assistant turn before the
    /// model's own output (Qwen3.6: `<think>\n`; with `enable_thinking: false` the empty think
    /// block), i.e. the generation prompt's tail (default true).
    #[serde(default)]
    pub think_prefill: Option<bool>,
    /// Which tokens on the edge of a supervised span are supervised (default `first_char`).
    #[serde(default)]
    pub boundary: Option<Boundary>,
    /// Arrow type of the `loss_mask` column (default `int8`).
    #[serde(default)]
    pub dtype: Option<MaskDtype>,
}

/// A peer's whole convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Preset {
    /// vllm-project/speculators 0.7 (`scripts/prepare_data.py`): every assistant turn of the
    /// whole conversation supervised, `<|im_end|>` and its newline not, a token supervised when
    /// it overlaps an assistant span at all, `loss_mask` stored as `bool`.
    #[serde(rename = "speculators-0.7")]
    Speculators07,
    /// vllm-project/speculators 0.9 (`prepare-data --render-endpoint`): one row per assistant
    /// turn rendered after the prefix inference sees, `<|im_end|>\n` supervised, the template's
    /// think prefill not, and a token supervised when it overlaps the reply at all (its
    /// boundary is the common prefix of the prompt and full renders, so a token that merges
    /// the prefill's last `\n` with the reply's first is the reply's).
    #[serde(rename = "speculators-0.9")]
    Speculators09,
}

impl Preset {
    pub fn name(self) -> &'static str {
        match self {
            Preset::Speculators07 => "speculators-0.7",
            Preset::Speculators09 => "speculators-0.9",
        }
    }

    fn settings(self) -> (MaskSettings, RenderPolicy) {
        match self {
            Preset::Speculators07 => (
                MaskSettings {
                    end_of_turn: false,
                    think_prefill: true,
                    boundary: Boundary::AnyOverlap,
                    dtype: MaskDtype::Bool,
                },
                RenderPolicy::All,
            ),
            Preset::Speculators09 => (
                MaskSettings {
                    end_of_turn: true,
                    think_prefill: false,
                    boundary: Boundary::AnyOverlap,
                    dtype: MaskDtype::Int8,
                },
                RenderPolicy::Turns,
            ),
        }
    }
}

/// How a token that lies partly inside a supervised span is decided. The tokenizer can merge
/// the header's newline with whitespace an assistant reply starts with (`"\n\n"`, `"\n \n"`):
/// such a token starts in the header and ends in the reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundary {
    /// Supervised when its first character lies in the span (what a mask computed from
    /// `return_offsets_mapping` start offsets gives).
    #[default]
    FirstChar,
    /// Supervised when any of its characters lies in the span (speculators 0.7).
    AnyOverlap,
}

/// Arrow type of the `loss_mask` column's items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskDtype {
    #[default]
    Int8,
    /// Arrow `bool`, as speculators 0.7 writes it.
    Bool,
}

/// The resolved settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MaskSettings {
    pub end_of_turn: bool,
    pub think_prefill: bool,
    pub boundary: Boundary,
    pub dtype: MaskDtype,
}

impl Default for MaskSettings {
    fn default() -> Self {
        MaskSettings {
            end_of_turn: true,
            think_prefill: true,
            boundary: Boundary::FirstChar,
            dtype: MaskDtype::Int8,
        }
    }
}

impl MaskConfig {
    /// The settings and the render policy this section asks for, given the policy written in
    /// `render.policy` (if any). A field that contradicts the preset is an error naming both.
    pub fn resolve(
        &self,
        policy: Option<RenderPolicy>,
    ) -> Result<(MaskSettings, RenderPolicy), PresetConflict> {
        let Some(preset) = self.preset else {
            let d = MaskSettings::default();
            let settings = MaskSettings {
                end_of_turn: self.end_of_turn.unwrap_or(d.end_of_turn),
                think_prefill: self.think_prefill.unwrap_or(d.think_prefill),
                boundary: self.boundary.unwrap_or(d.boundary),
                dtype: self.dtype.unwrap_or(d.dtype),
            };
            return Ok((settings, policy.unwrap_or_default()));
        };
        let (settings, preset_policy) = preset.settings();
        let mut conflicts = Vec::new();
        let mut check = |field: &str, given: Option<String>, wanted: String| {
            if let Some(given) = given.filter(|g| *g != wanted) {
                conflicts.push(format!("`{field}: {given}` (the preset has {wanted})"));
            }
        };
        check(
            "mask.end_of_turn",
            self.end_of_turn.map(|v| v.to_string()),
            settings.end_of_turn.to_string(),
        );
        check(
            "mask.think_prefill",
            self.think_prefill.map(|v| v.to_string()),
            settings.think_prefill.to_string(),
        );
        check(
            "mask.boundary",
            self.boundary.as_ref().map(show),
            show(&settings.boundary),
        );
        check(
            "mask.dtype",
            self.dtype.as_ref().map(show),
            show(&settings.dtype),
        );
        check(
            "render.policy",
            policy.as_ref().map(show),
            show(&preset_policy),
        );
        if conflicts.is_empty() {
            Ok((settings, preset_policy))
        } else {
            Err(PresetConflict {
                preset: preset.name(),
                conflicts,
            })
        }
    }
}

/// Fields of `mask` / `render.policy` that contradict `mask.preset` (a plan error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("mask.preset `{preset}` conflicts with {}", conflicts.join(", "))]
pub struct PresetConflict {
    pub preset: &'static str,
    /// Each as `` `field: given` (the preset has wanted) ``.
    pub conflicts: Vec<String>,
}

/// The YAML spelling of a setting, for messages.
fn show<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::from("?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> MaskConfig {
        serde_yaml_ng::from_str(yaml).expect("parses")
    }

    #[test]
    fn defaults_are_todays_convention() {
        let (s, p) = MaskConfig::default().resolve(None).expect("resolves");
        assert_eq!(s, MaskSettings::default());
        assert_eq!(p, RenderPolicy::Expand);
        let (s, p) = parse("{end_of_turn: false, boundary: any_overlap, dtype: bool}")
            .resolve(Some(RenderPolicy::Last))
            .expect("resolves");
        assert_eq!(
            s,
            MaskSettings {
                end_of_turn: false,
                think_prefill: true,
                boundary: Boundary::AnyOverlap,
                dtype: MaskDtype::Bool
            }
        );
        assert_eq!(p, RenderPolicy::Last);
    }

    #[test]
    fn presets_set_everything_and_refuse_contradictions() {
        let (s, p) = parse("{preset: speculators-0.7}")
            .resolve(None)
            .expect("resolves");
        assert_eq!(
            (s.end_of_turn, s.boundary, s.dtype),
            (false, Boundary::AnyOverlap, MaskDtype::Bool)
        );
        assert_eq!(p, RenderPolicy::All);
        let (s, p) = parse("{preset: speculators-0.9, think_prefill: false}")
            .resolve(Some(RenderPolicy::Turns))
            .expect("agreeing fields are fine");
        assert!(!s.think_prefill && s.end_of_turn);
        assert_eq!(
            (s.boundary, s.dtype),
            (Boundary::AnyOverlap, MaskDtype::Int8)
        );
        assert_eq!(p, RenderPolicy::Turns);
        let err = parse("{preset: speculators-0.7, dtype: int8}")
            .resolve(Some(RenderPolicy::Expand))
            .expect_err("conflicts");
        assert_eq!(
            err.to_string(),
            "mask.preset `speculators-0.7` conflicts with `mask.dtype: int8` (the preset has bool), \
             `render.policy: expand` (the preset has all)"
        );
        assert!(serde_yaml_ng::from_str::<MaskConfig>("{preset: speculators-1.0}").is_err());
        assert!(serde_yaml_ng::from_str::<MaskConfig>("{end_of_trun: false}").is_err());
    }
}
