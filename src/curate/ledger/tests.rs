//! The ledger's calling contract, as the engine (`engine::run`) follows it:
//!
//! 1. scan, per source in plan order and per row in position order: [`Ledger::read`], then one
//!    of [`Ledger::rejected`], [`Ledger::filtered`] or [`Ledger::candidate`];
//! 2. [`Ledger::decide`] once, after the last row of the last source;
//! 3. work rounds: [`Ledger::extend`] (sized with [`Ledger::rows_for`] /
//!    [`Ledger::rows_for_amount`] / [`Ledger::remaining`]), a [`Ledger::worked`] per row it
//!    returned, then [`Ledger::allocate`] until it stops asking for more;
//! 4. [`Ledger::copies`] of the final allocation, a [`Ledger::worked`] per copy;
//! 5. [`Ledger::settle`].
//!
//! A resumed build makes the same calls with the records its journal kept (the scan's
//! [`Scanned`] and the work's [`Work`] through the frame codec), so it settles the same way as
//! long as those records carry everything the ledger reads and the ledger depends on nothing
//! but its calls. These tests hold that, with exact numbers, and show what an out-of-order call
//! does.

use super::*;
use crate::curate::select::{MixTarget, Shortfall};
use crate::reject::RejectReason;

/// One scan event of a row, as the journal records it.
#[derive(Clone)]
enum Scan {
    Rejected(RejectReason),
    Filtered(&'static str),
    /// Fingerprint byte, near-duplicate bands, benchmark hit, weight.
    Candidate(u8, Option<[u64; 2]>, Option<&'static str>, u32),
}

fn scanned(fp: u8, bands: Option<[u64; 2]>, hit: Option<&str>, weight: u32) -> Scanned {
    Scanned {
        fingerprint: Some([fp; 16]),
        bands: bands.map(|b| b.to_vec().into_boxed_slice()),
        hit: hit.map(|item| Hit {
            benchmark: "humaneval".to_owned(),
            item: item.to_owned(),
            text: format!("the text {item} shares"),
        }),
        weight,
    }
}

fn kept(tokens: u64, supervised: u64, line: u64) -> Work {
    Work::Kept(KeptWork {
        rows: 1,
        tokens,
        supervised_tokens: supervised,
        turns: 2,
        tool_calls: (tokens % 2) as u32,
        line: (line, 10),
        ..KeptWork::default()
    })
}

/// Two sources of one file each. `a` (take 3, first rows): a reject, a filtered row, an exact
/// duplicate, a near-duplicate, a contaminated row and six clean candidates; `b` (no take):
/// three candidates, the last one a duplicate of `a`'s first.
fn scans() -> Vec<Vec<Scan>> {
    use Scan::*;
    vec![
        vec![
            Candidate(1, Some([10, 11]), None, 40),      // row 0: global 0
            Rejected(RejectReason::MissingField),        // row 1
            Candidate(1, None, None, 40),                // row 2: duplicate of global 0
            Candidate(2, Some([10, 99]), None, 40),      // row 3: global 1, near-duplicate of 0
            Filtered("short"),                           // row 4
            Candidate(3, None, Some("HumanEval/7"), 40), // row 5: global 2, contaminated
            Candidate(4, None, None, 40),                // row 6: global 3
            Candidate(5, None, None, 40),                // row 7: global 4
            Candidate(6, None, None, 40),                // row 8: global 5
            Candidate(7, None, None, 40),                // row 9: global 6
            Candidate(8, None, None, 40),                // row 10: global 7
        ],
        vec![
            Candidate(20, None, None, 80), // row 0: global 8
            Candidate(21, None, None, 80), // row 1: global 9
            Candidate(1, None, None, 80),  // row 2: duplicate of a's global 0
        ],
    ]
}

/// What rendering and tokenizing a row gives (its copy is the same conversation).
fn outcome(source: usize, row: u64) -> Work {
    match (source, row) {
        (0, 6) => Work::Filtered {
            filter: "too_long".to_owned(),
            detail: "9000 tokens > 8192".to_owned(),
        },
        (0, 8) => Work::Rejected(Reject::new(RejectReason::Template, "raised: no user query")),
        (s, r) => kept(10 + 10 * s as u64 + r, 4 + r, 100 * s as u64 + r),
    }
}

fn selection(take: Option<u64>, weights: [Option<f64>; 2]) -> Vec<SourceSelection> {
    vec![
        SourceSelection {
            name: "a".to_owned(),
            filters: vec!["short".to_owned(), "too_long".to_owned()],
            take,
            sample: Sample::First,
            weight: weights[0],
        },
        SourceSelection {
            name: "b".to_owned(),
            filters: Vec::new(),
            take: None,
            sample: Sample::First,
            weight: weights[1],
        },
    ]
}

/// The records through the journal's codec and back, as a resume reads them.
fn through_journal<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    let bytes = crate::frames::to_vec(value).expect("encode");
    let len = bytes.len() as u64;
    crate::frames::FrameReader::new(bytes.as_slice(), len)
        .read()
        .expect("decode")
        .expect("one frame")
}

/// How a build feeds the ledger: `replayed` sends every record through the journal's codec,
/// `reverse` hands the outcomes of each work round over in reverse order (as jobs that finish
/// in another order would).
#[derive(Clone, Copy)]
struct Feed {
    replayed: bool,
    reverse: bool,
}

fn scan(ledger: &mut Ledger, feed: Feed) -> Vec<Option<u32>> {
    let mut duplicates = Vec::new();
    for (source, rows) in scans().into_iter().enumerate() {
        for (row, event) in rows.into_iter().enumerate() {
            ledger.read(source);
            match event {
                Scan::Rejected(reason) => ledger.rejected(source, reason),
                Scan::Filtered(filter) => ledger.filtered(source, filter),
                Scan::Candidate(fp, bands, hit, weight) => {
                    let mut record = scanned(fp, bands, hit, weight);
                    if feed.replayed {
                        record = through_journal(&record);
                    }
                    let at = (0, row as u64, row as u64 + 1);
                    duplicates.push(ledger.candidate(source, at, "data.jsonl", record));
                }
            }
        }
    }
    duplicates
}

fn work(ledger: &mut Ledger, source: usize, wanted: &[Wanted], feed: Feed) {
    let mut wanted = wanted.to_vec();
    if feed.reverse {
        wanted.reverse();
    }
    for w in wanted {
        let mut done = outcome(source, w.row);
        if feed.replayed {
            done = through_journal(&done);
        }
        assert!(ledger.worked(source, w.file, w.row, w.copy, done));
    }
}

/// The whole contract, in order, as `engine::run` drives it; the work rounds' requests too.
/// The rows each work round asked for: (source, rows).
type Requests = Vec<(usize, Vec<u64>)>;

fn build(mut ledger: Ledger, feed: Feed) -> (Settled, Requests, Vec<Allocation>) {
    scan(&mut ledger, feed);
    ledger.decide();
    let mut requests = Vec::new();
    for source in 0..2 {
        let rows = ledger.rows_for(source, 2).min(ledger.remaining(source));
        let wanted = ledger.extend(source, rows.min(2));
        requests.push((source, wanted.iter().map(|w| w.row).collect()));
        work(&mut ledger, source, &wanted, feed);
    }
    let allocations = loop {
        match ledger.allocate() {
            Ok(allocations) => break allocations,
            Err(AllocError::NeedMore { source, rows }) => {
                let rows = ledger.rows_for(source, rows);
                let wanted = ledger.extend(source, rows);
                assert!(!wanted.is_empty(), "asked for more than there is");
                requests.push((source, wanted.iter().map(|w| w.row).collect()));
                work(&mut ledger, source, &wanted, feed);
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    for (source, wanted) in ledger.copies(&allocations).into_iter().enumerate() {
        work(&mut ledger, source, &wanted, feed);
    }
    (ledger.settle(&allocations), requests, allocations)
}

fn ledger(take: Option<u64>) -> Ledger {
    Ledger::new(11, None, selection(take, [None, None]), true, Some(2))
}

/// Everything `settle` returns, comparable.
fn view(s: &Settled) -> String {
    let mut excluded: Vec<&String> = s.excluded.iter().collect();
    excluded.sort();
    format!(
        "{:?}\n{:?}\n{excluded:?} {} {:?}\n{:?}\n{:?}\n{:?}",
        s.stats, s.mix, s.excluded_rows, s.excluded_lines, s.rejects, s.filtered, s.conversations
    )
}

#[test]
fn a_take_settles_every_row_read_exactly_once() {
    let fresh = Feed {
        replayed: false,
        reverse: false,
    };
    let mut l = ledger(Some(3));
    let duplicates = scan(&mut l, fresh);
    // Global indices: a's rows 0, 3, 5..=10 are 0..=7, b's rows 0, 1 are 8, 9; the two exact
    // duplicates name a's row 0.
    assert_eq!(
        duplicates,
        [
            None,
            Some(0),
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            Some(0)
        ]
    );
    assert_eq!(l.position_of(1), (0, 0, 3));
    assert_eq!(l.position_of(9), (1, 0, 1));
    l.decide();
    type Note<'a> = (u64, String, Vec<(&'a str, String)>);
    let notes: Vec<Note> = l
        .dropped_notes()
        .into_iter()
        .map(|n| (n.row, n.reason, n.extra))
        .collect();
    assert_eq!(
        notes,
        [
            (
                3,
                "near_duplicate".to_owned(),
                vec![("duplicate_of", "a:0:0".to_owned())]
            ),
            (
                5,
                "contaminated".to_owned(),
                vec![
                    ("benchmark", "humaneval".to_owned()),
                    ("item", "HumanEval/7".to_owned()),
                    ("text", "the text HumanEval/7 shares".to_owned())
                ]
            ),
        ]
    );
    assert_eq!(l.remaining(0), 6, "rows 0, 6, 7, 8, 9, 10");
    assert_eq!(l.remaining(1), 2);

    let (settled, requests, allocations) = build(ledger(Some(3)), fresh);
    // First round: two rows each. Row 6 is filtered by the work: 1 of 2 kept, so `a` asks for
    // 2 more at a keep rate of 1/2 (with the margin, all that is left); `b` is complete.
    assert_eq!(
        requests,
        [(0, vec![0, 6]), (1, vec![0, 1]), (0, vec![7, 8, 9, 10])]
    );
    assert_eq!(allocations[0].originals, 3);
    assert_eq!(allocations[1].originals, 2);
    let a = &settled.stats[0];
    assert_eq!(
        (
            a.read,
            a.kept,
            a.deduplicated,
            a.near_duplicate,
            a.contaminated
        ),
        (11, 3, 1, 1, 1)
    );
    assert_eq!(
        a.rejected,
        BTreeMap::from([(RejectReason::MissingField, 1), (RejectReason::Template, 1)])
    );
    assert_eq!(
        a.filtered,
        BTreeMap::from([("short".to_owned(), 1), ("too_long".to_owned(), 1)])
    );
    // Rows 0, 7 and 9 are the three taken; row 10 was worked but is past the last one taken.
    assert_eq!(a.sampled_out, 1);
    assert_eq!(
        a.read,
        a.kept
            + a.rejected.values().sum::<u64>()
            + a.filtered.values().sum::<u64>()
            + a.deduplicated
            + a.near_duplicate
            + a.contaminated
            + a.sampled_out
    );
    assert_eq!((a.tokens, a.supervised_tokens), (10 + 17 + 19, 4 + 11 + 13));
    let mut excluded: Vec<&String> = settled.excluded.iter().collect();
    excluded.sort();
    assert_eq!(excluded, ["a:0:10"]);
    assert_eq!(
        (settled.excluded_rows, settled.excluded_lines.clone()),
        (1, vec![(10, 10)])
    );
    let b = &settled.stats[1];
    assert_eq!(
        (b.read, b.kept, b.deduplicated, b.tokens),
        (3, 2, 1, 20 + 21)
    );
    let rejects: Vec<(usize, u64, u64, &str)> = settled
        .rejects
        .iter()
        .map(|n| (n.source, n.row, n.shown, n.reason.as_str()))
        .collect();
    assert_eq!(rejects, [(0, 8, 9, "template")]);
    let filtered: Vec<(u64, &str, &str)> = settled
        .filtered
        .iter()
        .map(|n| (n.row, n.reason.as_str(), n.message.as_str()))
        .collect();
    assert_eq!(filtered, [(6, "too_long", "9000 tokens > 8192")]);
    assert_eq!(
        settled.conversations,
        [(0, 2, 0), (0, 2, 1), (0, 2, 1), (1, 2, 0), (1, 2, 1)]
    );
    let shares: Vec<(u64, f64, f64)> = settled
        .mix
        .iter()
        .map(|m| (m.conversations, m.share.conversations, m.share.tokens))
        .collect();
    assert_eq!(shares, [(3, 0.6, 0.528736), (2, 0.4, 0.471264)]);
}

#[test]
fn a_resumed_build_settles_like_a_fresh_one() {
    let fresh = Feed {
        replayed: false,
        reverse: false,
    };
    for take in [Some(3), None] {
        let (expected, requests, _) = build(ledger(take), fresh);
        for feed in [
            Feed {
                replayed: true,
                reverse: false,
            },
            Feed {
                replayed: true,
                reverse: true,
            },
        ] {
            let (resumed, again, _) = build(ledger(take), feed);
            assert_eq!(view(&resumed), view(&expected), "take {take:?}");
            assert_eq!(again, requests, "the same work rounds");
        }
    }
}

#[test]
fn a_mix_with_repeats_resumes_like_a_fresh_build() {
    // 40 rows in all, `b` has 2: its quota (weight 1 of 2) is filled with copies.
    let mix = MixConfig {
        target: MixTarget::Rows,
        total: 8,
        shortfall: Shortfall::Fail,
        max_repeats: Some(3),
    };
    let new = || {
        Ledger::new(
            11,
            Some(mix.clone()),
            selection(None, [Some(1.0), Some(1.0)]),
            true,
            Some(2),
        )
    };
    let fresh = Feed {
        replayed: false,
        reverse: false,
    };
    let (expected, _, allocations) = build(new(), fresh);
    assert_eq!(allocations[1].originals, 2);
    assert_eq!(allocations[1].copies.len(), 2, "{allocations:?}");
    let b = &expected.stats[1];
    assert_eq!((b.kept, b.repeated), (2, 2));
    assert_eq!(expected.mix[1].conversations, 4);
    assert_eq!(expected.mix[1].realized, 4);
    let resumed = build(
        new(),
        Feed {
            replayed: true,
            reverse: true,
        },
    )
    .0;
    assert_eq!(view(&resumed), view(&expected));
}

#[test]
fn out_of_order_calls_are_refused_or_change_nothing() {
    let fresh = Feed {
        replayed: false,
        reverse: false,
    };
    // Before `decide`, nothing is eligible: the work pass gets no rows.
    let mut l = ledger(Some(3));
    scan(&mut l, fresh);
    assert_eq!(l.remaining(0), 0);
    assert!(l.extend(0, 10).is_empty());
    // `decide` twice decides the same.
    l.decide();
    let first = l.dropped_notes();
    l.decide();
    assert_eq!(l.dropped_notes(), first);
    assert_eq!(l.remaining(0), 6);
    // The outcome of a row that is no candidate (a reject, a duplicate, unknown) is refused.
    for row in [1, 2, 4, 99] {
        assert!(!l.worked(0, 0, row, 0, kept(1, 1, 0)), "row {row}");
    }
    // `allocate` before every row it needs is worked asks for them, and changes nothing.
    assert_eq!(
        l.allocate(),
        Err(AllocError::NeedMore { source: 0, rows: 3 })
    );
    assert_eq!(
        l.allocate(),
        Err(AllocError::NeedMore { source: 0, rows: 3 })
    );
}

/// Candidates must come in position order within a source: a row recorded out of order is
/// not found again by the work pass (its outcome is refused), so a scan that fed the ledger
/// out of order shows up as a work pass that cannot record its rows.
#[test]
fn candidates_out_of_position_order_lose_their_work() {
    let mut l = ledger(None);
    for row in [5u64, 3, 1] {
        l.read(0);
        l.candidate(
            0,
            (0, row, row + 1),
            "data.jsonl",
            scanned(row as u8, None, None, 1),
        );
    }
    l.decide();
    let recorded = [5u64, 3, 1]
        .into_iter()
        .filter(|&row| l.worked(0, 0, row, 0, kept(1, 1, row)))
        .count();
    assert!(recorded < 3, "every row found although out of order");
}

#[test]
fn a_kept_rows_regeneration_tally_is_recorded_as_before_and_boxed_only_when_not_zero() {
    use crate::model::stats::RegenTally;
    let tally = RegenTally {
        conversations: 1,
        requested: 3,
        succeeded: 3,
        generated_tokens: 700,
        ..RegenTally::default()
    };
    let with = |regen| KeptWork {
        rows: 1,
        tokens: 9,
        regen,
        ..KeptWork::default()
    };
    let none = postcard::to_stdvec(&with(None)).unwrap();
    let zero = postcard::to_stdvec(&with(Some(Box::new(RegenTally::default())))).unwrap();
    assert_eq!(none, zero, "a zero tally and no tally are the same record");
    let read: KeptWork = postcard::from_bytes(&none).unwrap();
    assert!(read.regen.is_none());
    let some = postcard::to_stdvec(&with(Some(Box::new(tally)))).unwrap();
    let read: KeptWork = postcard::from_bytes(&some).unwrap();
    assert_eq!(read.regen.as_deref(), Some(&tally));
    // The tally's ten counters follow the fields before it, as an unboxed field wrote them.
    assert_eq!(
        some.len() - none.len(),
        postcard::to_stdvec(&tally).unwrap().len() - 10
    );
    // Every kept row's outcome is held until the selection settles (was 176 bytes unboxed).
    assert!(std::mem::size_of::<Work>() <= 104);
}
