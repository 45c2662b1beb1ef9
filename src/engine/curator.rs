//! The per-row part of curation, run on the pool: content filters, the exact fingerprint, the
//! MinHash bands and the benchmark check during the scan; token filters after tokenizing.
//! Everything here is a function of one row; the decisions across rows are the ledger's.

use super::row_path::Tokenized;
use crate::conversation::Conversation;
use crate::curate::decontaminate::{load_items, BenchmarkError, DecontamIndex};
use crate::curate::exact::{fingerprint, token_fingerprint, DedupKey};
use crate::curate::filters::{Dropped, Filters};
use crate::curate::ledger::Scanned;
use crate::curate::near_dup::MinHasher;
use crate::curate::text::RowText;
use crate::plan::Plan;

pub struct Curator<'p> {
    /// Per source: the global filters, then the source's own.
    filters: Vec<&'p Filters>,
    pub dedup: Option<DedupKey>,
    minhash: Option<MinHasher>,
    bands: Option<usize>,
    /// Per source: whether it takes part in near-duplicate removal.
    near_dup: Vec<bool>,
    decontam: Option<DecontamIndex>,
}

impl<'p> Curator<'p> {
    /// Builds the per-row steps of a plan (loading the benchmark sets, if any).
    pub fn new(plan: &'p Plan) -> Result<Self, BenchmarkError> {
        let decontam = match &plan.decontaminate {
            None => None,
            Some(d) => {
                let mut sets = Vec::with_capacity(d.files.len());
                for (config, files) in d.config.benchmarks.iter().zip(&d.files) {
                    sets.push(load_items(&config.name, files, &config.columns)?);
                }
                Some(DecontamIndex::build(&d.config, &sets))
            }
        };
        Ok(Curator {
            filters: plan.sources.iter().map(|s| &s.filters).collect(),
            dedup: plan.dedup,
            minhash: plan.near_dup.as_ref().map(MinHasher::new),
            bands: plan.near_dup.as_ref().map(|n| n.bands),
            near_dup: plan
                .sources
                .iter()
                .map(|s| {
                    plan.near_dup.as_ref().is_some_and(|n| {
                        n.sources
                            .as_ref()
                            .is_none_or(|names| names.contains(&s.name))
                    })
                })
                .collect(),
            decontam,
        })
    }

    /// Bands per row when near-duplicate removal is on.
    pub fn bands(&self) -> Option<usize> {
        self.bands
    }

    /// Whether the scan's records decide anything across rows (exact or near duplicates,
    /// contamination): then no row can be worked before every row is scanned.
    pub fn decides_across_rows(&self) -> bool {
        self.dedup.is_some() || self.bands.is_some() || self.decontam.is_some()
    }

    /// The scan of one validated row: the first content filter that drops it, or its record.
    pub fn scan(
        &self,
        source: usize,
        conversation: &Conversation,
        weight: u32,
    ) -> Result<Scanned, Dropped> {
        // Scope texts and their normalizations, made once for the filters, near-dup and
        // decontamination (those reading the same scope share them).
        let text = RowText::new(conversation);
        self.filters[source].check_row(&text)?;
        Ok(Scanned {
            fingerprint: self.dedup.map(|key| fingerprint(conversation, key)),
            bands: match self.near_dup[source] {
                true => self.minhash.as_ref().and_then(|m| m.bands_of_row(&text)),
                false => None,
            },
            hit: self.decontam.as_ref().and_then(|d| d.check_row(&text)),
            weight,
        })
    }

    /// The scan of a pre-tokenized row (`format: speculator`): only its exact fingerprint.
    /// Content filters, near-duplicate bands and the benchmark check read text, which it has
    /// not (the plan refuses a source's own text filters; the pipeline's skip it).
    pub fn scan_tokens(&self, ids: &[u32], mask: &[u8], weight: u32) -> Scanned {
        Scanned {
            fingerprint: self.dedup.map(|key| token_fingerprint(ids, mask, key)),
            bands: None,
            hit: None,
            weight,
        }
    }

    /// The token filters over a kept conversation's rows: the rows that pass, or the first
    /// filter that dropped the last of them.
    pub fn token_filters(
        &self,
        source: usize,
        rows: Vec<Tokenized>,
    ) -> Result<Vec<Tokenized>, Dropped> {
        let filters = &self.filters[source];
        if !filters.has_token_filters() {
            return Ok(rows);
        }
        let mut first = None;
        let kept: Vec<Tokenized> = rows
            .into_iter()
            .filter(
                |r| match filters.check_tokens(r.ids.len(), r.supervised()) {
                    Ok(()) => true,
                    Err(d) => {
                        first.get_or_insert(d);
                        false
                    }
                },
            )
            .collect();
        match (kept.is_empty(), first) {
            (true, Some(d)) => Err(d),
            _ => Ok(kept),
        }
    }
}
