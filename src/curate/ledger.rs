//! The curation ledger: one compact record per input row, the global decisions over them, and
//! the accounting that follows from those decisions.
//!
//! A build runs in two passes (CURATION.md). The *scan* reads every row, adapts, validates and
//! runs the content filters, and hands each surviving row (a *candidate*) to the ledger with its
//! exact fingerprint, MinHash bands and contamination hit. After the scan, [`Ledger::decide`]
//! settles exact duplicates, near-duplicate groups and contamination from these records only,
//! so the outcome is a function of the set of rows and their positions, never of read order or
//! batch boundaries. The *work* pass then renders and tokenizes only rows that can be selected,
//! in selection order, asking the ledger which rows it still needs ([`Ledger::extend`]);
//! [`Ledger::allocate`] runs the take / mix allocation over what is known so far. Finally
//! [`Ledger::settle`] turns the records into the per-source accounting, in which every row read
//! is counted exactly once, under the first step that dropped it.

use super::decontaminate::Hit;
use super::exact::{ExactIndex, Fingerprint};
use super::near_dup::NearDupIndex;
use super::select::{self, AllocError, Allocation, MixConfig, Sample, Supply};
use crate::model::stats::SourceStats;
use crate::model::SampleId;
use crate::reject::{Reject, RejectReason, Repair};
use std::collections::BTreeMap;

/// A row that survived every step before rendering, at its position.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    file: u32,
    row: u64,
    /// The row as shown to a user (its line number in a line format).
    shown: u64,
    /// Selection key (`sel`) or, under `sample: first`, the position order.
    order: u64,
    /// Bytes of input: the estimate of its size before it is tokenized.
    weight: u32,
}

/// What the scan found for one row that survived validation and the content filters.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Scanned {
    pub fingerprint: Option<Fingerprint>,
    pub bands: Option<Box<[u64]>>,
    /// The first benchmark n-gram the row shares: the item, and the row's text around it.
    pub hit: Option<Hit>,
    pub weight: u32,
}

/// Why a candidate was dropped before rendering, decided from the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// An exact duplicate of the candidate with this global index.
    Duplicate(u32),
    /// In the near-duplicate group whose survivor has this global index.
    NearDuplicate(u32),
    Contaminated(Hit),
}

/// The result of rendering and tokenizing one candidate.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Work {
    Kept(KeptWork),
    Rejected(Reject),
    /// A token filter (`too_long`, `too_few_supervised`, or a named filter).
    Filtered {
        filter: String,
        detail: String,
    },
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KeptWork {
    /// Output rows (several under `expand`).
    pub rows: u32,
    pub tokens: u64,
    pub supervised_tokens: u64,
    pub truncated_rows: u32,
    /// Rows whose mask had a span edge inside a token.
    pub boundary_merged_rows: u32,
    /// Non-system messages and tool calls of the conversation (for `stats.json`).
    pub turns: u32,
    pub tool_calls: u32,
    pub repairs: Box<[Repair]>,
    pub encoder_checked: bool,
    pub renderer_checked: bool,
    /// Byte range of its line in `conversations.jsonl` (so a row that ends up not selected can
    /// be left out of it).
    pub line: (u64, u32),
    /// Its regeneration requests (`regenerate:`); `None` for none. Boxed: the outcome of every
    /// row is held until the selection settles, and 80 bytes of zeros a row were a third of a
    /// large build's ledger. Recorded as the tally itself (zeros for `None`).
    #[serde(with = "tally_or_zero")]
    pub regen: Option<Box<crate::model::stats::RegenTally>>,
    /// A pre-tokenized row's id (`format: speculator`): the rows of a source that share it
    /// are one conversation for `output.validation`'s split.
    pub group: Option<String>,
}

