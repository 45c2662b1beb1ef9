//! Selection: `take` (an exact seeded random sample, or the first rows) and `mix` (a total in
//! rows, tokens or supervised tokens shared by weight, allocated exactly).
//!
//! Keys are xxh3-64 with the pipeline's seed over length-prefixed fields (each string as its
//! byte length, 8 bytes little-endian, then its bytes; numbers as little-endian bytes), so no
//! two different field lists encode alike:
//! - `sel_key(seed, source, file, row)` = xxh3("select", source, file, row as u64);
//! - `repeat_key(seed, copy, sample_id)` = xxh3("repeat", copy as u32, sample_id).
//!
//! [`allocate`] is a pure function of what is known of each source's surviving rows, asked
//! again with more rows whenever it answers [`AllocError::NeedMore`].

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

fn push_field(buf: &mut Vec<u8>, field: &[u8]) {
    buf.extend_from_slice(&(field.len() as u64).to_le_bytes());
    buf.extend_from_slice(field);
}

/// The selection key of a row: a function of its position only, so it is known before the row
/// is read, and independent of the shuffle key.
pub fn sel_key(seed: u64, source: &str, file: &str, row: u64) -> u64 {
    let mut buf = Vec::with_capacity(48 + source.len() + file.len());
    push_field(&mut buf, b"select");
    push_field(&mut buf, source.as_bytes());
    push_field(&mut buf, file.as_bytes());
    buf.extend_from_slice(&row.to_le_bytes());
    xxh3_64_with_seed(&buf, seed)
}

/// The order key of copy `copy` (≥ 1) of the row `sample_id`.
pub fn repeat_key(seed: u64, copy: u32, sample_id: &str) -> u64 {
    let mut buf = Vec::with_capacity(32 + sample_id.len());
    push_field(&mut buf, b"repeat");
    buf.extend_from_slice(&copy.to_le_bytes());
    push_field(&mut buf, sample_id.as_bytes());
    xxh3_64_with_seed(&buf, seed)
}

/// How a source's `take` chooses its rows.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    /// The rows with the smallest selection keys: a seeded uniform random sample.
    #[default]
    Random,
    /// The first rows in position order.
    First,
}

/// `mix:` in the YAML.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MixConfig {
    pub target: MixTarget,
    pub total: u64,
    #[serde(default)]
    pub shortfall: Shortfall,
    /// Each row may be used up to `1 + max_repeats` times when its source cannot fill its
    /// quota otherwise: copy j (1..=max_repeats) of every row, ordered by `repeat_key`, copy 1
    /// of all rows before copy 2, and copies only after every original.
    #[serde(default)]
    pub max_repeats: Option<u32>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MixTarget {
    Rows,
    Tokens,
    SupervisedTokens,
}

impl MixTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            MixTarget::Rows => "rows",
            MixTarget::Tokens => "tokens",
            MixTarget::SupervisedTokens => "supervised_tokens",
        }
    }
}

/// What a mix does when a source has less than its quota.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Shortfall {
    /// The build fails naming the source, its quota and what it has.
    #[default]
    Fail,
    /// The deficit goes to the other weighted sources by weight, repeatedly.
    Redistribute,
}

/// What is known of one source's surviving rows.
#[derive(Debug, Clone, Copy)]
pub struct Supply<'a> {
    pub name: &'a str,
    /// Its weight in a mix.
    pub weight: Option<f64>,
    /// A fixed row count: served first.
    pub take: Option<u64>,
    /// Rows known to survive every earlier step, in selection order (sel key, or position for
    /// `sample: first`): (amount in the target's unit, sample_id). Amounts are ignored for a
    /// row target and without a mix (a row is 1).
    pub known: &'a [(u64, &'a str)],
    /// `known` is every surviving row of the source (false: more may be asked for).
    pub complete: bool,
}

