//! `output.validation`: a grouped, seeded train/validation split.
//!
//! The unit is the conversation (`source:file:row`, the stable id every row of it carries in
//! its `sample_id`), so all its rows (`expand` / `turns` rows, `max_repeats` copies) land on
//! one side. Each source gets its share of the validation rows (`fraction` of its rows, or
//! `rows` shared by the sources' rows, largest remainder first), filled with its
//! conversations in the order of a seeded hash of their id, whole conversations until the
//! quota is reached (so a source may give a few rows more). The choice depends only on the
//! kept rows' ids, never on arrival order, threads or parts.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// `output.validation` as written in the YAML: `fraction` or `rows`, and an optional seed
/// (the pipeline's `seed` otherwise).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// How many validation rows are asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    Fraction(f64),
    Rows(u64),
}

impl ValidationConfig {
    /// The target, or why the section is invalid (a plan error).
    pub fn target(&self) -> Result<Target, String> {
        match (self.fraction, self.rows) {
            (Some(f), None) if f > 0.0 && f < 1.0 => Ok(Target::Fraction(f)),
            (Some(f), None) => Err(format!(
                "`output.validation.fraction` must be between 0 and 1, exclusive (it is {f})"
            )),
            (None, Some(n)) if n >= 1 => Ok(Target::Rows(n)),
            (None, Some(_)) => Err("`output.validation.rows` must be at least 1".to_owned()),
            _ => Err("`output.validation` needs exactly one of `fraction` or `rows`".to_owned()),
        }
    }
}

/// The conversation id of a row's `sample_id` (`source:file:row:segment[#copy]`).
pub fn conversation_of(sample_id: &str) -> &str {
    super::SampleId::conversation_text(sample_id)
}

/// Conversation ids that belong to another's group (pre-tokenized rows sharing an id, see
/// `Settled::groups` of the ledger) → that conversation's id.
pub type Groups = BTreeMap<String, String>;

/// The split unit of a row: its conversation, or the first conversation of its group.
pub fn unit_of<'a>(groups: &'a Groups, sample_id: &'a str) -> &'a str {
    let conversation = conversation_of(sample_id);
    groups
        .get(conversation)
        .map_or(conversation, String::as_str)
}

/// The split key of a conversation: xxh3-64 with `seed` over the length-prefixed tag
/// `validation` and the id (the encoding of `curate::select`'s keys).
pub fn conversation_key(seed: u64, conversation: &str) -> u64 {
    let mut buf = Vec::with_capacity(32 + conversation.len());
    for field in [b"validation".as_slice(), conversation.as_bytes()] {
        buf.extend_from_slice(&(field.len() as u64).to_le_bytes());
        buf.extend_from_slice(field);
    }
    xxh3_64_with_seed(&buf, seed)
}

/// Rows and conversations on each side, for one source or all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideCounts {
    pub train_rows: u64,
    pub validation_rows: u64,
    pub train_conversations: u64,
    pub validation_conversations: u64,
}

/// The chosen validation conversations (by [`conversation_key`]) and the counts per source.
#[derive(Debug, Clone)]
pub struct Split {
    pub seed: u64,
    chosen: HashSet<u64>,
    pub by_source: Vec<SideCounts>,
}

impl Split {
    /// Whether the row `sample_id` is a validation row.
    pub fn is_validation(&self, groups: &Groups, sample_id: &str) -> bool {
        self.is_chosen(conversation_key(self.seed, unit_of(groups, sample_id)))
    }

    /// Whether the conversation of split key `key` is a validation conversation.
    pub fn is_chosen(&self, key: u64) -> bool {
        self.chosen.contains(&key)
    }

    pub fn total(&self) -> SideCounts {
        let mut t = SideCounts::default();
        for s in &self.by_source {
            t.train_rows += s.train_rows;
            t.validation_rows += s.validation_rows;
            t.train_conversations += s.train_conversations;
            t.validation_conversations += s.validation_conversations;
        }
        t
    }
}

/// Chooses the validation conversations. `conversations[s]` maps each kept conversation of
/// source `s` (by [`conversation_key`]) to its number of rows.
pub fn choose(
    target: Target,
    seed: u64,
    conversations: &[HashMap<u64, u64>],
) -> Result<Split, String> {
    let rows: Vec<u64> = conversations.iter().map(|c| c.values().sum()).collect();
    let total: u64 = rows.iter().sum();
    let quotas: Vec<u64> = match target {
        Target::Fraction(f) => rows
            .iter()
            .map(|&r| (f * r as f64).round() as u64)
            .collect(),
        Target::Rows(n) if n >= total => {
            return Err(format!(
                "`output.validation.rows: {n}` leaves no training rows: the build kept {total}"
            ))
        }
        Target::Rows(n) => largest_remainder(n, &rows),
    };
    let mut chosen = HashSet::new();
    let mut by_source = Vec::with_capacity(conversations.len());
    for (convs, quota) in conversations.iter().zip(quotas) {
        let mut order: Vec<(u64, u64)> = convs.iter().map(|(&k, &r)| (k, r)).collect();
        order.sort_unstable();
        let mut counts = SideCounts::default();
        for (key, n) in order {
            if counts.validation_rows < quota {
                chosen.insert(key);
                counts.validation_rows += n;
                counts.validation_conversations += 1;
            } else {
                counts.train_rows += n;
                counts.train_conversations += 1;
            }
        }
        by_source.push(counts);
    }
    let split = Split {
        seed,
        chosen,
        by_source,
    };
    let t = split.total();
    if t.validation_rows == 0 {
        return Err(format!(
            "`output.validation` chose no rows: the build kept {total} rows, too few for the fraction asked"
        ));
    }
    if t.train_rows == 0 {
        return Err(format!(
            "`output.validation` leaves no training rows: every one of the {total} rows' conversations went to validation"
        ));
    }
    Ok(split)
}