/// [`KeptWork::regen`] in the journal: the tally, zeros for `None` (the records of a build
/// that kept it unboxed read the same).
mod tally_or_zero {
    use crate::model::stats::RegenTally;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        tally: &Option<Box<RegenTally>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match tally {
            Some(tally) => tally.serialize(s),
            None => RegenTally::default().serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Box<RegenTally>>, D::Error> {
        let tally = RegenTally::deserialize(d)?;
        Ok((!tally.is_zero()).then(|| Box::new(tally)))
    }
}

/// Where one source stands.
#[derive(Default)]
struct SourceLedger {
    stats: SourceStats,
    candidates: Vec<Candidate>,
    /// Global index of `candidates[0]`.
    first: u32,
    hits: BTreeMap<u32, Hit>,
    dropped: BTreeMap<u32, Dropped>,
    /// Local candidate indices that can be selected, in selection order (after `decide`).
    eligible: Vec<u32>,
    /// How many of `eligible` have been queued for the work pass.
    queued: usize,
    /// Work outcomes by local candidate index.
    work: WorkTable,
    /// Copies made by `max_repeats`: local index → copy numbers.
    copies: BTreeMap<u32, Vec<u32>>,
    /// Work outcomes of the copies, by (local index, copy).
    copy_work: BTreeMap<(u32, u32), KeptWork>,
    /// Queue no slack beyond the estimate: working a row is costly (`regenerate:` sends it to
    /// a server), so a shortfall is asked for again instead.
    lean: bool,
}

/// Work outcomes by local candidate index: a slot per candidate into the outcomes in the
/// order they were recorded. The ledger looks every eligible row up several times in
/// selection order (a random order of the candidates) once the work is done; a tree of a
/// million outcomes made that seconds of cache misses on the one thread that commits, this
/// costs two array reads a row and 4 bytes per candidate.
#[derive(Default)]
struct WorkTable {
    slot: Vec<u32>,
    outcomes: Vec<Work>,
}

impl WorkTable {
    const NONE: u32 = u32::MAX;

    fn get(&self, local: &u32) -> Option<&Work> {
        let slot = *self.slot.get(*local as usize)?;
        self.outcomes.get(slot as usize)
    }

    fn contains_key(&self, local: &u32) -> bool {
        self.get(local).is_some()
    }

    /// Records (or replaces) the outcome of candidate `local` of `candidates` in all.
    fn insert(&mut self, local: u32, candidates: usize, work: Work) {
        if self.slot.len() < candidates {
            self.slot.resize(candidates, Self::NONE);
        }
        let Some(slot) = self.slot.get_mut(local as usize) else {
            return;
        };
        match self.outcomes.get_mut(*slot as usize) {
            Some(existing) => *existing = work,
            None => {
                *slot = self.outcomes.len() as u32;
                self.outcomes.push(work);
            }
        }
    }

    fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// The outcomes, in the order they were first recorded.
    fn values(&self) -> impl Iterator<Item = &Work> {
        self.outcomes.iter()
    }
}

/// How a source is selected.
#[derive(Debug, Clone)]
pub struct SourceSelection {
    pub name: String,
    /// Count keys of the source's filters, listed in the manifest even when nothing was
    /// dropped.
    pub filters: Vec<String>,
    pub take: Option<u64>,
    pub sample: Sample,
    pub weight: Option<f64>,
}

/// The ledger of a whole build.
pub struct Ledger {
    seed: u64,
    mix: Option<MixConfig>,
    selection: Vec<SourceSelection>,
    sources: Vec<SourceLedger>,
    exact: Option<ExactIndex>,
    near: Option<NearDupIndex>,
    total: u32,
}

/// A row the work pass is asked for: its place in its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Wanted {
    pub file: u32,
    pub row: u64,
    /// 0 for the original; j ≥ 1 for copy j.
    pub copy: u32,
}

/// Everything about a selection once it is final.
pub struct Settled {
    /// Per source, in plan order.
    pub stats: Vec<SourceStats>,
    /// Realized mix, per source.
    pub mix: Vec<MixLine>,
    /// `source:file:row` of conversations tokenized and kept but not selected: the shard writer
    /// and `conversations.jsonl` leave them out.
    pub excluded: std::collections::HashSet<String>,
    pub excluded_rows: u64,
    pub excluded_lines: Vec<(u64, u32)>,
    /// Rejects found by the work pass among the rows that count, in source and position order.
    pub rejects: Vec<RowNote>,
    /// Rows dropped after the scan (near-duplicates, contamination, token filters).
    pub filtered: Vec<RowNote>,
    /// `(source, turns, tool calls)` of every conversation in the output (copies included).
    pub conversations: Vec<(usize, u32, u32)>,
    /// `source:file:row` of a kept pre-tokenized row → that of the first row (by file, then
    /// row) of its source sharing its id, for the rows that are not the first: one
    /// conversation for `output.validation`'s split.
    pub groups: std::collections::BTreeMap<String, String>,
}