/// What a source contributes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allocation {
    /// What the source was asked for: in rows for a `take` source or without a mix, else in
    /// the target's unit (its share of the total plus any redistributed deficit).
    pub quota: u64,
    /// How many of `known` (a prefix) are taken.
    pub originals: usize,
    /// Repeats, in use order: (copy j ≥ 1, index into `known`).
    pub copies: Vec<(u32, usize)>,
    /// What was taken, in the quota's unit.
    pub realized: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// The answer depends on rows beyond source `source`'s `known`: call again with more
    /// (`rows` more settle it as far as is known; `usize::MAX`: all of them).
    NeedMore { source: usize, rows: usize },
    /// A source has less than its quota and the mix allows no way around it.
    Shortfall {
        source: String,
        quota: u64,
        available: u64,
    },
    /// Redistribution ran out of sources with rows to give.
    Total {
        total: u64,
        available: u64,
        unit: &'static str,
    },
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::NeedMore { source, rows } => {
                write!(f, "source {source} needs {rows} more known rows")
            }
            AllocError::Shortfall {
                source,
                quota,
                available,
            } => write!(
                f,
                "source `{source}` cannot fill its quota: it needs {quota} and has {available} \
                 after filters and deduplication (set `shortfall: redistribute` or `max_repeats` \
                 in `mix`, lower the total, or add rows)"
            ),
            AllocError::Total {
                total,
                available,
                unit,
            } => write!(
                f,
                "the mix's target is {total} {unit} and its sources have only {available} in \
                 all (after filters, deduplication and any repeats)"
            ),
        }
    }
}

impl std::error::Error for AllocError {}

