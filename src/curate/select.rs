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
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    /// The rows with the smallest selection keys: a seeded uniform random sample.
    #[default]
    Random,
    /// The first rows in position order.
    First,
}

/// `mix:` in the YAML.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, serde::Serialize)]
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

/// Why a `mix:` section or a source's `weight` is invalid (a plan error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MixConfigError {
    #[error("mix: `total` must be at least 1")]
    NoTotal,
    #[error("mix: `max_repeats` must be at least 1 (leave it out for none)")]
    NoRepeats,
    #[error("source `{name}`: `weight` must be a positive number, not {weight}")]
    Weight { name: String, weight: f64 },
}

impl MixConfig {
    /// Checks the numbers; the message names the field.
    pub fn check(&self) -> Result<(), MixConfigError> {
        if self.total == 0 {
            return Err(MixConfigError::NoTotal);
        }
        if self.max_repeats == Some(0) {
            return Err(MixConfigError::NoRepeats);
        }
        Ok(())
    }

    /// Checks a source's `weight`.
    pub fn check_weight(source: &str, weight: f64) -> Result<(), MixConfigError> {
        if weight.is_finite() && weight > 0.0 {
            Ok(())
        } else {
            Err(MixConfigError::Weight {
                name: source.to_owned(),
                weight,
            })
        }
    }
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
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
        /// Its quota: rows for a `take` source, else in the target's unit.
        quota: u64,
        /// The quota's unit (`rows` for a `take`).
        unit: &'static str,
        /// A `take` source (its fix is a smaller `take`, not a smaller total).
        take: bool,
        /// Distinct rows it has after filters and deduplication.
        rows: u64,
        /// What those rows give, in the quota's unit.
        amount: u64,
        /// `max_repeats` (0: none).
        repeats: u32,
        /// What the rows and every allowed copy give, in the quota's unit.
        available: u64,
    },
    /// The sources served first (`take`s, and sources with neither `take` nor `weight`) give
    /// more than the mix's total, or all of it while weighted sources wait for a share.
    Served {
        total: u64,
        served: u64,
        unit: &'static str,
        /// The sources served first, as `` `name`: `take: n` `` or `` `name`: all its rows ``.
        sources: Vec<String>,
        /// The weighted sources, left with nothing.
        weighted: Vec<String>,
    },
    /// Without a mix, a `take` larger than the rows its source's files hold (a mistake: the
    /// build would quietly give fewer).
    TakeBeyondSource {
        source: String,
        take: u64,
        read: u64,
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
                unit,
                take,
                rows,
                amount,
                repeats,
                available,
            } => {
                write!(
                    f,
                    "source `{source}` cannot fill its quota: it needs {quota} {unit} and has \
                     {rows} rows"
                )?;
                if *unit != "rows" {
                    write!(f, " ({amount} {unit})")?;
                }
                write!(f, " after filters and deduplication")?;
                if *repeats > 0 {
                    write!(f, ", {available} {unit} with `max_repeats: {repeats}`")?;
                }
                let repeat = if *repeats > 0 {
                    "raise `max_repeats`"
                } else {
                    "set `max_repeats`"
                };
                if *take {
                    write!(
                        f,
                        " (lower its `take`, {repeat} or `shortfall: redistribute` in `mix`, or \
                         add rows)"
                    )
                } else {
                    write!(
                        f,
                        " (set `shortfall: redistribute` or {} in `mix`, lower the total, or \
                         add rows)",
                        if *repeats > 0 {
                            "a higher `max_repeats`"
                        } else {
                            "`max_repeats`"
                        }
                    )
                }
            }
            AllocError::Served {
                total,
                served,
                unit,
                sources,
                weighted,
            } => {
                write!(
                    f,
                    "the sources served first in the mix ({}) give {served} {unit}",
                    sources.join("; ")
                )?;
                if served > total {
                    write!(
                        f,
                        ", more than its total of {total} {unit}: lower their `take`s, raise \
                         `total`, or give them a `weight` instead"
                    )
                } else {
                    write!(
                        f,
                        ", the mix's whole total, leaving nothing for the weighted sources \
                         ({}): lower the `take`s or raise `total`",
                        weighted.join(", ")
                    )
                }
            }
            AllocError::TakeBeyondSource { source, take, read } => write!(
                f,
                "source `{source}`: `take: {take}` but its files hold only {read} rows (lower \
                 `take` to at most {read}, or write `take: all`)"
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
                    let rows = src.supply.known.len() as u64;
                    return Err(AllocError::Shortfall {
                        source: src.supply.name.to_string(),
                        quota: n,
                        unit: "rows",
                        take: true,
                        rows,
                        amount: rows,
                        repeats,
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

    let weighted: Vec<usize> = (0..state.len())
        .filter(|&i| is_weighted(state[i].supply))
        .collect();
    // A mix never gives more than its total, nor silently nothing to its weighted sources.
    if fixed_realized > mix.total || (fixed_realized == mix.total && !weighted.is_empty()) {
        return Err(AllocError::Served {
            total: mix.total,
            served: fixed_realized,
            unit: mix.target.as_str(),
            sources: supplies
                .iter()
                .filter(|s| !is_weighted(s))
                .map(|s| match s.take {
                    Some(n) => format!("`{}`: `take: {n}`", s.name),
                    None => format!("`{}`: all its rows", s.name),
                })
                .collect(),
            weighted: weighted
                .iter()
                .map(|&i| format!("`{}`", supplies[i].name))
                .collect(),
        });
    }
    // The rest of the total, shared by weight.
    let rest = mix.total - fixed_realized;
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
                        unit: mix.target.as_str(),
                        take: false,
                        rows: src.supply.known.len() as u64,
                        amount: (0..src.supply.known.len()).map(|k| src.amount(k)).sum(),
                        repeats,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` rows of `amount` each, ids `s:f:i:0`.
    fn rows(prefix: &str, amounts: &[u64]) -> Vec<(u64, String)> {
        amounts
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, format!("{prefix}:f:{i}:0")))
            .collect()
    }

    fn view(rows: &[(u64, String)]) -> Vec<(u64, &str)> {
        rows.iter().map(|(a, s)| (*a, s.as_str())).collect()
    }

    fn supply<'a>(
        name: &'a str,
        weight: Option<f64>,
        take: Option<u64>,
        known: &'a [(u64, &'a str)],
    ) -> Supply<'a> {
        Supply {
            name,
            weight,
            take,
            known,
            complete: true,
        }
    }

    fn mix(target: MixTarget, total: u64) -> MixConfig {
        MixConfig {
            target,
            total,
            shortfall: Shortfall::Fail,
            max_repeats: None,
        }
    }

    fn originals(a: &[Allocation]) -> Vec<usize> {
        a.iter().map(|a| a.originals).collect()
    }

    #[test]
    fn keys_are_stable_and_unambiguous() {
        // Independent values: Python `xxhash.xxh3_64_intdigest(bytes, seed)` over the same
        // length-prefixed encoding (tests/oracle/select_keys.py).
        assert_eq!(sel_key(0, "src", "a.jsonl", 7), SEL_GOLDEN);
        assert_eq!(repeat_key(42, 2, "src:a.jsonl:7:0"), REPEAT_GOLDEN);
        assert_ne!(sel_key(0, "ab", "c", 0), sel_key(0, "a", "bc", 0));
        assert_ne!(sel_key(0, "a", "b", 1), sel_key(1, "a", "b", 1));
        assert_ne!(sel_key(0, "a", "b", 1), sel_key(0, "a", "b", 2));
        assert_ne!(repeat_key(0, 1, "x"), repeat_key(0, 2, "x"));
    }

    const SEL_GOLDEN: u64 = 9_389_147_417_266_797_520;
    const REPEAT_GOLDEN: u64 = 1_699_266_550_756_252_866;

    #[test]
    fn mix_yaml_and_checks() {
        let m: MixConfig = serde_yaml_ng::from_str(
            "{target: supervised_tokens, total: 1000000, shortfall: redistribute, max_repeats: 2}",
        )
        .expect("parses");
        assert_eq!(
            m,
            MixConfig {
                target: MixTarget::SupervisedTokens,
                total: 1_000_000,
                shortfall: Shortfall::Redistribute,
                max_repeats: Some(2)
            }
        );
        assert_eq!(m.check(), Ok(()));
        let m: MixConfig = serde_yaml_ng::from_str("{target: rows, total: 0}").expect("parses");
        assert_eq!(m.shortfall, Shortfall::Fail);
        assert_eq!(
            m.check().map_err(|e| e.to_string()),
            Err("mix: `total` must be at least 1".into())
        );
        assert!(serde_yaml_ng::from_str::<MixConfig>("{target: words, total: 3}").is_err());
        assert!(serde_yaml_ng::from_str::<MixConfig>("{target: rows, totl: 3}").is_err());
        assert_eq!(MixConfig::check_weight("a", 0.5), Ok(()));
        assert_eq!(
            MixConfig::check_weight("a", 0.0).map_err(|e| e.to_string()),
            Err("source `a`: `weight` must be a positive number, not 0".into())
        );
        assert!(MixConfig::check_weight("a", f64::NAN).is_err());
        let s: Sample = serde_yaml_ng::from_str("first").expect("sample");
        assert_eq!(s, Sample::First);
    }

    #[test]
    fn without_a_mix_take_is_a_cap() {
        let a = rows("a", &[1; 5]);
        let a = view(&a);
        let got = allocate(
            None,
            0,
            &[supply("a", None, Some(3), &a), supply("b", None, None, &a)],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [3, 5]);
        assert_eq!((got[0].quota, got[0].realized), (3, 3));
        let got = allocate(None, 0, &[supply("a", None, Some(9), &a)]).expect("allocates");
        assert_eq!((got[0].quota, got[0].originals, got[0].realized), (9, 5, 5));
        // Incomplete supplies ask for more.
        let partial = Supply {
            complete: false,
            ..supply("a", None, Some(9), &a)
        };
        assert_eq!(
            allocate(None, 0, &[partial]),
            Err(AllocError::NeedMore { source: 0, rows: 4 })
        );
        let partial = Supply {
            complete: false,
            ..supply("a", None, Some(5), &a)
        };
        assert_eq!(
            originals(&allocate(None, 0, &[partial]).expect("enough")),
            [5]
        );
        let all = Supply {
            complete: false,
            ..supply("a", None, None, &a)
        };
        assert_eq!(
            allocate(None, 0, &[all]),
            Err(AllocError::NeedMore {
                source: 0,
                rows: usize::MAX
            })
        );
    }

    #[test]
    fn largest_remainder_adds_up_with_ties_by_order() {
        assert_eq!(largest_remainder(10, &[1.0, 1.0, 1.0]), [4, 3, 3]);
        assert_eq!(largest_remainder(11, &[1.0, 1.0, 1.0]), [4, 4, 3]);
        assert_eq!(largest_remainder(7, &[0.5, 0.3, 0.2]), [4, 2, 1]);
        assert_eq!(largest_remainder(0, &[1.0, 2.0]), [0, 0]);
        assert_eq!(
            largest_remainder(913_786, &[0.3, 0.3, 0.4]),
            [274_136, 274_136, 365_514]
        );
        for total in [1u64, 2, 99, 1000, 913_786, 10_000_000_019] {
            for w in [
                &[1.0, 2.0, 3.0][..],
                &[0.1, 0.7, 0.2, 1e-9],
                &[1.0 / 3.0; 7],
            ] {
                let s = largest_remainder(total, w);
                assert_eq!(s.iter().sum::<u64>(), total, "{total} {w:?}");
            }
        }
    }

    #[test]
    fn a_row_mix_meets_its_total_exactly() {
        let a = rows("a", &[1; 100]);
        let b = rows("b", &[1; 100]);
        let c = rows("c", &[1; 100]);
        let (a, b, c) = (view(&a), view(&b), view(&c));
        let m = mix(MixTarget::Rows, 10);
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(1.0), None, &a),
                supply("b", Some(1.0), None, &b),
                supply("c", Some(1.0), None, &c),
            ],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [4, 3, 3]);
        assert_eq!(got.iter().map(|a| a.quota).collect::<Vec<_>>(), [4, 3, 3]);
        // A take is served first; the rest is shared by weight.
        let m = mix(MixTarget::Rows, 20);
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(3.0), None, &a),
                supply("b", None, Some(5), &b),
                supply("c", Some(1.0), None, &c),
            ],
        )
        .expect("allocates");
        // 15 shared 3:1 → 11.25, 3.75 → 11, 4 (largest remainder to c).
        assert_eq!(originals(&got), [11, 5, 4]);
        assert_eq!(got.iter().map(|a| a.realized).sum::<u64>(), 20);
    }

    #[test]
    fn a_token_mix_takes_the_crossing_row() {
        let a = rows("a", &[10, 10, 10, 10, 10]);
        let b = rows("b", &[7, 7, 7, 7, 7, 7]);
        let (a, b) = (view(&a), view(&b));
        let m = mix(MixTarget::Tokens, 50);
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(1.0), None, &a),
                supply("b", Some(1.0), None, &b),
            ],
        )
        .expect("allocates");
        // Quotas 25 and 25: a takes 3 rows (30, crossing at the third), b 4 rows (28).
        assert_eq!(originals(&got), [3, 4]);
        assert_eq!(
            got.iter()
                .map(|a| (a.quota, a.realized))
                .collect::<Vec<_>>(),
            [(25, 30), (25, 28)]
        );
        // A quota met exactly stops there.
        let m = mix(MixTarget::Tokens, 40);
        let got = allocate(Some(&m), 0, &[supply("a", Some(1.0), None, &a)]).expect("ok");
        assert_eq!((got[0].originals, got[0].realized), (4, 40));
        // Incomplete: asks for about the rows still needed, at the average so far.
        let partial = Supply {
            complete: false,
            ..supply("a", Some(1.0), None, &a[..2])
        };
        let m = mix(MixTarget::Tokens, 45);
        assert_eq!(
            allocate(Some(&m), 0, &[partial]),
            Err(AllocError::NeedMore { source: 0, rows: 4 })
        );
    }

    #[test]
    fn a_shortfall_fails_naming_the_source() {
        let a = rows("a", &[1; 10]);
        let b = rows("b", &[1; 3]);
        let (a, b) = (view(&a), view(&b));
        let m = mix(MixTarget::Rows, 10);
        let supplies = [
            supply("big", Some(1.0), None, &a),
            supply("small", Some(1.0), None, &b),
        ];
        let err = allocate(Some(&m), 0, &supplies).expect_err("short");
        assert_eq!(
            err,
            AllocError::Shortfall {
                source: "small".into(),
                quota: 5,
                unit: "rows",
                take: false,
                rows: 3,
                amount: 3,
                repeats: 0,
                available: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "source `small` cannot fill its quota: it needs 5 rows and has 3 rows after filters \
             and deduplication (set `shortfall: redistribute` or `max_repeats` in `mix`, lower \
             the total, or add rows)"
        );
        // A short take fails the same way.
        let supplies = [
            supply("big", Some(1.0), None, &a),
            supply("small", None, Some(4), &b),
        ];
        let err = allocate(Some(&m), 0, &supplies).expect_err("short");
        assert_eq!(
            err,
            AllocError::Shortfall {
                source: "small".into(),
                quota: 4,
                unit: "rows",
                take: true,
                rows: 3,
                amount: 3,
                repeats: 0,
                available: 3
            }
        );
        // Its fix is a smaller `take`, not a smaller total.
        assert_eq!(
            err.to_string(),
            "source `small` cannot fill its quota: it needs 4 rows and has 3 rows after filters \
             and deduplication (lower its `take`, set `max_repeats` or `shortfall: \
             redistribute` in `mix`, or add rows)"
        );
    }

    #[test]
    fn a_shortfall_with_repeats_says_what_the_source_has() {
        // 50 rows, each usable twice: the message names the 50 rows, then the 100 with copies.
        let a = rows("a", &[1; 200]);
        let b = rows("b", &[3; 50]);
        let (a, b) = (view(&a), view(&b));
        let m = MixConfig {
            max_repeats: Some(1),
            ..mix(MixTarget::Rows, 150)
        };
        let err =
            allocate(Some(&m), 0, &[supply("small", None, Some(150), &b)]).expect_err("short");
        assert_eq!(
            err.to_string(),
            "source `small` cannot fill its quota: it needs 150 rows and has 50 rows after \
             filters and deduplication, 100 rows with `max_repeats: 1` (lower its `take`, raise \
             `max_repeats` or `shortfall: redistribute` in `mix`, or add rows)"
        );
        // A token quota: rows, then what they give in tokens.
        let m = MixConfig {
            max_repeats: Some(1),
            ..mix(MixTarget::Tokens, 800)
        };
        let supplies = [
            supply("big", Some(1.0), None, &a),
            supply("small", Some(1.0), None, &b),
        ];
        let err = allocate(Some(&m), 0, &supplies).expect_err("short");
        assert_eq!(
            err.to_string(),
            "source `small` cannot fill its quota: it needs 400 tokens and has 50 rows (150 \
             tokens) after filters and deduplication, 300 tokens with `max_repeats: 1` (set \
             `shortfall: redistribute` or a higher `max_repeats` in `mix`, lower the total, or \
             add rows)"
        );
    }

    #[test]
    fn sources_served_first_never_exceed_the_total_nor_starve_the_weighted() {
        let a = rows("a", &[1; 600]);
        let b = rows("b", &[1; 600]);
        let (a, b) = (view(&a), view(&b));
        // `take: 500` against `total: 300`: once 500 rows and a weighted source with quota 0.
        let m = mix(MixTarget::Rows, 300);
        let err = allocate(
            Some(&m),
            0,
            &[
                supply("big", None, Some(500), &a),
                supply("w", Some(1.0), None, &b),
            ],
        )
        .expect_err("over the total");
        assert_eq!(
            err.to_string(),
            "the sources served first in the mix (`big`: `take: 500`) give 500 rows, more than \
             its total of 300 rows: lower their `take`s, raise `total`, or give them a `weight` \
             instead"
        );
        // All of the total, with a weighted source waiting.
        let err = allocate(
            Some(&m),
            0,
            &[
                supply("t", None, Some(300), &a),
                supply("w", Some(1.0), None, &b),
            ],
        )
        .expect_err("nothing left");
        assert_eq!(
            err.to_string(),
            "the sources served first in the mix (`t`: `take: 300`) give 300 rows, the mix's \
             whole total, leaving nothing for the weighted sources (`w`): lower the `take`s or \
             raise `total`"
        );
        // A source with neither `take` nor `weight` gives all its rows: too many is an error.
        let err = allocate(Some(&m), 0, &[supply("all", None, None, &a)]).expect_err("600 rows");
        assert!(
            err.to_string()
                .contains("(`all`: all its rows) give 600 rows"),
            "{err}"
        );
        // Exactly the total with nobody waiting is fine.
        let got = allocate(Some(&m), 0, &[supply("t", None, Some(300), &a)]).expect("fits");
        assert_eq!(originals(&got), [300]);
    }

    #[test]
    fn redistribute_moves_the_deficit_by_weight() {
        let a = rows("a", &[1; 100]);
        let b = rows("b", &[1; 100]);
        let c = rows("c", &[1; 2]);
        let d = rows("d", &[1; 5]);
        let (a, b, c, d) = (view(&a), view(&b), view(&c), view(&d));
        let m = MixConfig {
            shortfall: Shortfall::Redistribute,
            ..mix(MixTarget::Rows, 40)
        };
        // Quotas 10 each; c gives 8 and d 5 away; round 1 shares 13 between a and b (by
        // weight 1:1 → 7, 6) and they have enough.
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(1.0), None, &a),
                supply("b", Some(1.0), None, &b),
                supply("c", Some(1.0), None, &c),
                supply("d", Some(1.0), None, &d),
            ],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [17, 16, 2, 5]);
        assert_eq!(
            got.iter().map(|a| a.quota).collect::<Vec<_>>(),
            [17, 16, 10, 10]
        );
        assert_eq!(got.iter().map(|a| a.realized).sum::<u64>(), 40);
        // Repeatedly: b runs out in the second round too, a takes the rest.
        let b6 = rows("b", &[1; 6]);
        let b6 = view(&b6);
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(1.0), None, &a),
                supply("b", Some(1.0), None, &b6),
                supply("c", Some(1.0), None, &c),
                supply("d", Some(1.0), None, &d),
            ],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [27, 6, 2, 5]);
        // Nobody has more: the total cannot be met.
        let m = MixConfig { total: 1000, ..m };
        assert_eq!(
            allocate(
                Some(&m),
                0,
                &[
                    supply("c", Some(1.0), None, &c),
                    supply("d", Some(2.0), None, &d)
                ]
            ),
            Err(AllocError::Total {
                total: 1000,
                available: 7,
                unit: "rows"
            })
        );
        // A short take's rows go to the weighted sources.
        let m = MixConfig { total: 20, ..m };
        let got = allocate(
            Some(&m),
            0,
            &[
                supply("a", Some(1.0), None, &a),
                supply("c", None, Some(5), &c),
            ],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [18, 2]);
    }

    #[test]
    fn repeats_come_after_every_original_in_key_order() {
        let a = rows("a", &[1; 100]);
        let b = rows("b", &[1; 4]);
        let (a, b) = (view(&a), view(&b));
        let m = MixConfig {
            max_repeats: Some(2),
            ..mix(MixTarget::Rows, 22)
        };
        let got = allocate(
            Some(&m),
            7,
            &[
                supply("a", Some(1.0), None, &a),
                supply("b", Some(1.0), None, &b),
            ],
        )
        .expect("allocates");
        assert_eq!(originals(&got), [11, 4]);
        // b needs 11: 4 originals, copy 1 of all 4 rows, then 3 of copy 2, each copy in
        // repeat-key order.
        let order = |copy: u32| {
            let mut k: Vec<(u64, usize)> =
                (0..4).map(|i| (repeat_key(7, copy, b[i].1), i)).collect();
            k.sort();
            k.into_iter().map(|(_, i)| (copy, i)).collect::<Vec<_>>()
        };
        let mut expected = order(1);
        expected.extend(order(2).into_iter().take(3));
        assert_eq!(got[1].copies, expected);
        assert_eq!(got[1].realized, 11);
        // Past max_repeats it is a shortfall again.
        let m = MixConfig {
            max_repeats: Some(1),
            ..m
        };
        assert_eq!(
            allocate(
                Some(&m),
                7,
                &[
                    supply("a", Some(1.0), None, &a),
                    supply("b", Some(1.0), None, &b)
                ]
            ),
            Err(AllocError::Shortfall {
                source: "b".into(),
                quota: 11,
                unit: "rows",
                take: false,
                rows: 4,
                amount: 4,
                repeats: 1,
                available: 8
            })
        );
        // A take source repeats too.
        let m = MixConfig {
            max_repeats: Some(1),
            ..mix(MixTarget::Rows, 6)
        };
        let got = allocate(Some(&m), 7, &[supply("b", None, Some(6), &b)]).expect("ok");
        assert_eq!(
            (got[0].originals, got[0].copies.len(), got[0].realized),
            (4, 2, 6)
        );
        assert_eq!(got[0].copies, order(1)[..2]);
    }

    #[test]
    fn need_more_when_the_answer_depends_on_unknown_rows() {
        let a = rows("a", &[1; 3]);
        let a = view(&a);
        let m = mix(MixTarget::Rows, 8);
        let partial = Supply {
            complete: false,
            ..supply("a", Some(1.0), None, &a)
        };
        let full = rows("b", &[1; 10]);
        let full = view(&full);
        assert_eq!(
            allocate(Some(&m), 0, &[supply("b", Some(1.0), None, &full), partial]),
            Err(AllocError::NeedMore { source: 1, rows: 1 })
        );
        // Enough known: no need for the rest.
        let m = mix(MixTarget::Rows, 4);
        let got =
            allocate(Some(&m), 0, &[supply("b", Some(1.0), None, &full), partial]).expect("enough");
        assert_eq!(originals(&got), [2, 2]);
    }

    #[test]
    fn a_random_take_has_no_order_bias() {
        // A sorted source of 10,000 rows; take 1,000 by selection key: the mean position is
        // within 3 sigma of the middle (sigma of a mean of 1,000 draws without replacement).
        let seed = 20_260_501;
        for (source, file) in [("openorca", "train.parquet"), ("code", "a.jsonl")] {
            let mut keyed: Vec<(u64, u64)> = (0..10_000u64)
                .map(|r| (sel_key(seed, source, file, r), r))
                .collect();
            keyed.sort_unstable();
            let ids: Vec<String> = keyed.iter().map(|(_, r)| r.to_string()).collect();
            let known: Vec<(u64, &str)> = ids.iter().map(|s| (1, s.as_str())).collect();
            let got = allocate(None, seed, &[supply(source, None, Some(1000), &known)])
                .expect("allocates");
            let taken = &keyed[..got[0].originals];
            let mean = taken.iter().map(|&(_, r)| r as f64).sum::<f64>() / 1000.0;
            let sd = 10_000f64 / 12f64.sqrt() / 1000f64.sqrt() * (9000.0f64 / 9999.0).sqrt();
            assert!(
                (mean - 4999.5).abs() < 3.0 * sd,
                "{source}: mean {mean}, sd {sd}"
            );
            // And no file-order clustering: every tenth of the file is represented.
            let mut deciles = [0u32; 10];
            for &(_, r) in taken {
                deciles[(r / 1000) as usize] += 1;
            }
            assert!(
                deciles.iter().all(|&d| (60..=140).contains(&d)),
                "{deciles:?}"
            );
        }
    }
}