/// A per-row line for `rejects.jsonl` / `filtered.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub struct RowNote {
    pub source: usize,
    pub file: u32,
    /// The record index (as in `sample_id`).
    pub row: u64,
    /// The row as shown to a user: the 1-based line of a line format, else the record index.
    pub shown: u64,
    pub reason: String,
    pub message: String,
    /// Extra fields (`duplicate_of`, `benchmark`, `item`).
    pub extra: Vec<(&'static str, String)>,
}

/// One source's line of the realized mix.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MixLine {
    #[serde(skip)]
    pub source: String,
    /// Conversations kept (originals and copies).
    pub conversations: u64,
    pub weight: Option<f64>,
    pub take: Option<u64>,
    pub quota: u64,
    pub realized: u64,
    pub rows: u64,
    pub tokens: u64,
    pub supervised_tokens: u64,
    pub copies: u64,
    /// Shares of the whole output: of its conversations, tokens and supervised tokens.
    pub share: Shares,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Shares {
    pub conversations: f64,
    pub tokens: f64,
    pub supervised_tokens: f64,
}

impl MixLine {
    fn rows_kept(&self) -> u64 {
        self.conversations
    }
}

impl Ledger {
    pub fn new(
        seed: u64,
        mix: Option<MixConfig>,
        selection: Vec<SourceSelection>,
        exact: bool,
        near_dup_bands: Option<usize>,
    ) -> Self {
        let sources = selection
            .iter()
            .map(|sel| {
                let mut s = SourceLedger::default();
                for name in &sel.filters {
                    s.stats.filtered.insert(name.clone(), 0);
                }
                s
            })
            .collect();
        Ledger {
            seed,
            mix,
            selection,
            sources,
            exact: exact.then(ExactIndex::default),
            near: near_dup_bands.map(NearDupIndex::new),
            total: 0,
        }
    }

    /// Counts a row read by the scan (call once per row, before its outcome).
    pub fn read(&mut self, source: usize) {
        self.sources[source].stats.read += 1;
    }

    pub fn rejected(&mut self, source: usize, reason: RejectReason) {
        *self.sources[source]
            .stats
            .rejected
            .entry(reason)
            .or_default() += 1;
    }

    pub fn filtered(&mut self, source: usize, filter: &str) {
        *self.sources[source]
            .stats
            .filtered
            .entry(filter.to_owned())
            .or_default() += 1;
    }

    /// Records a candidate in position order; returns the global index of the row it exactly
    /// duplicates, if any (then it is counted as `deduplicated` and goes no further).
    pub fn candidate(
        &mut self,
        source: usize,
        (file, row, shown): (u32, u64, u64),
        file_name: &str,
        scanned: Scanned,
    ) -> Option<u32> {
        let global = self.total;
        if let (Some(index), Some(fp)) = (self.exact.as_mut(), scanned.fingerprint) {
            if let Some(survivor) = index.first_or_insert(fp, global) {
                self.sources[source].stats.deduplicated += 1;
                return Some(survivor);
            }
        }
        self.total += 1;
        let s = &mut self.sources[source];
        if s.candidates.is_empty() {
            s.first = global;
        }
        let local = s.candidates.len() as u32;
        let selection = &self.selection[source];
        let order = match selection.sample {
            Sample::Random => select::sel_key(self.seed, &selection.name, file_name, row),
            Sample::First => u64::from(global),
        };
        s.candidates.push(Candidate {
            file,
            row,
            shown,
            order,
            weight: scanned.weight,
        });
        if let Some(hit) = scanned.hit {
            s.hits.insert(local, hit);
        }
        if let (Some(near), Some(bands)) = (self.near.as_mut(), scanned.bands.as_deref()) {
            near.insert(global, bands);
        }
        None
    }