/// `n` shared in proportion to `weights`, largest remainder first (ties to the earlier).
fn largest_remainder(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let p = u128::from(n) * u128::from(w);
            ((p / total) as u64, p % total)
        })
        .collect();
    let mut shares: Vec<u64> = exact.iter().map(|e| e.0).collect();
    let left = n - shares.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for &i in order.iter().take(left as usize) {
        shares[i] += 1;
    }
    shares
}

/// The `train_data_ratio` whose split `int(rows * ratio)` (speculators' `ArrowDataset`, in
/// double precision) is exactly `train` rows: the shortest decimal that gives it.
pub fn train_data_ratio(train: u64, rows: u64) -> f64 {
    let gives = |r: f64| (rows as f64 * r).floor() as u64 == train;
    let middle = (train as f64 + 0.5) / rows as f64;
    for digits in 1..=17 {
        let scale = 10f64.powi(digits);
        let r = (middle * scale).round() / scale;
        if gives(r) {
            return r;
        }
    }
    middle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_one_of_fraction_or_rows() {
        let parse = |y: &str| serde_yaml_ng::from_str::<ValidationConfig>(y).expect("parses");
        assert_eq!(
            parse("{fraction: 0.05}").target(),
            Ok(Target::Fraction(0.05))
        );
        assert_eq!(parse("{rows: 10, seed: 3}").target(), Ok(Target::Rows(10)));
        assert_eq!(
            parse("{fraction: 1.0}").target(),
            Err("`output.validation.fraction` must be between 0 and 1, exclusive (it is 1)".into())
        );
        assert_eq!(
            parse("{fraction: 0.1, rows: 3}").target(),
            Err("`output.validation` needs exactly one of `fraction` or `rows`".into())
        );
        assert!(serde_yaml_ng::from_str::<ValidationConfig>("{fractoin: 0.1}").is_err());
    }

    #[test]
    fn whole_conversations_fill_each_sources_share() {
        // Source 0: 10 conversations of 3 rows; source 1: 10 of 1 row.
        let convs: Vec<HashMap<u64, u64>> = vec![
            (0..10)
                .map(|i| (conversation_key(7, &format!("a:0:{i}")), 3))
                .collect(),
            (0..10)
                .map(|i| (conversation_key(7, &format!("b:0:{i}")), 1))
                .collect(),
        ];
        let split = choose(Target::Fraction(0.2), 7, &convs).expect("split");
        // 20% of 30 rows = 6 = two conversations; 20% of 10 = 2.
        assert_eq!(
            split.by_source,
            vec![
                SideCounts {
                    train_rows: 24,
                    validation_rows: 6,
                    train_conversations: 8,
                    validation_conversations: 2
                },
                SideCounts {
                    train_rows: 8,
                    validation_rows: 2,
                    train_conversations: 8,
                    validation_conversations: 2
                }
            ]
        );
        // 5 rows shared 30:10 → 3.75 and 1.25 → 4 and 1; whole conversations: 6 and 1.
        let split = choose(Target::Rows(5), 7, &convs).expect("split");
        assert_eq!(
            (
                split.by_source[0].validation_rows,
                split.by_source[1].validation_rows
            ),
            (6, 1)
        );
        assert!(choose(Target::Rows(40), 7, &convs)
            .expect_err("too many")
            .contains("leaves no training rows: the build kept 40"));
        assert!(choose(Target::Fraction(0.01), 7, &convs)
            .expect_err("too few")
            .contains("chose no rows"));
        // Every row of a conversation goes one way, copies and segments alike.
        let none = Groups::new();
        let one = split.is_validation(&none, "a:0:3:0");
        assert_eq!(split.is_validation(&none, "a:0:3:1#2"), one);
        // A row grouped with another conversation goes its way.
        let groups = Groups::from([("a:0:9".to_owned(), "a:0:3".to_owned())]);
        assert_eq!(split.is_validation(&groups, "a:0:9:0"), one);
    }

    #[test]
    fn the_ratio_gives_the_exact_split() {
        assert_eq!(train_data_ratio(207, 230), 0.9);
        for (train, rows) in [(1, 3), (2, 3), (999_999, 1_000_000), (12_345, 99_991)] {
            let r = train_data_ratio(train, rows);
            assert_eq!((rows as f64 * r).floor() as u64, train, "{train}/{rows}");
        }
    }
}
