//! Alpaca-family presets: the exact columns of four code-instruction sources, over
//! [`AlpacaAdapter`] (same rules and reject codes: `empty_response`,
//! `empty_prompt`, `missing_field`, `invalid_field`). Presets take no `columns`; for a mirror
//! with renamed columns use `format: alpaca` with a mapping.
//!
//! | format | source | user | assistant |
//! |---|---|---|---|
//! | `codealpaca` | sahil2801/CodeAlpaca-20k | `instruction` + `"\n"` + `input` (when non-empty) | `output` |
//! | `evol_codealpaca` | theblackcat102/evol-codealpaca-v1 | `instruction` | `output` |
//! | `magicoder_oss` | ise-uiuc/Magicoder-OSS-Instruct-75K | `problem` | `solution` |
//! | `magicoder_evol` | ise-uiuc/Magicoder-Evol-Instruct-110K | `instruction` | `response` |
//!
//! No preset has a system prompt. Magicoder-OSS's `seed` (the open-source snippet that inspired
//! the problem), `openai_fingerprint`, `lang`, `index` and `raw_index` are never read into the
//! conversation; `lang`, `index` and `raw_index` are reported as metadata.

use super::{AlpacaAdapter, Repairs, Row};
use crate::conversation::Conversation;
use crate::reject::Reject;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    CodeAlpaca,
    EvolCodeAlpaca,
    MagicoderOss,
    MagicoderEvol,
}

#[derive(Debug, Clone)]
pub struct PresetAdapter {
    pub preset: Preset,
    inner: AlpacaAdapter,
}

impl PresetAdapter {
    pub fn new(preset: Preset) -> Self {
        let (instruction, input, output) = match preset {
            Preset::CodeAlpaca => ("instruction", Some("input"), "output"),
            Preset::EvolCodeAlpaca => ("instruction", None, "output"),
            Preset::MagicoderOss => ("problem", None, "solution"),
            Preset::MagicoderEvol => ("instruction", None, "response"),
        };
        PresetAdapter {
            preset,
            inner: AlpacaAdapter {
                instruction: instruction.into(),
                input: input.map(Into::into),
                output: output.into(),
                system: None,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self.preset {
            Preset::CodeAlpaca => "codealpaca",
            Preset::EvolCodeAlpaca => "evol_codealpaca",
            Preset::MagicoderOss => "magicoder_oss",
            Preset::MagicoderEvol => "magicoder_evol",
        }
    }

    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        self.inner.adapt(row, repairs)
    }

    pub fn metadata(&self, row: &Row) -> Map<String, Value> {
        match self.preset {
            Preset::MagicoderOss => super::scalar_fields(row, &["lang", "index", "raw_index"]),
            _ => Map::new(),
        }
    }
}

impl super::Format for PresetAdapter {
    fn configure(settings: &super::Settings) -> Self {
        PresetAdapter::new(match settings.format {
            super::FormatName::EvolCodeAlpaca => Preset::EvolCodeAlpaca,
            super::FormatName::MagicoderOss => Preset::MagicoderOss,
            super::FormatName::MagicoderEvol => Preset::MagicoderEvol,
            _ => Preset::CodeAlpaca,
        })
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        PresetAdapter::adapt(self, row, repairs)
    }

    fn metadata(&self, row: &Row) -> serde_json::Map<String, serde_json::Value> {
        PresetAdapter::metadata(self, row)
    }
}
