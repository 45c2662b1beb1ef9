//! `language`: keeps rows whose scope text is detected as one of the listed languages.

use super::{Filter, FilterProblem, Judge, JudgeText};
use crate::curate::text::{RowText, Scope};
use serde::Deserialize;

/// Keeps rows whose text is in one of `keep` (ISO 639-1 codes such as `en`, `zh`, or whatlang's
/// ISO 639-3 codes such as `eng`, `cmn`), on the first 2,000 characters of the scope text.
///
/// A row detected as a kept language is kept at any confidence: whatlang's confidence is low on
/// short and code-heavy text that is plainly in the language it names. `min_confidence` (0 to 1)
/// is how sure the detector must be to drop a row for another language: below it the detection
/// is not trusted and the row is kept. `drop_low_confidence: true` instead drops every row
/// detected below `min_confidence`, whatever the language (the strict rule).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Language {
    #[serde(default)]
    pub name: Option<String>,
    pub keep: Vec<String>,
    #[serde(default)]
    pub min_confidence: f64,
    #[serde(default)]
    pub drop_low_confidence: bool,
    /// Default `user`: the prompt's language is the conversation's, and code in answers
    /// confuses language detection.
    #[serde(default = "user_scope")]
    pub scope: Scope,
}

fn user_scope() -> Scope {
    Scope::User
}

impl Filter for Language {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        if self.keep.is_empty() {
            return Err(FilterProblem::NoLanguage);
        }
        if !(0.0..=1.0).contains(&self.min_confidence) {
            return Err(FilterProblem::Confidence(self.min_confidence));
        }
        let keep = self
            .keep
            .iter()
            .map(|code| {
                lang_from_code(code)
                    .ok_or_else(|| FilterProblem::UnknownLanguage { code: code.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Judge::Text(Box::new(KeepLanguages {
            keep,
            min_confidence: self.min_confidence,
            drop_low_confidence: self.drop_low_confidence,
            scope: self.scope,
        })))
    }
}

/// A [`Language`] filter with its codes resolved.
#[derive(Debug)]
struct KeepLanguages {
    keep: Vec<langid_index::Lang>,
    min_confidence: f64,
    drop_low_confidence: bool,
    scope: Scope,
}

impl JudgeText for KeepLanguages {
    fn judge(&self, row: &RowText) -> Option<String> {
        let (keep, min_confidence, scope) = (&self.keep, self.min_confidence, self.scope);
        let Some((lang, confidence)) =
            langid_index::detect(prefix(row.scope(scope), LANGUAGE_CHARS))
        else {
            return Some(format!("no language detected in {} text", scope.as_str()));
        };
        let sure = confidence >= min_confidence;
        if self.drop_low_confidence && !sure {
            return Some(format!(
                "language {} confidence {confidence:.2} < {min_confidence}",
                lang_code(lang)
            ));
        }
        // Another language drops the row only when the detector is sure of it.
        if !keep.contains(&lang) && sure {
            let keep: Vec<&str> = keep.iter().map(|&l| lang_code(l)).collect();
            return Some(format!(
                "language {} ({confidence:.2}) not in [{}]",
                lang_code(lang),
                keep.join(", ")
            ));
        }
        None
    }

    /// The scope's text the detector read (its first characters).
    fn evidence(&self, row: &RowText) -> Option<String> {
        Some(super::head(row.scope(self.scope)))
    }
}

/// Characters of a text that language detection reads: enough to tell the language, and
/// bounded, so a long row costs no more than a short one.
const LANGUAGE_CHARS: usize = 2000;

/// The first `chars` characters of `text`.
pub(super) fn prefix(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(end, _)| &text[..end])
}

/// whatlang's languages with their ISO 639-1 codes (all of its languages have one).
pub(super) const LANGS: &[(&str, langid_index::Lang)] = {
    use langid_index::Lang::*;
    &[
        ("af", Afr),
        ("ak", Aka),
        ("am", Amh),
        ("ar", Ara),
        ("az", Aze),
        ("be", Bel),
        ("bg", Bul),
        ("bn", Ben),
        ("ca", Cat),
        ("cs", Ces),
        ("cy", Cym),
        ("da", Dan),
        ("de", Deu),
        ("el", Ell),
        ("en", Eng),
        ("eo", Epo),
        ("es", Spa),
        ("et", Est),
        ("fa", Pes),
        ("fi", Fin),
        ("fr", Fra),
        ("gu", Guj),
        ("he", Heb),
        ("hi", Hin),
        ("hr", Hrv),
        ("hu", Hun),
        ("hy", Hye),
        ("id", Ind),
        ("it", Ita),
        ("ja", Jpn),
        ("jv", Jav),
        ("ka", Kat),
        ("km", Khm),
        ("kn", Kan),
        ("ko", Kor),
        ("la", Lat),
        ("lt", Lit),
        ("lv", Lav),
        ("mk", Mkd),
        ("ml", Mal),
        ("mr", Mar),
        ("my", Mya),
        ("nb", Nob),
        ("ne", Nep),
        ("nl", Nld),
        ("or", Ori),
        ("pa", Pan),
        ("pl", Pol),
        ("pt", Por),
        ("ro", Ron),
        ("ru", Rus),
        ("si", Sin),
        ("sk", Slk),
        ("sl", Slv),
        ("sn", Sna),
        ("sr", Srp),
        ("sv", Swe),
        ("ta", Tam),
        ("te", Tel),
        ("th", Tha),
        ("tk", Tuk),
        ("tl", Tgl),
        ("tr", Tur),
        ("uk", Ukr),
        ("ur", Urd),
        ("uz", Uzb),
        ("vi", Vie),
        ("yi", Yid),
        ("zh", Cmn),
        ("zu", Zul),
    ]
};

/// A language from an ISO 639-1 code, `no` (Norwegian, detected as Bokmål) or an ISO 639-3
/// code as whatlang spells it; case-insensitive.
fn lang_from_code(code: &str) -> Option<langid_index::Lang> {
    let code = code.to_ascii_lowercase();
    if code == "no" {
        return Some(langid_index::Lang::Nob);
    }
    LANGS
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, l)| *l)
        .or_else(|| langid_index::Lang::from_code(code))
}

/// The ISO 639-1 code of a detected language.
fn lang_code(lang: langid_index::Lang) -> &'static str {
    LANGS
        .iter()
        .find(|(_, l)| *l == lang)
        .map_or(lang.code(), |(c, _)| c)
}