    /// Source, file and row of a candidate by its global index.
    pub fn position_of(&self, global: u32) -> (usize, u32, u64) {
        for (i, s) in self.sources.iter().enumerate() {
            let local = global.wrapping_sub(s.first) as usize;
            if global >= s.first && local < s.candidates.len() {
                let c = s.candidates[local];
                return (i, c.file, c.row);
            }
        }
        (0, 0, 0)
    }

    /// Settles near-duplicates and contamination once every row has been scanned, and orders
    /// each source's remaining candidates for selection.
    pub fn decide(&mut self) {
        if let Some(near) = self.near.take() {
            let survivors = near.survivors(self.total);
            for s in &mut self.sources {
                for local in 0..s.candidates.len() as u32 {
                    let global = s.first + local;
                    let survivor = survivors[global as usize];
                    if survivor != global {
                        s.dropped.insert(local, Dropped::NearDuplicate(survivor));
                    }
                }
            }
        }
        // The exact index is needed no more.
        self.exact = None;
        for s in &mut self.sources {
            let hits = std::mem::take(&mut s.hits);
            for (local, hit) in hits {
                s.dropped.entry(local).or_insert(Dropped::Contaminated(hit));
            }
            let mut eligible: Vec<u32> = (0..s.candidates.len() as u32)
                .filter(|l| !s.dropped.contains_key(l))
                .collect();
            // Ties (equal keys) fall back to position, so the order is total.
            eligible.sort_by_key(|&l| (s.candidates[l as usize].order, l));
            s.eligible = eligible;
        }
    }

    /// The candidates dropped by `decide`, for `filtered.jsonl`, with the row they duplicate.
    pub fn dropped_notes(&self) -> Vec<RowNote> {
        let mut notes = Vec::new();
        for (source, s) in self.sources.iter().enumerate() {
            for (&local, dropped) in &s.dropped {
                let c = s.candidates[local as usize];
                let (reason, extra) = match dropped {
                    Dropped::Duplicate(of) | Dropped::NearDuplicate(of) => {
                        let (os, of_file, of_row) = self.position_of(*of);
                        let id = SampleId::conversation_of_row(
                            &self.selection[os].name,
                            of_file,
                            of_row,
                        )
                        .to_string();
                        let reason = match dropped {
                            Dropped::Duplicate(_) => "deduplicated",
                            _ => "near_duplicate",
                        };
                        (reason, vec![("duplicate_of", id)])
                    }
                    Dropped::Contaminated(hit) => (
                        "contaminated",
                        vec![
                            ("benchmark", hit.benchmark.clone()),
                            ("item", hit.item.clone()),
                            ("text", hit.text.clone()),
                        ],
                    ),
                };
                notes.push(RowNote {
                    source,
                    file: c.file,
                    row: c.row,
                    shown: c.shown,
                    reason: reason.to_owned(),
                    message: String::new(),
                    extra,
                });
            }
        }
        notes
    }

    /// Queues up to `rows` more eligible candidates of `source`, in selection order, for the
    /// work pass; returns them sorted by position (the order the pass reads them in).
    pub fn extend(&mut self, source: usize, rows: usize) -> Vec<Wanted> {
        let s = &mut self.sources[source];
        let end = s.queued.saturating_add(rows).min(s.eligible.len());
        let mut wanted: Vec<Wanted> = s.eligible[s.queued..end]
            .iter()
            .map(|&l| {
                let c = s.candidates[l as usize];
                Wanted {
                    file: c.file,
                    row: c.row,
                    copy: 0,
                }
            })
            .collect();
        s.queued = end;
        wanted.sort_unstable();
        wanted
    }

    /// Eligible rows of `source` not yet queued.
    pub fn remaining(&self, source: usize) -> usize {
        let s = &self.sources[source];
        s.eligible.len() - s.queued
    }