/// Allocates rows to sources.
///
/// Without a mix each source takes its `take` rows (all of them when fewer survive) or all its
/// rows. With a mix, `take` sources (and sources with neither `take` nor `weight`, which give
/// all their rows) are served first and the rest of the total is shared by weight: quotas are
/// integers by largest remainder (ties by source order), adding up to the rest exactly. A source
/// takes rows in order until its quota is met (for a token target the crossing row included).
/// A source short of its quota uses repeats (`max_repeats`), then gives its deficit to the
/// others (`shortfall: redistribute`), else the allocation fails naming it.
pub fn allocate(
    mix: Option<&MixConfig>,
    seed: u64,
    supplies: &[Supply],
) -> Result<Vec<Allocation>, AllocError> {
    let Some(mix) = mix else {
        return supplies
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = match s.take {
                    Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                    None if s.complete => s.known.len(),
                    None => {
                        return Err(AllocError::NeedMore {
                            source: i,
                            rows: usize::MAX,
                        })
                    }
                };
                if s.known.len() < n && !s.complete {
                    return Err(AllocError::NeedMore {
                        source: i,
                        rows: n - s.known.len(),
                    });
                }
                let originals = n.min(s.known.len());
                Ok(Allocation {
                    quota: s.take.unwrap_or(originals as u64),
                    originals,
                    copies: Vec::new(),
                    realized: originals as u64,
                })
            })
            .collect();
    };
    let mut state: Vec<Source> = supplies
        .iter()
        .enumerate()
        .map(|(i, s)| Source {
            index: i,
            supply: s,
            unit_rows: mix.target == MixTarget::Rows,
            alloc: Allocation::default(),
            next_copy: None,
        })
        .collect();
    let repeats = mix.max_repeats.unwrap_or(0);
    let weight = |s: &Supply| {
        s.weight
            .filter(|w| w.is_finite() && *w > 0.0)
            .unwrap_or(0.0)
    };
    let is_weighted = |s: &Supply| s.take.is_none() && s.weight.is_some();

    // Fixed sources first: `take: n` rows (repeats may fill a short one), or all rows.
    let mut fixed_realized = 0u64;
    for src in state.iter_mut().filter(|s| !is_weighted(s.supply)) {
        match src.supply.take {
            Some(n) => {
                src.alloc.quota = n;
                let short = src.fill_rows(n)?;
                let short = if short > 0 {
                    src.fill_copies_rows(short, seed, repeats)
                } else {
                    0
                };
                if short > 0 && mix.shortfall == Shortfall::Fail {
                    return Err(AllocError::Shortfall {
                        source: src.supply.name.to_string(),
                        quota: n,
                        available: n - short,
                    });
                }
            }
            None => {
                if !src.supply.complete {
                    return Err(AllocError::NeedMore {
                        source: src.index,
                        rows: usize::MAX,
                    });
                }
                src.alloc.originals = src.supply.known.len();
                src.alloc.quota = src.supply.known.len() as u64;
            }
        }
        fixed_realized += src.realized_in_target();
    }

    // The rest of the total, shared by weight.
    let rest = mix.total.saturating_sub(fixed_realized);
    let weighted: Vec<usize> = (0..state.len())
        .filter(|&i| is_weighted(state[i].supply))
        .collect();
    let weights: Vec<f64> = weighted.iter().map(|&i| weight(state[i].supply)).collect();
    let mut deficit = 0u64;
    let mut active: Vec<usize> = Vec::new();
    if rest > 0 {
        if weights.iter().sum::<f64>() <= 0.0 {
            return Err(AllocError::Total {
                total: mix.total,
                available: fixed_realized,
                unit: mix.target.as_str(),
            });
        }
        for (&i, quota) in weighted.iter().zip(largest_remainder(rest, &weights)) {
            let src = &mut state[i];
            src.alloc.quota = quota;
            let short = src.fill(quota, seed, repeats)?;
            if short > 0 {
                if mix.shortfall == Shortfall::Fail {
                    return Err(AllocError::Shortfall {
                        source: src.supply.name.to_string(),
                        quota,
                        available: src.alloc.realized,
                    });
                }
                deficit += short;
            } else {
                active.push(i);
            }
        }
    }
    // Redistribution: every round either meets the deficit or exhausts a source, so it ends
    // within one round per source.
    let mut guard = state.len() + 1;
    while deficit > 0 {
        active.retain(|&i| weight(state[i].supply) > 0.0);
        if active.is_empty() || guard == 0 {
            let available = state.iter().map(|s| s.realized_in_target()).sum();
            return Err(AllocError::Total {
                total: mix.total,
                available,
                unit: mix.target.as_str(),
            });
        }
        guard -= 1;
        let w: Vec<f64> = active.iter().map(|&i| weight(state[i].supply)).collect();
        let extra = largest_remainder(deficit, &w);
        deficit = 0;
        let mut still = Vec::new();
        for (&i, extra) in active.iter().zip(extra) {
            let src = &mut state[i];
            src.alloc.quota += extra;
            let quota = src.alloc.quota;
            let short = src.fill(quota, seed, repeats)?;
            if short > 0 {
                deficit += short;
            } else {
                still.push(i);
            }
        }
        active = still;
    }
    Ok(state.into_iter().map(|s| s.alloc).collect())
}

/// Integer shares of `total` proportional to `weights` (not all zero), adding up to `total`:
/// floors, then one more each to the largest remainders (ties: the earlier source).
pub fn largest_remainder(total: u64, weights: &[f64]) -> Vec<u64> {
    let sum: f64 = weights.iter().sum();
    if weights.is_empty() || sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * (w / sum)).collect();
    let mut shares: Vec<u64> = exact
        .iter()
        .map(|x| (x.floor() as u64).min(total))
        .collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let assigned: u64 = shares.iter().sum();
    if assigned <= total {
        for &i in order.iter().cycle().take((total - assigned) as usize) {
            shares[i] += 1;
        }
    } else {
        // Only from floating-point error: take back from the smallest remainders.
        let mut excess = assigned - total;
        for &i in order.iter().rev().cycle() {
            if excess == 0 {
                break;
            }
            if shares[i] > 0 {
                shares[i] -= 1;
                excess -= 1;
            }
        }
    }
    shares
}

struct Source<'s, 'a> {
    index: usize,
    supply: &'s Supply<'a>,
    /// The target counts rows (amounts are 1).
    unit_rows: bool,
    alloc: Allocation,
    /// The copies of this source in use order, built on first use: (copy, index into known).
    next_copy: Option<(Vec<(u32, usize)>, usize)>,
}

impl Source<'_, '_> {
    fn amount(&self, k: usize) -> u64 {
        if self.unit_rows {
            1
        } else {
            self.supply.known[k].0
        }
    }

    fn realized_in_target(&self) -> u64 {
        let originals: u64 = (0..self.alloc.originals).map(|k| self.amount(k)).sum();
        let copies: u64 = self.alloc.copies.iter().map(|&(_, k)| self.amount(k)).sum();
        originals + copies
    }

    /// Takes originals until `n` rows are taken (a `take`); the rows still missing.
    fn fill_rows(&mut self, n: u64) -> Result<u64, AllocError> {
        let known = self.supply.known.len() as u64;
        if known < n && !self.supply.complete {
            return Err(AllocError::NeedMore {
                source: self.index,
                rows: (n - known) as usize,
            });
        }
        self.alloc.originals = n.min(known) as usize;
        self.alloc.realized = self.alloc.originals as u64;
        Ok(n - self.alloc.realized)
    }

    /// Repeats for a `take` source `short` rows short; the rows still missing.
    fn fill_copies_rows(&mut self, mut short: u64, seed: u64, repeats: u32) -> u64 {
        while short > 0 {
            let Some(k) = self.next_copy(seed, repeats) else {
                break;
            };
            self.alloc.copies.push(k);
            self.alloc.realized += 1;
            short -= 1;
        }
        short
    }

    /// Takes rows (originals, then copies) until `realized` reaches `quota` in the target's
    /// unit, the crossing row included; the amount still missing.
    fn fill(&mut self, quota: u64, seed: u64, repeats: u32) -> Result<u64, AllocError> {
        while self.alloc.realized < quota {
            let k = self.alloc.originals;
            if k < self.supply.known.len() {
                self.alloc.realized += self.amount(k);
                self.alloc.originals += 1;
                continue;
            }
            if !self.supply.complete {
                let missing = quota - self.alloc.realized;
                let rows = if self.unit_rows || k == 0 {
                    missing
                } else {
                    // Rows at the average amount so far, one more for the crossing row.
                    missing.div_ceil((self.alloc.realized / k as u64).max(1)) + 1
                };
                return Err(AllocError::NeedMore {
                    source: self.index,
                    rows: usize::try_from(rows).unwrap_or(usize::MAX),
                });
            }
            let Some(copy) = self.next_copy(seed, repeats) else {
                return Ok(quota - self.alloc.realized);
            };
            self.alloc.copies.push(copy);
            self.alloc.realized += self.amount(copy.1);
        }
        Ok(0)
    }

    /// The next copy to use: copy 1 of every row in `repeat_key` order, then copy 2, ...
    fn next_copy(&mut self, seed: u64, repeats: u32) -> Option<(u32, usize)> {
        let known = self.supply.known;
        let (order, used) = self.next_copy.get_or_insert_with(|| (Vec::new(), 0));
        if *used == order.len() {
            // Build the next copy's order (bounded: at most `repeats` times).
            let copy = order.last().map_or(1, |&(j, _)| j + 1);
            if copy > repeats || known.is_empty() {
                return None;
            }
            let mut keyed: Vec<(u64, usize)> = (0..known.len())
                .map(|k| (repeat_key(seed, copy, known[k].1), k))
                .collect();
            keyed.sort_unstable();
            order.extend(keyed.into_iter().map(|(_, k)| (copy, k)));
        }
        let next = order[*used];
        *used += 1;
        Some(next)
    }
}