    /// Rows of `source` to queue so that about `rows` more of them are kept, from the share
    /// of tokenized rows kept so far (with a small margin, so one more pass is rarely needed).
    pub fn rows_for(&self, source: usize, rows: usize) -> usize {
        let s = &self.sources[source];
        let tried = s.work.len();
        let kept = s
            .work
            .values()
            .filter(|w| matches!(w, Work::Kept(_)))
            .count();
        let keep_rate = match tried {
            0 => 1.0,
            _ => (kept as f64 / tried as f64).max(0.01),
        };
        if s.lean {
            return (rows as f64 / keep_rate).ceil() as usize;
        }
        ((rows as f64 / keep_rate * 1.05).ceil() as usize).saturating_add(32)
    }

    /// Makes [`Self::rows_for`] queue no fixed slack for `source` (its rows are regenerated).
    pub fn lean(&mut self, source: usize) {
        if let Some(s) = self.sources.get_mut(source) {
            s.lean = true;
        }
    }

    /// Rows of `source` to queue for about `amount` of the mix's target unit: the amount per
    /// kept row measured so far, or before anything is measured about one token per 4 bytes
    /// of input.
    pub fn rows_for_amount(&self, source: usize, amount: u64) -> usize {
        let s = &self.sources[source];
        let unit = self.mix.as_ref().map(|m| m.target);
        let kept: Vec<&KeptWork> = s
            .work
            .values()
            .filter_map(|w| match w {
                Work::Kept(k) => Some(k),
                _ => None,
            })
            .collect();
        let per_row = match unit {
            None | Some(select::MixTarget::Rows) => 1.0,
            _ if !kept.is_empty() => {
                kept.iter().map(|k| amount_of(unit, k)).sum::<u64>() as f64 / kept.len() as f64
            }
            _ => {
                let n = s.candidates.len().max(1) as f64;
                let bytes: f64 = s.candidates.iter().map(|c| f64::from(c.weight)).sum();
                (bytes / n / 4.0).max(1.0)
            }
        };
        self.rows_for(source, (amount as f64 / per_row.max(1.0)).ceil() as usize)
    }

    /// Records the work outcome of a queued row (or of a copy of one).
    pub fn worked(&mut self, source: usize, file: u32, row: u64, copy: u32, work: Work) -> bool {
        let s = &mut self.sources[source];
        let Ok(i) = s
            .candidates
            .binary_search_by_key(&(file, row), |c| (c.file, c.row))
        else {
            return false;
        };
        let local = i as u32;
        if copy == 0 {
            s.work.insert(local, s.candidates.len(), work);
        } else if let Work::Kept(k) = work {
            s.copy_work.insert((local, copy), k);
        }
        true
    }

    /// Runs the allocation over what the work pass has measured so far.
    pub fn allocate(&self) -> Result<Vec<Allocation>, AllocError> {
        // A `take` beyond the rows read is a mistake, not a cap (with a mix, the allocation's
        // shortfall rules say what happens instead).
        if self.mix.is_none() {
            for (sel, s) in self.selection.iter().zip(&self.sources) {
                if let Some(take) = sel.take.filter(|&t| t > s.stats.read) {
                    return Err(AllocError::TakeBeyondSource {
                        source: sel.name.clone(),
                        take,
                        read: s.stats.read,
                    });
                }
            }
        }
        let unit = self.mix.as_ref().map(|m| m.target);
        let known: Vec<(Vec<(u64, String)>, bool)> = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut known = Vec::new();
                let mut complete = true;
                for &l in &s.eligible {
                    match s.work.get(&l) {
                        Some(Work::Kept(k)) => {
                            // Only a mix orders rows by their id: without one, a million
                            // formatted ids would be made for nothing.
                            let id = match self.mix {
                                Some(_) => {
                                    let c = s.candidates[l as usize];
                                    SampleId::conversation_of_row(
                                        &self.selection[i].name,
                                        c.file,
                                        c.row,
                                    )
                                    .to_string()
                                }
                                None => String::new(),
                            };
                            known.push((amount_of(unit, k), id));
                        }
                        Some(_) => {}
                        None => {
                            complete = false;
                            break;
                        }
                    }
                }
                (known, complete)
            })
            .collect();
        let refs: Vec<Vec<(u64, &str)>> = known
            .iter()
            .map(|(k, _)| k.iter().map(|(a, id)| (*a, id.as_str())).collect())
            .collect();
        let supplies: Vec<Supply> = self
            .selection
            .iter()
            .zip(&known)
            .zip(&refs)
            .map(|((sel, (_, complete)), known)| Supply {
                name: &sel.name,
                weight: sel.weight,
                take: sel.take,
                known,
                complete: *complete,
            })
            .collect();
        select::allocate(self.mix.as_ref(), self.seed, &supplies)
    }

    /// The copies an allocation asks for, per source, sorted by position; remembers them.
    pub fn copies(&mut self, allocations: &[Allocation]) -> Vec<Vec<Wanted>> {
        let mut all = Vec::with_capacity(allocations.len());
        for (s, a) in self.sources.iter_mut().zip(allocations) {
            let kept = kept_in_order(s);
            let mut wanted = Vec::new();
            for &(copy, index) in &a.copies {
                let Some(&l) = kept.get(index) else { continue };
                let c = s.candidates[l as usize];
                s.copies.entry(l).or_default().push(copy);
                wanted.push(Wanted {
                    file: c.file,
                    row: c.row,
                    copy,
                });
            }
            wanted.sort_unstable();
            all.push(wanted);
        }
        all
    }

    /// The final accounting, once the allocation is final.
    pub fn settle(&self, allocations: &[Allocation]) -> Settled {
        let unit = self.mix.as_ref().map(|m| m.target);
        let mut settled = Settled {
            stats: Vec::new(),
            mix: Vec::new(),
            excluded: Default::default(),
            excluded_rows: 0,
            excluded_lines: Vec::new(),
            rejects: Vec::new(),
            filtered: Vec::new(),
            conversations: Vec::new(),
            groups: Default::default(),
        };
        for (i, (s, a)) in self.sources.iter().zip(allocations).enumerate() {
            let mut stats = s.stats.clone();
            for dropped in s.dropped.values() {
                match dropped {
                    Dropped::Duplicate(_) => stats.deduplicated += 1,
                    Dropped::NearDuplicate(_) => stats.near_duplicate += 1,
                    Dropped::Contaminated(_) => stats.contaminated += 1,
                }
            }
            // The eligible rows up to the last one selected count with their own outcome;
            // the rest were sampled out (whether or not they were tokenized).
            let mut frontier = s.eligible.len();
            let mut taken = 0usize;
            let complete_and_all = {
                let kept = kept_in_order(s);
                let complete = s.eligible.iter().all(|l| s.work.contains_key(l));
                complete && a.originals == kept.len()
            };
            if !complete_and_all {
                frontier = 0;
                for (pos, l) in s.eligible.iter().enumerate() {
                    if taken == a.originals {
                        break;
                    }
                    if matches!(s.work.get(l), Some(Work::Kept(_))) {
                        taken += 1;
                    }
                    frontier = pos + 1;
                }
            }
            let mut within: Vec<u32> = s.eligible[..frontier].to_vec();
            within.sort_unstable();
            // The kept rows of each id, in (file, row) order.
            let mut by_group: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
            for l in within {
                let c = s.candidates[l as usize];
                match s.work.get(&l) {
                    Some(Work::Kept(k)) => {
                        if let Some(group) = &k.group {
                            by_group.entry(group).or_default().push((c.file, c.row));
                        }
                        stats.kept += 1;
                        add_kept(&mut stats, k, true);
                        settled.conversations.push((i, k.turns, k.tool_calls));
                    }
                    Some(Work::Rejected(r)) => {
                        *stats.rejected.entry(r.reason).or_default() += 1;
                        stats.regenerate += &crate::model::stats::RegenTally::of_reject(r);
                        settled.rejects.push(RowNote {
                            source: i,
                            file: c.file,
                            row: c.row,
                            shown: c.shown,
                            reason: r.reason.code().to_owned(),
                            message: r.message.clone(),
                            extra: Vec::new(),
                        });
                    }
                    Some(Work::Filtered { filter, detail }) => {
                        *stats.filtered.entry(filter.clone()).or_default() += 1;
                        settled.filtered.push(RowNote {
                            source: i,
                            file: c.file,
                            row: c.row,
                            shown: c.shown,
                            reason: filter.clone(),
                            message: detail.clone(),
                            extra: Vec::new(),
                        });
                    }
                    // Cannot happen: every row before the frontier was worked.
                    None => stats.sampled_out += 1,
                }
            }
            let name = &self.selection[i].name;
            for mut rows in by_group.into_values() {
                rows.sort_unstable();
                let first = format!("{name}:{}:{}", rows[0].0, rows[0].1);
                for (file, row) in &rows[1..] {
                    settled
                        .groups
                        .insert(format!("{name}:{file}:{row}"), first.clone());
                }
            }
            for l in &s.eligible[frontier..] {
                stats.sampled_out += 1;
                if let Some(Work::Kept(k)) = s.work.get(l) {
                    let c = s.candidates[*l as usize];
                    settled.excluded.insert(
                        SampleId::conversation_of_row(&self.selection[i].name, c.file, c.row)
                            .to_string(),
                    );
                    settled.excluded_rows += u64::from(k.rows);
                    settled.excluded_lines.push(k.line);
                }
            }
            let mut copies = 0;
            for k in s.copy_work.values() {
                copies += 1;
                add_kept(&mut stats, k, false);
                settled.conversations.push((i, k.turns, k.tool_calls));
            }
            stats.repeated = copies;
            let sel = &self.selection[i];
            settled.mix.push(MixLine {
                source: sel.name.clone(),
                conversations: stats.kept + copies,
                weight: sel.weight,
                take: sel.take,
                quota: a.quota,
                realized: match unit {
                    None | Some(select::MixTarget::Rows) => stats.kept + copies,
                    Some(select::MixTarget::Tokens) => stats.tokens,
                    Some(select::MixTarget::SupervisedTokens) => stats.supervised_tokens,
                },
                rows: stats.rows,
                tokens: stats.tokens,
                supervised_tokens: stats.supervised_tokens,
                copies,
                share: Shares::default(),
            });
            settled.stats.push(stats);
        }
        let total = |f: fn(&MixLine) -> u64| settled.mix.iter().map(f).sum::<u64>().max(1) as f64;
        let (c, t, st) = (
            total(|l| l.rows_kept()),
            total(|l| l.tokens),
            total(|l| l.supervised_tokens),
        );
        for l in &mut settled.mix {
            // Rounded, so the manifest's bytes do not depend on float formatting subtleties.
            let round = |x: f64| (x * 1e6).round() / 1e6;
            l.share = Shares {
                conversations: round(l.rows_kept() as f64 / c),
                tokens: round(l.tokens as f64 / t),
                supervised_tokens: round(l.supervised_tokens as f64 / st),
            };
        }
        settled.excluded_lines.sort_unstable();
        settled
    }
}

/// Local indices of the kept rows of a source in selection order, up to the first row the
/// work pass has not measured (what `allocate` saw as `known`).
fn kept_in_order(s: &SourceLedger) -> Vec<u32> {
    let mut kept = Vec::new();
    for &l in &s.eligible {
        match s.work.get(&l) {
            Some(Work::Kept(_)) => kept.push(l),
            Some(_) => {}
            None => break,
        }
    }
    kept
}

fn amount_of(unit: Option<select::MixTarget>, k: &KeptWork) -> u64 {
    match unit {
        None | Some(select::MixTarget::Rows) => 1,
        Some(select::MixTarget::Tokens) => k.tokens,
        Some(select::MixTarget::SupervisedTokens) => k.supervised_tokens,
    }
}

fn add_kept(stats: &mut SourceStats, k: &KeptWork, original: bool) {
    stats.rows += u64::from(k.rows);
    stats.tokens += k.tokens;
    stats.supervised_tokens += k.supervised_tokens;
    stats.truncated_rows += u64::from(k.truncated_rows);
    stats.mask_boundary_merged += u64::from(k.boundary_merged_rows);
    if original {
        if let Some(regen) = &k.regen {
            stats.regenerate += regen;
        }
        stats.encoder_checked_rows += u64::from(k.encoder_checked);
        stats.renderer_checked_rows += u64::from(k.renderer_checked);
        for r in k.repairs.iter() {
            *stats.repaired.entry(*r).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests;
